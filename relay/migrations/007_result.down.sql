DROP INDEX outbox_result;
