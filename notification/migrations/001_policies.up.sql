-- Recipient rules, read by the dispatcher when it delivers and written by
-- the application inside its own transactions.

-- A subject's wishes: on or off for a category and a channel, '' standing
-- for every category or every channel. The most specific row wins.
CREATE TABLE preference (
    subject    text        NOT NULL,
    category   text        NOT NULL DEFAULT '',
    channel    text        NOT NULL DEFAULT '',
    enabled    boolean     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subject, category, channel)
);

-- A subject's time zone (IANA) and quiet windows, as JSON:
-- [{"days": [1, 2], "start": "22:00", "end": "07:00", "channels": ["sms"]}].
CREATE TABLE quiet_hours (
    subject    text        PRIMARY KEY,
    time_zone  text        NOT NULL,
    windows    jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Dedup keys: the request whose delivery committed first under a key, per
-- consumer (its provider reference is its outbox row's result). Purged
-- after the dispatcher's DedupRetention, through a BRIN index: keys are
-- written in time order, and it costs next to nothing to keep.
CREATE TABLE dedup (
    consumer   text        NOT NULL,
    key        text        NOT NULL,
    event_id   uuid        NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, key)
);

CREATE INDEX dedup_claimed ON dedup USING brin (claimed_at);
