package notification_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/retrypolicy"
)

func TestDispatcher(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, testDispatcher)
}

func testDispatcher(t *testing.T, _ drivertest.Driver) {

	t.Run("DeliversWithThePendingAsStaged", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.mail.Script(delivery.DeliveredWithReference("msg-1"))
		b.run(t, b.dispatcher(t, b.config()))
		ctx := relay.WithCorrelationID(t.Context(), "booking-9")
		id, err := b.ob.Stage(ctx, b.native.Execer(), must(mailTo("ada@example.com").Message(module)))
		require.NoError(t, err)

		got, err := b.mail.Wait(waitCtx(t), 1)
		require.NoError(t, err)
		p := got[0]
		require.Equal(t, id, p.ID)
		require.Equal(t, "mail", p.Channel)
		require.Equal(t, "ada@example.com", p.Recipient)
		require.Equal(t, "welcome", p.Template)
		require.Equal(t, map[string]any{"name": "Ada"}, p.Data)
		require.Equal(t, "booking-9", p.CorrelationID)
		require.Empty(t, p.CausationID)
		require.Equal(t, 1, p.Attempt)
		require.WithinDuration(t, time.Now(), p.StagedAt, time.Minute)

		st := b.waitSettled(t, id)
		require.Equal(t, relay.StateProcessed, st.State)
		require.Equal(t, "msg-1", st.Result, "the receipt")
		require.Equal(t, 1, b.claims(t, id))
	})

	// A claim's transaction runs on a connection of its own, which goes
	// back to the pool out of any transaction whether it committed or not:
	// the next statements on it each run in a transaction of their own.
	t.Run("GivesItsConnectionBackOutOfTheTransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pool := drivertest.For(t).Open(t, pgtest.URL(t), 1).DB
		b.mail.Script(delivery.Retry(errors.New("busy")), delivery.Delivered())
		d := b.dispatcher(t, b.config())
		rc := b.relayConfig(t)
		rc.MaxHands = relay.MaxHandsDefault
		require.NoError(t, d.Prepare(t.Context(), pool, rc))
		id := b.stage(t, mailTo("a@example.com"))[0]
		rec := relay.Record{ID: id, Module: module, Kind: notification.Kind, Payload: must(mailTo("a@example.com").Message(module)).Payload}
		for _, want := range []string{"retry", "done"} {
			require.Contains(t, d.Handle(t.Context(), rec).String(), want)
			var xids [2]int64
			for k := range xids {
				require.NoError(t, pool.QueryRowContext(t.Context(), `SELECT txid_current()`).Scan(&xids[k]))
			}
			require.NotEqual(t, xids[0], xids[1], "after a claim's transaction that answered %s, the pool's next statements ran in one transaction", want)
		}
		require.Equal(t, 1, b.claims(t, id), "the retry's claim rolled back, the delivery's committed")
	})

	// Through each of the claim's statements: a request alone in its batch
	// (the rules read in the claim), the requests of a batch claimed each
	// in a transaction of its own (with and without a dedup key), and
	// together in one (alone in the batch, or beside another channel's,
	// the rules read before).
	t.Run("RedeliveryOfACommittedClaimIsNotDeliveredAgain", func(t *testing.T) {
		t.Parallel()
		for name, tc := range map[string]struct {
			commit notification.Commit
			n      int
			dedup  bool
			sms    bool
		}{
			"Alone":                        {notification.CommitEach, 1, false, false},
			"EachOfABatch":                 {notification.CommitEach, 3, false, false},
			"EachOfABatchWithDedupKeys":    {notification.CommitEach, 3, true, false},
			"SharedBatch":                  {notification.CommitShared, 3, false, false},
			"SharedBatchBesideAnotherLane": {notification.CommitShared, 3, false, true},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				cfg := b.config()
				cfg.Commit = map[string]notification.Commit{"mail": tc.commit}
				b.run(t, b.dispatcher(t, cfg))
				var reqs []notification.Request
				for i := range tc.n {
					r := mailTo(fmt.Sprintf("r%d@example.com", i))
					if tc.dedup {
						r.DedupKey = fmt.Sprintf("welcome/r%d", i)
					}
					reqs = append(reqs, r)
				}
				if tc.sms {
					reqs = append(reqs, notification.Request{Channel: "sms", Recipient: "+15550100", Template: "code"})
				}
				ids := b.stage(t, reqs...)
				for _, id := range ids {
					b.waitSettled(t, id)
				}
				b.loseSettleAndReemit(t, ids...)
				for _, id := range ids {
					st := b.waitSettled(t, id)
					require.Equal(t, relay.StateProcessed, st.State)
					require.Equal(t, 1, st.Hands, "handed again after the re-emit")
					require.Equal(t, 1, b.mail.Count(id)+b.sms.Count(id), "delivered once")
				}
			})
		}
	})

	t.Run("TwoRelaysHandingTheSameRowDeliverOnce", func(t *testing.T) {
		t.Parallel()
		for _, first := range []delivery.Outcome{delivery.Delivered(), delivery.Retry(errors.New("busy"))} {
			t.Run(first.Kind().String(), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				slow := newBlocked()
				cfg := b.config()
				cfg.Deliveries = map[string]delivery.Delivery{"mail": slow}
				d := b.prepared(t, cfg)
				id := b.stage(t, mailTo("a@example.com"))[0]
				rec := relay.Record{ID: id, Module: module, Kind: notification.Kind,
					Payload: must(mailTo("a@example.com").Message(module)).Payload}

				results := make(chan relay.Result, 2)
				go func() { results <- d.Handle(t.Context(), rec) }()
				testwait.Recv(t, slow.started, "the first hand's delivery")
				go func() { results <- d.Handle(t.Context(), rec) }()
				b.waitBlockedOnClaim(t)
				require.Equal(t, 1, slow.callCount(), "the second hand waits on the claim, not in the delivery")

				slow.answer <- first
				if first.Kind() == delivery.KindDelivered {
					require.Equal(t, "done", testwait.Recv(t, results, "the first hand's answer").String())
					require.Equal(t, "done", testwait.Recv(t, results, "the second hand's answer").String())
					require.Equal(t, 1, slow.callCount())
				} else {
					require.Contains(t, testwait.Recv(t, results, "the first hand's answer").String(), "retry")
					// The claim was rolled back: the second hand delivers.
					testwait.Recv(t, slow.started, "the second hand's delivery")
					slow.answer <- delivery.Delivered()
					require.Equal(t, "done", testwait.Recv(t, results, "the second hand's answer").String())
					require.Equal(t, 2, slow.callCount())
				}
				require.Equal(t, 1, b.claims(t, id))
			})
		}
	})

	// The backoff counts from the answer, not from the claim's start: a
	// delivery slower than the delay is not offered again at once, when
	// the retry is written in the claim's transaction (a shared commit) as
	// much as in the relay's settle.
	t.Run("RetryIsOfferedAfterTheBackoffThenExhausted", func(t *testing.T) {
		t.Parallel()
		eachCommit(t, func(t *testing.T, commit map[string]notification.Commit) {
			b := setup(t)
			cfg := b.config()
			cfg.Commit = map[string]notification.Commit{"mail": commit["mail"]}
			cfg.Policy = retrypolicy.Policy{MaxAttempts: 3, BaseDelay: 300 * time.Millisecond, RandFunc: func() float64 { return 0 }}
			const takes = 400 * time.Millisecond
			var started, answered []time.Time // one hand at a time: a single record
			cfg.Deliveries = map[string]delivery.Delivery{"mail": delivery.Func(func(_ context.Context, p delivery.Pending) delivery.Outcome {
				started = append(started, time.Now())
				time.Sleep(takes) // the provider's slowness, not a synchronization
				answered = append(answered, time.Now())
				return delivery.Retry(fmt.Errorf("provider busy (attempt %d)", p.Attempt))
			})}
			b.run(t, b.dispatcher(t, cfg))
			id := b.stage(t, mailTo("a@example.com"))[0]

			require.Eventually(t, func() bool { return b.status(t, id).Attempts == 1 }, 10*time.Second, time.Millisecond)
			st := b.status(t, id)
			require.Equal(t, relay.StatePending, st.State)
			require.Equal(t, "provider busy (attempt 1)", st.LastError)
			require.True(t, st.NextAttempt.After(st.CreatedAt), "a next attempt is scheduled")
			require.Equal(t, 0, b.claims(t, id), "a retry leaves no claim")

			st = b.waitSettled(t, id)
			require.Equal(t, relay.StateDead, st.State)
			require.Equal(t, "exhausted after 3 attempts: provider busy (attempt 3)", st.Reason)
			require.Len(t, started, 3)
			require.GreaterOrEqual(t, started[1].Sub(answered[0]), 300*time.Millisecond, "never inside the backoff window")
			require.GreaterOrEqual(t, started[2].Sub(answered[1]), 600*time.Millisecond, "doubling")
			require.Equal(t, 0, b.claims(t, id))
		})
	})

	// A provider's Retry-After shorter than the policy's delay does not
	// bring the next attempt forward: the policy's backoff is the least.
	t.Run("PolicyWinsOverAShorterRetryAfter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.mail.Script(delivery.RetryAfter(errors.New("429"), time.Millisecond))
		cfg := b.config()
		cfg.Policy = retrypolicy.Policy{BaseDelay: time.Hour, RandFunc: func() float64 { return 0 }}
		b.run(t, b.dispatcher(t, cfg))
		id := b.stage(t, mailTo("a@example.com"))[0]
		require.Eventually(t, func() bool { return b.status(t, id).Attempts == 1 }, 10*time.Second, time.Millisecond)
		require.WithinDuration(t, time.Now().Add(time.Hour), b.status(t, id).NextAttempt, time.Minute)
	})

	t.Run("ProviderRetryAfterWinsWhenLonger", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.mail.Script(delivery.RetryAfter(errors.New("429"), time.Hour))
		b.run(t, b.dispatcher(t, b.config()))
		id := b.stage(t, mailTo("a@example.com"))[0]
		require.Eventually(t, func() bool { return b.status(t, id).Attempts == 1 }, 10*time.Second, time.Millisecond)
		require.WithinDuration(t, time.Now().Add(time.Hour), b.status(t, id).NextAttempt, time.Minute)
	})

	t.Run("RejectIsDeadAtOnceAndReemitDeliversOnceFixed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.sms.ScriptRecipient("+1555", delivery.Reject(errors.New("21211: invalid 'To' phone number")))
		b.run(t, b.dispatcher(t, b.config()))
		id := b.stage(t, notification.Request{Channel: "sms", Recipient: "+1555", Template: "code"})[0]
		st := b.waitSettled(t, id)
		require.Equal(t, relay.StateDead, st.State)
		require.Equal(t, "21211: invalid 'To' phone number", st.Reason)
		require.Equal(t, 1, st.Attempts)
		require.Equal(t, 0, b.claims(t, id), "a reject leaves no claim")

		// The script has run out: the provider now accepts it.
		n, err := b.ob.Reemit(t.Context(), b.db, &relay.DeadFilter{IDs: []uuid.UUID{id}})
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		st = b.waitSettled(t, id)
		require.Equal(t, relay.StateProcessed, st.State)
		require.Equal(t, 2, b.sms.Count(id), "the same id both times: the provider's idempotency key")
	})

	t.Run("BadRecordsAreDeadWithClearReasonsOthersIgnored", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.run(t, b.dispatcher(t, b.config()))
		other, err := b.ob.Stage(t.Context(), b.native.Execer(), relay.Message{Module: module, Kind: "order.placed", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
		fax := b.stage(t, notification.Request{Channel: "fax", Recipient: "+1555"})[0]
		corrupt, err := b.ob.Stage(t.Context(), b.native.Execer(), relay.Message{Module: module, Kind: notification.Kind, Payload: json.RawMessage(`{"channel": 7}`)})
		require.NoError(t, err)
		empty, err := b.ob.Stage(t.Context(), b.native.Execer(), relay.Message{Module: module, Kind: notification.Kind, Payload: json.RawMessage(`{"channel":"mail"}`)})
		require.NoError(t, err)

		require.Equal(t, relay.StateProcessed, b.waitSettled(t, other).State, "not a request: accepted and ignored")
		ignored, err := b.client.Status(t.Context(), other)
		require.NoError(t, err)
		require.Empty(t, ignored.Outcome, "not a request: no request's outcome, delivered least of all")
		st := b.waitSettled(t, fax)
		require.Equal(t, relay.StateDead, st.State)
		require.Equal(t, `no delivery is registered for channel "fax"`, st.Reason)
		st = b.waitSettled(t, corrupt)
		require.Equal(t, relay.StateDead, st.State)
		require.Equal(t, `undecodable notification request: payload field "channel" is a JSON number, want string`, st.Reason)
		st = b.waitSettled(t, empty)
		require.Equal(t, "undecodable notification request: payload has no recipient", st.Reason)
		require.Zero(t, b.mail.Len()+b.sms.Len())
	})

	t.Run("PanicAndTimeoutAreRetriesThatSaySo", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := b.config()
		cfg.Policy.MaxAttempts = 1
		cfg.DeliveryTimeout = 50 * time.Millisecond
		cfg.Deliveries = map[string]delivery.Delivery{
			"mail": delivery.Func(func(context.Context, delivery.Pending) delivery.Outcome { panic("template engine exploded") }),
			"sms": delivery.Func(func(ctx context.Context, _ delivery.Pending) delivery.Outcome {
				<-ctx.Done()
				return delivery.Retry(ctx.Err())
			}),
		}
		b.run(t, b.dispatcher(t, cfg))
		ids := b.stage(t, mailTo("a@example.com"), notification.Request{Channel: "sms", Recipient: "+1555"})
		require.Equal(t, `exhausted after 1 attempts: delivery for channel "mail" panicked: template engine exploded`, b.waitSettled(t, ids[0]).Reason)
		require.Equal(t, `exhausted after 1 attempts: delivery for channel "sms" timed out: DeliveryTimeout of 50ms passed: context deadline exceeded`, b.waitSettled(t, ids[1]).Reason)
	})

	// Also for a delivery that writes in the claim's transaction, which a
	// shared commit runs inside a savepoint.
	t.Run("CausationAndCorrelationFlowIntoWhatADeliveryStages", func(t *testing.T) {
		t.Parallel()
		for _, inTx := range []bool{false, true} {
			t.Run(fmt.Sprintf("InTheClaimsTransaction=%v", inTx), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				cfg := b.config()
				followUp := make(chan uuid.UUID, 1)
				stage := delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
					if p.Template == "welcome" {
						// The delivery passes no ids: they ride its context.
						var to dbtx.Execer = b.native.Execer()
						if tx, ok := delivery.TxFrom(ctx); ok {
							to = tx
						}
						id, err := b.ob.Stage(ctx, to, must(notification.Request{Channel: "sms", Recipient: "+1555", Template: "after-welcome"}.Message(module)))
						if err != nil {
							return delivery.Retry(err)
						}
						followUp <- id
					}
					return delivery.Delivered()
				})
				cfg.Deliveries["mail"] = stage
				if inTx {
					cfg.Deliveries["mail"] = writesInTx{stage}
				}
				b.run(t, b.dispatcher(t, cfg))
				ctx := relay.WithCorrelationID(t.Context(), "signup-3")
				first, err := b.ob.Stage(ctx, b.native.Execer(), must(mailTo("a@example.com").Message(module)))
				require.NoError(t, err)

				second := testwait.Recv(t, followUp, "the follow-up staged by the delivery")
				got, err := b.sms.Wait(waitCtx(t), 1)
				require.NoError(t, err)
				require.Equal(t, second, got[0].ID)
				require.Equal(t, first.String(), got[0].CausationID)
				require.Equal(t, "signup-3", got[0].CorrelationID)
			})
		}
	})
}

