DROP INDEX outbox_dead_code;
DROP TABLE timeline;
ALTER TABLE outbox DROP COLUMN took_ms, DROP COLUMN answered_hand, DROP COLUMN code;
