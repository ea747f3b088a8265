-- The inbox: one row per (consumer, event) whose effect committed.
CREATE TABLE inbox (
    consumer   text        NOT NULL,
    event_id   uuid        NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

-- Old claims, for the retention purge.
CREATE INDEX inbox_claimed_at ON inbox (claimed_at);
