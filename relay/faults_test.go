package relay_test

// Faults of the relay's own connections, and a sink that hangs ignoring
// its context. The relay's pool goes through a loopback proxy that can cut
// or stall it (internal/tcpproxy).

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/tcpproxy"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/relay"
)

// isClaim and isSettle recognise the relay's claim and settle statements
// in the Parse messages of the extended protocol.
func isClaim(q string) bool {
	return strings.Contains(q, "FOR UPDATE SKIP LOCKED") && strings.Contains(q, "hands = o.hands + 1")
}

func isSettle(q string) bool {
	return strings.Contains(q, "FROM unnest((SELECT $1::uuid[]), (SELECT $2::int[]), (SELECT $3::text[])")
}

// A connection cut at the relay's own statements: the claim or the settle
// cut before the server read it (it never ran) or right after (it ran and
// committed; only the answer is lost). Nothing is lost and nothing is
// dead: a lost settle is written again (fenced, so writing it twice is
// harmless) without handing the record again; a lost claim's lease runs
// out and the record is handed then, its hand counted but no attempt.
func TestFaultRelayConnectionCut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		match     func(string) bool
		when      tcpproxy.When
		wantHand  int // the hand the sink sees
		wantHands int // the row's hands at the end
	}{
		{"ClaimBefore", isClaim, tcpproxy.Before, 1, 1},
		{"ClaimAfter", isClaim, tcpproxy.After, 2, 2},
		{"SettleBefore", isSettle, tcpproxy.Before, 1, 1},
		{"SettleAfter", isSettle, tcpproxy.After, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			proxy, pool, _ := b.faultProxyPool(t)
			cut := proxy.CutOnQuery(tc.match, tc.when)
			sink := newRecorder(nil)
			cfg := b.config(t)
			cfg.HandTimeout = time.Second
			cfg.Lease = 2 * time.Second
			id := b.stage(t, 1)[0] // before the relay starts: its first claim takes it
			supervise(t, pool, cfg, sink)

			testwait.Recv(t, cut, "the cut of the statement")
			b.eventually(t, "processed_at IS NOT NULL", 1, 10*time.Second)
			st, err := b.ob.Status(t.Context(), b.db, id)
			require.NoError(t, err)
			require.Zero(t, st.Attempts)
			require.Equal(t, tc.wantHands, st.Hands)
			recs := sink.records()
			require.Len(t, recs, 1, "handed once")
			require.Equal(t, tc.wantHand, recs[0].Hand)
			require.Zero(t, b.count(t, "failed_at IS NOT NULL"))
		})
	}

	// Every connection of the relay, its pool and its LISTEN session, cut
	// again and again while records are staged: once the cuts stop, every
	// record is processed, none is dead, and none counted an attempt.
	t.Run("CutAgainAndAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		proxy, pool, dsn := b.faultProxyPool(t)
		sink := newRecorder(nil)
		cfg := b.config(t)
		cfg.Listener = drivertest.For(t).Listener(t, dsn)
		cfg.HandTimeout = 300 * time.Millisecond
		cfg.Lease = time.Second
		cfg.SweepInterval = 500 * time.Millisecond
		supervise(t, pool, cfg, sink)
		// Once it runs: a cut while it starts is an error Supervise returns.
		b.stage(t, 1)
		b.eventually(t, "processed_at IS NOT NULL", 1, 10*time.Second)

		stop := make(chan struct{})
		var cutter sync.WaitGroup
		var cuts atomic.Int64
		cutter.Go(func() {
			tick := time.NewTicker(40 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					cuts.Add(int64(proxy.Cut()))
				}
			}
		})
		const rounds, per = 30, 10
		for range rounds {
			b.stage(t, per)
			time.Sleep(50 * time.Millisecond)
		}
		close(stop)
		cutter.Wait()
		t.Logf("%d connections cut", cuts.Load())
		require.Positive(t, cuts.Load())

		b.eventually(t, "processed_at IS NOT NULL", 1+rounds*per, 30*time.Second)
		require.Zero(t, b.count(t, "failed_at IS NOT NULL"))
		require.Zero(t, b.count(t, "attempts > 0"))
		// Each record handed at least once, and never more often than
		// claims were counted for it: a hand again comes only from a claim
		// whose answer was lost, after its lease.
		rows, err := b.db.QueryContext(t.Context(), `SELECT id, hands FROM "`+b.schema+`".outbox`)
		require.NoError(t, err)
		defer rows.Close()
		again := 0
		for rows.Next() {
			var id uuid.UUID
			var hands int
			require.NoError(t, rows.Scan(&id, &hands))
			handed := sink.handsOf(id)
			require.Positive(t, handed, "%s never handed", id)
			require.LessOrEqual(t, handed, hands, "%s handed more often than it was claimed", id)
			if handed > 1 {
				again++
			}
		}
		require.NoError(t, rows.Err())
		t.Logf("%d records handed again after a lost claim", again)
	})

	// A stalled connection (the network stops delivering, nothing is
	// closed) holds the relay up, and once it moves again every record is
	// handed once.
	t.Run("Stall", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		proxy, pool, _ := b.faultProxyPool(t)
		sink := newRecorder(nil)
		supervise(t, pool, b.config(t), sink)
		b.eventually(t, "true", 0, time.Second)
		proxy.Stall(true)
		ids := b.stage(t, 20)
		// The relay's claim, woken by the commit, waits in the stalled
		// proxy: nothing can have been claimed, so nothing settles.
		require.Eventually(t, func() bool { return proxy.Held() > 0 }, 10*time.Second, 5*time.Millisecond,
			"the relay's claim is held by the stall")
		require.Zero(t, b.count(t, "processed_at IS NOT NULL OR hands > 0"), "nothing claimed while stalled")
		proxy.Stall(false)
		b.eventually(t, "processed_at IS NOT NULL", 20, 10*time.Second)
		for _, id := range ids {
			require.Equal(t, 1, sink.handsOf(id))
		}
	})
}

