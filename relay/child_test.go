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

// runChild runs the child relay when the variables say so, and reports
// whether it did. Its sink prints "handed <id>" for every record, answers
// every other one Done and holds the rest until the process is killed.
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
		fmt.Printf("handed %s\n", rec.ID)
		mu.Unlock()
		if hold {
			<-ctx.Done()
			return relay.Retry(0, ctx.Err())
		}
		return relay.Done()
	})
	err = relay.Supervise(ctx, db, &relay.Config{
		Module: module, Schema: os.Getenv(envChildSchema), ListenDSN: dsn,
		BatchSize: 10, Concurrency: 10, HandTimeout: time.Minute, Lease: 2 * time.Minute,
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

	// Wait until the child holds a full batch of hands, half of them
	// answered, half in flight; then kill it.
	handedByChild := map[uuid.UUID]bool{}
	lines := bufio.NewScanner(out)
	for len(handedByChild) < 10 && lines.Scan() {
		id, ok := strings.CutPrefix(lines.Text(), "handed ")
		if ok {
			handedByChild[uuid.MustParse(id)] = true
		}
	}
	require.Len(t, handedByChild, 10, "the child handed records")
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()

	// The records it held are leased for two minutes: let them run out, as
	// the passing of time would, and run a second relay.
	_, err = b.db.ExecContext(t.Context(), `UPDATE "`+b.schema+`".outbox SET available_at = now() WHERE processed_at IS NULL`)
	require.NoError(t, err)
	sink := newRecorder(nil)
	supervise(t, b.db, b.config(t), sink)

	b.eventually(t, "processed_at IS NOT NULL", len(ids), 20*time.Second)
	rehanded := 0
	for id := range handedByChild {
		if sink.handsOf(id) > 0 {
			rehanded++
		}
	}
	// The child answered some of its hands before dying; at least the ones
	// it held in flight came back.
	require.GreaterOrEqual(t, rehanded, 5)
	require.Equal(t, 0, b.count(t, "failed_at IS NOT NULL"))
}
