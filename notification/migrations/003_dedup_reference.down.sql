ALTER TABLE dedup DROP COLUMN reference;
