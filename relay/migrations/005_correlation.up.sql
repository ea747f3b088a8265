-- Records by correlation id, for an operator's "what did this write
-- stage?". A record staged without a correlation id takes its own id as
-- one, and is found by its primary key instead: only records given a
-- correlation id of another (the staging write's, or the record whose
-- hand staged them) enter this index, so a service that sets none pays
-- nothing for it.
CREATE INDEX outbox_correlation ON outbox (correlation_id, created_at)
    WHERE correlation_id <> id::text;
