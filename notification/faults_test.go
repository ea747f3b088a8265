package notification_test

// Faults the dispatcher and its relay meet in production: a connection cut
// at commit, a provider slower than the lease, a server that kills idle
// transactions, an exhausted pool, a poison request, a producer
// transaction left open, and the application's clock. Each runs against
// the test binary's PostgreSQL.

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/logbuf"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/tcpproxy"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/retrypolicy"
)

// A connection that breaks at the claim's COMMIT leaves the outcome
// unknown: the server may or may not have committed. Either way the
// request is offered again without counting an attempt (relay.Unsure),
// is never dead, and ends processed with exactly one inbox claim. Cut
// before the server read the COMMIT, the claim rolled back and the
// provider is called again with the same id (at least once, G4); cut
// after, the claim committed and the next hand finds it and does not call
// the provider again (G3).
func TestFaultConnectionCutAtCommitIsUnsureNeverDead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		when   tcpproxy.When
		calls  int // provider calls
		unsure int // hands answered unsure
	}{
		// The commit never reached the server: delivered again, under
		// the same key.
		{tcpproxy.Before, 2, 1},
		// The claim committed; only the answer was lost: offered again,
		// the request finds its committed claim and is done without a
		// second provider call.
		{tcpproxy.After, 1, 1},
	} {
		t.Run(tc.when.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			// The dispatcher's pool goes through the proxy; the relay's pool
			// and its LISTEN session go straight to the server.
			proxy, dsn := tcpproxy.StartFor(t, pgtest.URL(t))
			pool := faultPool(t, dsn, 2)
			cut := proxy.CutOnQuery(tcpproxy.Query("COMMIT"), tc.when)
			supervise(t, pool, b.relayConfig(t), b.dispatcher(t, b.config()))

			id := b.stage(t, mailTo("a@example.com"))[0]
			testwait.Recv(t, cut, "the cut of the COMMIT")
			st := b.waitSettled(t, id)
			require.Equal(t, relay.StateProcessed, st.State, "%+v", st)
			require.Equal(t, 1, b.claims(t, id))
			require.Zero(t, st.Attempts, "the cut is no attempt")
			require.Equal(t, tc.unsure, st.Unsure)
			require.Equal(t, 1, st.Hands, "an unsure hand is not counted")
			if tc.unsure > 0 {
				require.Contains(t, st.LastError, "delivered, but the claim's commit failed")
			}
			require.Equal(t, tc.calls, b.mail.Count(id))
			for _, p := range b.mail.Requests() {
				require.Equal(t, id, p.ID, "the same idempotency key every time")
				require.Equal(t, 1, p.Attempt)
			}
			dead, err := b.ob.ListDead(t.Context(), b.db, nil)
			require.NoError(t, err)
			require.Empty(t, dead)
		})
	}
}

