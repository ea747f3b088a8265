DROP INDEX outbox_correlation;
