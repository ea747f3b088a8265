DROP TABLE dedup;
DROP TABLE quiet_hours;
DROP TABLE preference;
