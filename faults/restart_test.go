package faults_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/drivertest"
)

// Item 5 of the issue: PostgreSQL stopped in immediate mode, as a crash
// would, while deliveries are in flight, and started again. The relay is
// never restarted: it reconnects its pool and its LISTEN session by itself
// and delivers what was staged before and after; claims the crash rolled
// back are delivered again with the same key, claims it kept are not.
func TestImmediateStopAndStart(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, testImmediateStopAndStart)
}

func testImmediateStopAndStart(t *testing.T, _ drivertest.Driver) {
	b := setupCluster(t)
	listener := watch(drivertest.For(t).Listener(t, b.dsn(t, appListen)))
	cfg := relayConfig(b.schema, drivertest.For(t), listener)
	// Longer than every wait below: recovery must come from the relay
	// reconnecting, not from its safety net. While LISTEN is away the
	// relay sweeps every second, so the probe below checks the session.
	cfg.SweepInterval = 5 * time.Minute
	stopRelay := b.runRelay(t, cfg)

	const before, after = 1000, 1000
	b.mustStage(t, before)
	waitFor(t, 30*time.Second, func() bool { _, n := b.provider.Counts(); return n >= 200 },
		func() string { return "deliveries to be under way" })
	require.NoError(t, b.faults.Inject("immediate restart", func() error { return b.cluster.Restart(t.Context(), true) }))
	c, err := b.counts(t.Context())
	if err == nil {
		t.Logf("after the restart: %+v", c)
	}
	b.stageRetrying(t, after, 30*time.Second)

	start := time.Now()
	b.waitProcessed(t, time.Minute)
	t.Logf("everything staged was processed %s after staging resumed", time.Since(start).Round(time.Millisecond))
	b.probeListen(t, listener)
	stopRelay()
	r := b.checkLedger(t)
	require.GreaterOrEqual(t, r.Staged, before+after)
	t.Logf("duplicates: %d ids received more than once, all inside the restart's window", r.Duplicated)
}
