-- Lanes: a record's lane (for notifications, its channel) lets the relay
-- take no more records of a lane than it may have in flight, so a busy
-- lane's rows stay untouched in the table until there is room. The due
-- index leads with the lane: the claim finds each lane's oldest due rows
-- without reading another lane's.
ALTER TABLE outbox ADD COLUMN lane text NOT NULL DEFAULT '';

DROP INDEX outbox_due;
CREATE INDEX outbox_due ON outbox (module, lane, available_at)
    WHERE processed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL;
