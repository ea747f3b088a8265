-- Pending requests $1 to $2 of the ceiling's outbox copy: the shape the
-- dispatcher stages (its lane is its channel), time-ordered ids, all due now
-- as a StageBatch makes them.
INSERT INTO {s}.outbox (id, module, lane, kind, payload, headers, correlation_id, causation_id, available_at)
SELECT (lpad(to_hex(1700000000000000 + i), 14, '0') || lpad(to_hex(i), 18, '0'))::uuid,
    'bench', 'mail', 'notification.requested',
    jsonb_build_object('channel', 'mail', 'recipient', 'user' || i || '@example.com', 'template', 'welcome',
        'data', jsonb_build_object('name', 'Ada', 'seq', i)),
    '{}', 'pgbench', '', now()
FROM generate_series($1::bigint, $2::bigint) AS i
