DROP TRIGGER outbox_erase_secret ON outbox;
DROP FUNCTION erase_secret();
ALTER TABLE outbox DROP COLUMN has_secret;
DROP TABLE secret;
