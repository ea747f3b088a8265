-- The keys of the recipient rules compare byte by byte, whatever the
-- database's collation. Under a linguistic one (such as en_US.UTF-8)
-- every comparison of an index's search and every sort of keys went
-- through the C library's collation, and taking a claim's dedup keys
-- cost PostgreSQL half as much again as under "C" (docs/bench/HISTORY.md).
-- Equality is the same under both; the order of a listing of suppressed
-- addresses becomes the bytes' order. Each ALTER rebuilds its table's
-- indexes under an exclusive lock: against millions of dedup keys the
-- upgrade holds the dispatcher's claims with rules for as long.
ALTER TABLE dedup
    ALTER COLUMN consumer TYPE text COLLATE "C",
    ALTER COLUMN key TYPE text COLLATE "C";
ALTER TABLE preference
    ALTER COLUMN subject TYPE text COLLATE "C",
    ALTER COLUMN category TYPE text COLLATE "C",
    ALTER COLUMN channel TYPE text COLLATE "C";
ALTER TABLE quiet_hours
    ALTER COLUMN subject TYPE text COLLATE "C";
ALTER TABLE suppression
    ALTER COLUMN channel TYPE text COLLATE "C",
    ALTER COLUMN address TYPE text COLLATE "C",
    ALTER COLUMN scope TYPE text COLLATE "C";
ALTER TABLE transient_failure
    ALTER COLUMN channel TYPE text COLLATE "C",
    ALTER COLUMN address TYPE text COLLATE "C";
