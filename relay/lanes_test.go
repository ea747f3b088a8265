package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/relay"
)

// stageLane commits n records of lane and returns their ids.
func (b testBundle) stageLane(t *testing.T, lane string, n int) {
	t.Helper()
	msgs := make([]relay.Message, n)
	for i := range msgs {
		msgs[i] = relay.Message{Module: module, Kind: "k", Lane: lane, Payload: payload(i)}
	}
	_, err := b.ob.StageBatch(t.Context(), b.db, msgs)
	require.NoError(t, err)
}

// slowLane is a sink whose records of lane "slow" hang until they receive
// from release (or their hand ends); the others are done at once.
func slowLane(release <-chan struct{}) *recorder {
	return newRecorder(func(ctx context.Context, rec relay.Record) relay.Result {
		if rec.Lane == "slow" {
			select {
			case <-release:
			case <-ctx.Done():
				return relay.Retry(0, ctx.Err())
			}
		}
		return relay.Done()
	})
}

// A lane at its limit behind a sink that hangs keeps its rows untouched in
// the table (no claim locks or updates them, so their row versions stay)
// while another lane drains through the rest of the slots; once the hang
// ends, the held lane drains too.
func TestLaneAtItsLimitIsNotClaimedWhileAnotherDrains(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	sink := slowLane(release)
	cfg := b.config(t)
	cfg.Concurrency, cfg.LaneLimit, cfg.BatchSize = 10, 4, 10
	cfg.HandTimeout, cfg.Lease = time.Minute, 2*time.Minute
	b.stageLane(t, "slow", 1000)
	supervise(t, b.db, cfg, sink)
	t.Cleanup(func() { close(release) })

	// The slow lane holds its four slots; the other 996 rows wait.
	b.eventually(t, "lane = 'slow' AND hands > 0", 4, 10*time.Second)
	versions := func() map[string]string { return pgtest.RowVersions(t, b.db, b.schema, "lane = 'slow' AND hands = 0") }
	before := versions()
	require.Len(t, before, 996)

	b.stageLane(t, "fast", 500)
	b.eventually(t, "lane = 'fast' AND processed_at IS NOT NULL", 500, 30*time.Second)
	require.Equal(t, before, versions(), "the waiting rows of the full lane were neither locked nor updated")
	require.Equal(t, 4, b.count(t, "lane = 'slow' AND hands > 0"))
}

// A full lane whose records each hold a connection is claimed again once
// half its room is free, in one claim, not in a claim per record that
// finishes: with eight connections the lane holds six, and it takes
// three more only once three have finished.
func TestAFullLaneIsClaimedAgainOnceHalfItsRoomIsFree(t *testing.T) {
	t.Parallel()
	b := setup(t)
	finish := make(chan struct{}, 20) // a record of lane "slow" finishes for each
	sink := slowLane(finish)
	cfg := b.config(t)
	cfg.Connections = 8
	cfg.HandTimeout, cfg.Lease = time.Minute, 2*time.Minute
	b.stageLane(t, "slow", 20)
	supervise(t, b.db, cfg, sink)

	b.eventually(t, "hands > 0", 6, 10*time.Second)
	for done := 1; done <= 2; done++ {
		finish <- struct{}{}
		b.eventually(t, "processed_at IS NOT NULL", done, 10*time.Second)
	}
	require.Equal(t, 6, b.count(t, "hands > 0"), "two records finished: the lane has less room than a claim takes")
	finish <- struct{}{}
	b.eventually(t, "hands > 0", 9, 10*time.Second)
	b.eventually(t, "processed_at IS NOT NULL", 3, 10*time.Second)
	for range 17 {
		finish <- struct{}{}
	}
	b.eventually(t, "processed_at IS NOT NULL", 20, 10*time.Second)
}

// A lane of its own is not capped below the relay's free slots by another
// lane's limit: each lane's room counts only its own records in flight.
func TestLaneRoomIsPerLane(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	started := make(chan string, 20)
	sink := newRecorder(func(ctx context.Context, rec relay.Record) relay.Result {
		started <- rec.Lane
		select {
		case <-release:
			return relay.Done()
		case <-ctx.Done():
			return relay.Retry(0, ctx.Err())
		}
	})
	cfg := b.config(t)
	cfg.Concurrency, cfg.LaneLimit, cfg.BatchSize = 9, 3, 9
	b.stageLane(t, "a", 5)
	b.stageLane(t, "b", 5)
	b.stageLane(t, "c", 5)
	supervise(t, b.db, cfg, sink)
	t.Cleanup(func() { close(release) })
	seen := map[string]int{}
	for range 9 {
		seen[testwait.Recv(t, started, "a hand")]++
	}
	require.Equal(t, map[string]int{"a": 3, "b": 3, "c": 3}, seen, "three of each lane, nine in all")
	require.Equal(t, 9, b.count(t, "hands > 0"), "no more claimed than the lanes have room for")
}

