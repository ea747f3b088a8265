-- Vacuum the outbox once 2 % of its rows are dead, not the server's default
-- fifth. Each record leaves two dead row versions (the claim's and the
-- settle's), and until a vacuum removes their entries from outbox_due each
-- claim steps over them at the head of its lanes: the longer a busy outbox
-- waits for its vacuum, the more every claim reads. With the default, a
-- table that keeps a week of settled rows waits for a fifth of a week's
-- records. An operator's own ALTER TABLE ... SET after this one stands.
ALTER TABLE outbox SET (autovacuum_vacuum_scale_factor = 0.02);
