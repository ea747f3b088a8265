package faults_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
)

// childConcurrency is the child relay's: more hands in flight, more
// deliveries the provider has seen whose claims a kill rolls back.
const childConcurrency = 32

// runChild runs the child relay, with the dispatcher delivering to the
// provider, when the variables say so, and reports whether it did. It runs
// until SIGTERM (and exits 0) or SIGKILL.
func runChild() bool {
	dsn := os.Getenv(envChildDSN)
	if dsn == "" {
		return false
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := child(ctx, dsn, os.Getenv(envChildSchema), os.Getenv(envChildProvider)); err != nil {
		fmt.Fprintln(os.Stderr, "faults child:", err)
		os.Exit(2)
	}
	return true
}

func child(ctx context.Context, dsn, schema, providerURL string) error {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	// Room for a connection per hand, kept open: database/sql keeps only
	// two idle connections by default, and a relay that opens a session
	// per hand spends its time forking backends.
	db.SetMaxOpenConns(childConcurrency + 8)
	db.SetMaxIdleConns(childConcurrency + 8)
	client := ledger.NewClient(providerURL)
	defer client.Close()
	dcfg := dispatcherConfig(client)
	d, err := notification.NewDispatcher(&dcfg)
	if err != nil {
		return err
	}
	cfg := relayConfig(schema, dsn)
	cfg.Concurrency = childConcurrency
	cfg.BatchSize = childConcurrency
	return relay.Supervise(ctx, db, &cfg, stamped{d})
}

// childProcess is one run of the child relay.
type childProcess struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	err  error         // what Wait returned; read after done
}

func (b testBundle) startChild(t *testing.T) *childProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChildDSN+"="+b.dsn(t, appRelay), envChildSchema+"="+b.schema,
		envChildProvider+"="+b.provider.URL())
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	c := &childProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	return c
}

// kill sends SIGKILL and waits until the process is gone.
func (c *childProcess) kill() error {
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-c.done
	return nil
}

// stop asks the child to shut down and requires a clean exit.
func (c *childProcess) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the child relay did not stop within 30 s of SIGTERM")
	}
	require.NoError(t, c.err, "the child relay's exit")
}

// Item 1 of the issue: the relay process is killed five times while 10,000
// events are delivered through a provider with 5-50 ms latency, and
// restarted each time. Every kill leaves deliveries the provider received
// but whose claims never committed: they are delivered again, with the same
// key, once their leases run out; nothing is lost and nothing is claimed
// twice.
func TestSIGKILLFiveTimes(t *testing.T) {
	t.Parallel()
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
		died := c.done
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
		case <-c.done:
			t.Fatalf("the child relay exited by itself: %v", c.err)
		default:
		}
		require.NoError(t, err, "kill %d: the provider saw %d of the %d events to wait for", k+1, got, n)
		require.NoError(t, b.faults.Inject("sigkill", c.kill))
		receipts, distinct := b.provider.Counts()
		t.Logf("kill %d after %s: the provider has %d receipts of %d events", k+1, time.Since(start).Round(time.Millisecond), receipts, distinct)
		c = b.startChild(t)
	}
	b.waitProcessed(t, 2*time.Minute)
	t.Logf("all %d events processed %s after the first start", events, time.Since(start).Round(time.Millisecond))
	c.stop(t)
	r := b.checkLedger(t)
	require.Equal(t, events, r.Staged)
	t.Logf("duplicates: %d ids received more than once, all inside a kill's window", r.Duplicated)
	require.Positive(t, r.Duplicated, "the kills caught deliveries in flight")
}
