package relay

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/pgtest"
)

// TestOperatorQueriesReadOnlyTheirIndexes checks that the statements an
// operator's tools, the gauges and a sink's lookups run often can be
// answered from the partial indexes of the records they read: with
// sequential scans off, each plan reads the outbox through those indexes
// alone (every one of them, where a statement has a branch per index). A condition
// that stops implying an index's predicate leaves the planner nothing but
// a scan of the whole table, history included.
func TestOperatorQueriesReadOnlyTheirIndexes(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t, Migrate)
	o, err := NewOutbox(&OutboxConfig{Schema: schema})
	require.NoError(t, err)
	tx := pgtest.Tx(t)
	_, err = tx.ExecContext(t.Context(), `SET LOCAL enable_seqscan = off`)
	require.NoError(t, err)

	dead := []string{"outbox_dead", "outbox_dead_code"}
	for name, c := range map[string]struct {
		query   string
		args    []any
		indexes []string
		ranged  bool // each index is read over a range of its key, not whole
		every   bool // each of indexes is read
	}{
		"CountDeadByCode":   {o.q.countDead[ByCode], (&DeadFilter{}).args(), dead, false, false},
		"CountDeadByLane":   {o.q.countDead[ByLane], (&DeadFilter{Lane: "sms"}).args(), dead, false, false},
		"CountDeadByModule": {o.q.countDead[ByModule], (&DeadFilter{Module: "bookings"}).args(), dead, false, false},
		"Throughput":        {o.q.throughput, []any{"", 5}, append([]string{"outbox_settled"}, dead...), true, false},
		"Stats":             {o.q.stats, []any{""}, append([]string{"outbox_due"}, dead...), false, false},
		"FindByCorrelation": {o.q.byCorrelation, []any{"order-7", uuid.New(), "", FindLimitDefault},
			[]string{"outbox_correlation", "outbox_pkey"}, true, true},
		"FindByResult": {o.q.byResult, []any{"ref-a", "sent", "mail", FindLimitDefault}, []string{"outbox_result"}, true, true},
	} {
		plan, raw := pgtest.Explain(t, tx, c.query, c.args...)
		used := map[string]bool{}
		plan.Walk(func(n pgtest.Plan) {
			require.False(t, n.Type == "Seq Scan" && n.Relation == "outbox", "%s reads the whole outbox: %s", name, raw)
			if n.Index != "" { // every index these statements may use is the outbox's
				require.Contains(t, c.indexes, n.Index, "%s reads the outbox through %s: %s", name, n.Index, raw)
				require.False(t, c.ranged && n.Cond == "", "%s reads all of %s: %s", name, n.Index, raw)
				used[n.Index] = true
			}
		})
		require.NotEmpty(t, used, "%s uses none of %v: %s", name, c.indexes, raw)
		for _, index := range c.indexes {
			require.True(t, !c.every || used[index], "%s does not read %s: %s", name, index, raw)
		}
	}
}

// TestClaimKeepsOnePlan checks that the server keeps one plan for a
// prepared claim, as it does for the statements pgx prepares: a plan
// that knows the claim's limit and the lanes' rooms must cost no less
// than one that does not, or the server plans the claim again for every
// run, which cost more than running it.
func TestClaimKeepsOnePlan(t *testing.T) {
	t.Parallel()
	o := backlog(t, 100_000)
	// As a relay claims with one busy lane: its room, and a few records;
	// from the lanes' floors, and from the lanes' start.
	pgtest.RequireOnePlan(t, o.q.claim, `(text, int, float8, int, int, text[], int[], int, text[], text[], bigint[])`, []string{
		`'bench', 13, 30, 10, 37, '{mail}', '{13}', 13, '{push}', '{mail,push}', '{1764583200000000,1764583200000000}'`,
		`'bench', 5, 30, 10, 37, '{mail}', '{5}', 5, '{push}', '{mail}', '{1764583200000000}'`,
		`'bench', 7, 30, 10, 37, '{mail}', '{7}', 7, '{push}', NULL, NULL`,
	})
}

// TestSettleKeepsOnePlan checks the same of the settle, whose batches
// vary in size.
func TestSettleKeepsOnePlan(t *testing.T) {
	t.Parallel()
	o := backlog(t, 100_000)
	one := func(n int) string {
		a := make([]string, 10)
		for k, v := range []string{uuid.NewString(), "1", "done", "0", "", "0", "", "0.01", "{}", "1"} {
			a[k] = "'{" + strings.TrimSuffix(strings.Repeat(`"`+v+`",`, n), ",") + "}'"
		}
		return strings.Join(a, ", ")
	}
	pgtest.RequireOnePlan(t, o.q.settle, `(uuid[], int[], text[], float8[], text[], int[], text[], float8[], text[], bigint[])`,
		[]string{one(1), one(9), one(3)})
}

