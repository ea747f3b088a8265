package relay_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/child"
	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/relay"
)

// The G2 crash test runs a relay in a child process: the test binary run
// again with these variables set.
const (
	envChildDSN    = "TIDINGS_RELAY_CHILD_DSN"
	envChildSchema = "TIDINGS_RELAY_CHILD_SCHEMA"
	envChildDriver = "TIDINGS_RELAY_CHILD_DRIVER"
)

// childLease is the child relay's lease: short, so that the test lets it
// run out for real.
const childLease = 3 * time.Second

// childMaxHands is the child relay's MaxHands.
const childMaxHands = 3

// runChild runs the child relay when the variables say so, and reports
// whether it did. Its sink prints "handed <id> done" or "handed <id> held"
// for every record of kind order.placed: it answers every other one Done
// and holds the rest until the process is killed. A record of kind
// "poison" kills the process (exit status 3); one of kind "plain" is Done.
func runChild() bool {
	return child.Run(envChildDSN, func(ctx context.Context, dsn string) error {
		d := drivertest.Driver(os.Getenv(envChildDriver))
		db, err := d.OpenDB(dsn, 20)
		if err != nil {
			return err
		}
		defer db.Close()
		listener, err := d.NewListener(dsn)
		if err != nil {
			return err
		}
		var mu sync.Mutex
		n := 0
		sink := relay.SinkFunc(func(ctx context.Context, rec relay.Record) relay.Result {
			switch rec.Kind {
			case "poison":
				os.Exit(3)
			case "plain":
				return relay.Done()
			}
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
		return relay.Supervise(ctx, db.DB, &relay.Config{
			Module: module, Schema: os.Getenv(envChildSchema), Listener: listener,
			BatchSize: 10, Concurrency: 10, HandTimeout: childLease - time.Second, Lease: childLease, MaxHands: childMaxHands,
		}, sink)
	})
}

// startChild starts a child relay on b's schema.
func (b testBundle) startChild(t *testing.T, lines bool) *child.Process {
	listen := b.listen
	if listen == "" {
		listen = pgtest.URL(t)
	}
	return child.Test(t, map[string]string{envChildDSN: listen, envChildSchema: b.schema,
		envChildDriver: string(drivertest.For(t))}, lines)
}

func TestG2CrashMidBatchLosesNothing(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, testG2CrashMidBatchLosesNothing)
}

func testG2CrashMidBatchLosesNothing(t *testing.T, _ drivertest.Driver) {
	b := setup(t)
	ids := b.stage(t, 100)

	c := b.startChild(t, true)

	// Wait until the child has handed a full batch, half of it answered,
	// half in flight; then kill it, and read what else it handed.
	held := map[uuid.UUID]bool{} // id: held (true) or answered Done
	handed := func(line string) {
		id, how, _ := strings.Cut(line, " ")
		held[uuid.MustParse(id)] = how == "held"
	}
	for len(held) < 10 {
		line, err := c.Next("handed ", testwait.Within)
		require.NoError(t, err, "the child hands records")
		handed(line)
	}
	require.NoError(t, c.Kill())
	for _, line := range c.Rest() {
		if rest, ok := strings.CutPrefix(line, "handed "); ok {
			handed(rest)
		}
	}

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
			st, err := b.ob.Status(t.Context(), b.db, rec.ID)
			require.NoError(t, err)
			var tl []string
			for _, e := range st.Timeline {
				tl = append(tl, fmt.Sprintf("%s/%d", e.Event, e.Hand))
			}
			require.Equal(t, []string{"staged/0", "lost/1", "done/2"}, tl, "the timeline shows the hand the crash took")
			require.Equal(t, relay.CodeLostHand, st.Timeline[1].Code)
		}
	}
	for _, id := range ids {
		if _, byChild := held[id]; !byChild {
			require.Equal(t, 1, sink.handsOf(id), "a record the child never handed is handed once")
		}
	}
}

// G10: a record that kills its relay's process every time it is handed is
// dead after MaxHands hands, counted across the restarts in the claims'
// own commits; the relay that claims it once more marks it dead and goes
// on with the rest. (Records in flight with it when it kills the process
// lose a hand each time too, as they would under any crash.)
func TestG10PoisonThatKillsTheProcessIsDeadAcrossRestarts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	poison, err := b.ob.Stage(t.Context(), b.db, relay.Message{Module: module, Kind: "poison", Payload: payload(0)})
	require.NoError(t, err)

	// Restart the relay each time the poison kills it, as a service's
	// supervisor would, until the poison is dead.
	crashes := 0
	dead := func() bool { return b.count(t, "failed_at IS NOT NULL") > 0 }
	for !dead() {
		require.LessOrEqual(t, crashes, childMaxHands, "the poison is still not dead")
		c := b.startChild(t, false)
		deadline := time.After(testwait.Within)
	wait:
		for {
			select {
			case <-c.Done():
				require.Equal(t, 3, c.ExitCode(), "killed by the poison: %v", c.Err())
				crashes++
				break wait
			case <-time.After(20 * time.Millisecond):
				if dead() { // this child marked it dead instead of handing it
					require.NoError(t, c.Kill())
					break wait
				}
			case <-deadline:
				t.Fatalf("waited %s for the child relay to hand the poison", testwait.Within)
			}
		}
	}
	st, err := b.ob.Status(t.Context(), b.db, poison)
	require.NoError(t, err)
	require.Equal(t, relay.StateDead, st.State)
	require.Contains(t, st.Reason, fmt.Sprintf("handed %d times without being settled, more than MaxHands (%d)", childMaxHands+1, childMaxHands))
	require.Equal(t, childMaxHands, crashes, "one crash per hand, each hand counted although the process died")

	// The relay that marked it dead goes on with the rest.
	b.startChild(t, false)
	msgs := make([]relay.Message, 5)
	for i := range msgs {
		msgs[i] = relay.Message{Module: module, Kind: "plain", Payload: payload(i + 1)}
	}
	_, err = b.ob.StageBatch(t.Context(), b.db, msgs)
	require.NoError(t, err)
	b.eventually(t, "kind = 'plain' AND processed_at IS NOT NULL", 5, 20*time.Second)
}
