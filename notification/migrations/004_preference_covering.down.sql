ALTER TABLE preference DROP CONSTRAINT preference_pkey,
    ADD CONSTRAINT preference_pkey PRIMARY KEY (subject, category, channel);
