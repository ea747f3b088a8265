package relay

import (
	"strconv"
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
// oldest row's due time (lanes), by a loose scan of the outbox_due index:
// an index probe or two per lane, however many rows each lane holds.
//
// A probe from a lane's start first walks the index entries of the rows
// settled since the last vacuum, which lie at the lane's head: in a long
// drain, hundreds of thousands on every claim (docs/bench/HISTORY.md).
// The arrays lanes and floors (parameters of the statement that uses
// it) name lanes the relay knows, each with a floor before which none of
// the lane's pending rows falls due (see floorLag), in microseconds since
// 1970 as an earlier claim gave it: such a lane's probe starts at its
// floor. The lanes not named are found by probes from the start of each
// range between the named ones (and before the first and after the
// last). Without floors, every probe starts at a lane's start.
//
// A step of the walk starts at (pl, pa): past lane pl, or at its start
// while pa is -infinity. Its probe of the lanes before the next named
// one is two, of which their one-time filters run one: with an upper
// bound the index can use, and without one past the last named lane.
// Their LIMIT 1 tells the planner what the filters do, so that it
// reckons with as many lanes as before there were floors (see
// claimLaneMax).
func lanesCTE(lanes, floors string) string {
	return `known(lane, floor) AS (
			SELECT lane, 'epoch'::timestamptz + us * interval '1 microsecond'
			FROM unnest((SELECT ` + lanes + `::text[]), (SELECT ` + floors + `::bigint[])) AS f(lane, us)),
		walk(pl, pa, lane, available_at) AS (
			SELECT ''::text, '-infinity'::timestamptz, NULL::text, NULL::timestamptz
			UNION ALL
			SELECT coalesce(g.lane, k.lane), 'infinity'::timestamptz, coalesce(g.lane, k.lane), coalesce(g.available_at, h.available_at)
			FROM walk w
			LEFT JOIN LATERAL (
				SELECT lane, floor FROM known WHERE (known.lane, 'infinity'::timestamptz) > (w.pl, w.pa)
				ORDER BY lane LIMIT 1) k ON true
			LEFT JOIN LATERAL (
				(SELECT lane, available_at FROM {t}
				WHERE k.lane IS NOT NULL AND module = $1 AND {pending}
					AND (lane, available_at) > (w.pl, w.pa) AND lane < k.lane
				ORDER BY lane, available_at LIMIT 1)
				UNION ALL
				(SELECT lane, available_at FROM {t}
				WHERE k.lane IS NULL AND module = $1 AND {pending} AND (lane, available_at) > (w.pl, w.pa)
				ORDER BY lane, available_at LIMIT 1)
				LIMIT 1) g ON true
			LEFT JOIN LATERAL (
				SELECT available_at FROM {t}
				WHERE g.lane IS NULL AND module = $1 AND {pending} AND lane = k.lane AND available_at >= k.floor
				ORDER BY available_at LIMIT 1) h ON true
			WHERE g.lane IS NOT NULL OR k.lane IS NOT NULL),
		lanes(lane, available_at) AS (SELECT lane, available_at FROM walk WHERE available_at IS NOT NULL)`
}

// deadFilter is the condition of a DeadFilter on a dead row o: $1 module,
// $2 kind, $3 lane, $4 code, $5 and $6 the time of death, $7 ids.
const deadFilter = `($1 = '' OR o.module = $1) AND ($2 = '' OR o.kind = $2)
	AND ($3 = '' OR o.lane = $3) AND ($4 = '' OR o.code = $4)
	AND ($5::timestamptz IS NULL OR o.failed_at >= $5)
	AND ($6::timestamptz IS NULL OR o.failed_at < $6)
	AND ($7::uuid[] IS NULL OR o.id = ANY($7))`

// countDead counts the dead rows of a DeadFilter ($1 to $7) per {by}, the
// largest group first, with the first and last death of each.
const countDead = `SELECT {by}, count(*), min(o.failed_at), max(o.failed_at) FROM {t} o
	WHERE o.failed_at IS NOT NULL AND {deadFilter}
	GROUP BY 1
	ORDER BY 2 DESC, 1`

// claimLaneMax is the most records one claim takes of one lane, a bound
// the planner can see (see the claim). The planner reckons with about
// ten lanes, and with a random page read for each record of a large
// table: 1,000 keeps the claim's estimate under half of the default
// jit_above_cost (100,000) in the worst case, where 10,000 passed it.
const claimLaneMax = 1_000

// queries holds every statement of the relay for one schema, built once.
type queries struct {
	channel string // the NOTIFY channel of the schema; the payload is the module

	stage, stageBatch string
	claim, nextDue    string
	settle            string
	ping              string
	listDead, reemit  string
	timeline          string
	notify            string
	purge             string
	status, cancel    string
	finish, note      string
	byResult          string
	stats             string
	byCorrelation     string
	countDead         map[GroupBy]string
	throughput        string
}

func newQueries(schema string) queries {
	t := ident.Quote(schema) + ".outbox"
	base := strings.NewReplacer("{t}", t, "{pending}", pending)
	r := strings.NewReplacer("{t}", t, "{pending}", pending, "{pendingByID}", pendingByID,
		"{lanes}", base.Replace(lanesCTE("$10", "$11")), "{nextLanes}", base.Replace(lanesCTE("$3", "$4")),
		"{timeline}", ident.Quote(schema)+".timeline",
		"{deadFilter}", deadFilter, "{floorLag}", strconv.Itoa(int(floorLag.Seconds())))
	return queries{
		channel: schema + ident.ChannelSuffix,

		// One statement: the row and its wake-up, which PostgreSQL delivers
		// at commit and drops on rollback. A NULL channel ($9) stages
		// without waking anyone. The id is made by the caller, so a
		// statement that database/sql runs again after losing its answer
		// (outside a transaction) finds its own row and changes nothing.
		// The pending rows through outbox_due, the dead ones through
		// outbox_dead_code; never the processed history. A row of kind
		// "now" comes whatever the table holds.
		stats: r.Replace(`SELECT now(), kind, module, lane, code, a, b, oldest FROM (
			SELECT 'pending' AS kind, module, lane, '' AS code,
				count(*) FILTER (WHERE available_at <= now()) AS a,
				count(*) FILTER (WHERE available_at > now()) AS b,
				coalesce(extract(epoch FROM now() - min(available_at) FILTER (WHERE available_at <= now())), 0)::float8 AS oldest
			FROM {t} WHERE ($1 = '' OR module = $1) AND {pending}
			GROUP BY module, lane
			UNION ALL
			SELECT 'dead', module, lane, code, count(*), 0, 0
			FROM {t} WHERE ($1 = '' OR module = $1) AND failed_at IS NOT NULL
			GROUP BY module, lane, code
			UNION ALL
			SELECT 'now', '', '', '', 0, 0, 0) s
			ORDER BY kind DESC, module, lane, code`),

		// Dead rows per group, through outbox_dead_code (or outbox_dead):
		// the condition failed_at IS NOT NULL is both partial indexes'
		// predicate, so the processed history is never read.
		countDead: map[GroupBy]string{
			ByCode:   r.Replace(strings.ReplaceAll(countDead, "{by}", "o.code")),
			ByLane:   r.Replace(strings.ReplaceAll(countDead, "{by}", "o.lane")),
			ByModule: r.Replace(strings.ReplaceAll(countDead, "{by}", "o.module")),
		},

		// No index holds correlation ids: one would cost every staging
		// insert. An operator's look-up reads the table.

		// Records settled in each of the last $2 minutes, oldest first,
		// every minute present: processed ones through outbox_settled,
		// dead ones through outbox_dead. Each condition is its index's
		// predicate and a range of its key, so only those minutes' rows
		// are read. A row settled after this statement's now() but
		// committed before its snapshot counts in the last minute.
		throughput: r.Replace(`SELECT now() - make_interval(mins => m.ago + 1), coalesce(c.done, 0), coalesce(c.dead, 0)
			FROM generate_series(0, $2 - 1) AS m(ago) LEFT JOIN (
				SELECT ago, count(*) FILTER (WHERE NOT dead) AS done, count(*) FILTER (WHERE dead) AS dead FROM (
					SELECT greatest(0, floor(extract(epoch FROM now() - coalesce(processed_at, cancelled_at)) / 60))::int AS ago, false AS dead
					FROM {t}
					WHERE (processed_at IS NOT NULL OR cancelled_at IS NOT NULL)
						AND coalesce(processed_at, cancelled_at) > now() - make_interval(mins => $2)
						AND processed_at IS NOT NULL AND ($1 = '' OR module = $1)
					UNION ALL
					SELECT greatest(0, floor(extract(epoch FROM now() - failed_at) / 60))::int, true
					FROM {t}
					WHERE failed_at IS NOT NULL AND failed_at > now() - make_interval(mins => $2)
						AND ($1 = '' OR module = $1)) s
				GROUP BY ago) c ON c.ago = m.ago
			ORDER BY m.ago DESC`),

		stage: r.Replace(`WITH ins AS (
			INSERT INTO {t} (id, module, kind, payload, headers, correlation_id, causation_id, available_at, lane, secret)
			VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8, now()), $10, $11)
			ON CONFLICT (id) DO NOTHING)
			SELECT pg_notify($9, $2) WHERE $9::text IS NOT NULL`),
		stageBatch: r.Replace(`WITH m AS (
			SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
				$8::timestamptz[], $10::text[], $11::text[])
				AS m(id, module, kind, payload, headers, correlation_id, causation_id, not_before, lane, secret)),
			ins AS (
			INSERT INTO {t} (id, module, kind, payload, headers, correlation_id, causation_id, available_at, lane, secret)
			SELECT id, module, kind, payload::jsonb, headers::jsonb, correlation_id, causation_id, coalesce(not_before, now()), lane,
				decode(secret, 'hex')
			FROM m
			ON CONFLICT (id) DO NOTHING)
			SELECT pg_notify($9, module) FROM (SELECT DISTINCT unnest($2::text[]) AS module) mods
			WHERE $9::text IS NOT NULL`),

		// Claim and lease in one statement. {lanes} finds each lane's
		// oldest pending row, from the floors $10 and $11 give the lanes
		// they name; of the lanes whose oldest is due, each gives
		// at most its room ($6/$7 name the lanes with records in flight and
		// their room, $5 is the room of any other), oldest first, $2 in
		// all, and of the lanes a sink does not share ($9 names those it
		// does) $8 in all: each of their records takes a connection of
		// its own, and $8 are free. Only then are rows locked, by id,
		// skipping rows other relays hold, and checked again (a relay may
		// have leased them since; the lock re-evaluates the check on the
		// latest row). The check is written so the planner cannot answer
		// it from outbox_due, whose scan would read every pending row: the
		// rows come by primary key.
		// A lane without room is never read, let alone locked or updated.
		// A lane's rows are read from its oldest on ({lanes} found it),
		// not from the start of the lane in outbox_due: the entries of the
		// rows settled since the last vacuum lie there, and one walk over
		// them per claim is enough; a floor spares even that one.
		// A lane's room is a LIMIT the planner cannot know, which it takes
		// for a tenth of the lane's pending rows: against a backlog of
		// millions the claim's estimated cost then passed jit_above_cost,
		// and the server compiled it for most of a second on every run.
		// The constant claimLaneMax bounds that estimate whatever the
		// backlog and the table's size, and caps what one claim takes of
		// one lane.
		//
		// The oldest $2 are the first $2 row numbers, not a LIMIT $2, and
		// the lanes' rooms come through sub-selects: a plan that does not
		// know $2 or how many lanes have records in flight then costs the
		// same as one that does, so the server keeps one plan for a
		// prepared claim (pgx prepares it) instead of planning the
		// statement again for every claim, which cost more than running
		// it.
		// The UPDATE pushes their due time past the lease and counts the
		// hand in this commit, so a crash loop still counts, and the claim,
		// which the settle that answers it names. A row handed
		// more than $4 times is dead here instead of handed again. The
		// timeline gets an entry for a hand that ended without an answer
		// (hands ran ahead of answered_hand) and for a row dead here.
		//
		// Every row returned also says when the next row falls due in a
		// lane with room, so the relay sets its timer without a second
		// statement: of a lane that was not due, its oldest row; of a due
		// lane the claim did not give all its room, its first row not
		// chosen, a retry or schedule to come, a lease of an earlier
		// claim or a due row a limit left; and at the latest the lease of
		// the rows claimed now, which the statement cannot see. A due lane
		// given all its room is full, and a slot coming free wakes the
		// relay (which checks that those lanes are full). The answer holds
		// only when every row chosen was locked: a row another relay held
		// is not accounted for. And every row gives the floors of the next
		// claim, as a JSON object of lane to floor: each lane's oldest due
		// time, or floorLag before now(), whichever is earlier, in
		// microseconds since 1970 (whole: a timestamptz holds no less), so
		// that no time written out crosses the wire.
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
				SELECT l.lane, l.available_at AS oldest, least($2, coalesce(b.room, $5)) AS room, sh.lane IS NOT NULL AS shared
				FROM lanes l LEFT JOIN unnest((SELECT $6::text[]), (SELECT $7::int[])) AS b(lane, room) ON b.lane = l.lane
					LEFT JOIN unnest((SELECT $9::text[])) AS sh(lane) ON sh.lane = l.lane
				WHERE l.available_at <= now()),
			cand AS (
				SELECT id, lane FROM (
					SELECT id, lane, row_number() OVER (ORDER BY available_at) AS n FROM (
						SELECT c.id, c.available_at, r.lane, r.shared,
							row_number() OVER (PARTITION BY r.shared ORDER BY c.available_at) AS k
						FROM room r CROSS JOIN LATERAL (
							SELECT * FROM (
								SELECT id, available_at FROM {t}
								WHERE module = $1 AND lane = r.lane AND {pending} AND available_at >= r.oldest AND available_at <= now()
								ORDER BY available_at LIMIT r.room) l
							LIMIT ` + strconv.Itoa(claimLaneMax) + `) c
						WHERE r.room > 0) p
					WHERE p.shared OR p.k <= $8) o
				WHERE n <= $2),
			due AS (
				SELECT id FROM {t}
				WHERE id = ANY(ARRAY(SELECT id FROM cand))
					AND coalesce(processed_at, failed_at, cancelled_at) IS NULL AND available_at - now() <= '0'::interval
				FOR UPDATE SKIP LOCKED),
			claimed AS (
				UPDATE {t} o SET
					hands = o.hands + 1,
					claims = o.claims + 1,
					available_at = now() + make_interval(secs => $3),
					failed_at = CASE WHEN o.hands >= $4 THEN now() END,
					code = CASE WHEN o.hands >= $4 THEN '` + CodeMaxHands + `' ELSE o.code END,
					failure_reason = CASE WHEN o.hands >= $4 THEN format(
						'handed %s times without being settled, more than MaxHands (%s): the record keeps crashing or hanging its handler; last error: %s',
						o.hands + 1, $4, coalesce(nullif(o.last_error, ''), 'none')) END
				FROM due, nosync WHERE o.id = due.id
				RETURNING o.*),
			later AS (
				SELECT least(min(CASE WHEN l.available_at > now() THEN l.available_at ELSE n.at END),
						now() + make_interval(secs => $3)) AS at
				FROM lanes l LEFT JOIN unnest((SELECT $6::text[]), (SELECT $7::int[])) AS b(lane, room) ON b.lane = l.lane
					LEFT JOIN room r ON r.lane = l.lane
					LEFT JOIN LATERAL (
						SELECT available_at AS at FROM {t}
						WHERE (SELECT count(*) FROM cand WHERE cand.lane = r.lane) < r.room
							AND module = $1 AND lane = l.lane AND {pending} AND available_at >= l.available_at
							AND id <> ALL(ARRAY(SELECT id FROM cand))
						ORDER BY available_at LIMIT 1) n ON true
				WHERE coalesce(b.room, $5) > 0),
			entries AS (
				INSERT INTO {timeline} (record_id, event, hand, code, reason)
				SELECT id, 'lost', hands - 1, '` + CodeLostHand + `',
					'the hand ended without an answer: its process stopped or its lease ran out'
				FROM claimed WHERE hands - 1 > answered_hand
				UNION ALL
				SELECT id, 'dead', hands, code, failure_reason FROM claimed WHERE failed_at IS NOT NULL)
			SELECT id, lane, kind, payload, headers, correlation_id, causation_id,
				created_at, attempts, hands, unsure, last_error, failed_at IS NOT NULL,
				extract(epoch FROM now() - created_at),
				secret,
				(SELECT count(*) FROM cand) = (SELECT count(*) FROM due),
				extract(epoch FROM (SELECT at FROM later) - now()), claims,
				(SELECT json_object_agg(lane, (extract(epoch FROM
					least(available_at, now() - interval '{floorLag} seconds')) * 1000000)::bigint) FROM lanes)
			FROM claimed`),

		// Seconds until the module's next row falls due in a lane with
		// room ($2 names the lanes without): a retry, a scheduled record,
		// or a lease that runs out. A full lane wakes the relay when a
		// slot of it comes free. Asked after a short claim whose own
		// answer does not hold (see claim), with its floors ($3 and $4).
		nextDue: r.Replace(`WITH RECURSIVE {nextLanes}
			SELECT extract(epoch FROM min(available_at) - now()) FROM lanes
			WHERE lane <> ALL(coalesce($2::text[], '{}'))`),

		// Settle many rows in one statement, each fenced by the claim it
		// answers and the hands and attempts it was claimed with: a relay
		// whose lease ran out cannot overwrite what a later claim decided,
		// and a settle sent twice (its answer lost) lands once, since every
		// outcome changes the hands, the attempts or the state, and a
		// claim after it changes the claims.
		//
		// Its times are clock_timestamp(), not now(): a settle written in a
		// sink's transaction runs after the sink's work, and a retry's
		// delay counts from the answer, not from the transaction's start.
		//
		// Every settled row but a done one appends its timeline entry in
		// the same statement: the outcome, its code and reason, the hand,
		// how long the hand took, and the next due time of a row that
		// stays pending, with the sink's detail. A done row without a
		// detail is its own last entry: Status reads it from processed_at,
		// result, code, answered_hand and took_ms.
		//
		// A row that ends (done or dead) loses its secret here; the
		// trigger erases only what an update ends with its secret still
		// set.
		//
		// The arrays come through sub-selects, so that a plan does not
		// know the batch's size and the server keeps one for a prepared
		// settle (see claim). It answers how many rows it settled: the
		// others were fenced off.
		settle: r.Replace(`WITH up AS (
				UPDATE {t} o SET
					processed_at = CASE WHEN r.outcome = 'done' THEN clock_timestamp() END,
					result = CASE WHEN r.outcome = 'done' THEN r.text ELSE o.result END,
					failed_at = CASE WHEN r.outcome = 'dead' THEN clock_timestamp() END,
					failure_reason = CASE WHEN r.outcome = 'dead' THEN r.text END,
					attempts = o.attempts + CASE WHEN r.outcome IN ('retry', 'dead') THEN 1 ELSE 0 END,
					last_error = CASE WHEN r.outcome IN ('retry', 'dead', 'unsure') THEN r.text ELSE o.last_error END,
					code = CASE WHEN r.outcome = 'release' THEN o.code ELSE r.code END,
					hands = o.hands - CASE WHEN r.outcome IN ('release', 'unsure') THEN 1 ELSE 0 END,
					answered_hand = o.hands - CASE WHEN r.outcome IN ('release', 'unsure') THEN 1 ELSE 0 END,
					unsure = o.unsure + CASE WHEN r.outcome = 'unsure' THEN 1 ELSE 0 END,
					took_ms = round(r.took * 1000)::int,
					available_at = CASE r.outcome
						WHEN 'retry' THEN clock_timestamp() + make_interval(secs => r.delay)
						WHEN 'unsure' THEN clock_timestamp() + make_interval(secs => r.delay)
						WHEN 'release' THEN clock_timestamp() + make_interval(secs => r.delay)
						ELSE o.available_at END,
					secret = CASE WHEN r.outcome IN ('done', 'dead') THEN NULL ELSE o.secret END
				FROM unnest((SELECT $1::uuid[]), (SELECT $2::int[]), (SELECT $3::text[]), (SELECT $4::float8[]),
						(SELECT $5::text[]), (SELECT $6::int[]), (SELECT $7::text[]), (SELECT $8::float8[]),
						(SELECT $9::text[]), (SELECT $10::bigint[]))
					AS r(id, hands, outcome, delay, text, attempts, code, took, detail, claim)
				WHERE o.id = r.id AND o.claims = r.claim AND o.hands = r.hands AND o.attempts = r.attempts AND {pendingByID}
				RETURNING o.id, r.outcome, r.hands, r.code, r.text, r.took, o.available_at, r.detail),
			entries AS (INSERT INTO {timeline} (record_id, event, hand, code, reason, detail)
				SELECT id, outcome, hands, code, text, jsonb_build_object('took_ms', round(took * 1000)::bigint)
					|| CASE WHEN outcome IN ('retry', 'unsure', 'release') THEN jsonb_build_object('due', available_at) ELSE '{}' END
					|| detail::jsonb
				FROM up WHERE outcome <> 'done' OR detail <> '{}')
			SELECT count(*) FROM up`),

		// Start-up check, one round trip: the table is readable, and the
		// session's idle_in_transaction_session_timeout (ms; 0 is none).
		ping: r.Replace(`SELECT setting::bigint FROM pg_settings
			WHERE name = 'idle_in_transaction_session_timeout' AND NOT EXISTS (SELECT 1 FROM {t} WHERE false)`),

		listDead: r.Replace(`SELECT id, module, lane, kind, payload, correlation_id, causation_id,
				created_at, failed_at, failure_reason, code, attempts, hands
			FROM {t} o
			WHERE failed_at IS NOT NULL AND {deadFilter}
				AND ($8::timestamptz IS NULL OR (failed_at, id) > ($8, $9::uuid))
			ORDER BY failed_at, id
			LIMIT $10`),
		// Re-emit gives dead rows a fresh budget of attempts and hands,
		// and appends to each timeline what the row was; the caller wakes
		// each module's relay in the same transaction.
		reemit: r.Replace(`WITH was AS (
				SELECT id, failed_at, failure_reason, code, attempts, hands FROM {t} o
				WHERE failed_at IS NOT NULL AND {deadFilter}
				FOR UPDATE),
			up AS (
				UPDATE {t} o SET failed_at = NULL, failure_reason = NULL, code = '', last_error = '',
					attempts = 0, hands = 0, unsure = 0, answered_hand = 0, available_at = now()
				FROM was WHERE o.id = was.id
				RETURNING o.id, o.module),
			entries AS (
				INSERT INTO {timeline} (record_id, event, code, reason, detail)
				SELECT was.id, 'reemitted', was.code, was.failure_reason, jsonb_build_object(
					'was', 'dead', 'failed_at', was.failed_at, 'attempts', was.attempts, 'hands', was.hands)
				FROM was JOIN up ON up.id = was.id)
			SELECT module, count(*) FROM up GROUP BY module`),
		// One wake-up per module: $2 is the modules.
		notify: `SELECT pg_notify($1, m) FROM unnest($2::text[]) AS m`,

		// A record's timeline goes with it; the count is the records'. $3
		// is the module whose records go, or '' for every module's.
		purge: r.Replace(`WITH gone AS (
				DELETE FROM {t} WHERE id IN (
					SELECT id FROM {t}
					WHERE (processed_at IS NOT NULL OR cancelled_at IS NOT NULL)
						AND coalesce(processed_at, cancelled_at) < now() - make_interval(secs => $1)
						AND ($3 = '' OR module = $3)
					LIMIT $2 FOR UPDATE SKIP LOCKED)
				RETURNING id),
			entries AS (DELETE FROM {timeline} WHERE record_id IN (SELECT id FROM gone))
			SELECT id FROM gone`),

		// The row and its timeline in one statement, one snapshot: read
		// apart, a settle committing between them showed its entry beside
		// the row as it was before.
		status: r.Replace(`SELECT module, lane, kind, created_at, available_at, attempts, hands, unsure, last_error, code,
				result, processed_at, failed_at, failure_reason, cancelled_at, correlation_id, causation_id, headers,
				answered_hand, took_ms,
				(SELECT coalesce(json_agg(json_build_object('at', at, 'event', event, 'hand', hand, 'code', code,
					'reason', reason, 'detail', detail) ORDER BY at), '[]') FROM {timeline} WHERE record_id = $1)
			FROM {t} WHERE id = $1`),
		// The records of correlation id $1 ($2 the same as a uuid, or
		// NULL), of kind $3 ('' for any), oldest first, at most $4: those
		// given it, through outbox_correlation, and the record whose own
		// id it is (staged without one), by primary key.
		byCorrelation: r.Replace(`SELECT id, module, lane, kind, created_at, attempts, code,
				CASE WHEN processed_at IS NOT NULL THEN 'processed' WHEN failed_at IS NOT NULL THEN 'dead'
					WHEN cancelled_at IS NOT NULL THEN 'cancelled' ELSE 'pending' END,
				coalesce(processed_at, failed_at, cancelled_at)
			FROM (
				SELECT * FROM {t} WHERE correlation_id = $1 AND correlation_id <> id::text
				UNION ALL
				SELECT * FROM {t} WHERE id = $2::uuid AND correlation_id = id::text) o
			WHERE $3 = '' OR kind = $3
			ORDER BY created_at, id
			LIMIT $4`),
		cancel: r.Replace(`WITH up AS (
				UPDATE {t} SET cancelled_at = now(), code = '` + CodeCancelled + `'
				WHERE id = $1 AND {pending}
				RETURNING id)
			INSERT INTO {timeline} (record_id, event, code) SELECT id, 'cancelled', '` + CodeCancelled + `' FROM up`),
		// Pending records $1 settled as processed by someone other than
		// their relay: code $2, detail $3, a timeline entry each. A hand
		// running on one of them finds it settled: its own settle is
		// fenced by the pending state.
		finish: r.Replace(`WITH up AS (
				UPDATE {t} o SET processed_at = clock_timestamp(), code = $2, result = '', answered_hand = o.hands, took_ms = 0
				WHERE o.id = ANY($1::uuid[]) AND {pendingByID}
				RETURNING o.id, o.hands)
			INSERT INTO {timeline} (record_id, event, hand, code, detail)
			SELECT id, 'done', hands, $2, $3::jsonb FROM up
			RETURNING record_id`),
		note: r.Replace(`INSERT INTO {timeline} (record_id, event, code, detail)
			SELECT id, $2, $3, $4::jsonb FROM {t} WHERE id = ANY($1::uuid[])`),
		// Through outbox_result.
		byResult: r.Replace(`SELECT id, module, payload, correlation_id, causation_id, created_at FROM {t}
			WHERE result = $1 AND result <> '' AND kind = $2 AND lane = $3
			ORDER BY created_at, id LIMIT $4`),
	}
}
