-- One delivery transaction of {k} outbox rows, as the dispatcher's claim
-- transaction does it in SQL alone: claim one lane's due rows with the
-- relay's CTE shape (FOR UPDATE SKIP LOCKED, through the due index that
-- leads with module and lane), insert their inbox claims in id order,
-- mark them processed, commit. {s} is the schema.
BEGIN;
WITH due AS (
        SELECT id FROM {s}.outbox
        WHERE module = 'bench' AND lane = 'mail' AND processed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL
            AND available_at <= now()
        ORDER BY available_at
        LIMIT {k}
        FOR UPDATE SKIP LOCKED),
    claimed AS (
        INSERT INTO {s}.inbox (consumer, event_id)
        SELECT 'bench', id FROM due ORDER BY id
        ON CONFLICT (consumer, event_id) DO NOTHING
        RETURNING event_id)
UPDATE {s}.outbox o SET processed_at = now(), hands = o.hands + 1
FROM claimed WHERE o.id = claimed.event_id;
COMMIT;
