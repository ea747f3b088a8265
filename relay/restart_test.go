package relay_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/internal/pgtemp"
	"github.com/tidings-go/tidings/relay"
)

// The server of this test is its own: it is crashed and restarted under a
// running relay, which must recover by itself.
func TestServerRestartRecovers(t *testing.T) {
	t.Parallel()
	// Durable: a crash must not forget committed settles.
	cluster, err := pgtemp.Start(t.Context(), &pgtemp.Options{Durable: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cluster.Stop()) })
	db, err := sql.Open("postgres", cluster.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, tidings.Migrate(t.Context(), db, ""))
	b := testBundle{db: db, schema: relay.SchemaDefault}
	b.ob, err = relay.NewOutbox("")
	require.NoError(t, err)

	sink := newRecorder(nil)
	cfg := b.config(t)
	cfg.ListenDSN = cluster.URL()
	cfg.SweepInterval = time.Hour // the reconnected listener must wake it
	supervise(t, db, cfg, sink)

	b.stage(t, 50)
	b.eventually(t, "processed_at IS NOT NULL", 50, 10*time.Second)

	require.NoError(t, cluster.Restart(t.Context(), true))
	// Staging may meet a pooled connection the crash killed: the
	// application retries its write, as it would.
	require.Eventually(t, func() bool {
		tx, err := db.BeginTx(t.Context(), nil)
		if err != nil {
			return false
		}
		defer func() { _ = tx.Rollback() }()
		for i := range 50 {
			if _, err := b.ob.Stage(t.Context(), tx, relay.Message{Module: module, Kind: "k", Payload: payload(i)}); err != nil {
				return false
			}
		}
		return tx.Commit() == nil
	}, 10*time.Second, 50*time.Millisecond)
	b.eventually(t, "processed_at IS NOT NULL", 100, 30*time.Second)
	require.Equal(t, 100, sink.total())
}
