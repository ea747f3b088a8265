CREATE TABLE secret (
    record_id uuid  PRIMARY KEY,
    value     bytea NOT NULL
);
ALTER TABLE outbox ADD COLUMN has_secret boolean NOT NULL DEFAULT false;
INSERT INTO secret (record_id, value) SELECT id, secret FROM outbox WHERE secret IS NOT NULL;
UPDATE outbox SET has_secret = true WHERE secret IS NOT NULL;

DROP TRIGGER outbox_erase_secret ON outbox;
DROP FUNCTION erase_secret();
ALTER TABLE outbox DROP COLUMN secret;

CREATE FUNCTION erase_secret() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM secret WHERE record_id = NEW.id;
    NEW.has_secret := false;
    RETURN NEW;
END
$$;

CREATE TRIGGER outbox_erase_secret BEFORE UPDATE ON outbox FOR EACH ROW
    WHEN (NEW.has_secret AND (NEW.processed_at IS NOT NULL OR NEW.failed_at IS NOT NULL OR NEW.cancelled_at IS NOT NULL))
    EXECUTE FUNCTION erase_secret();
