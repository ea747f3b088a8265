package relay_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"database/sql"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/relay"
)

// The G2 crash test runs a relay in a child process: the test binary run
// again with these variables set.
const (
	envChildDSN    = "TIDINGS_RELAY_CHILD_DSN"
	envChildSchema = "TIDINGS_RELAY_CHILD_SCHEMA"
)

// childLease is the child relay's lease: short, so that the test lets it
// run out for real.
const childLease = 3 * time.Second

// runChild runs the child relay when the variables say so, and reports
// whether it did. Its sink prints "handed <id> done" or "handed <id> held"
// for every record: it answers every other one Done and holds the rest
// until the process is killed.
func runChild() bool {
	dsn := os.Getenv(envChildDSN)
	if dsn == "" {
		return false
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex
	n := 0
	sink := relay.SinkFunc(func(ctx context.Context, rec relay.Record) relay.Result {
		mu.Lock()
		n++
		hold := n%2 == 0
		fmt.Printf("handed %s %s\n", rec.ID, map[bool]string{true: "held", false: "done"}[hold])
		mu.Unlock()
		if hold {
			<-ctx.Done()
			return relay.Retry(0, ctx.Err())
		}
		return relay.Done()
	})
	err = relay.Supervise(ctx, db, &relay.Config{
		Module: module, Schema: os.Getenv(envChildSchema), ListenDSN: dsn,
		BatchSize: 10, Concurrency: 10, HandTimeout: childLease - time.Second, Lease: childLease,
	}, sink)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return true
}

func TestG2CrashMidBatchLosesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.stage(t, 100)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), envChildDSN+"="+b.config(t).ListenDSN, envChildSchema+"="+b.schema)
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	child.Stderr = os.Stderr
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })

	// Wait until the child has handed a full batch, half of it answered,
	// half in flight; then kill it, and read what else it handed.
	held := map[uuid.UUID]bool{} // id: held (true) or answered Done
	lines := bufio.NewScanner(out)
	read := func() bool {
		if !lines.Scan() {
			return false
		}
		if rest, ok := strings.CutPrefix(lines.Text(), "handed "); ok {
			id, how, _ := strings.Cut(rest, " ")
			held[uuid.MustParse(id)] = how == "held"
		}
		return true
	}
	for len(held) < 10 && read() {
	}
	require.Len(t, held, 10, "the child handed records")
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	for read() {
	}
	_ = child.Wait()

	// Its leases run out for real, and a second relay hands again every
	// record the child was holding, as their second hand.
	sink := newRecorder(nil)
	supervise(t, b.db, b.config(t), sink)
	b.eventually(t, "processed_at IS NOT NULL", len(ids), 20*time.Second)
	require.Equal(t, 0, b.count(t, "failed_at IS NOT NULL"))
	for id, wasHeld := range held {
		if wasHeld {
			require.Equal(t, 1, sink.handsOf(id), "a record the child held in flight is handed again once")
		}
	}
	for _, rec := range sink.records() {
		if held[rec.ID] {
			require.Equal(t, 2, rec.Hand, "the second hand of %s", rec.ID)
		}
	}
	for _, id := range ids {
		if _, byChild := held[id]; !byChild {
			require.Equal(t, 1, sink.handsOf(id), "a record the child never handed is handed once")
		}
	}
}
