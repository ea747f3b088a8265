package main

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/internal/logbuf"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/relaytest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A sign-up stages its mail in its own pgx transaction, the relay on the
// pgxpool delivers it once, and a sign-up that fails stages nothing.
func TestSignUpDeliversThroughTheRelay(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t, func(ctx context.Context, db *sql.DB, schema string) error { return migrate(ctx, db, schema) })
	db := drivertest.PGX.Open(t, pgtest.URL(t), 10)
	out := &logbuf.Buffer{}
	svc, err := newService(db.Pool, db.DB, schema, out)
	require.NoError(t, err)
	relaytest.Supervise(t, db.DB, svc.relayConfig(), svc.dispatcher)

	id, err := svc.SignUp(t.Context(), "ada@example.com")
	require.NoError(t, err)
	st, err := svc.client.Wait(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, relay.StateProcessed, st.State)
	require.Equal(t, "mail "+id.String()+" to ada@example.com: welcome\n", out.String())

	// The same address again: the insert fails, the transaction rolls back
	// and no mail was staged.
	_, err = svc.SignUp(t.Context(), "ada@example.com")
	require.ErrorContains(t, err, "sign up")
	var staged int
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM "`+schema+`".outbox`).Scan(&staged))
	require.Equal(t, 1, staged)
	require.Equal(t, 1, strings.Count(out.String(), "mail "))
}
