package relay_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/tcpproxy"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/relay"
)

func TestSupervise(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, testSupervise)
}

func testSupervise(t *testing.T, _ drivertest.Driver) {

	t.Run("WakesOnCommitWithoutTheSweep", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sink := newRecorder(nil)
		cfg := b.config(t) // sweep every hour
		supervise(t, b.db, cfg, sink)
		// Whatever the first claim found is gone; wait until the relay
		// is idle, listening, then commit.
		b.eventually(t, "true", 0, testwait.Within)
		for i := range 5 {
			start := time.Now()
			ids := b.stage(t, 1)
			require.Eventually(t, func() bool { return sink.handsOf(ids[0]) == 1 }, testwait.Within, time.Millisecond, "record %d", i)
			t.Logf("commit to hand: %s", time.Since(start))
		}
		b.eventually(t, "processed_at IS NOT NULL", 5, testwait.Within)
	})

	t.Run("SweepFindsRecordsWithoutWakeUps", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sink := newRecorder(nil)
		cfg := b.config(t)
		cfg.SweepInterval = 300 * time.Millisecond
		supervise(t, b.db, cfg, sink)
		// Staged without a wake-up: only the sweep can find them.
		b.ob = b.ob.WithoutWakeUp()
		ids := b.stage(t, 3)
		start := time.Now()
		sink.waitHands(t, 3, 5*time.Second)
		for _, id := range ids {
			require.Equal(t, 1, sink.handsOf(id))
		}
		t.Logf("handed by the sweep after %s", time.Since(start))
	})

	t.Run("ListenerTerminatedStillHandsWithinTheSweep", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sink := newRecorder(nil)
		cfg := b.config(t)
		cfg.SweepInterval = time.Second
		cfg.Listener = drivertest.For(t).Listener(t, pgtest.URL(t)+"&application_name=listen_"+b.schema)
		supervise(t, b.db, cfg, sink)
		for round := range 3 {
			// Terminate the LISTEN session, then stage while it is away.
			require.Eventually(t, func() bool {
				var n int
				require.NoError(t, b.db.QueryRowContext(t.Context(),
					`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`,
					"listen_"+b.schema).Scan(&n))
				return n > 0
			}, 10*time.Second, 20*time.Millisecond)
			ids := b.stage(t, 2)
			require.Eventually(t, func() bool { return sink.handsOf(ids[0]) == 1 && sink.handsOf(ids[1]) == 1 },
				cfg.SweepInterval+2*time.Second, 5*time.Millisecond, "round %d", round)
		}
	})

	// A LISTEN session that is away costs latency, not a sweep interval:
	// the relay sweeps every second until it is back.
	t.Run("ListenDownSweepsEverySecond", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		proxy, listen := tcpproxy.StartFor(t, pgtest.URL(t))
		b.listen = listen
		sink := newRecorder(nil)
		cfg := b.config(t) // SweepInterval 1 h
		supervise(t, b.db, cfg, sink)
		// The start-up check's connection, then the LISTEN session's.
		require.Eventually(t, func() bool { return proxy.Accepted() == 2 && proxy.Open() == 1 }, 10*time.Second, 5*time.Millisecond,
			"the LISTEN session connects")
		proxy.Refuse(true)
		ids := b.stage(t, 2)
		require.Eventually(t, func() bool { return sink.handsOf(ids[0]) == 1 && sink.handsOf(ids[1]) == 1 },
			relay.ListenDownSweep+3*time.Second, 5*time.Millisecond, "handed by the one-second sweep")
	})

	t.Run("RetryIsCountedAndHandedAgainAfterTheDelay", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sink := newRecorder(func(_ context.Context, rec relay.Record) relay.Result {
			if rec.Attempts < 2 {
				return relay.Retry(300*time.Millisecond, fmt.Errorf("provider down (attempt %d)", rec.Attempts+1))
			}
			return relay.DoneWith("ref-1")
		})
		supervise(t, b.db, b.config(t), sink) // sweep every hour: the relay must wake itself
		ids := b.stage(t, 1)
		b.eventually(t, "processed_at IS NOT NULL AND attempts = 2 AND result = 'ref-1'", 1, 10*time.Second)

		recs := sink.records()
		require.Len(t, recs, 3)
		require.Equal(t, []int{0, 1, 2}, []int{recs[0].Attempts, recs[1].Attempts, recs[2].Attempts})
		require.Equal(t, "provider down (attempt 2)", recs[2].LastError)
		require.Equal(t, ids[0], recs[2].ID)
		require.Equal(t, 3, recs[2].Hand)
	})

	t.Run("UnsureIsOfferedAgainWithoutCountingAnAttemptOrAHand", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sink := newRecorder(func(_ context.Context, rec relay.Record) relay.Result {
			if rec.Unsure < 2 {
				return relay.Unsure(100*time.Millisecond, errors.New("commit lost its answer"))
			}
			return relay.Done()
		})
		supervise(t, b.db, b.config(t), sink)
		b.stage(t, 1)
		b.eventually(t, "processed_at IS NOT NULL AND hands = 1 AND unsure = 2 AND attempts = 0 AND last_error = 'commit lost its answer'", 1, 10*time.Second)
		for i, rec := range sink.records() {
			require.Zero(t, rec.Attempts, "an unsure hand is no attempt")
			require.Equal(t, 1, rec.Hand, "nor a hand")
			require.Equal(t, i, rec.Unsure)
		}
	})

	// A sink that can never commit is a fault: bounded by MaxUnsure, not
	// by MaxHands, and named in the reason.
	t.Run("UnsureEveryTimeIsDeadAfterMaxUnsure", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sink := newRecorder(func(_ context.Context, rec relay.Record) relay.Result {
			return relay.Unsure(10*time.Millisecond, fmt.Errorf("commit failed (%d)", rec.Unsure+1))
		})
		cfg := b.config(t)
		cfg.MaxHands = 2
		cfg.MaxUnsure = 4
		supervise(t, b.db, cfg, sink)
		id := b.stage(t, 1)[0]
		b.eventually(t, "failed_at IS NOT NULL", 1, 10*time.Second)
		st, err := b.ob.Status(t.Context(), b.db, id)
		require.NoError(t, err)
		require.Equal(t, "the sink could not commit its work 4 times (MaxUnsure); last: commit failed (4)", st.Reason)
		require.Equal(t, 4, sink.handsOf(id))
	})

	t.Run("DeadAtOnceWithTheSinksReason", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sink := newRecorder(func(context.Context, relay.Record) relay.Result {
			return relay.Dead(errors.New("recipient unknown"))
		})
		supervise(t, b.db, b.config(t), sink)
		b.stage(t, 1)
		b.eventually(t, "failed_at IS NOT NULL AND failure_reason = 'recipient unknown' AND attempts = 1", 1, 10*time.Second)
		require.Equal(t, 1, sink.total())
	})

	t.Run("PoisonIsDeadAfterMaxHandsAndTheRestFlow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var poison atomic.Value
		sink := newRecorder(func(_ context.Context, rec relay.Record) relay.Result {
			if rec.ID == poison.Load() {
				panic("boom on " + rec.Kind)
			}
			return relay.Done()
		})
		cfg := b.config(t)
		cfg.MaxHands = 3
		cfg.HandTimeout = 100 * time.Millisecond
		cfg.Lease = 200 * time.Millisecond
		ids := b.stage(t, 20)
		poison.Store(ids[7])
		supervise(t, b.db, cfg, sink)

		b.eventually(t, "processed_at IS NOT NULL", 19, 10*time.Second)
		b.eventually(t, "failed_at IS NOT NULL", 1, 10*time.Second)
		dead, err := b.ob.ListDead(t.Context(), b.db, nil)
		require.NoError(t, err)
		require.Len(t, dead, 1)
		require.Equal(t, ids[7], dead[0].ID)
		require.Contains(t, dead[0].Reason, "handed 4 times")
		require.Contains(t, dead[0].Reason, "MaxHands (3)")
		require.Contains(t, dead[0].Reason, "sink panicked: boom on order.placed")
		require.Equal(t, relay.CodeMaxHands, dead[0].Code)
		require.Equal(t, 3, sink.handsOf(ids[7]))
	})

	t.Run("HandCarriesCorrelationAndCausation", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		type seen struct{ corr, cause string }
		got := make(chan seen, 2)
		sink := newRecorder(func(ctx context.Context, rec relay.Record) relay.Result {
			got <- seen{relay.CorrelationID(ctx), relay.CausationID(ctx)}
			if rec.Kind == "parent" {
				// Staged from inside a hand: no ids passed by hand.
				if _, err := b.ob.Stage(ctx, b.db, relay.Message{Module: module, Kind: "child", Payload: payload(2)}); err != nil {
					return relay.Retry(0, err)
				}
			}
			return relay.Done()
		})
		supervise(t, b.db, b.config(t), sink)
		ctx := relay.WithCorrelationID(t.Context(), "booking-7")
		parent, err := b.ob.Stage(ctx, b.db, relay.Message{Module: module, Kind: "parent", Payload: payload(1)})
		require.NoError(t, err)

		first := testwait.Recv(t, got, "the parent's hand")
		second := testwait.Recv(t, got, "the child's hand")
		require.Equal(t, seen{"booking-7", parent.String()}, first)
		var childID uuid.UUID
		for _, rec := range sink.records() {
			if rec.Kind == "child" {
				childID = rec.ID
			}
		}
		require.Equal(t, seen{"booking-7", childID.String()}, second)
		b.eventually(t, fmt.Sprintf("id = '%s' AND causation_id = '%s' AND correlation_id = 'booking-7'", childID, parent), 1, time.Second)
	})

	t.Run("FourRelaysSettleEveryRecordOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 10_000
		b.stage(t, n)
		sink := newRecorder(nil)
		cfg := b.config(t)
		cfg.Lease = 10 * time.Minute // longer than the test: no record may be handed twice
		for range 4 {
			supervise(t, b.db, cfg, sink)
		}
		b.eventually(t, "processed_at IS NOT NULL", n, 60*time.Second)
		require.Equal(t, n, sink.total(), "every record handed exactly once")
		require.Equal(t, n, b.count(t, "hands = 1"))
	})

	t.Run("ShutdownLetsInFlightFinish", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		release := make(chan struct{})
		started := make(chan struct{}, 10)
		sink := newRecorder(func(ctx context.Context, rec relay.Record) relay.Result {
			started <- struct{}{}
			select {
			case <-release:
				return relay.Done()
			case <-ctx.Done(): // cancelled before the grace period ended
				return relay.Retry(0, context.Cause(ctx))
			}
		})
		cfg := b.config(t)
		cfg.Concurrency, cfg.LaneLimit = 2, 2
		cfg.BatchSize = 2
		b.stage(t, 5)
		stop := supervise(t, b.db, cfg, sink)
		testwait.Recv(t, started, "the first hand")
		testwait.Recv(t, started, "the second hand")
		stopped := make(chan struct{})
		go func() { stop(); close(stopped) }()
		select {
		case <-stopped:
			t.Fatal("Supervise returned while hands were in flight")
		case <-time.After(200 * time.Millisecond):
		}
		close(release)
		testwait.Recv(t, stopped, "Supervise to return once its hands finished")
		require.Equal(t, 2, b.count(t, "processed_at IS NOT NULL"))
		require.Equal(t, 3, b.count(t, "processed_at IS NULL AND hands = 0 AND available_at <= now()"), "never claimed, still due")
	})

	t.Run("GracePeriodOverCancelsAndTheRecordStaysPending", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		started := make(chan struct{}, 1)
		sink := newRecorder(func(ctx context.Context, rec relay.Record) relay.Result {
			started <- struct{}{}
			<-ctx.Done()
			return relay.Retry(0, ctx.Err())
		})
		cfg := b.config(t)
		cfg.GracePeriod = 100 * time.Millisecond
		cfg.HandTimeout = time.Minute
		cfg.Lease = 2 * time.Minute
		b.stage(t, 1)
		stop := supervise(t, b.db, cfg, sink)
		testwait.Recv(t, started, "the hand")
		stop()
		require.Equal(t, 1, b.count(t, "processed_at IS NULL AND failed_at IS NULL AND attempts = 1 AND last_error = 'context canceled' AND available_at <= now()"))
	})
}

