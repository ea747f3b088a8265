-- The settle erases the secrets of the records it ends itself, in one
-- statement for its whole batch, and clears has_secret as it does; the
-- trigger now erases only for the updates that end a record and leave
-- has_secret set (a cancel, a record dead at its claim, an operator's
-- statement), which it did for every row before, one DELETE at a time.
DROP TRIGGER outbox_erase_secret ON outbox;
CREATE TRIGGER outbox_erase_secret BEFORE UPDATE ON outbox FOR EACH ROW
    WHEN (NEW.has_secret AND (NEW.processed_at IS NOT NULL OR NEW.failed_at IS NOT NULL OR NEW.cancelled_at IS NOT NULL))
    EXECUTE FUNCTION erase_secret();