// A provider slower than the lease. The lease of the first relay runs out
// while its claim's transaction is still open (its process stalled, or its
// lease was too short): a second relay claims the record, blocks on the
// inbox claim, and never calls the provider while the first transaction is
// open. The first transaction then decides.
func TestFaultProviderSlowerThanTheLease(t *testing.T) {
	t.Parallel()

	for _, first := range []delivery.Outcome{delivery.Delivered(), delivery.Retry(errors.New("provider busy"))} {
		t.Run("SecondRelayWaitsOnTheClaim/"+first.Kind().String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			slow := newBlocked()
			cfg := b.config()
			cfg.Deliveries = map[string]delivery.Delivery{"mail": slow}
			cfg.DeliveryTimeout = 20 * time.Second
			rcfg := b.relayConfig(t)
			rcfg.HandTimeout = 30 * time.Second
			rcfg.Lease = time.Minute
			rcfg.Concurrency = 1 // its one slot is busy: it cannot take the record again
			id := b.stage(t, mailTo("a@example.com"))[0]
			b.runWith(t, rcfg, b.dispatcher(t, cfg))
			testwait.Recv(t, slow.started, "the first relay's delivery")

			// The first relay's lease runs out while it waits on the provider.
			_, err := b.db.ExecContext(t.Context(), `UPDATE "`+b.schema+`".outbox SET available_at = now() WHERE id = $1`, id)
			require.NoError(t, err)
			b.runWith(t, rcfg, b.dispatcher(t, cfg)) // a second relay, same consumer
			b.waitBlockedOnClaim(t)
			require.Equal(t, 2, b.status(t, id).Hands, "the second relay holds the record")
			// It waits on the claim, which comes before the provider call.
			require.Equal(t, 1, slow.callCount(), "no second provider call while the first transaction is open")

			slow.answer <- first
			if first.Kind() == delivery.KindRetry {
				// The first claim rolled back: the second relay delivers.
				p := testwait.Recv(t, slow.started, "the second relay's delivery")
				require.Equal(t, id, p.ID)
				slow.answer <- delivery.Delivered()
			}
			st := b.waitSettled(t, id)
			require.Equal(t, relay.StateProcessed, st.State)
			require.Equal(t, 1, b.claims(t, id))
			if first.Kind() == delivery.KindDelivered {
				require.Equal(t, 1, slow.callCount(), "delivered once in all")
				require.Zero(t, st.Attempts)
			} else {
				require.Equal(t, 2, slow.callCount())
				require.Zero(t, st.Attempts, "the first relay's retry belonged to a stale hand: fenced off")
			}
		})
	}

	// A provider call that ignores its context outlives the hand and the
	// lease. The claim's transaction does not: database/sql rolls it back
	// when its deadline passes (the delivery timeout and a few seconds for
	// the commit), so after the lease another hand claims the record and
	// calls the provider again, with the same id, while the
	// first call still runs (at least once: the provider's idempotency key
	// is what saves the recipient a second message). The first call's late
	// answer cannot commit and is fenced off.
	t.Run("ProviderIgnoringItsContext", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		app := "fault_" + b.schema
		pool := faultPool(t, faultWithParam(t, pgtest.URL(t), "application_name", app), 10)
		var calls atomic.Int32
		started := make(chan int, 4)
		release := [3]chan struct{}{nil, make(chan struct{}), make(chan struct{})}
		answer := [3]func(){nil, sync.OnceFunc(func() { close(release[1]) }), sync.OnceFunc(func() { close(release[2]) })}
		cfg := b.config()
		cfg.DeliveryTimeout = 200 * time.Millisecond
		cfg.Deliveries = map[string]delivery.Delivery{"mail": delivery.Func(func(_ context.Context, p delivery.Pending) delivery.Outcome {
			n := min(int(calls.Add(1)), 2)
			started <- n
			<-release[n] // ignores ctx
			return delivery.Delivered()
		})}
		var logs logbuf.Buffer
		rcfg := b.relayConfig(t)
		rcfg.HandTimeout = 300 * time.Millisecond
		rcfg.Lease = 2 * time.Second
		rcfg.Concurrency, rcfg.LaneLimit = 2, 2
		rcfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		id := b.stage(t, mailTo("a@example.com"))[0]
		supervise(t, pool, rcfg, b.dispatcher(t, cfg))
		t.Cleanup(func() { answer[1](); answer[2]() }) // runs before the relay stops

		require.Equal(t, 1, testwait.Recv(t, started, "the first hand"))
		start := time.Now()
		require.Equal(t, 2, testwait.Recv(t, started, "the hand after the lease"), "handed again after the lease")
		require.GreaterOrEqual(t, time.Since(start), time.Second, "not before the lease ran out")
		// Only the second hand's transaction is open: the first one's ended
		// with its hand.
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, b.db.QueryRowContext(t.Context(),
				`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state LIKE 'idle in transaction%'`, app).Scan(&n))
			return n == 1
		}, 5*time.Second, 5*time.Millisecond)

		answer[2]()
		st := b.waitSettled(t, id)
		require.Equal(t, relay.StateProcessed, st.State)
		answer[1]() // the first call answers at last: its commit fails, and its settle is fenced off
		require.Eventually(t, func() bool { return strings.Contains(logs.String(), "fenced off by a later hand") },
			5*time.Second, 5*time.Millisecond)
		st = b.status(t, id)
		require.Equal(t, relay.StateProcessed, st.State)
		require.Zero(t, st.Attempts)
		// Two hands, or three: the second hand may outlive its lease too,
		// waiting on the first one's claim, and a third then finds the
		// second's committed claim and is done without a provider call.
		require.GreaterOrEqual(t, st.Hands, 2)
		require.Equal(t, 1, b.claims(t, id))
		require.EqualValues(t, 2, calls.Load(), "the provider saw the same id twice")
	})
}

