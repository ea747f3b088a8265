DROP TRIGGER outbox_erase_secret ON outbox;
CREATE TRIGGER outbox_erase_secret BEFORE UPDATE ON outbox FOR EACH ROW
    WHEN (OLD.has_secret AND (NEW.processed_at IS NOT NULL OR NEW.failed_at IS NOT NULL OR NEW.cancelled_at IS NOT NULL))
    EXECUTE FUNCTION erase_secret();
