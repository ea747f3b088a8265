package notification

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/inbox"
	"github.com/tidings-go/tidings/internal/migrate"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/relay"
)

// The rules read of a batch, alone or after a transaction's inbox claims,
// once prepared (pgx prepares every statement), keeps one plan instead of
// being planned again per batch, and that plan, which knows neither the batch's size nor its
// values, probes the primary keys of the preferences (from the index
// alone), quiet hours and suppressions, one probe per subject, scope and
// address: a scan of the whole table per batch would grow with every
// subject and every suppressed address the service has. The tables are
// small here, as they are when a service starts, where a scan looks
// cheapest.
func TestRulesReadKeepsOnePlanThatProbesPrimaryKeys(t *testing.T) {
	t.Parallel()
	schema := rulesSchema(t)
	q := `"` + schema + `"`
	db := pgtest.AdminDB(t) // the tables' owner: only it may analyze them
	for _, fill := range []string{
		`INSERT INTO ` + q + `.preference (subject, category, channel, enabled)
			SELECT 'subject-' || i, 'marketing', '', false FROM generate_series(1, 1000) i`,
		`INSERT INTO ` + q + `.quiet_hours (subject, time_zone, windows)
			SELECT 'subject-' || i, 'UTC', '[]' FROM generate_series(1, 1000) i`,
		`INSERT INTO ` + q + `.suppression (channel, address, class, reason)
			SELECT 'mail', 'user' || i || '@example.com', 'permanent', 'bounce.permanent' FROM generate_series(1, 1000) i`,
		`ANALYZE ` + q + `.preference, ` + q + `.quiet_hours, ` + q + `.suppression`,
	} {
		_, err := db.ExecContext(t.Context(), fill)
		require.NoError(t, err)
	}

	// As the dispatcher reads them: a claim's subjects and addresses.
	const ids = `'dispatch', '{5b1e2f6c-3c8f-4f6e-9a57-0d8d6c1e2a01,5b1e2f6c-3c8f-4f6e-9a57-0d8d6c1e2a02}'`
	rules := []string{
		`'{}', '{}', '{}', '{}', '{mail}', '{user1@example.com}'`,
		`'{subject-1,subject-2,subject-3}', '{subject-1,subject-2,subject-3}', '{marketing,marketing,booking}', '{mail,mail,sms}',
			'{mail,mail}', '{user1@example.com,user2@example.com}'`,
		`'{subject-9}', '{subject-9,subject-9}', '{marketing,""}', '{push,push}',
			'{mail,sms,push}', '{user9@example.com,+15550100,ExponentPushToken[x]}'`,
	}
	var batch, one []string
	for i, r := range rules {
		batch = append(batch, r+`, `+ids)
		one = append(one, fmt.Sprintf(`%s, 'dispatch', '5b1e2f6c-3c8f-4f6e-9a57-0d8d6c1e2a0%d', '%s'`, r, i+3,
			map[bool]string{true: "key-1"}[i%2 == 0]))
	}
	const rulesTypes = `(text[], text[], text[], text[], text[], text[]`
	pq := newPolicyQueries(schema)
	pgtest.RequireOnePlan(t, pq.rules, rulesTypes+`)`, rules)
	pgtest.RequireOnePlan(t, pq.claimBatchRules, rulesTypes+`, text, uuid[])`, batch)
	pgtest.RequireOnePlan(t, pq.claimOneRules, rulesTypes+`, text, uuid, text)`, one)

	tx := pgtest.Tx(t)
	_, err := tx.ExecContext(t.Context(), `SET LOCAL plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	claim := pgtest.Prepare(t, tx, rulesTypes+`, text, uuid[])`, pq.claimBatchRules)
	plan, raw := pgtest.Explain(t, tx, `EXECUTE `+claim+`(`+batch[1]+`)`)
	probed := map[string]string{}
	plan.Walk(func(n pgtest.Plan) {
		require.NotEqual(t, "Seq Scan", n.Type, "the rules read scans all of %s: %s", n.Relation, raw)
		if n.Index != "" {
			require.NotEmpty(t, n.Cond, "the rules read reads all of %s: %s", n.Index, raw)
			probed[n.Index] = n.Type
		}
	})
	// The preferences come from their index alone.
	require.Equal(t, map[string]string{"preference_pkey": "Index Only Scan", "quiet_hours_pkey": "Index Scan",
		"suppression_pkey": "Index Scan"}, probed, "%s", raw)
}

// rulesSchema is a schema of its own with the outbox and the recipient
// rules' tables, for the tests of this package that read them.
func rulesSchema(tb testing.TB) string {
	return pgtest.Schema(tb, func(ctx context.Context, db *sql.DB, schema string) error {
		if err := relay.Migrate(ctx, db, schema); err != nil {
			return err
		}
		if err := inbox.Migrate(ctx, db, schema); err != nil {
			return err
		}
		return migrate.Apply(ctx, db, schema, migrate.Set{Component: "notification", FS: Migrations()})
	})
}
