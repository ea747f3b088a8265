-- A record's secret moves into its own row: a column apart from the
-- payload (which operators list and re-emit), read by the claim with the
-- row and set to NULL by the update that ends the record. A table of its
-- own cost a second row per secret (written when staged, read through
-- its key at every claim, deleted at the end) where a column costs none
-- of the three.
ALTER TABLE outbox ADD COLUMN secret bytea;
UPDATE outbox o SET secret = s.value FROM secret s WHERE s.record_id = o.id;

DROP TRIGGER outbox_erase_secret ON outbox;
DROP FUNCTION erase_secret();
ALTER TABLE outbox DROP COLUMN has_secret;
DROP TABLE secret;

-- The settle clears the secrets of the records it ends itself; the trigger
-- clears it for any other update that ends a record with it still set (a
-- cancel, a record dead at its claim, an operator's statement).
CREATE FUNCTION erase_secret() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.secret := NULL;
    RETURN NEW;
END
$$;

CREATE TRIGGER outbox_erase_secret BEFORE UPDATE ON outbox FOR EACH ROW
    WHEN (NEW.secret IS NOT NULL AND (NEW.processed_at IS NOT NULL OR NEW.failed_at IS NOT NULL OR NEW.cancelled_at IS NOT NULL))
    EXECUTE FUNCTION erase_secret();