// While a lane is full, a record of another lane that falls due later is
// handed when it does, not at the next sweep: the claim that filled the
// lane tells the relay when the other lane's row falls due.
func TestRecordOfAnotherLaneIsHandedWhenDueWhileALaneIsFull(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	sink := slowLane(release)
	cfg := b.config(t) // SweepInterval 1 h
	cfg.Concurrency, cfg.LaneLimit, cfg.BatchSize = 10, 2, 10
	cfg.HandTimeout, cfg.Lease = time.Minute, 2*time.Minute
	// No LISTEN session, whose start wakes the relay once more: the claim
	// that fills the slow lane is the last before the wait.
	cfg.Listener = nil
	b.stageLane(t, "slow", 5)
	_, err := b.ob.Stage(t.Context(), b.db, relay.Message{Module: module, Kind: "k", Lane: "fast", Payload: payload(0),
		NotBefore: time.Now().Add(time.Second)})
	require.NoError(t, err)
	supervise(t, b.db, cfg, sink)
	t.Cleanup(func() { close(release) })

	b.eventually(t, "lane = 'slow' AND hands > 0", 2, 10*time.Second)
	b.eventually(t, "lane = 'fast' AND processed_at IS NOT NULL", 1, 10*time.Second)
}

// A claim that gives a lane fewer records than its room tells the relay
// when the lane's next row falls due: a record scheduled behind a prompt
// one of its lane is handed when due, with no wake-up or sweep to find it.
func TestRecordBehindOneClaimedInItsLaneIsHandedWhenDue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t) // SweepInterval 1 h
	cfg.HandTimeout, cfg.Lease = time.Minute, 2*time.Minute
	cfg.Listener = nil // no LISTEN session, whose start wakes the relay once more
	prompt, err := b.ob.Stage(t.Context(), b.db, relay.Message{Module: module, Kind: "k", Lane: "a", Payload: payload(0)})
	require.NoError(t, err)
	scheduled, err := b.ob.Stage(t.Context(), b.db, relay.Message{Module: module, Kind: "k", Lane: "a", Payload: payload(1),
		NotBefore: time.Now().Add(time.Second)})
	require.NoError(t, err)
	sink := newRecorder(nil)
	supervise(t, b.db, cfg, sink)

	b.eventually(t, fmt.Sprintf("id = '%s' AND processed_at IS NOT NULL", prompt), 1, 10*time.Second)
	b.eventually(t, fmt.Sprintf("id = '%s' AND processed_at IS NOT NULL", scheduled), 1, 10*time.Second)
	require.Equal(t, 1, sink.handsOf(scheduled))
}

// A hand that outlives its lease is handed again when the lease ends,
// though nothing else wakes the relay: the claim that leased it bounds the
// relay's wait by its lease, which the claim's own answer cannot see.
func TestHandOutlivingItsLeaseIsHandedAgainWhenItEnds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t) // SweepInterval 1 h
	cfg.HandTimeout, cfg.Lease = time.Second, 2*time.Second
	cfg.Listener = nil
	id, err := b.ob.Stage(t.Context(), b.db, relay.Message{Module: module, Kind: "k", Lane: "a", Payload: payload(0)})
	require.NoError(t, err)
	second := make(chan struct{})
	secondCame := sync.OnceFunc(func() { close(second) })
	sink := newRecorder(func(_ context.Context, rec relay.Record) relay.Result {
		if rec.Hand == 1 {
			<-second // ignores its context: outlives the hand timeout and the lease
		} else {
			secondCame()
		}
		return relay.Done()
	})
	supervise(t, b.db, cfg, sink)
	t.Cleanup(secondCame) // before the relay stops: it waits for its hands

	b.eventually(t, fmt.Sprintf("id = '%s' AND processed_at IS NOT NULL AND hands = 2", id), 1, 15*time.Second)
}