// A sink that hangs every time it gets one record, ignoring its context
// (G10): each hand holds a slot until the sink returns, the lease runs out
// and the record is handed again, and the claim after MaxHands marks it
// dead. Meanwhile the other records flow through the free slots, and the
// hung hands' late answers are fenced off.
//
// The bound needs Concurrency above the stuck hands: a record hangs
// MaxHands slots at most, and with no slot free the relay stops claiming
// (and so never marks the record dead) until a hung sink returns.
func TestFaultPoisonSinkIgnoringItsContextIsDeadAfterMaxHands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var poison atomic.Value
	poison.Store(uuid.Nil)
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	var hung atomic.Int32
	sink := newRecorder(func(_ context.Context, rec relay.Record) relay.Result {
		if rec.ID == poison.Load().(uuid.UUID) {
			hung.Add(1)
			defer hung.Add(-1)
			<-release // ignores ctx
		}
		return relay.Done()
	})
	cfg := b.config(t)
	cfg.Concurrency = 4
	cfg.MaxHands = 2
	cfg.HandTimeout = 200 * time.Millisecond
	cfg.Lease = time.Second
	ids := b.stage(t, 1)
	poison.Store(ids[0])
	supervise(t, b.db, cfg, sink)
	t.Cleanup(releaseOnce) // before the relay stops: it waits for its hands

	b.eventually(t, "failed_at IS NOT NULL", 1, 10*time.Second)
	others := b.stage(t, 20)
	b.eventually(t, "processed_at IS NOT NULL", 20, 10*time.Second)
	for _, id := range others {
		require.Positive(t, sink.handsOf(id))
	}
	dead, err := b.ob.ListDead(t.Context(), b.db, nil)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, ids[0], dead[0].ID)
	require.Contains(t, dead[0].Reason, "handed 3 times without being settled, more than MaxHands (2)")
	require.Equal(t, 2, sink.handsOf(ids[0]))
	require.EqualValues(t, 2, hung.Load(), "both hands still hang, each holding a slot")

	releaseOnce()
	require.Eventually(t, func() bool { return hung.Load() == 0 }, 5*time.Second, 5*time.Millisecond)
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		require.Equal(t, 1, b.count(t, "failed_at IS NOT NULL"), "the late answers of the stale hands are fenced off")
	}
}

// faultProxyPool opens a pool for the relay whose connections go through a
// proxy of their own, and returns the proxy, the pool and its connection
// string.
func (b testBundle) faultProxyPool(t *testing.T) (*tcpproxy.Proxy, *sql.DB, string) {
	t.Helper()
	proxy, dsn := tcpproxy.StartFor(t, pgtest.URL(t))
	db, err := sql.Open("postgres", dsn)
	require.NoError(t, err)
	db.SetMaxOpenConns(10)
	t.Cleanup(func() { _ = db.Close() })
	return proxy, db, dsn
}

// Staging outside a transaction whose answer is lost: database/sql runs
// the statement again on a new connection. The row is there once, and the
// caller gets its id, not a duplicate-key error that would make it stage
// a second notification.
func TestFaultStageOnAPoolWhoseAnswerIsLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy, pool, _ := b.faultProxyPool(t)
	cut := proxy.CutOnQuery(func(q string) bool { return strings.Contains(q, "INSERT INTO") }, tcpproxy.After)
	id, err := b.ob.Stage(t.Context(), pool, relay.Message{Module: module, Kind: "k", Payload: payload(1)})
	testwait.Recv(t, cut, "the cut after the INSERT")
	require.NoError(t, err)
	require.Equal(t, 1, b.count(t, "id = '"+id.String()+"'"))
	require.Equal(t, 1, b.count(t, "true"))
}
