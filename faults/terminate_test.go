package faults_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/drivertest"
)

// Item 4 of the issue: pg_terminate_backend of every session of the relay,
// its pool and its LISTEN session, five times a second for ten seconds
// while events are staged. Afterwards the relay drains everything staged
// within a minute (its rate is logged, not judged: a loaded machine sets
// it), its LISTEN session is back and its notifications wake the relay
// (the sweep is an hour away), and nothing is lost or claimed twice.
func TestTerminateBackendsUnderLoad(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, testTerminateBackendsUnderLoad)
}

func testTerminateBackendsUnderLoad(t *testing.T, _ drivertest.Driver) {
	b := setupCluster(t)
	listener := watch(drivertest.For(t).Listener(t, b.dsn(t, appListen)))
	cfg := relayConfig(b.schema, drivertest.For(t), listener)
	cfg.SweepInterval = time.Hour // only a wake-up (or the relay's own timers) finds new rows
	stopRelay := b.runRelay(t, cfg)

	// About 100 events a second, from a pool no fault touches.
	ld := b.startLoad(t, 20*time.Millisecond, 2)
	waitFor(t, 30*time.Second, func() bool { _, n := b.provider.Counts(); return n >= 200 },
		func() string { return "the relay to deliver 200 events before the storm" })

	const (
		storm = 10 * time.Second
		every = 200 * time.Millisecond
	)
	stormStart := time.Now()
	var rounds, pool, listen int
	tick := time.NewTicker(every)
	for time.Since(stormStart) < storm {
		var p, l int
		err := b.faults.Inject("terminate", func() error {
			return b.db.QueryRowContext(t.Context(), `WITH cut AS MATERIALIZED (
					SELECT application_name AS app, pg_terminate_backend(pid) AS done
					FROM pg_stat_activity WHERE application_name IN ($1, $2))
				SELECT count(*) FILTER (WHERE app = $1 AND done), count(*) FILTER (WHERE app = $2 AND done) FROM cut`,
				appRelay, appListen).Scan(&p, &l)
		})
		require.NoError(t, err)
		rounds, pool, listen = rounds+1, pool+p, listen+l
		<-tick.C
	}
	tick.Stop()
	stormEnd := time.Now()
	_, deliveredByStormEnd := b.provider.Counts()
	t.Logf("storm: %d rounds in %s terminated %d pool sessions and %d LISTEN sessions",
		rounds, stormEnd.Sub(stormStart).Round(time.Millisecond), pool, listen)
	require.Positive(t, pool, "the storm cut pool sessions")
	require.Positive(t, listen, "the storm cut the LISTEN session")

	// Throughput comes back: the load goes on for three more seconds' worth
	// of events, and the relay, woken only by notifications and its own
	// timers, delivers everything staged.
	stagedByStormEnd := ld.staged()
	waitFor(t, 30*time.Second, func() bool { return ld.staged() >= stagedByStormEnd+300 },
		func() string { return "300 more events staged after the storm" })
	ld.stop()
	b.waitProcessed(t, time.Minute)
	caughtUp := time.Now()
	_, delivered := b.provider.Counts()
	t.Logf("after the storm: %d events delivered in %s, %.0f/s (the load offers about 100/s)",
		delivered-deliveredByStormEnd, caughtUp.Sub(stormEnd).Round(time.Millisecond),
		float64(delivered-deliveredByStormEnd)/caughtUp.Sub(stormEnd).Seconds())
	var late float64
	require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT coalesce(extract(epoch FROM max(processed_at - created_at)), 0)
		FROM "`+b.schema+`".outbox WHERE created_at > now() - make_interval(secs => $1)`,
		time.Since(stormEnd).Seconds()).Scan(&late))
	t.Logf("events staged after the storm waited at most %.3f s to be processed", late)

	// LISTEN is re-established, one session, and its notifications reach
	// the relay: the relay would drain by sweeping every second without it.
	waitFor(t, 10*time.Second, func() bool { return b.sessions(t, appListen) == 1 },
		func() string { return "the LISTEN session to come back" })
	b.probeListen(t, listener)

	stopRelay()
	r := b.checkLedger(t)
	t.Logf("duplicates: %d ids received more than once, all inside a termination's window", r.Duplicated)
}