// The grace period bounds a claim in flight at shutdown: while the relay
// runs, a claim may take as long as leaves its records a whole
// HandTimeout of their lease (3 s here), and one that waits longer than
// the grace period on a busy server is no failure.
func TestAClaimMayOutlastTheGracePeriod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	logs := logged(&cfg)
	cfg.GracePeriod = 50 * time.Millisecond
	sink := newRecorder(nil)
	supervise(t, b.db, cfg, sink)

	unlock := b.holdClaims(t, 10*cfg.GracePeriod)
	unlock()
	sink.waitHands(t, 1, testwait.Within)
	b.eventually(t, "processed_at IS NOT NULL", 1, testwait.Within)
	require.NotContains(t, logs.String(), "claim failed")
}

// A claim in flight when the relay stops is awaited for the grace period,
// not for a lease.
func TestAClaimHangingAtShutdownIsAbandonedAfterTheGracePeriod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	cfg.GracePeriod = 100 * time.Millisecond
	cfg.Lease = time.Hour
	stop := supervise(t, b.db, cfg, newRecorder(nil))

	unlock := b.holdClaims(t, 0)
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	testwait.Recv(t, stopped, "Supervise to return while its claim still waited on a lock, its lease an hour")
	unlock()
}

// holdClaims locks the timeline, which a claim writes to and the staging
// insert does not touch, stages a record, and returns once the relay's
// claim has waited on the lock for longer than d. The returned func lets
// the claim go on.
func (b testBundle) holdClaims(t *testing.T, d time.Duration) (unlock func()) {
	t.Helper()
	tx, err := b.db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	_, err = tx.ExecContext(t.Context(), `LOCK TABLE "`+b.schema+`".timeline IN EXCLUSIVE MODE`)
	require.NoError(t, err)
	b.stage(t, 1)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var waiting bool
		assert.NoError(c, b.db.QueryRowContext(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND position('set_config(''synchronous_commit''' IN query) > 0
				AND position($1 IN query) > 0 AND clock_timestamp() - query_start > $2 * interval '1 ms')`,
			b.schema, d.Milliseconds()).Scan(&waiting))
		assert.True(c, waiting, "the relay's claim waiting on the lock for over %s", d)
	}, testwait.Within, 10*time.Millisecond)
	return func() { require.NoError(t, tx.Commit()) }
}

// A Listener that cannot connect is an error at start, not a relay that
// waits for its sweep.
func TestSuperviseRejectsAListenerThatCannotConnect(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, testSuperviseRejectsAListenerThatCannotConnect)
}

func testSuperviseRejectsAListenerThatCannotConnect(t *testing.T, d drivertest.Driver) {
	b := setup(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close())
	cfg := b.config(t)
	cfg.Listener = d.Listener(t, "postgres://"+closed+"/postgres?sslmode=disable")
	err = relay.Supervise(t.Context(), b.db, &cfg, newRecorder(nil))
	require.ErrorIs(t, err, relay.ErrConfig)
	require.ErrorContains(t, err, "Listener: cannot connect the LISTEN session")
}

func TestSuperviseRejectsBadConfig(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	for name, tc := range map[string]struct {
		cfg  relay.Config
		want string
	}{
		"NoModule":           {relay.Config{}, "Module is empty"},
		"BadModule":          {relay.Config{Module: "Orders"}, "Module"},
		"BadSchema":          {relay.Config{Module: module, Schema: `x"; drop table y;--`}, "Schema"},
		"LongSchema":         {relay.Config{Module: module, Schema: strings.Repeat("s", 64)}, "Schema is 64 bytes"},
		"NegativeBatch":      {relay.Config{Module: module, BatchSize: -1}, "BatchSize is negative"},
		"NegativeConc":       {relay.Config{Module: module, Concurrency: -5}, "Concurrency is negative"},
		"LeaseBelowTimeout":  {relay.Config{Module: module, HandTimeout: time.Minute, Lease: 30 * time.Second}, "Lease (30s) must be longer than HandTimeout (1m0s)"},
		"LeaseEqualsTimeout": {relay.Config{Module: module, HandTimeout: time.Minute, Lease: time.Minute}, "Lease (1m0s) must be longer than HandTimeout (1m0s)"},
		"NegativeGrace":      {relay.Config{Module: module, GracePeriod: -time.Second}, "GracePeriod is negative"},
		"NegativeUnsure":     {relay.Config{Module: module, MaxUnsure: -1}, "MaxUnsure is negative"},
		"LaneAboveConc":      {relay.Config{Module: module, Concurrency: 10, LaneLimit: 11}, "LaneLimit (11) must not exceed Concurrency (10)"},
		"NoLimitConc":        {relay.Config{Module: module, Concurrency: math.MaxInt, LaneLimit: 10}, "Concurrency (9223372036854775807) is more than LimitMax"},
		"HugeBatch":          {relay.Config{Module: module, BatchSize: relay.LimitMax + 1}, "BatchSize (1000001) is more than LimitMax"},
		"HugeMaxHands":       {relay.Config{Module: module, MaxHands: 1 << 31}, "MaxHands (2147483648) is more than LimitMax"},
		"HugeMaxUnsure":      {relay.Config{Module: module, MaxUnsure: math.MaxInt}, "MaxUnsure (9223372036854775807) is more than LimitMax"},
		"EndlessHand":        {relay.Config{Module: module, HandTimeout: math.MaxInt64}, "HandTimeout (2562047h47m16.854775807s) is too long"},
	} {
		err := relay.Supervise(t.Context(), db, &tc.cfg, newRecorder(nil))
		require.ErrorIs(t, err, relay.ErrConfig, name)
		require.ErrorContains(t, err, tc.want, name)
	}
	require.ErrorIs(t, relay.Supervise(t.Context(), db, &relay.Config{Module: module}, nil), relay.ErrNoSink)
	err := relay.Supervise(t.Context(), db, &relay.Config{Module: module, Schema: "not_migrated"}, newRecorder(nil))
	require.ErrorIs(t, err, relay.ErrNotMigrated)
	require.ErrorContains(t, err, `schema "not_migrated" has no outbox table; run tidings.Migrate`)
}

