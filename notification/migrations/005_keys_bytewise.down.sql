-- Back to the database's collation.
ALTER TABLE dedup
    ALTER COLUMN consumer TYPE text COLLATE "default",
    ALTER COLUMN key TYPE text COLLATE "default";
ALTER TABLE preference
    ALTER COLUMN subject TYPE text COLLATE "default",
    ALTER COLUMN category TYPE text COLLATE "default",
    ALTER COLUMN channel TYPE text COLLATE "default";
ALTER TABLE quiet_hours
    ALTER COLUMN subject TYPE text COLLATE "default";
ALTER TABLE suppression
    ALTER COLUMN channel TYPE text COLLATE "default",
    ALTER COLUMN address TYPE text COLLATE "default",
    ALTER COLUMN scope TYPE text COLLATE "default";
ALTER TABLE transient_failure
    ALTER COLUMN channel TYPE text COLLATE "default",
    ALTER COLUMN address TYPE text COLLATE "default";
