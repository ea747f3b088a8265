ALTER TABLE outbox RESET (autovacuum_vacuum_scale_factor);