// writesInTx is a delivery that writes through the claim's transaction
// (delivery.TxFrom), as the in-app module does.
type writesInTx struct{ delivery.Func }

func (writesInTx) Repeats() delivery.Repeat { return delivery.RepeatImpossible }

func TestNewDispatcherRejectsBadConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, tc := range map[string]struct {
		mutate func(*notification.Config)
		want   string
	}{
		"BadConsumer":  {func(c *notification.Config) { c.Consumer = "HR" }, "Consumer"},
		"NoDeliveries": {func(c *notification.Config) { c.Deliveries = nil }, "Deliveries is empty"},
		"BadChannel":   {func(c *notification.Config) { c.Deliveries = map[string]delivery.Delivery{"E-Mail": b.mail} }, "Deliveries channel"},
		"NilDelivery":  {func(c *notification.Config) { c.Deliveries = map[string]delivery.Delivery{"mail": nil} }, `Deliveries["mail"] is nil`},
		"BadPolicy":    {func(c *notification.Config) { c.Policy.MaxAttempts = -1 }, "MaxAttempts"},
		"BadTimeout":   {func(c *notification.Config) { c.DeliveryTimeout = -time.Second }, "DeliveryTimeout is negative"},
		"CommitOfNoChannel": {func(c *notification.Config) {
			c.Commit = map[string]notification.Commit{"fax": notification.CommitShared}
		}, `Commit["fax"] names no channel`},
		"BadCommit": {func(c *notification.Config) { c.Commit = map[string]notification.Commit{"mail": 7} }, `Commit["mail"] is 7`},
	} {
		cfg := b.config()
		tc.mutate(&cfg)
		_, err := notification.NewDispatcher(&cfg)
		require.ErrorIs(t, err, notification.ErrConfig, name)
		require.ErrorContains(t, err, tc.want, name)
	}
}

