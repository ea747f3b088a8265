package faults_test

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/child"
	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/internal/ledger"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

// The kill test runs the relay in a child process: the test binary run
// again with these variables set.
const (
	envChildDSN      = "TIDINGS_FAULTS_CHILD_DSN"
	envChildSchema   = "TIDINGS_FAULTS_CHILD_SCHEMA"
	envChildProvider = "TIDINGS_FAULTS_CHILD_PROVIDER"
	envChildDriver   = "TIDINGS_FAULTS_CHILD_DRIVER"
)

// childConcurrency is the child relay's: more hands in flight, more
// deliveries the provider has seen whose claims a kill rolls back.
const childConcurrency = 32

// runChild runs the child relay, with the dispatcher delivering to the
// provider, when the variables say so, and reports whether it did. It runs
// until SIGTERM (and exits 0) or SIGKILL.
func runChild() bool {
	return child.Run(envChildDSN, func(ctx context.Context, dsn string) error {
		return runRelayChild(ctx, dsn, os.Getenv(envChildSchema), os.Getenv(envChildProvider))
	})
}

func runRelayChild(ctx context.Context, dsn, schema, providerURL string) error {
	// Room for a connection per hand, kept open: database/sql keeps only
	// two idle connections by default, and a relay that opens a session
	// per hand spends its time forking backends.
	drv := drivertest.Driver(os.Getenv(envChildDriver))
	db, err := drv.OpenDB(dsn, childConcurrency+8)
	if err != nil {
		return err
	}
	defer db.Close()
	listener, err := drv.NewListener(dsn)
	if err != nil {
		return err
	}
	client := ledger.NewClient(providerURL)
	defer client.Close()
	dcfg := dispatcherConfig(client)
	d, err := notification.NewDispatcher(&dcfg)
	if err != nil {
		return err
	}
	cfg := relayConfig(schema, drv, listener)
	cfg.Concurrency = childConcurrency
	cfg.BatchSize = childConcurrency
	return relay.Supervise(ctx, db.DB, &cfg, stamped{d})
}

func (b testBundle) startChild(t *testing.T) *child.Process {
	t.Helper()
	return child.Test(t, map[string]string{envChildDSN: b.dsn(t, appRelay), envChildSchema: b.schema,
		envChildProvider: b.provider.URL(), envChildDriver: string(drivertest.For(t))}, false)
}

// Item 1 of the issue: the relay process is killed five times while 10,000
// events are delivered through a provider with 5-50 ms latency, and
// restarted each time. Every kill leaves deliveries the provider received
// but whose claims never committed: they are delivered again, with the same
// key, once their leases run out; nothing is lost and nothing is claimed
// twice.
func TestSIGKILLFiveTimes(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, testSIGKILLFiveTimes)
}

func testSIGKILLFiveTimes(t *testing.T, _ drivertest.Driver) {
	b := setupShared(t)
	const events, kills = 10_000, 5
	b.mustStage(t, events)

	// Kill at random points: the k-th once the provider has seen between
	// 10+15k % and 20+15k % of the events.
	var at [kills]int
	for k := range at {
		at[k] = events * (10 + 15*k + rand.IntN(11)) / 100
	}
	start := time.Now()
	c := b.startChild(t)
	for k, n := range at {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		died := c.Done()
		go func() {
			select {
			case <-died: // the child died by itself: stop waiting
				cancel()
			case <-ctx.Done():
			}
		}()
		got, err := b.provider.WaitDistinct(ctx, n)
		cancel()
		select {
		case <-c.Done():
			t.Fatalf("the child relay exited by itself: %v", c.Err())
		default:
		}
		require.NoError(t, err, "kill %d: the provider saw %d of the %d events to wait for", k+1, got, n)
		require.NoError(t, b.faults.Inject("sigkill", c.Kill))
		receipts, distinct := b.provider.Counts()
		t.Logf("kill %d after %s: the provider has %d receipts of %d events", k+1, time.Since(start).Round(time.Millisecond), receipts, distinct)
		c = b.startChild(t)
	}
	b.waitProcessed(t, 2*time.Minute)
	t.Logf("all %d events processed %s after the first start", events, time.Since(start).Round(time.Millisecond))
	require.NoError(t, c.Stop(30*time.Second), "the child relay stops cleanly on SIGTERM")
	r := b.checkLedger(t)
	require.Equal(t, events, r.Staged)
	t.Logf("duplicates: %d ids received more than once, all inside a kill's window", r.Duplicated)
	require.Positive(t, r.Duplicated, "the kills caught deliveries in flight")
}