// A relay whose lease ran out must not overwrite what a later hand decided.
func TestSettleIsFencedByTheHand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	firstHand := make(chan struct{})
	letGo := make(chan struct{})
	slow := newRecorder(func(ctx context.Context, rec relay.Record) relay.Result {
		close(firstHand)
		select {
		case <-letGo:
		case <-ctx.Done():
		}
		return relay.Dead(errors.New("stale answer"))
	})
	id := b.stage(t, 1)[0]
	cfg := b.config(t)
	cfg.Concurrency = 1 // its one slot stays busy: it cannot claim the record again
	logs := logged(&cfg)
	stopSlow := supervise(t, b.db, cfg, slow)
	testwait.Recv(t, firstHand, "the first hand")

	// The first relay's lease runs out (as if it stalled); a second relay
	// hands the record again and settles it.
	_, err := b.db.ExecContext(t.Context(), `UPDATE "`+b.schema+`".outbox SET available_at = now() WHERE id = $1`, id)
	require.NoError(t, err)
	supervise(t, b.db, b.config(t), newRecorder(func(context.Context, relay.Record) relay.Result {
		return relay.Retry(time.Hour, errors.New("provider busy"))
	}))
	b.eventually(t, "attempts = 1 AND hands = 2", 1, 10*time.Second)

	// Now the first hand answers; stopping its relay flushes the settle,
	// which belongs to hand 1 and is fenced off.
	close(letGo)
	stopSlow()
	st, err := b.ob.Status(t.Context(), b.db, id)
	require.NoError(t, err)
	require.Equal(t, relay.StatePending, st.State, "the stale dead answer was fenced off")
	require.Equal(t, "provider busy", st.LastError)
	require.Equal(t, 1, st.Attempts)
	require.Contains(t, logs.String(), "fenced=1")
}