// A server whose idle_in_transaction_session_timeout is shorter than a
// provider call kills the claim's session mid-delivery. The relay warns
// about it at start; the delivered answer then cannot commit, and the
// request is offered again without counting an attempt, never
// "delivered" and lost: it is delivered again once the provider is fast,
// with exactly one claim.
func TestFaultIdleTransactionTimeoutMidDeliveryIsOfferedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := faultPool(t, faultWithSetting(t, pgtest.URL(t), "idle_in_transaction_session_timeout", "1000"), 5)
	var mu sync.Mutex
	var seen []uuid.UUID
	cfg := b.config()
	cfg.Deliveries = map[string]delivery.Delivery{"mail": delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
		mu.Lock()
		seen = append(seen, p.ID)
		slow := len(seen) == 1
		mu.Unlock()
		if slow { // longer than the server lets a transaction sit idle
			select {
			case <-time.After(2500 * time.Millisecond):
			case <-ctx.Done():
				return delivery.Retry(ctx.Err())
			}
		}
		return delivery.Delivered()
	})}
	var logs logbuf.Buffer
	rcfg := b.relayConfig(t)
	rcfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	supervise(t, pool, rcfg, b.dispatcher(t, cfg))
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), "idle_in_transaction_session_timeout is not above HandTimeout")
	}, 5*time.Second, 5*time.Millisecond, "the relay warns at start")

	id := b.stage(t, mailTo("a@example.com"))[0]
	st := b.waitSettled(t, id)
	require.Equal(t, relay.StateProcessed, st.State, "%+v", st)
	require.Equal(t, 1, b.claims(t, id))
	require.Zero(t, st.Attempts, "a killed transaction is no attempt")
	require.Contains(t, st.LastError, "delivered, but the claim's commit failed")
	t.Logf("last error after the server killed the session: %s", st.LastError)
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(seen), 2, "delivered again after the killed transaction")
	for _, got := range seen {
		require.Equal(t, id, got)
	}
}

// A claim's transaction that can never commit (the server ends idle
// transactions before the provider answers, every time) is a fault of the
// setup, not of the delivery, nor a crash: the request is dead after
// MaxUnsure such hands, with a reason that says so, however low MaxHands
// is, and no attempt is counted.
func TestFaultClaimThatNeverCommitsIsDeadAfterMaxUnsure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := faultPool(t, faultWithSetting(t, pgtest.URL(t), "idle_in_transaction_session_timeout", "200"), 5)
	var calls atomic.Int64
	cfg := b.config()
	cfg.Policy.MaxAttempts = 2 // below MaxHands
	cfg.Deliveries = map[string]delivery.Delivery{"mail": delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
		calls.Add(1)
		select { // a provider slower than the server lets a transaction sit idle
		case <-time.After(500 * time.Millisecond):
			return delivery.Delivered()
		case <-ctx.Done():
			return delivery.Retry(ctx.Err())
		}
	})}
	rcfg := b.relayConfig(t)
	rcfg.MaxHands = 3
	rcfg.MaxUnsure = 4
	supervise(t, pool, rcfg, b.dispatcher(t, cfg))

	id := b.stage(t, mailTo("a@example.com"))[0]
	st := b.waitSettled(t, id)
	require.Equal(t, relay.StateDead, st.State, "%+v", st)
	require.Contains(t, st.Reason, "could not commit its work 4 times (MaxUnsure); last: delivered, but the claim's commit failed")
	require.NotContains(t, st.Reason, "MaxHands")
	require.Equal(t, 1, st.Attempts, "only the final answer counts")
	require.EqualValues(t, 4, calls.Load(), "the provider was called on each of the four hands")
	require.Zero(t, b.claims(t, id))
}

