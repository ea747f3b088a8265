DROP INDEX outbox_due;
CREATE INDEX outbox_due ON outbox (module, available_at)
    WHERE processed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL;

ALTER TABLE outbox DROP COLUMN lane;
