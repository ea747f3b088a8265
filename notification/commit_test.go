package notification_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

func TestCommit(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, testCommit)
}

func testCommit(t *testing.T, _ drivertest.Driver) {

	// Shared: the requests of a claimed batch and channel are claimed,
	// delivered and settled in one transaction, so each request's inbox
	// claim and its outcome share that transaction (one xmin), and a batch
	// shares it among its requests. Each: a transaction per request.
	for _, mode := range []notification.Commit{notification.CommitShared, notification.CommitEach} {
		t.Run("HowClaimsAndOutcomesCommit/"+map[notification.Commit]string{notification.CommitShared: "Shared", notification.CommitEach: "Each"}[mode], func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			cfg := b.config()
			cfg.Commit = map[string]notification.Commit{"mail": mode}
			reqs := make([]notification.Request, 200)
			for i := range reqs {
				reqs[i] = mailTo("user" + strconv.Itoa(i) + "@example.com")
			}
			ids := b.stage(t, reqs...)
			b.run(t, b.dispatcher(t, cfg))
			for _, id := range ids {
				require.Equal(t, relay.StateProcessed, b.waitSettled(t, id).State)
				require.Equal(t, 1, b.mail.Count(id))
			}
			var rows, apart, txs int
			require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT count(*),
					count(*) FILTER (WHERE i.xmin::text <> o.xmin::text), count(DISTINCT o.xmin::text)
				FROM "`+b.schema+`".outbox o JOIN "`+b.schema+`".inbox i ON i.event_id = o.id AND i.consumer = $1`,
				consumer).Scan(&rows, &apart, &txs))
			require.Equal(t, len(ids), rows, "one claim each")
			if mode == notification.CommitShared {
				require.Zero(t, apart, "every claim committed with its request's outcome")
				require.Less(t, txs, len(ids), "requests of a batch shared a transaction")
			} else {
				// Each claim commits alone, and the relay's settle writes
				// the outcomes of many in one statement after.
				require.Equal(t, len(ids), apart, "every claim committed apart from its request's outcome")
				var claimTxs int
				require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT count(DISTINCT xmin::text)
					FROM "`+b.schema+`".inbox WHERE consumer = $1`, consumer).Scan(&claimTxs))
				require.Equal(t, len(ids), claimTxs, "a transaction per request")
			}
			t.Logf("%d requests settled in %d transactions", rows, txs)
		})
	}

	t.Run("MixedAnswersKeepOnlyTheDeliveredClaims", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := b.sharedMail()
		cfg.Policy.MaxAttempts = 1
		b.mail.ScriptRecipient("retry@example.com", delivery.Retry(errors.New("busy")))
		b.mail.ScriptRecipient("reject@example.com", delivery.Reject(errors.New("no such mailbox")))
		ids := b.stage(t, mailTo("ok@example.com"), mailTo("retry@example.com"), mailTo("reject@example.com"))
		b.run(t, b.dispatcher(t, cfg))
		require.Equal(t, relay.StateProcessed, b.waitSettled(t, ids[0]).State)
		require.Equal(t, "exhausted after 1 attempts: busy", b.waitSettled(t, ids[1]).Reason)
		require.Equal(t, "no such mailbox", b.waitSettled(t, ids[2]).Reason)
		require.Equal(t, []int{1, 0, 0}, []int{b.claims(t, ids[0]), b.claims(t, ids[1]), b.claims(t, ids[2])})
	})

	t.Run("ASlowDeliveryHoldsTheOthersNoLongerThanTheTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := b.sharedMail()
		cfg.DeliveryTimeout = 300 * time.Millisecond
		cfg.Deliveries["mail"] = delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
			if p.Recipient == "slow@example.com" {
				<-ctx.Done()
				return delivery.Retry(ctx.Err())
			}
			return delivery.Delivered()
		})
		d := b.prepared(t, cfg)
		recs := b.records(t, mailTo("slow@example.com"), mailTo("a@example.com"), mailTo("b@example.com"))
		start := time.Now()
		results := handBatch(t, d, recs)
		require.Less(t, time.Since(start), 5*time.Second)
		require.Contains(t, results[0].String(), "timed out: DeliveryTimeout of 300ms passed")
		require.Equal(t, "done", results[1].String())
		require.Equal(t, "done", results[2].String())
		require.Equal(t, []int{0, 1, 1}, []int{b.claims(t, recs[0].ID), b.claims(t, recs[1].ID), b.claims(t, recs[2].ID)})
	})

	// Every delivery of a batch starts at once, whatever the others do:
	// half of them answer only when all of that half have started, the
	// others answer at once, so that a goroutine that answered one goes on
	// to the next.
	t.Run("TheDeliveriesOfABatchStartAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := b.sharedMail()
		cfg.DeliveryTimeout = 4 * time.Second
		const waiters = 30
		var started atomic.Int32
		all := make(chan struct{})
		cfg.Deliveries["mail"] = delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
			if !strings.HasPrefix(p.Recipient, "wait") {
				return delivery.Delivered()
			}
			if started.Add(1) == waiters {
				close(all)
			}
			select {
			case <-all:
				return delivery.Delivered()
			case <-ctx.Done():
				return delivery.Retry(fmt.Errorf("%d of the %d waiting deliveries started: %w", started.Load(), waiters, context.Cause(ctx)))
			}
		})
		d := b.prepared(t, cfg)
		var reqs []notification.Request
		for i := range waiters {
			reqs = append(reqs, mailTo("quick"+strconv.Itoa(i)+"@example.com"), mailTo("wait"+strconv.Itoa(i)+"@example.com"))
		}
		for i, r := range handBatch(t, d, b.records(t, reqs...)) {
			require.Equal(t, "done", r.String(), "request %d (%s)", i, reqs[i].Recipient)
		}
	})

	t.Run("AFailedCommitOffersTheDeliveredAgainUncounted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := b.sharedMail()
		d := b.prepared(t, cfg)
		recs := b.records(t, mailTo("a@example.com"), mailTo("b@example.com"))
		// A constraint checked at commit fails the shared commit once. The
		// owner installs it; the dispatcher's role gets its sequence.
		admin := pgtest.AdminDB(t)
		_, err := admin.ExecContext(t.Context(), `
			CREATE SEQUENCE "`+b.schema+`".commits; -- not rolled back with the commit it counts
			CREATE FUNCTION "`+b.schema+`".fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF nextval('"`+b.schema+`".commits') = 1 THEN
					RAISE EXCEPTION 'commit refused';
				END IF;
				RETURN NULL;
			END $$;
			CREATE CONSTRAINT TRIGGER fail_once AFTER INSERT ON "`+b.schema+`".inbox
				DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "`+b.schema+`".fail_once();`)
		require.NoError(t, err)
		pgtest.Grant(t, admin, b.schema)

		for i, res := range handBatch(t, d, recs) {
			require.Contains(t, res.String(), "unsure", "delivered, but not known to be")
			require.Contains(t, res.String(), "commit refused")
			require.Zero(t, b.claims(t, recs[i].ID), "its commit failed")
		}
		// Handed again: delivered again, with the same ids, and committed.
		for _, res := range handBatch(t, d, recs) {
			require.Equal(t, "done", res.String())
		}
		for _, rec := range recs {
			require.Equal(t, 2, b.mail.Count(rec.ID))
			require.Equal(t, 1, b.claims(t, rec.ID))
		}
	})

	t.Run("TwoBatchesHandingTheSameRequestDeliverOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		slow := newBlocked()
		cfg := b.sharedMail()
		cfg.Deliveries = map[string]delivery.Delivery{"mail": slow}
		d := b.prepared(t, cfg)
		rec := b.records(t, mailTo("a@example.com"))[0]
		results := make(chan relay.Result, 2)
		go func() { results <- d.Handle(t.Context(), rec) }()
		testwait.Recv(t, slow.started, "the first hand's delivery")
		go func() { results <- d.Handle(t.Context(), rec) }()
		b.waitBlockedOnClaim(t)
		slow.answer <- delivery.Delivered()
		require.Equal(t, "done", testwait.Recv(t, results, "the first hand's answer").String())
		require.Equal(t, "done", testwait.Recv(t, results, "the second hand's answer").String())
		require.Equal(t, 1, slow.callCount())
		require.Equal(t, 1, b.claims(t, rec.ID))
	})

	// A delivery that writes through the claim's transaction sees it
	// whether its request shares the commit or not, and takes effect
	// exactly once either way: in a shared transaction, one that fails
	// takes back only its own write.
	for _, mode := range []notification.Commit{notification.CommitShared, notification.CommitEach} {
		t.Run("WritesInTheClaimsTransactionExactlyOnce/"+strconv.Itoa(int(mode)), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			cfg := b.config()
			writer := &txWriter{schema: b.schema, fail: map[string]bool{"fail@example.com": true}}
			cfg.Deliveries = map[string]delivery.Delivery{"inapp": writer}
			cfg.Commit = map[string]notification.Commit{"inapp": mode}
			d := b.prepared(t, cfg)
			recs := b.records(t, inappTo("a@example.com"), inappTo("fail@example.com"), inappTo("b@example.com"))
			results := handBatch(t, d, recs)
			require.Equal(t, "done: written", results[0].String())
			require.Contains(t, results[1].String(), "retry")
			require.Equal(t, "done: written", results[2].String())
			require.Equal(t, []int{1, 0, 1}, []int{writer.effects(t, b, recs[0].ID), writer.effects(t, b, recs[1].ID), writer.effects(t, b, recs[2].ID)})
			require.Equal(t, 3, writer.calls(), "every delivery had the transaction")

			// Handed again: the delivered ones are not written twice.
			writer.fail = nil
			handBatch(t, d, recs)
			require.Equal(t, []int{1, 1, 1}, []int{writer.effects(t, b, recs[0].ID), writer.effects(t, b, recs[1].ID), writer.effects(t, b, recs[2].ID)})
		})
	}
}