// Few connections, many slow deliveries: a pool of 3 for the relay and
// the dispatcher together, 10 hands at once, 200 ms per delivery. Claims,
// settles and purges still get their turn (every request ends processed,
// then purged), every request is delivered once, and staging from the
// application's own pool keeps its latency meanwhile.
func TestFaultPoolExhaustionStillClaimsSettlesPurgesAndStages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := faultPool(t, pgtest.URL(t), 3)
	var mu sync.Mutex
	calls := map[uuid.UUID]int{}
	cfg := b.config()
	cfg.Deliveries = map[string]delivery.Delivery{"mail": delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
		mu.Lock()
		calls[p.ID]++
		mu.Unlock()
		select {
		case <-time.After(200 * time.Millisecond):
			return delivery.Delivered()
		case <-ctx.Done():
			return delivery.Retry(ctx.Err())
		}
	})}
	rcfg := b.relayConfig(t)
	rcfg.Concurrency = 10
	rcfg.BatchSize = 10
	rcfg.PurgeInterval = 100 * time.Millisecond
	rcfg.Retention = time.Millisecond
	supervise(t, pool, rcfg, b.dispatcher(t, cfg))

	const first, trickle = 20, 40
	reqs := make([]notification.Request, first)
	for i := range reqs {
		reqs[i] = mailTo(fmt.Sprintf("r%d@example.com", i))
	}
	ids := b.stage(t, reqs...)
	var latencies []time.Duration
	for i := range trickle {
		start := time.Now()
		ids = append(ids, b.stage(t, mailTo(fmt.Sprintf("t%d@example.com", i)))...)
		latencies = append(latencies, time.Since(start))
		time.Sleep(25 * time.Millisecond)
	}
	slices.Sort(latencies)
	t.Logf("staging latency while the pool is exhausted: median %s, max %s", latencies[len(latencies)/2], latencies[len(latencies)-1])
	require.Less(t, latencies[len(latencies)-1], 2*time.Second, "staging is not starved")

	// Processed, then purged: nothing is left.
	for deadline := time.Now().Add(40 * time.Second); faultCount(t, b, "outbox", "true") > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("left after 40 s: %d pending, %d dead, %d processed",
				faultCount(t, b, "outbox", "processed_at IS NULL AND failed_at IS NULL"),
				faultCount(t, b, "outbox", "failed_at IS NOT NULL"), faultCount(t, b, "outbox", "processed_at IS NOT NULL"))
		}
	}
	require.Equal(t, first+trickle, faultCount(t, b, "inbox", "true"), "one claim each")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, calls, first+trickle)
	for _, id := range ids {
		require.Equal(t, 1, calls[id], "delivered once: %s", id)
	}
	stats := pool.Stats()
	t.Logf("pool: %d waits, %s waited in all", stats.WaitCount, stats.WaitDuration)
	require.Positive(t, stats.WaitCount, "the pool was exhausted")
}

