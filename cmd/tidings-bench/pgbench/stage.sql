-- One staging transaction: the relay's staging statement with a request
-- of the same size, and its NOTIFY when {notify} is the channel (NULL
-- stages without the wake-up). The id is time-ordered, like a UUIDv7.
BEGIN;
WITH ins AS (
        INSERT INTO {s}.outbox (id, module, lane, kind, payload, headers, correlation_id, causation_id, available_at)
        VALUES ((lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000000)::bigint), 14, '0')
                || lpad(to_hex((random() * 4294967295)::bigint), 8, '0')
                || lpad(to_hex((random() * 4294967295)::bigint), 10, '0'))::uuid,
            'bench', 'mail', 'notification.requested',
            '{"channel":"mail","recipient":"user1@example.com","template":"welcome","data":{"name":"Ada","seq":1}}',
            '{}', 'pgbench', '', now()))
SELECT pg_notify({notify}, 'bench') WHERE {notify}::text IS NOT NULL;
COMMIT;
