-- Secrets: values a record's handler may use but that must not outlive
-- the record (a verification code, a magic-link token). They are kept
-- apart from the payload, which operators list and re-emit, and erased
-- by the update that ends the record (processed, dead or cancelled), in
-- that update's transaction, whichever statement makes it.
CREATE TABLE secret (
    record_id uuid  PRIMARY KEY,
    value     bytea NOT NULL
);

ALTER TABLE outbox ADD COLUMN has_secret boolean NOT NULL DEFAULT false;

-- The function runs with the search_path of this migration (the schema),
-- whatever the session's.
CREATE FUNCTION erase_secret() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM secret WHERE record_id = NEW.id;
    NEW.has_secret := false;
    RETURN NEW;
END
$$;

-- Only rows that have a secret and end fire it: the common update costs
-- nothing more.
CREATE TRIGGER outbox_erase_secret BEFORE UPDATE ON outbox FOR EACH ROW
    WHEN (OLD.has_secret AND (NEW.processed_at IS NOT NULL OR NEW.failed_at IS NOT NULL OR NEW.cancelled_at IS NOT NULL))
    EXECUTE FUNCTION erase_secret();
