package relay

import (
	"strings"

	"github.com/tidings-go/tidings/internal/ident"
)

// pending is the condition of a row that is neither processed, dead nor
// cancelled: the outbox_due index's predicate.
const pending = `processed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL`

// pendingByID is pending for a statement that finds its rows by id: the
// same condition, written so that the planner cannot take it for
// outbox_due's predicate and scan every pending row instead of looking the
// ids up (it did, with 100,000 rows waiting: hundreds of milliseconds per
// statement).
const pendingByID = `coalesce(o.processed_at, o.failed_at, o.cancelled_at) IS NULL`

// lanesCTE lists each lane of module $1 that has pending rows, with its
// oldest row's due time, by a loose scan of the outbox_due index: one
// index probe per lane, however many rows each lane holds.
const lanesCTE = `lanes(lane, available_at) AS (
		(SELECT lane, available_at FROM {t}
		WHERE module = $1 AND {pending}
		ORDER BY lane, available_at LIMIT 1)
		UNION ALL
		SELECT n.lane, n.available_at FROM lanes l CROSS JOIN LATERAL (
			SELECT lane, available_at FROM {t}
			WHERE module = $1 AND {pending} AND lane > l.lane
			ORDER BY lane, available_at LIMIT 1) n)`

// queries holds every statement of the relay for one schema, built once.
type queries struct {
	channel string // the NOTIFY channel of the schema; the payload is the module

	stage, stageBatch string
	claim, nextDue    string
	settle            string
	ping              string
	listDead, reemit  string
	notify            string
	purge             string
	status, cancel    string
}