// Settles that land are not reported as fenced off, whether or not they
// write a timeline entry.
func TestSettlesThatLandAreNotReportedFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.stage(t, 4)
	cfg := b.config(t)
	logs := logged(&cfg)
	stop := supervise(t, b.db, cfg, newRecorder(func(_ context.Context, rec relay.Record) relay.Result {
		if rec.ID == ids[0] {
			return relay.Dead(errors.New("gone"))
		}
		return relay.Done()
	}))
	b.eventually(t, "processed_at IS NOT NULL OR failed_at IS NOT NULL", 4, testwait.Within)
	stop()
	require.NotContains(t, logs.String(), "fenced")
}

// A server that cuts idle transactions sooner than a hand may last cannot
// work with a sink that holds one: the relay says so when it starts.
func TestSuperviseWarnsAboutIdleTransactionTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config(t)
	logs := logged(&cfg)
	db := pgtest.Open(t, 1)
	_, err := db.ExecContext(t.Context(), `SET idle_in_transaction_session_timeout = '1s'`)
	require.NoError(t, err)
	supervise(t, db, cfg, newRecorder(nil))
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), "idle_in_transaction_session_timeout is not above HandTimeout")
	},
		5*time.Second, 5*time.Millisecond)
	require.Contains(t, logs.String(), "hand_timeout=2s")
}

