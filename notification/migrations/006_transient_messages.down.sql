ALTER TABLE transient_failure DROP COLUMN message_id;