func newQueries(schema string) queries {
	t := ident.Quote(schema) + ".outbox"
	base := strings.NewReplacer("{t}", t, "{pending}", pending)
	r := strings.NewReplacer("{t}", t, "{pending}", pending, "{pendingByID}", pendingByID, "{lanes}", base.Replace(lanesCTE))
	return queries{
		channel: schema + ident.ChannelSuffix,

		// One statement: the row and its wake-up, which PostgreSQL delivers
		// at commit and drops on rollback. A NULL channel ($9) stages
		// without waking anyone. The id is made by the caller, so a
		// statement that database/sql runs again after losing its answer
		// (outside a transaction) finds its own row and changes nothing.
		stage: r.Replace(`WITH ins AS (
			INSERT INTO {t} (id, module, kind, payload, headers, correlation_id, causation_id, available_at, lane)
			VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8, now()), $10)
			ON CONFLICT (id) DO NOTHING)
			SELECT pg_notify($9, $2) WHERE $9::text IS NOT NULL`),
		stageBatch: r.Replace(`WITH ins AS (
			INSERT INTO {t} (id, module, kind, payload, headers, correlation_id, causation_id, available_at, lane)
			SELECT id, module, kind, payload::jsonb, headers::jsonb, correlation_id, causation_id, coalesce(not_before, now()), lane
			FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[], $10::text[])
				AS m(id, module, kind, payload, headers, correlation_id, causation_id, not_before, lane)
			ON CONFLICT (id) DO NOTHING)
			SELECT pg_notify($9, module) FROM (SELECT DISTINCT unnest($2::text[]) AS module) mods
			WHERE $9::text IS NOT NULL`),

		// Claim and lease in one statement. {lanes} finds each lane's
		// oldest pending row; of the lanes whose oldest is due, each gives
		// at most its room ($6/$7 name the lanes with records in flight and
		// their room, $5 is the room of any other), oldest first, $2 in
		// all. Only then are rows locked, by id, skipping rows other relays
		// hold, and checked again (a relay may have leased them since; the
		// lock re-evaluates the check on the latest row). The check is
		// written so the planner cannot answer it from outbox_due, whose
		// scan would read every pending row: the rows come by primary key.
		// A lane without room is never read, let alone locked or updated.
		// The
		// UPDATE pushes their due time past the lease and counts the hand
		// in this commit, so a crash loop still counts. A row handed more
		// than $4 times is dead here instead of handed again.
		//
		// The claim commits without waiting for its WAL flush (nosync sets
		// synchronous_commit for this statement's transaction only): that
		// wait was most of the time from a wake-up to the hand. What a
		// server crash can lose is the last fraction of a second of leases
		// and hand counts, so those records are handed again, as a crash
		// hands again what was in flight anyway; and any later synchronous
		// commit (a settle, a sink's own claim, such as the dispatcher's
		// inbox claim) flushes the WAL up to it first.
		claim: r.Replace(`WITH RECURSIVE nosync AS (SELECT set_config('synchronous_commit', 'off', true)),
			{lanes},
			room AS (
				SELECT l.lane, least($2, coalesce(b.room, $5)) AS room
				FROM lanes l LEFT JOIN unnest($6::text[], $7::int[]) AS b(lane, room) ON b.lane = l.lane
				WHERE l.available_at <= now()),
			cand AS (
				SELECT c.id FROM room r CROSS JOIN LATERAL (
					SELECT id, available_at FROM {t}
					WHERE module = $1 AND lane = r.lane AND {pending} AND available_at <= now()
					ORDER BY available_at LIMIT r.room) c
				WHERE r.room > 0
				ORDER BY c.available_at
				LIMIT $2),
			due AS (
				SELECT id FROM {t}
				WHERE id = ANY(ARRAY(SELECT id FROM cand))
					AND coalesce(processed_at, failed_at, cancelled_at) IS NULL AND available_at - now() <= '0'::interval
				FOR UPDATE SKIP LOCKED)
			UPDATE {t} o SET
				hands = o.hands + 1,
				available_at = now() + make_interval(secs => $3),
				failed_at = CASE WHEN o.hands >= $4 THEN now() END,
				failure_reason = CASE WHEN o.hands >= $4 THEN format(
					'handed %s times without being settled, more than MaxHands (%s): the record keeps crashing or hanging its handler; last error: %s',
					o.hands + 1, $4, coalesce(nullif(o.last_error, ''), 'none')) END
			FROM due, nosync WHERE o.id = due.id
			RETURNING o.id, o.lane, o.kind, o.payload, o.headers, o.correlation_id, o.causation_id,
				o.created_at, o.attempts, o.hands, o.unsure, o.last_error, o.failed_at IS NOT NULL,
				extract(epoch FROM now() - o.created_at)`),

		// Seconds until the module's next row falls due in a lane with
		// room ($2 names the lanes without): a retry, a scheduled record,
		// or a lease that runs out. A full lane wakes the relay when a
		// slot of it comes free.
		nextDue: r.Replace(`WITH RECURSIVE {lanes}
			SELECT extract(epoch FROM min(available_at) - now()) FROM lanes
			WHERE lane <> ALL(coalesce($2::text[], '{}'))`),

		// Settle many rows in one statement, each fenced by the hand it
		// belongs to and the attempts it was claimed with: a relay whose
		// lease ran out cannot overwrite what a later hand decided, and a
		// settle sent twice (its answer lost) lands once, since every
		// outcome changes the hands, the attempts or the state.
		//
		// Its times are clock_timestamp(), not now(): a settle written in a
		// sink's transaction runs after the sink's work, and a retry's
		// delay counts from the answer, not from the transaction's start.
		settle: r.Replace(`UPDATE {t} o SET
				processed_at = CASE WHEN r.outcome = 'done' THEN clock_timestamp() END,
				result = CASE WHEN r.outcome = 'done' THEN r.text ELSE o.result END,
				failed_at = CASE WHEN r.outcome = 'dead' THEN clock_timestamp() END,
				failure_reason = CASE WHEN r.outcome = 'dead' THEN r.text END,
				attempts = o.attempts + CASE WHEN r.outcome IN ('retry', 'dead') THEN 1 ELSE 0 END,
				last_error = CASE WHEN r.outcome IN ('retry', 'dead', 'unsure') THEN r.text ELSE o.last_error END,
				hands = o.hands - CASE WHEN r.outcome IN ('release', 'unsure') THEN 1 ELSE 0 END,
				unsure = o.unsure + CASE WHEN r.outcome = 'unsure' THEN 1 ELSE 0 END,
				available_at = CASE r.outcome
					WHEN 'retry' THEN clock_timestamp() + make_interval(secs => r.delay)
					WHEN 'unsure' THEN clock_timestamp() + make_interval(secs => r.delay)
					WHEN 'release' THEN clock_timestamp() + make_interval(secs => r.delay)
					ELSE o.available_at END
			FROM unnest($1::uuid[], $2::int[], $3::text[], $4::float8[], $5::text[], $6::int[]) AS r(id, hands, outcome, delay, text, attempts)
			WHERE o.id = r.id AND o.hands = r.hands AND o.attempts = r.attempts AND {pendingByID}`),

		// Start-up check, one round trip: the table is readable, and the
		// session's idle_in_transaction_session_timeout (ms; 0 is none).
		ping: r.Replace(`SELECT setting::bigint FROM pg_settings
			WHERE name = 'idle_in_transaction_session_timeout' AND NOT EXISTS (SELECT 1 FROM {t} WHERE false)`),

		listDead: r.Replace(`SELECT id, module, kind, payload, correlation_id, causation_id,
				created_at, failed_at, failure_reason, attempts, hands
			FROM {t}
			WHERE failed_at IS NOT NULL
				AND ($1 = '' OR module = $1) AND ($2 = '' OR kind = $2)
				AND ($3::timestamptz IS NULL OR failed_at >= $3)
				AND ($4::timestamptz IS NULL OR failed_at < $4)
				AND ($5::uuid[] IS NULL OR id = ANY($5))
			ORDER BY failed_at, id
			LIMIT $6`),
		// Re-emit gives dead rows a fresh budget of attempts and hands;
		// the caller wakes each module's relay in the same transaction.
		reemit: r.Replace(`WITH up AS (
				UPDATE {t} SET failed_at = NULL, failure_reason = NULL,
					attempts = 0, hands = 0, unsure = 0, available_at = now()
				WHERE failed_at IS NOT NULL
					AND ($1 = '' OR module = $1) AND ($2 = '' OR kind = $2)
					AND ($3::timestamptz IS NULL OR failed_at >= $3)
					AND ($4::timestamptz IS NULL OR failed_at < $4)
					AND ($5::uuid[] IS NULL OR id = ANY($5))
				RETURNING module)
			SELECT module, count(*) FROM up GROUP BY module`),
		// One wake-up per module: $2 is the modules.
		notify: `SELECT pg_notify($1, m) FROM unnest($2::text[]) AS m`,

		purge: r.Replace(`DELETE FROM {t} WHERE id IN (
				SELECT id FROM {t}
				WHERE (processed_at IS NOT NULL OR cancelled_at IS NOT NULL)
					AND coalesce(processed_at, cancelled_at) < now() - make_interval(secs => $1)
				LIMIT $2 FOR UPDATE SKIP LOCKED)`),

		status: r.Replace(`SELECT module, kind, created_at, available_at, attempts, hands, unsure, last_error, result,
				processed_at, failed_at, failure_reason, cancelled_at
			FROM {t} WHERE id = $1`),
		cancel: r.Replace(`UPDATE {t} SET cancelled_at = now()
			WHERE id = $1 AND {pending}`),
	}
}
