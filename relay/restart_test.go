package relay_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/pgtemp"
	"github.com/tidings-go/tidings/relay"
)

// The server of this test is its own: it is crashed and restarted under a
// running relay, which must recover by itself.
func TestServerRestartRecovers(t *testing.T) {
	t.Parallel()
	// Durable: a crash must not forget committed settles.
	b, cluster := ownCluster(t, &pgtemp.Options{Durable: true})

	sink := newRecorder(nil)
	cfg := b.config(t)
	cfg.SweepInterval = time.Hour // the reconnected listener must wake it
	supervise(t, b.db, cfg, sink)

	b.stage(t, 50)
	b.eventually(t, "processed_at IS NOT NULL", 50, 10*time.Second)

	require.NoError(t, cluster.Restart(t.Context(), true))
	// Staging may meet a pooled connection the crash killed: the
	// application retries its write, as it would.
	require.Eventually(t, func() bool {
		tx, err := b.db.BeginTx(t.Context(), nil)
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