// The claim commits without waiting for its WAL flush, and only the claim:
// the session it ran on is back to the server's synchronous_commit, so a
// sink's own commits on the same pool (an inbox claim) stay durable.
func TestClaimLeavesTheSessionDurable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := pgtest.Open(t, 1) // the claim's session is the one checked below
	// The test cluster does not flush; the session asks for it.
	_, err := db.ExecContext(t.Context(), `SET synchronous_commit = on`)
	require.NoError(t, err)

	sink := newRecorder(nil)
	supervise(t, db, b.config(t), sink)
	b.stage(t, 3)
	sink.waitHands(t, 3, 10*time.Second)
	b.eventually(t, "processed_at IS NOT NULL", 3, 10*time.Second)

	// Asked while the relay runs: stopping it cancels its statement in
	// flight, which can cost the session.
	var after string
	require.NoError(t, db.QueryRowContext(t.Context(), `SHOW synchronous_commit`).Scan(&after))
	require.Equal(t, "on", after)
}

// Later gives a record back unstarted: it is handed again once the delay
// has passed, and neither the attempt nor that hand is counted.
func TestLaterGivesTheRecordBackUncounted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const delay = 400 * time.Millisecond
	var first time.Time
	var mu sync.Mutex
	sink := newRecorder(func(ctx context.Context, rec relay.Record) relay.Result {
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() {
			first = time.Now()
			return relay.Later(delay)
		}
		if since := time.Since(first); since < delay {
			return relay.Dead(fmt.Errorf("handed again after %s, before the delay", since))
		}
		return relay.Done()
	})
	supervise(t, b.db, b.config(t), sink)
	ids := b.stage(t, 1)
	b.eventually(t, "processed_at IS NOT NULL", 1, 10*time.Second)
	require.Equal(t, 2, sink.handsOf(ids[0]))
	st, err := b.ob.Status(t.Context(), b.db, ids[0])
	require.NoError(t, err)
	require.Equal(t, 0, st.Attempts)
	require.Equal(t, 1, st.Hands, "the hand given back is not counted")
	require.Empty(t, st.LastError)
	require.Equal(t, "later, in 400ms", relay.Later(delay).String())
}