// txWriter is a delivery that writes its effect through the claim's
// transaction (a row of consumer "effects" in the inbox table, as the
// test's role may write nothing else), then answers Retry for the
// recipients in fail.
type txWriter struct {
	schema string
	fail   map[string]bool
	mu     sync.Mutex
	n      int
}

func (w *txWriter) Repeats() delivery.Repeat { return delivery.RepeatImpossible }

func (w *txWriter) Deliver(ctx context.Context, p delivery.Pending) delivery.Outcome {
	tx, ok := delivery.TxFrom(ctx)
	if !ok {
		return delivery.Reject(errors.New("no transaction"))
	}
	w.mu.Lock()
	w.n++
	w.mu.Unlock()
	if _, err := tx.ExecContext(ctx, `INSERT INTO "`+w.schema+`".inbox (consumer, event_id) VALUES ('effects', $1)`, p.ID); err != nil {
		return delivery.Retry(err)
	}
	if w.fail[p.Recipient] {
		return delivery.Retry(errors.New("failed after writing"))
	}
	return delivery.DeliveredWithReference("written")
}

func (w *txWriter) calls() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

func (w *txWriter) effects(t *testing.T, b testBundle, id uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRowContext(t.Context(),
		`SELECT count(*) FROM "`+b.schema+`".inbox WHERE consumer = 'effects' AND event_id = $1`, id).Scan(&n))
	return n
}