// A poison request, whose delivery panics or hangs until its timeout every
// time, is dead after the policy's attempts with the panic or the timeout
// as its reason, while the other requests are delivered meanwhile.
func TestFaultPoisonRequestIsDeadAndTheRestFlow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		poison delivery.Func
		reason string
	}{
		{
			name:   "Panics",
			poison: func(context.Context, delivery.Pending) delivery.Outcome { panic("renderer crashed") },
			reason: `exhausted after 3 attempts: delivery for channel "mail" panicked: renderer crashed`,
		},
		{
			name: "HangsUntilItsTimeout",
			poison: func(ctx context.Context, _ delivery.Pending) delivery.Outcome {
				<-ctx.Done()
				return delivery.Retry(ctx.Err())
			},
			reason: `exhausted after 3 attempts: delivery for channel "mail" timed out: DeliveryTimeout of 100ms passed: context deadline exceeded`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			cfg := b.config()
			// Its next attempt a minute away, until the test makes it due:
			// the rest must flow before it, however slow the machine.
			cfg.Policy = retrypolicy.Policy{MaxAttempts: 3, BaseDelay: time.Minute, RandFunc: func() float64 { return 0 }}
			cfg.DeliveryTimeout = 100 * time.Millisecond
			var poisonCalls atomic.Int32
			cfg.Deliveries = map[string]delivery.Delivery{"mail": delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
				if p.Recipient == "poison@example.com" {
					poisonCalls.Add(1)
					return tc.poison(ctx, p)
				}
				// The rest answer whatever the timeout the poison needs: a
				// loaded machine's slow hand must not make one of them wait
				// the poison's minute of backoff.
				return b.mail.Deliver(context.WithoutCancel(ctx), p)
			})}
			b.run(t, b.dispatcher(t, cfg))
			poison := b.stage(t, mailTo("poison@example.com"))[0]
			require.Eventually(t, func() bool { return b.status(t, poison).Attempts == 1 }, 10*time.Second, time.Millisecond)

			// Between its attempts the rest flows.
			reqs := make([]notification.Request, 30)
			for i := range reqs {
				reqs[i] = mailTo(fmt.Sprintf("r%d@example.com", i))
			}
			for _, id := range b.stage(t, reqs...) {
				require.Equal(t, relay.StateProcessed, b.waitSettled(t, id).State)
				require.Equal(t, 1, b.mail.Count(id))
			}
			require.Equal(t, 1, b.status(t, poison).Attempts, "the others did not wait for the poison to die")
			for attempts := 2; attempts <= 3; attempts++ {
				b.makeDue(t, poison)
				require.Eventually(t, func() bool { return b.status(t, poison).Attempts == attempts }, 10*time.Second,
					time.Millisecond, "the poison's attempt %d", attempts)
			}

			st := b.waitSettled(t, poison)
			require.Equal(t, relay.StateDead, st.State)
			require.Equal(t, tc.reason, st.Reason)
			require.Equal(t, 3, st.Attempts)
			require.Equal(t, 3, st.Hands)
			require.EqualValues(t, 3, poisonCalls.Load())
			require.Zero(t, b.claims(t, poison))
		})
	}
}

// A producer transaction that stages a request early (its UUIDv7 id sorts
// before every later one) and stays open while later requests are staged
// and delivered: once it commits, its request is delivered too. Claims go
// by state, never by an id or time cursor.
func TestFaultLongOpenProducerTransactionIsStillDelivered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t, b.dispatcher(t, b.config()))
	tx, err := b.db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	early, err := b.ob.Stage(t.Context(), tx, must(mailTo("early@example.com").Message(module)))
	require.NoError(t, err)

	for round := range 3 {
		time.Sleep(200 * time.Millisecond)
		later := b.stage(t, mailTo(fmt.Sprintf("later%d@example.com", round)))[0]
		require.Equal(t, relay.StateProcessed, b.waitSettled(t, later).State)
		require.Negative(t, bytes.Compare(early[:], later[:]), "the open transaction holds the earlier id")
		require.Zero(t, b.mail.Count(early), "not visible before its commit")
	}
	require.NoError(t, tx.Commit())
	st := b.waitSettled(t, early)
	require.Equal(t, relay.StateProcessed, st.State)
	require.Equal(t, 1, b.mail.Count(early))
	require.Equal(t, 1, b.claims(t, early))
}

