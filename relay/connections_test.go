package relay_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/relay"
)

// holdingSink is a LaneSharer whose records of the lanes named "hang..."
// never finish until their hand ends, and the others at once. It holds
// what a sink holds a connection for: a transaction per batch for the
// records of a shared lane, one per record otherwise. It counts the
// holds of the hanging lanes open now, and the records of each.
type holdingSink struct {
	shared []string

	mu    sync.Mutex
	open  int   // holds of the hanging lanes open now
	sizes []int // the records of each hold of a hanging lane, in the order they opened
}

func (s *holdingSink) SharedLanes() []string { return s.shared }

func (s *holdingSink) Handle(context.Context, relay.Record) relay.Result {
	panic("not handed one by one")
}

func (s *holdingSink) HandleBatch(ctx context.Context, b *relay.Batch) {
	groups := map[string][]int{} // a shared lane's records, together
	var wg sync.WaitGroup
	for i := range b.Len() {
		lane := b.Record(i).Lane
		if slices.Contains(s.shared, lane) {
			groups[lane] = append(groups[lane], i)
			continue
		}
		wg.Go(func() { s.hold(ctx, b, lane, []int{i}) })
	}
	for lane, idx := range groups {
		wg.Go(func() { s.hold(ctx, b, lane, idx) })
	}
	wg.Wait()
}

// hold answers the records idx of lane, at once or, for a hanging lane,
// once the hand ends.
func (s *holdingSink) hold(ctx context.Context, b *relay.Batch, lane string, idx []int) {
	res := relay.Done()
	if strings.HasPrefix(lane, "hang") {
		s.mu.Lock()
		s.open++
		s.sizes = append(s.sizes, len(idx))
		s.mu.Unlock()
		<-ctx.Done()
		s.mu.Lock()
		s.open--
		s.mu.Unlock()
		res = relay.Retry(time.Hour, ctx.Err())
	}
	for _, i := range idx {
		b.Answer(i, res)
	}
}

func (s *holdingSink) holds() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

func (s *holdingSink) holdSizes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sizes)
}

// A claim takes at most half of a shared lane's LaneLimit, rounded up, so
// that the lane has two batches in flight: the sink reads and claims one
// while it delivers and commits the other. A backlog of the lane goes out
// as batches of 5 and 4 for a LaneLimit of 9, not as one batch of 9, and
// the lane takes no more than its limit.
func TestASharedLaneHasTwoBatchesInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sink := &holdingSink{shared: []string{"hang"}}
	cfg := b.config(t)
	cfg.LaneLimit = 9
	cfg.HandTimeout, cfg.Lease = time.Minute, 2*time.Minute
	b.stageLane(t, "hang", 30)
	supervise(t, b.db, cfg, sink)

	require.Eventually(t, func() bool { return sink.holds() == 2 }, 10*time.Second, 5*time.Millisecond,
		"the shared lane has two batches in flight")
	b.eventually(t, "lane = 'hang' AND hands > 0", 9, 10*time.Second)
	require.Equal(t, []int{5, 4}, sink.holdSizes(), "the lane's backlog went out as two batches of half its LaneLimit")
}

// Connections bounds what the sink holds, not the records in flight: a
// lane whose records each hold a connection has at most three quarters of
// them in flight, however high LaneLimit; a shared lane holds one per
// batch, so its batches behind a hanging provider take three quarters of
// the connections and no more, whatever their sizes. Either way the rest
// of the lane's rows wait untouched, and another lane goes on through the
// connection left.
func TestConnectionsBoundWhatTheSinkHolds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		shared  []string
		first   int // connections held after a batch of five
		claimed int // records of the lane in flight at its three connections
	}{
		{"a connection per record", nil, 3, 3},
		{"a connection per batch of a shared lane", []string{"hang"}, 1, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			sink := &holdingSink{shared: tc.shared}
			cfg := b.config(t)
			// Room for 75 records of a lane; 4 connections, 3 for a lane.
			cfg.Concurrency, cfg.Connections, cfg.BatchSize = 100, 4, 100
			cfg.HandTimeout, cfg.Lease = time.Minute, 2*time.Minute
			supervise(t, b.db, cfg, sink)

			// Five records in one commit, one claim: a batch of five. Then
			// one per commit, each a batch of one, until the lane holds
			// three connections; then six more, which it does not take.
			holding := func(n int) {
				t.Helper()
				require.Eventually(t, func() bool { return sink.holds() == n }, 10*time.Second, 5*time.Millisecond,
					"the hanging lane holds %d connections", n)
			}
			b.stageLane(t, "hang", 5)
			holding(tc.first)
			for n := tc.first + 1; n <= 3; n++ {
				b.stageLane(t, "hang", 1)
				holding(n)
			}
			b.stageLane(t, "hang", 6)
			staged := 5 + 3 - tc.first + 6
			b.eventually(t, "lane = 'hang' AND hands > 0", tc.claimed, 10*time.Second)
			versions := func() map[string]string { return pgtest.RowVersions(t, b.db, b.schema, "lane = 'hang' AND hands = 0") }
			before := versions()
			require.Len(t, before, staged-tc.claimed)

			// Another lane drains through the fourth connection, claim after
			// claim, while the hanging lane takes nothing more.
			b.stageLane(t, "fast", 50)
			b.eventually(t, "lane = 'fast' AND processed_at IS NOT NULL", 50, 30*time.Second)
			require.Equal(t, 3, sink.holds(), "the hanging lane still holds three connections")
			require.Equal(t, tc.claimed, b.count(t, "lane = 'hang' AND hands > 0"), "the hanging lane claimed no more")
			require.Equal(t, before, versions(), "the hanging lane's waiting rows were neither locked nor updated")
		})
	}
}

// One claim that takes records of several lanes that are not shared takes
// no more of them together than there are free connections, though each
// lane alone has room for more.
func TestOneClaimOfManyLanesTakesNoMoreConnectionsThanAreFree(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sink := &holdingSink{}
	cfg := b.config(t)
	// 4 connections, 3 for a lane: each lane alone has room for 3.
	cfg.Concurrency, cfg.Connections, cfg.BatchSize = 100, 4, 100
	cfg.HandTimeout, cfg.Lease = time.Minute, 2*time.Minute
	supervise(t, b.db, cfg, sink)

	// Both lanes due at one commit: the first claim that finds any of
	// them finds them all, and a claim is one statement.
	msgs := make([]relay.Message, 10)
	for i := range msgs {
		msgs[i] = relay.Message{Module: module, Kind: "k", Lane: []string{"hang-a", "hang-b"}[i%2], Payload: payload(i)}
	}
	_, err := b.ob.StageBatch(t.Context(), b.db, msgs)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return b.count(t, "hands > 0") > 0 }, 10*time.Second, 5*time.Millisecond,
		"a claim of the two lanes")
	require.Equal(t, 4, b.count(t, "hands > 0"), "the claim took no more records than free connections")
	require.Eventually(t, func() bool { return sink.holds() == 4 }, 10*time.Second, 5*time.Millisecond,
		"the two lanes hold the four connections")
}