func inappTo(who string) notification.Request {
	return notification.Request{Channel: "inapp", Recipient: who, Template: "welcome"}
}

// records stages reqs and returns them as the relay would hand them.
func (b testBundle) records(t *testing.T, reqs ...notification.Request) []relay.Record {
	t.Helper()
	ids := b.stage(t, reqs...)
	recs := make([]relay.Record, len(reqs))
	for i, req := range reqs {
		recs[i] = relay.Record{ID: ids[i], Module: module, Lane: req.Channel, Kind: notification.Kind, Payload: must(req.Message(module)).Payload}
	}
	return recs
}

// sharedMail is the bundle's config with the mail channel's claims sharing
// commits (CommitShared).
func (b testBundle) sharedMail() notification.Config {
	cfg := b.config()
	cfg.Commit = map[string]notification.Commit{"mail": notification.CommitShared}
	return cfg
}

// handBatch hands recs to d as one batch, as a relay hands a claimed
// batch, and returns their results in order.
func handBatch(t *testing.T, d *notification.Dispatcher, recs []relay.Record) []relay.Result {
	t.Helper()
	batch := relay.NewBatch(recs...)
	d.HandleBatch(t.Context(), batch)
	results := make([]relay.Result, len(recs))
	for i := range recs {
		results[i] = batch.Result(i)
	}
	return results
}

// A request with a dedup key whose claim commits alone (CommitEach) writes
// its provider reference with the key: a duplicate handed before the relay
// settled the first request's row (a batch no relay settles stands for that
// moment) still ends a duplicate carrying the first receipt, and the first
// is delivered once. The duplicate keeps no inbox claim, since it was not
// delivered: handed again, as after its own settle was lost, it is a
// duplicate again, not a request "delivered before".
func TestDedupKeyCarriesTheFirstReceiptBeforeTheSettle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.Commit = map[string]notification.Commit{"mail": notification.CommitEach}
	b.mail.ScriptRecipient("ada@example.com", delivery.DeliveredWithReference("msg-1"))
	d := b.prepared(t, cfg)
	confirm := notification.Request{Channel: "mail", Recipient: "ada@example.com", DedupKey: "booking-9/confirmed"}
	first := handBatch(t, d, b.records(t, confirm))
	require.Equal(t, "done: msg-1", first[0].String())
	require.Equal(t, relay.StatePending, b.status(t, b.mail.Requests()[0].ID).State, "the first's row is not settled yet")

	dup := b.records(t, confirm)
	for hand := 1; hand <= 2; hand++ {
		results := handBatch(t, d, dup)
		require.Equal(t, "msg-1", results[0].Detail()["reference"], "hand %d: the duplicate carries the first receipt", hand)
		require.Equal(t, "done", results[0].String(), "hand %d: as its own result, none: a report naming msg-1 is the first's", hand)
		require.Equal(t, notification.CodeDuplicate, results[0].Code(), "hand %d", hand)
	}
	require.Zero(t, b.claims(t, dup[0].ID), "a duplicate is no delivery")
	require.Zero(t, b.mail.Count(dup[0].ID), "no provider call for the duplicate")
	require.Equal(t, 1, b.mail.Len())
}