// TestClaimIsNotCompiledAgainstABigBacklog checks that the claim's
// estimated cost stays under jit_above_cost however many records are
// pending and however large the table: the server compiles a statement
// that passes it on every run (JIT is on by default), which took most of
// a second per claim against three million pending records and drained
// them at some 200 events/s. Its cost grew with the backlog, through the
// lanes' rooms that the planner takes for a tenth of a lane's rows; the
// constant claimLaneMax bounds the rows it expects of each lane. What
// each of those rows costs grows with the table: in a table of far more
// settled rows than pending ones, whose due times are out of step with
// where the rows lie (a drained table after a vacuum), the planner takes
// each for a page read of its own. A bound of 10,000 rows per lane let a
// drain's claim pass the line again after its first autovacuum, and
// drain three million records at a fifth of the rate from then on. The
// claim now reads each lane from its oldest row, a range the planner
// guesses small, so its estimate at this size no longer reaches the
// bound; a deep enough backlog still would. So the claim must stay under
// the line even if every lane the planner expects gave claimLaneMax
// rows, each a random page read.
func TestClaimIsNotCompiledAgainstABigBacklog(t *testing.T) {
	t.Parallel()
	o := backlog(t, 400_000)
	tx := pgtest.Tx(t)
	claim := pgtest.Prepare(t, tx, `(text, int, float8, int, int, text[], int[], int, text[], text[], bigint[])`, o.q.claim)
	var above, perRow float64
	require.NoError(t, tx.QueryRowContext(t.Context(), `SELECT current_setting('jit_above_cost')::float8,
		current_setting('random_page_cost')::float8 + current_setting('cpu_tuple_cost')::float8
		+ current_setting('cpu_index_tuple_cost')::float8 + current_setting('cpu_operator_cost')::float8`).Scan(&above, &perRow))
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		_, err := tx.ExecContext(t.Context(), `SET LOCAL plan_cache_mode = `+mode)
		require.NoError(t, err)
		plan, raw := pgtest.Explain(t, tx, `EXECUTE `+claim+`('bench', 500, 30, 10, 375, '{mail}', '{100}', 50, '{mail}', '{mail}', '{1764583200000000}')`)
		// The lanes' rows: a nested loop over the lanes, right under a
		// sort (the walk that finds the lanes sorts their floors too).
		var lanes *pgtest.Plan
		plan.Walk(func(n pgtest.Plan) {
			if lanes == nil && n.Type == "Sort" && len(n.Plans) > 0 && n.Plans[0].Type == "Nested Loop" {
				lanes = &n.Plans[0].Plans[0]
			}
		})
		require.NotNil(t, lanes, "%s: the claim's plan has no loop over the lanes under a sort: %s", mode, raw)
		worst := plan.Cost + lanes.Rows*claimLaneMax*perRow
		require.Less(t, worst, above, "%s: the claim costs %.0f, and %.0f if each of the %.0f lanes it expects gave "+
			"%d rows, each a random page read: more than jit_above_cost: %s", mode, plan.Cost, worst, lanes.Rows, claimLaneMax, raw)
	}
}

// backlog returns the outbox of a schema of its own holding n pending
// records of one lane, vacuumed and analyzed as a drain finds it (the
// indexes' sizes known), by the tables' owner: only it may analyze them.
func backlog(t *testing.T, n int) *Outbox {
	t.Helper()
	schema := pgtest.Schema(t, Migrate)
	o, err := NewOutbox(&OutboxConfig{Schema: schema})
	require.NoError(t, err)
	db := pgtest.AdminDB(t)
	for _, fill := range []string{
		`INSERT INTO "` + schema + `".outbox (id, module, kind, payload, headers, lane)
			SELECT gen_random_uuid(), 'bench', 'k', '{}', '{}', 'mail' FROM generate_series(1, ` + strconv.Itoa(n) + `) i`,
		`VACUUM (ANALYZE) "` + schema + `".outbox`,
	} {
		_, err := db.ExecContext(t.Context(), fill)
		require.NoError(t, err)
	}
	return o
}
