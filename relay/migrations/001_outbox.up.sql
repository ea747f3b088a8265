-- The outbox: one row per staged record. Times come from the database clock.
-- States: pending (processed_at, failed_at and cancelled_at all null),
-- processed, dead (failed_at set) or cancelled.
CREATE TABLE outbox (
    id             uuid        PRIMARY KEY,          -- UUIDv7, stable for the row's life
    module         text        NOT NULL,             -- which relay hands it
    kind           text        NOT NULL,             -- what it is, for the sink
    payload        jsonb       NOT NULL,
    headers        jsonb       NOT NULL DEFAULT '{}', -- W3C trace context and baggage
    correlation_id text        NOT NULL DEFAULT '',
    causation_id   text        NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL DEFAULT now(),
    available_at   timestamptz NOT NULL DEFAULT now(), -- due time, or end of the current lease
    attempts       int         NOT NULL DEFAULT 0,     -- answers that were not "done"
    hands          int         NOT NULL DEFAULT 0,     -- claims, counted in the claim's commit
    last_error     text        NOT NULL DEFAULT '',
    result         text        NOT NULL DEFAULT '',    -- what the sink reported with "done"
    processed_at   timestamptz,
    failed_at      timestamptz,
    failure_reason text,
    cancelled_at   timestamptz
);

-- Due rows of a module, oldest first: the claim's only index. Partial, so
-- settled rows leave it and it stays small however long they are kept.
CREATE INDEX outbox_due ON outbox (module, available_at)
    WHERE processed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL;

-- Dead rows, for listing and re-emit.
CREATE INDEX outbox_dead ON outbox (failed_at) WHERE failed_at IS NOT NULL;

-- Settled rows, for the retention purge.
CREATE INDEX outbox_settled ON outbox ((coalesce(processed_at, cancelled_at)))
    WHERE processed_at IS NOT NULL OR cancelled_at IS NOT NULL;