// A reason PostgreSQL's text cannot hold (a NUL, UTF-8 cut mid-rune, as a
// provider's answer quoted in an error may be) is stored with U+FFFD in
// their place, and a detail its jsonb cannot store (a json.RawMessage with
// a lone surrogate, as a provider's raw answer may hold) as a note saying
// so: each record ends as its sink answered, and the settle of the records
// beside it is not held up (it would fail with them, again, until their
// leases ran out).
func TestWhatTheDatabaseCannotStoreIsStoredCleaned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.stage(t, 20)
	sink := newRecorder(func(_ context.Context, rec relay.Record) relay.Result {
		switch rec.ID {
		case ids[0]:
			return relay.Dead(errors.New("provider said \x00 then \xe2\x82")).WithCode("provider.\xffodd")
		case ids[7]:
			return relay.Done().WithDetail(map[string]any{"raw": json.RawMessage(`"\ud800"`)})
		}
		return relay.Done().WithDetail(map[string]any{"ok": true})
	})
	supervise(t, b.db, b.config(t), sink)
	b.eventually(t, "processed_at IS NOT NULL", 19, testwait.Within)
	b.eventually(t, "failed_at IS NOT NULL", 1, testwait.Within)
	st, err := b.ob.Status(t.Context(), b.db, ids[0])
	require.NoError(t, err)
	require.Equal(t, relay.StateDead, st.State)
	require.Equal(t, "provider said \uFFFD then \uFFFD", st.Reason)
	require.Equal(t, "provider.\uFFFDodd", st.Code)
	// Its done entry: on a loaded machine a hand can outlive its lease,
	// and the record then has a "lost" entry too.
	var note string
	require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT detail->>'detail' FROM "`+b.schema+`".timeline
		WHERE record_id = $1 AND event = 'done'`, ids[7]).Scan(&note))
	require.Equal(t, "does not encode as JSON", note)
}

// A result or a code longer than a row's index takes is kept cut,
// instead of failing the settle of every record settled with it (and
// handing them all again after their lease).
func TestLongResultsAndCodesAreCut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.stage(t, 4)
	var long string // 4,160 random bytes, which no compression makes fit
	for range 160 {
		long += rand.Text()
	}
	sink := newRecorder(func(_ context.Context, rec relay.Record) relay.Result {
		switch rec.ID {
		case ids[0]:
			return relay.DoneWith(long)
		case ids[1]:
			return relay.Dead(errors.New("gone")).WithCode(long)
		}
		return relay.Done()
	})
	supervise(t, b.db, b.config(t), sink)
	b.eventually(t, "processed_at IS NOT NULL", 3, testwait.Within)
	b.eventually(t, "failed_at IS NOT NULL", 1, testwait.Within)
	var result, code string
	require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT (SELECT result FROM "`+b.schema+`".outbox WHERE id = $1),
		(SELECT code FROM "`+b.schema+`".outbox WHERE id = $2)`, ids[0], ids[1]).Scan(&result, &code))
	require.Equal(t, long[:relay.ResultMaxLen], result)
	require.Equal(t, long[:relay.CodeMaxLen], code)
	for _, id := range ids {
		require.Equal(t, 1, sink.handsOf(id), "handed once: no settle failed")
	}
}

