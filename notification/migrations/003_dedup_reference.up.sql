-- The provider's reference of the request that holds a dedup key, written
-- with the key in the transaction that commits its delivery's claim: a
-- duplicate reads the first receipt here, before the relay has settled
-- the first request's row.
ALTER TABLE dedup ADD COLUMN reference text NOT NULL DEFAULT '';