// The application's clock never decides a time: no statement the relay or
// the dispatcher sends carries a time value, so a clock set ten minutes
// off cannot lease, retry or schedule a request early or late; leases and
// retries are due at the database's now() plus a duration.
//
// (A clock actually set off cannot be shown in-process: Go reads the
// system clock directly, and the database server runs on the same one.)
func TestFaultTimesComeFromTheDatabaseClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sent := &faultSentLog{}
	conn, err := pq.NewConnector(pgtest.URL(t))
	require.NoError(t, err)
	pool := sql.OpenDB(faultConnector{Connector: conn, log: sent})
	t.Cleanup(func() { _ = pool.Close() })

	const delay = 2 * time.Second
	type sample struct{ leaseLeft, dbBefore time.Time }
	firstHand := make(chan sample, 1)
	cfg := b.config()
	cfg.Policy = retrypolicy.Policy{BaseDelay: delay, RandFunc: func() float64 { return 0 }}
	cfg.Deliveries = map[string]delivery.Delivery{"mail": delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
		if p.Attempt > 1 {
			return delivery.Delivered()
		}
		var s sample
		if err := b.db.QueryRowContext(ctx, `SELECT available_at, clock_timestamp() FROM "`+b.schema+`".outbox WHERE id = $1`,
			p.ID).Scan(&s.leaseLeft, &s.dbBefore); err != nil {
			return delivery.Reject(err)
		}
		firstHand <- s
		return delivery.Retry(errors.New("provider busy"))
	})}
	rcfg := b.relayConfig(t)
	rcfg.PurgeInterval = 100 * time.Millisecond
	d := b.dispatcher(t, cfg)
	supervise(t, pool, rcfg, d)

	msg := must(mailTo("a@example.com").Message(module))
	ids, err := b.ob.StageBatch(t.Context(), pool, []relay.Message{msg})
	require.NoError(t, err)
	id := ids[0]

	// The lease: the claim's now() plus Lease, on the database clock.
	s := testwait.Recv(t, firstHand, "the first hand")
	left := s.leaseLeft.Sub(s.dbBefore)
	require.LessOrEqual(t, left, rcfg.Lease)
	require.Greater(t, left, rcfg.Lease-3*time.Second)

	// The retry: due at the settle's now() plus the delay.
	var due, dbAfter time.Time
	var attempts, hands int
	require.Eventually(t, func() bool {
		require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT attempts, hands, available_at, clock_timestamp() FROM "`+
			b.schema+`".outbox WHERE id = $1`, id).Scan(&attempts, &hands, &due, &dbAfter))
		return attempts == 1
	}, 10*time.Second, time.Millisecond)
	require.Equal(t, 1, hands, "sampled before the second hand")
	require.False(t, due.Before(s.dbBefore.Add(delay)), "due %s, not before %s + %s", due, s.dbBefore, delay)
	require.False(t, due.After(dbAfter.Add(delay)), "due %s, not after %s + %s", due, dbAfter, delay)

	st, err := b.client.Wait(waitCtx(t), id)
	require.NoError(t, err)
	require.Equal(t, relay.StateProcessed, st.State)
	require.Eventually(t, func() bool { return sent.purges() > 0 }, 5*time.Second, 10*time.Millisecond, "a purge ran")

	// What crossed the wire: every statement of staging, claim, inbox
	// claim, settle, status and purge, and not one time value among their
	// arguments.
	stmts := sent.all()
	for _, want := range []string{"pg_notify", "FOR UPDATE SKIP LOCKED", "ON CONFLICT (consumer, event_id) DO NOTHING",
		"unnest((SELECT $1::uuid[]), (SELECT $2::int[])", "DELETE FROM"} {
		require.True(t, slices.ContainsFunc(stmts, func(s faultStatement) bool { return strings.Contains(s.query, want) }),
			"no statement with %q was sent", want)
	}
	for _, s := range stmts {
		for i, arg := range s.args {
			_, isTime := arg.(time.Time)
			require.False(t, isTime, "argument $%d of %s is a time: %v", i+1, s.query, arg)
			if str, ok := arg.(string); ok {
				require.False(t, faultTimestamp.MatchString(str), "argument $%d of %s holds a time: %s", i+1, s.query, str)
			}
			if raw, ok := arg.([]byte); ok {
				require.False(t, faultTimestamp.Match(raw), "argument $%d of %s holds a time: %s", i+1, s.query, raw)
			}
		}
	}
	require.Zero(t, sent.prepared.Load(), "every statement went through ExecContext or QueryContext, and was seen")
}