// G1 through the Client: what Stage and StageBatch stage belongs to the
// caller's transaction. Rolled back, none of it exists or is ever
// delivered; committed, each is delivered once.
func TestClientStagesInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t, b.dispatcher(t, b.config()))
	stage := func(commit bool) []uuid.UUID {
		tx, err := b.db.BeginTx(t.Context(), nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		one, err := b.client.Stage(t.Context(), tx, module, mailTo("one@example.com"))
		require.NoError(t, err)
		ids, err := b.client.StageBatch(t.Context(), tx, module, []notification.Request{mailTo("b1@example.com"), mailTo("b2@example.com")})
		require.NoError(t, err)
		if commit {
			require.NoError(t, tx.Commit())
		}
		return append(ids, one)
	}
	rolledBack := stage(false)
	committed := stage(true)
	for _, id := range committed {
		require.Equal(t, relay.StateProcessed, b.waitSettled(t, id).State)
		require.Equal(t, 1, b.mail.Count(id))
	}
	// Staged before the committed ones, which are delivered: had the
	// rolled-back ones been written, they would be too.
	for _, id := range rolledBack {
		_, err := b.ob.Status(t.Context(), b.db, id)
		require.ErrorIs(t, err, relay.ErrNotFound, "a rolled-back request exists")
		require.Zero(t, b.mail.Count(id), "a rolled-back request was delivered")
	}
}

