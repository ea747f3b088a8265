package notification_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

func TestGroupCommit(t *testing.T) {
	t.Parallel()

	t.Run("EveryRequestDeliveredOnceInSharedTransactions", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var logs lockedBuffer
		cfg := b.config()
		cfg.GroupSize = 50
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		reqs := make([]notification.Request, 500)
		for i := range reqs {
			reqs[i] = mailTo("user" + strconv.Itoa(i) + "@example.com")
		}
		ids := b.stage(t, reqs...)
		b.run(t, b.dispatcher(t, cfg))
		for _, id := range ids {
			require.Equal(t, relay.StateProcessed, b.waitSettled(t, id).State)
			require.Equal(t, 1, b.mail.Count(id))
			require.Equal(t, 1, b.claims(t, id))
		}
		largest := 0
		for _, m := range regexp.MustCompile(`msg="group committed".* requests=(\d+)`).FindAllStringSubmatch(logs.String(), -1) {
			n, _ := strconv.Atoi(m[1])
			largest = max(largest, n)
		}
		require.Greater(t, largest, 1, "requests handed together shared a transaction")
		t.Logf("largest group: %d", largest)
	})

	t.Run("MixedAnswersKeepOnlyTheDeliveredClaims", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := b.config()
		cfg.GroupSize = 10
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
		cfg := b.config()
		cfg.GroupSize = 10
		cfg.DeliveryTimeout = 300 * time.Millisecond
		started := make(chan struct{}, 10)
		cfg.Deliveries["mail"] = delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
			started <- struct{}{}
			if p.Recipient == "slow@example.com" {
				<-ctx.Done()
				return delivery.Retry(ctx.Err())
			}
			return delivery.Delivered()
		})
		d := b.dispatcher(t, cfg)
		recs := b.records(t, mailTo("slow@example.com"), mailTo("a@example.com"), mailTo("b@example.com"))
		results := handTogether(t, d, recs)
		require.Contains(t, results[0].String(), "timed out: DeliveryTimeout of 300ms passed")
		require.Equal(t, "done", results[1].String())
		require.Equal(t, "done", results[2].String())
		require.Equal(t, []int{0, 1, 1}, []int{b.claims(t, recs[0].ID), b.claims(t, recs[1].ID), b.claims(t, recs[2].ID)})
	})

	t.Run("AFailedCommitOffersTheDeliveredAgainUncounted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := b.config()
		cfg.GroupSize = 10
		d := b.dispatcher(t, cfg)
		recs := b.records(t, mailTo("a@example.com"), mailTo("b@example.com"))
		// A constraint checked at commit fails the group's commit once. The
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

		// Groups form as requests arrive: the two may share the failing
		// commit, or one may commit alone after it.
		var unsure []relay.Record
		for i, res := range handTogether(t, d, recs) {
			if res.String() == "done" {
				require.Equal(t, 1, b.claims(t, recs[i].ID))
				continue
			}
			require.Contains(t, res.String(), "unsure", "delivered, but not known to be")
			require.Contains(t, res.String(), "commit refused")
			require.Zero(t, b.claims(t, recs[i].ID), "its commit failed")
			unsure = append(unsure, recs[i])
		}
		require.NotEmpty(t, unsure)

		// Handed again: delivered again, with the same ids, and committed.
		for _, res := range handTogether(t, d, unsure) {
			require.Equal(t, "done", res.String())
		}
		for _, rec := range unsure {
			require.Equal(t, 2, b.mail.Count(rec.ID))
			require.Equal(t, 1, b.claims(t, rec.ID))
		}
	})

	t.Run("TwoGroupsHandingTheSameRequestDeliverOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		slow := newBlocked()
		cfg := b.config()
		cfg.GroupSize = 10
		cfg.Deliveries = map[string]delivery.Delivery{"mail": slow}
		d := b.dispatcher(t, cfg)
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
}

// records stages reqs and returns them as the relay would hand them.
func (b testBundle) records(t *testing.T, reqs ...notification.Request) []relay.Record {
	t.Helper()
	ids := b.stage(t, reqs...)
	recs := make([]relay.Record, len(reqs))
	for i, req := range reqs {
		recs[i] = relay.Record{ID: ids[i], Module: module, Kind: notification.Kind, Payload: must(req.Message(module)).Payload}
	}
	return recs
}

// handTogether hands recs to d at once, as a relay hands a claimed batch,
// and returns the results in order.
func handTogether(t *testing.T, d *notification.Dispatcher, recs []relay.Record) []relay.Result {
	t.Helper()
	results := make([]relay.Result, len(recs))
	var wg sync.WaitGroup
	for i, rec := range recs {
		wg.Go(func() { results[i] = d.Handle(t.Context(), rec) })
	}
	wg.Wait()
	return results
}

// lockedBuffer is a log destination safe for concurrent writers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