// faultTimestamp matches a time written out, as PostgreSQL or RFC 3339 do.
var faultTimestamp = regexp.MustCompile(`\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}`)

// faultPool opens a pool of at most maxOpen connections on dsn, closed
// when the test ends.
func faultPool(t *testing.T, dsn string, maxOpen int) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", dsn)
	require.NoError(t, err)
	db.SetMaxOpenConns(maxOpen)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// faultWithParam returns dsn with a connection parameter set.
func faultWithParam(t *testing.T, dsn, key, value string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// faultWithSetting returns dsn with a server setting for its sessions.
func faultWithSetting(t *testing.T, dsn, name, value string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	return faultWithParam(t, dsn, "options", strings.TrimSpace(u.Query().Get("options")+" -c "+name+"="+value))
}

func faultCount(t *testing.T, b testBundle, table, where string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRowContext(context.Background(),
		`SELECT count(*) FROM "`+b.schema+`".`+table+` WHERE `+where).Scan(&n))
	return n
}

// faultStatement is one statement a pool sent, with its arguments as the
// driver received them.
type faultStatement struct {
	query string
	args  []any
}

// faultSentLog records what a faultConnector's sessions send.
type faultSentLog struct {
	mu       sync.Mutex
	stmts    []faultStatement
	prepared atomic.Int64
}

func (l *faultSentLog) add(query string, args []driver.NamedValue) {
	s := faultStatement{query: query}
	for _, a := range args {
		s.args = append(s.args, a.Value)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stmts = append(l.stmts, s)
}

func (l *faultSentLog) all() []faultStatement {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.stmts)
}

func (l *faultSentLog) purges() int {
	n := 0
	for _, s := range l.all() {
		if strings.Contains(s.query, "DELETE FROM") {
			n++
		}
	}
	return n
}

// faultConnector opens lib/pq sessions that record every statement and
// its arguments.
type faultConnector struct {
	driver.Connector
	log *faultSentLog
}

// faultDriverConn is what the wrapper needs of a lib/pq session.
type faultDriverConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

func (c faultConnector) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	full, ok := cn.(faultDriverConn)
	if !ok {
		_ = cn.Close()
		return nil, fmt.Errorf("lib/pq session %T lacks an interface the recorder needs", cn)
	}
	return faultConn{faultDriverConn: full, log: c.log}, nil
}

type faultConn struct {
	faultDriverConn
	log *faultSentLog
}

func (c faultConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.log.add(query, args)
	return c.faultDriverConn.ExecContext(ctx, query, args)
}

func (c faultConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.log.add(query, args)
	return c.faultDriverConn.QueryContext(ctx, query, args)
}

func (c faultConn) Prepare(query string) (driver.Stmt, error) {
	c.log.prepared.Add(1)
	return c.faultDriverConn.Prepare(query)
}

func (c faultConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.log.prepared.Add(1)
	return c.faultDriverConn.PrepareContext(ctx, query)
}
