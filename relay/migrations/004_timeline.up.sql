-- A timeline per record: every change of its state appends an entry, in
-- the transaction that makes the change. The staging and the final "done"
-- are the record's row itself (created_at and headers; processed_at,
-- result, code, answered_hand and took_ms), so the common life, staged and
-- done at the first hand, writes no entry.
ALTER TABLE outbox
    ADD COLUMN code text NOT NULL DEFAULT '',         -- machine code of the last error, the failure or the result
    ADD COLUMN answered_hand int NOT NULL DEFAULT 0,  -- the hands count after the last answer: below hands, a hand was lost
    ADD COLUMN took_ms int NOT NULL DEFAULT 0;        -- how long the last answered hand took

CREATE TABLE timeline (
    record_id uuid        NOT NULL,
    at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    event     text        NOT NULL,            -- done, retry, dead, unsure, released, lost, cancelled, reemitted, ...
    hand      int         NOT NULL DEFAULT 0,  -- the hand it belongs to
    code      text        NOT NULL DEFAULT '', -- stable machine code of the reason or result
    reason    text        NOT NULL DEFAULT '', -- the reason, or the result (a provider's reference)
    detail    jsonb       NOT NULL DEFAULT '{}' -- what else the change knew: due time, duration, earlier state
);

-- A record's entries in order; purged with the record.
CREATE INDEX timeline_record ON timeline (record_id, at);

-- Dead records by cause, for listing and re-emit by code.
CREATE INDEX outbox_dead_code ON outbox (code, failed_at) WHERE failed_at IS NOT NULL;