func TestStageValidates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ok := mailTo("a@example.com")
	for name, tc := range map[string]struct {
		mutate func(*notification.Request)
		want   string
	}{
		"NoChannel":        {func(r *notification.Request) { r.Channel = "" }, "Channel is empty"},
		"BadChannel":       {func(r *notification.Request) { r.Channel = "e mail" }, "Channel"},
		"NoRecipient":      {func(r *notification.Request) { r.Recipient = "" }, "Recipient is empty"},
		"Huge":             {func(r *notification.Request) { r.Recipient = strings.Repeat("a", 1025) }, "Recipient is 1025 bytes"},
		"BadData":          {func(r *notification.Request) { r.Data = map[string]any{"f": func() {}} }, "Data cannot be encoded as JSON"},
		"PanickingData":    {func(r *notification.Request) { r.Data = map[string]any{"p": panicky{}} }, "Data cannot be encoded as JSON: a MarshalJSON method panicked"},
		"NULInRecipient":   {func(r *notification.Request) { r.Recipient = "a\x00@example.com" }, "Recipient holds a NUL character"},
		"NULInTemplate":    {func(r *notification.Request) { r.Template = "w\x00" }, "Template holds a NUL character"},
		"NULInData":        {func(r *notification.Request) { r.Data = map[string]any{"ok": 1, "note": []any{"x\x00"}} }, `Data["note"] holds a NUL character`},
		"NULInDataKey":     {func(r *notification.Request) { r.Data = map[string]any{"n\x00": 1} }, `Data["n\x00"] holds a NUL character`},
		"LoneSurrogate":    {func(r *notification.Request) { r.Data = map[string]any{"raw": json.RawMessage(`"\ud800"`)} }, `Data["raw"] holds a NUL character, a lone UTF-16 surrogate`},
		"YearMinusOne":     {func(r *notification.Request) { r.NotBefore = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC) }, "NotBefore is before 1970"},
		"BadUTF8Recipient": {func(r *notification.Request) { r.Recipient = "a\xff@example.com" }, "Recipient is not valid UTF-8"},
		"BadUTF8Template":  {func(r *notification.Request) { r.Template = "w\xc3" }, "Template is not valid UTF-8"},
		"NULInSecretsKey":  {func(r *notification.Request) { r.Secrets = map[string]string{"c\x00": "1"} }, `Secrets key "c\x00" holds a NUL character`},
		"ExpiresYear10000": {func(r *notification.Request) { r.ExpiresAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "ExpiresAt is after the year 9999"},
		"ExpiresYear1":     {func(r *notification.Request) { r.ExpiresAt = time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC) }, "ExpiresAt is before 1970"},
		"CenturyAhead":     {func(r *notification.Request) { r.NotBefore = time.Now().AddDate(100, 0, 0) }, "NotBefore is more than 8784h0m0s ahead"},
	} {
		req := ok
		tc.mutate(&req)
		tx, err := b.db.BeginTx(t.Context(), nil)
		require.NoError(t, err)
		_, err = notification.Stage(t.Context(), tx, module, req)
		require.ErrorIs(t, err, notification.ErrInvalidRequest, name)
		require.ErrorContains(t, err, tc.want, name)
		require.NotContains(t, err.Error(), "a@example.com", "no personal data in errors")
		_, err = notification.StageBatch(t.Context(), tx, module, []notification.Request{ok, req})
		require.ErrorIs(t, err, notification.ErrInvalidRequest, name)
		require.ErrorContains(t, err, "requests[1]: ", name)
		require.ErrorContains(t, err, tc.want, name)
		require.NoError(t, tx.Rollback())
	}

	t.Run("NoTransaction", func(t *testing.T) {
		t.Parallel()
		for _, tx := range []dbtx.Execer{nil, (*sql.Tx)(nil), (*sql.DB)(nil)} {
			_, err := notification.Stage(t.Context(), tx, module, ok)
			require.ErrorIs(t, err, notification.ErrInvalidRequest)
			require.ErrorContains(t, err, "tx is")
			_, err = notification.StageBatch(t.Context(), tx, module, []notification.Request{ok})
			require.ErrorIs(t, err, notification.ErrInvalidRequest)
			require.ErrorContains(t, err, "tx is")
		}
		_, err := notification.Stage(t.Context(), b.db, "Bad Module", ok)
		require.ErrorIs(t, err, notification.ErrInvalidRequest)
		require.ErrorContains(t, err, "module")
	})
}

// panicky is a Data value whose encoding panics.
type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error) { panic("secret value in a panic") }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}
