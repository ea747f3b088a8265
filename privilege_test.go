package tidings_test

// Least privilege: the relay and the dispatcher need only DML on their own
// tables; migrations need more and refuse to run without it.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/inbox"
	"github.com/tidings-go/tidings/internal/logbuf"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/recording"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/pqlisten"
	"github.com/tidings-go/tidings/relay/relaytest"
)

// TestLeastPrivilege runs a relay and a dispatcher, end to end, connected
// as pgtest's application role, as every test is, with its grants narrowed
// to what a production relay gets: USAGE on the schema and DML on the
// outbox, the timeline and the inbox, nothing else. Stage, deliver, dead, list, re-emit,
// status, cancel and purge all work; and every migration refuses to run
// as that role, with a permission error, creating nothing.
func TestLeastPrivilege(t *testing.T) {
	t.Parallel()
	admin := pgtest.AdminDB(t)
	schema := pgtest.Schema(t, tidings.Migrate)
	role := pgtest.AppRole(t)
	// pgtest grants DML on every table of the schema; the library's own
	// bookkeeping of migrations is none of the relay's business.
	_, err := admin.ExecContext(t.Context(), `REVOKE ALL ON `+pq.QuoteIdentifier(schema)+`.migrations FROM `+pq.QuoteIdentifier(role))
	require.NoError(t, err)
	app, dsn := pgtest.Open(t, 10), pgtest.URL(t)

	var user string
	var super, createDB, createRole bool
	require.NoError(t, app.QueryRowContext(t.Context(), `SELECT current_user, rolsuper, rolcreatedb, rolcreaterole
		FROM pg_catalog.pg_roles WHERE rolname = current_user`).Scan(&user, &super, &createDB, &createRole))
	require.Equal(t, role, user)
	require.False(t, super || createDB || createRole, "the application role has an attribute beyond LOGIN")
	var privileges []string
	q := pq.QuoteIdentifier(schema)
	for _, check := range []string{
		`has_schema_privilege(` + pq.QuoteLiteral(schema) + `, 'CREATE')`,
		`has_database_privilege(current_database(), 'CREATE')`,
		`has_table_privilege(` + pq.QuoteLiteral(q+".outbox") + `, 'TRUNCATE, REFERENCES, TRIGGER')`,
		`has_table_privilege(` + pq.QuoteLiteral(q+".inbox") + `, 'TRUNCATE, REFERENCES, TRIGGER')`,
		`has_table_privilege(` + pq.QuoteLiteral(q+".timeline") + `, 'TRUNCATE, REFERENCES, TRIGGER')`,
		`has_table_privilege(` + pq.QuoteLiteral(q+".migrations") + `, 'SELECT, INSERT, UPDATE, DELETE')`,
	} {
		var has bool
		require.NoError(t, app.QueryRowContext(t.Context(), `SELECT `+check).Scan(&has), check)
		if has {
			privileges = append(privileges, check)
		}
	}
	require.Empty(t, privileges, "the application role has more than DML on its tables")
	_, err = app.ExecContext(t.Context(), `CREATE TABLE `+q+`.x (n int)`)
	pqErr, ok := errors.AsType[*pq.Error](err)
	require.True(t, ok, "CREATE in the schema: %v", err)
	require.Equal(t, pq.ErrorCode("42501"), pqErr.Code, "CREATE in the schema: %v", err)

	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: schema})
	require.NoError(t, err)
	mail := recording.New()
	mail.ScriptRecipient("bounces@example.com", delivery.Reject(errors.New("mailbox does not exist")))
	d, err := notification.NewDispatcher(&notification.Config{Consumer: "app_notify",
		Deliveries: map[string]delivery.Delivery{"mail": mail}})
	require.NoError(t, err)
	client, err := notification.NewClient(app, &notification.ClientConfig{Schema: schema, Consumer: "app_notify"})
	require.NoError(t, err)

	var logs logbuf.Buffer
	relaytest.Supervise(t, app, relay.Config{Module: "app", Schema: schema, Listener: pqlisten.New(dsn),
		HandTimeout: 5 * time.Second, Lease: 10 * time.Second, SweepInterval: time.Hour, GracePeriod: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, d)

	wait := func(id uuid.UUID) notification.Status {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		defer cancel()
		st, err := client.Wait(ctx, id)
		require.NoError(t, err)
		return st
	}

	// Stage, in the application's transaction, as the role.
	tx, err := app.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	var msgs []relay.Message
	for _, r := range []notification.Request{
		{Channel: "mail", Recipient: "ada@example.com", Template: "welcome"},
		{Channel: "mail", Recipient: "bounces@example.com", Template: "welcome"},
		{Channel: "mail", Recipient: "later@example.com", Template: "reminder", NotBefore: time.Now().Add(time.Hour)},
	} {
		m, err := r.Message("app")
		require.NoError(t, err)
		msgs = append(msgs, m)
	}
	ids, err := ob.StageBatch(t.Context(), tx, msgs[:2])
	require.NoError(t, err)
	later, err := ob.Stage(t.Context(), tx, msgs[2])
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	delivered, bounced := ids[0], ids[1]

	require.Equal(t, relay.StateProcessed, wait(delivered).State)
	st := wait(bounced)
	require.Equal(t, relay.StateDead, st.State)
	require.Contains(t, st.Reason, "mailbox does not exist")

	dead, err := ob.ListDead(t.Context(), app, &relay.DeadFilter{Module: "app"})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, bounced, dead[0].ID)
	n, err := ob.Reemit(t.Context(), app, &relay.DeadFilter{IDs: []uuid.UUID{bounced}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, relay.StateProcessed, wait(bounced).State, "re-emitted, and delivered this time")
	require.Equal(t, 2, mail.Count(bounced))

	st, err = client.Status(t.Context(), later)
	require.NoError(t, err)
	require.Equal(t, relay.StatePending, st.State)
	st, err = client.Cancel(t.Context(), later)
	require.NoError(t, err)
	require.Equal(t, relay.StateCancelled, st.State)

	purged, err := ob.Purge(t.Context(), app, time.Microsecond)
	require.NoError(t, err)
	require.EqualValues(t, 3, purged, "processed and cancelled rows")
	_, err = ob.Status(t.Context(), app, delivered)
	require.ErrorIs(t, err, relay.ErrNotFound)
	_, err = d.Purge(t.Context()) // the inbox, at its retention
	require.NoError(t, err)
	ib, err := inbox.New(schema)
	require.NoError(t, err)
	claims, err := ib.Purge(t.Context(), app, "app_notify", time.Microsecond)
	require.NoError(t, err)
	require.EqualValues(t, 3, claims, "two deliveries and one cancel")

	for _, failure := range []string{"permission denied", "claim failed", "settle failed", "purge failed", "listen failed"} {
		require.NotContains(t, logs.String(), failure)
	}

	t.Run("MigrationsRefuse", func(t *testing.T) {
		t.Parallel()
		fresh := fmt.Sprintf("t_lp_%d_%d", os.Getpid(), schemaCounter.Add(1))
		t.Cleanup(func() {
			_, err := admin.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS `+pq.QuoteIdentifier(fresh)+` CASCADE`)
			require.NoError(t, err)
		})
		var versions int
		require.NoError(t, admin.QueryRowContext(t.Context(),
			`SELECT count(*) FROM `+pq.QuoteIdentifier(schema)+`.migrations`).Scan(&versions))

		for name, migrate := range map[string]pgtest.MigrateFunc{
			"tidings.Migrate": tidings.Migrate,
			"relay.Migrate":   relay.Migrate,
			"inbox.Migrate":   inbox.Migrate,
		} {
			for _, target := range []string{fresh, schema} {
				err := migrate(t.Context(), app, target)
				require.Error(t, err, "%s(%s) as %s", name, target, role)
				pqErr, ok := errors.AsType[*pq.Error](err)
				require.True(t, ok, "%s(%s): %v", name, target, err)
				require.Equal(t, pq.ErrorCode("42501"), pqErr.Code, "insufficient_privilege: %v", err)
				require.Contains(t, err.Error(), "permission denied")
			}
		}
		var exists bool
		require.NoError(t, admin.QueryRowContext(t.Context(),
			`SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)`, fresh).Scan(&exists))
		require.False(t, exists, "a refused migration created its schema")
		var after int
		require.NoError(t, admin.QueryRowContext(t.Context(),
			`SELECT count(*) FROM `+pq.QuoteIdentifier(schema)+`.migrations`).Scan(&after))
		require.Equal(t, versions, after)
		require.Equal(t, migratedTables, tables(t, admin, schema))
	})
}