// A due record another transaction holds locked (a Cancel in a
// transaction still open, say) is skipped by each claim, and still due
// for the next: the relay waits longer each time it finds it so, instead
// of asking every millisecond until the transaction ends, and hands it
// once it does.
func TestARecordLockedElsewhereIsNotAskedForEveryMillisecond(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.stage(t, 1)[0]
	tx, err := b.db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(t.Context(), `SELECT 1 FROM "`+b.schema+`".outbox WHERE id = $1 FOR UPDATE`, id)
	require.NoError(t, err)

	proxy, dsn := tcpproxy.StartFor(t, pgtest.URL(t))
	sink := newRecorder(nil)
	supervise(t, drivertest.For(t).Open(t, dsn, 5).DB, b.config(t), sink)
	require.Eventually(t, func() bool { return proxy.Statements() > 0 }, testwait.Within, time.Millisecond,
		"the relay's first statement")
	// The window the rate is measured over, not a wait for an event.
	const window = 2 * time.Second
	before := proxy.Statements()
	time.Sleep(window)
	asked := proxy.Statements() - before
	t.Logf("%d statements in %s while the record was locked", asked, window)
	require.Less(t, asked, 100, "claims of a locked record, one every millisecond or so")

	require.NoError(t, tx.Rollback())
	sink.waitHands(t, 1, testwait.Within)
	b.eventually(t, "processed_at IS NOT NULL", 1, testwait.Within)
}
