package recording_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/recording"
)

var (
	errBusy     = errors.New("provider busy")
	errBounced  = errors.New("mailbox unavailable")
	errNoDevice = errors.New("device unregistered")
)

// waitTimeout bounds every wait on a condition in these tests.
const waitTimeout = 10 * time.Second

type testBundle struct {
	ctx context.Context
}

func setup(t *testing.T) (*recording.Delivery, *testBundle) {
	t.Helper()

	return recording.New(), &testBundle{ctx: t.Context()}
}

func pending(channel, recipient string) delivery.Pending {
	return delivery.Pending{
		ID:        uuid.New(),
		Channel:   channel,
		Recipient: recipient,
		Attempt:   1,
		StagedAt:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

func TestDeliveryScript(t *testing.T) {
	t.Parallel()

	t.Run("DeliveredWithoutScript", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)

		require.Equal(t, delivery.Delivered(), rec.Deliver(bundle.ctx, pending("mail", "a")))
	})

	t.Run("ZeroValueIsReady", func(t *testing.T) {
		t.Parallel()

		var rec recording.Delivery
		rec.ScriptChannel("mail", delivery.Reject(errBounced))

		require.Equal(t, delivery.Reject(errBounced), rec.Deliver(t.Context(), pending("mail", "a")))
		require.Equal(t, 1, rec.Len())
	})

	t.Run("InOrderThenDelivered", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)
		rec.Script(delivery.Retry(errBusy), delivery.RetryAfter(errBusy, time.Minute))
		rec.Script(delivery.Reject(errBounced))

		for _, want := range []delivery.Outcome{
			delivery.Retry(errBusy),
			delivery.RetryAfter(errBusy, time.Minute),
			delivery.Reject(errBounced),
			delivery.Delivered(),
			delivery.Delivered(),
		} {
			require.Equal(t, want, rec.Deliver(bundle.ctx, pending("mail", "a")))
		}
	})

	t.Run("ChannelBeforeGeneral", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)
		rec.Script(delivery.Retry(errBusy))
		rec.ScriptChannel("push", delivery.Reject(errNoDevice))

		require.Equal(t, delivery.Reject(errNoDevice), rec.Deliver(bundle.ctx, pending("push", "a")))
		// The push script ran out: push falls through to the general script.
		require.Equal(t, delivery.Retry(errBusy), rec.Deliver(bundle.ctx, pending("push", "a")))
		require.Equal(t, delivery.Delivered(), rec.Deliver(bundle.ctx, pending("push", "a")))
	})

	t.Run("ChannelScriptOnlyForItsChannel", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)
		rec.ScriptChannel("push", delivery.Reject(errNoDevice))

		require.Equal(t, delivery.Delivered(), rec.Deliver(bundle.ctx, pending("mail", "a")))
		require.Equal(t, delivery.Reject(errNoDevice), rec.Deliver(bundle.ctx, pending("push", "a")))
	})

	t.Run("RecipientBeforeChannelBeforeGeneral", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)
		rec.Script(delivery.Retry(errBusy))
		rec.ScriptChannel("mail", delivery.RetryAfter(errBusy, time.Second))
		rec.ScriptRecipient("bob", delivery.Reject(errBounced), delivery.Reject(errBounced))

		// Bob's own script first, whatever the channel.
		require.Equal(t, delivery.Reject(errBounced), rec.Deliver(bundle.ctx, pending("mail", "bob")))
		require.Equal(t, delivery.Reject(errBounced), rec.Deliver(bundle.ctx, pending("sms", "bob")))
		// Another recipient on mail gets the channel script.
		require.Equal(t, delivery.RetryAfter(errBusy, time.Second), rec.Deliver(bundle.ctx, pending("mail", "ann")))
		// Bob's and mail's scripts ran out: the general script.
		require.Equal(t, delivery.Retry(errBusy), rec.Deliver(bundle.ctx, pending("mail", "bob")))
		// Everything ran out.
		require.Equal(t, delivery.Delivered(), rec.Deliver(bundle.ctx, pending("mail", "bob")))
	})

	t.Run("ScriptedZeroOutcome", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)
		rec.Script(delivery.Outcome{})

		require.Equal(t, delivery.KindInvalid, rec.Deliver(bundle.ctx, pending("mail", "a")).Kind())
	})

	t.Run("EachOutcomeAnsweredOnceUnderConcurrency", func(t *testing.T) {
		t.Parallel()

		const n = 50
		rec, bundle := setup(t)
		for i := range n {
			rec.Script(delivery.Reject(fmt.Errorf("reject %d", i)))
		}

		var (
			mu      sync.Mutex
			reasons = make(map[string]int)
			wg      sync.WaitGroup
		)
		for range 2 * n {
			wg.Go(func() {
				outcome := rec.Deliver(bundle.ctx, pending("mail", "a"))
				mu.Lock()
				defer mu.Unlock()
				if outcome.Kind() == delivery.KindReject {
					reasons[outcome.Reason().Error()]++
				} else {
					reasons[outcome.String()]++
				}
			})
		}
		wg.Wait()

		require.Len(t, reasons, n+1)
		require.Equal(t, n, reasons["delivered"])
		for i := range n {
			require.Equal(t, 1, reasons[fmt.Sprintf("reject %d", i)])
		}
	})
}

func TestDeliveryRecord(t *testing.T) {
	t.Parallel()

	t.Run("RequestsInOrder", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)
		first, second := pending("mail", "a"), pending("sms", "b")
		rec.Deliver(bundle.ctx, first)
		rec.Deliver(bundle.ctx, second)

		require.Equal(t, []delivery.Pending{first, second}, rec.Requests())
		require.Equal(t, 2, rec.Len())
	})

	t.Run("EmptyBeforeAnyRequest", func(t *testing.T) {
		t.Parallel()

		rec, _ := setup(t)

		require.Empty(t, rec.Requests())
		require.Zero(t, rec.Len())
	})

	t.Run("RequestsIsACopy", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)
		p := pending("mail", "a")
		p.Data, p.Secrets = map[string]any{"name": "Ada"}, map[string]string{"code": "123456"}
		rec.Deliver(bundle.ctx, p)

		got := rec.Requests()
		got[0].Recipient = "changed"
		got[0].Data["name"] = "changed"
		got[0].Secrets["code"] = "changed"
		got = append(got, pending("mail", "b"))
		require.Len(t, got, 2)

		again := rec.Requests()
		require.Len(t, again, 1)
		require.Equal(t, "a", again[0].Recipient)
		require.Equal(t, map[string]any{"name": "Ada"}, again[0].Data)
		require.Equal(t, map[string]string{"code": "123456"}, again[0].Secrets)
	})

	t.Run("DataCopiedOnRecord", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)
		p := pending("mail", "a")
		p.Data, p.Secrets = map[string]any{"name": "Ada"}, map[string]string{"code": "123456"}
		rec.Deliver(bundle.ctx, p)

		p.Data["name"] = "changed"
		p.Data["extra"] = 1
		p.Secrets["code"] = "changed"

		require.Equal(t, map[string]any{"name": "Ada"}, rec.Requests()[0].Data)
		require.Equal(t, map[string]string{"code": "123456"}, rec.Requests()[0].Secrets)
	})

	// The maps and slices in Data, as JSON decodes them, are the record's
	// own: neither the caller's later change nor one through Requests'
	// result reaches it.
	t.Run("NestedDataCopied", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)
		address := map[string]any{"city": "London"}
		items := []any{map[string]any{"sku": "A-1"}}
		p := pending("mail", "a")
		p.Data = map[string]any{"address": address, "items": items}
		rec.Deliver(bundle.ctx, p)

		address["city"] = "changed by the caller"
		items[0].(map[string]any)["sku"] = "changed by the caller"
		got := rec.Requests()
		got[0].Data["address"].(map[string]any)["city"] = "changed through Requests"
		got[0].Data["items"].([]any)[0] = "changed through Requests"

		require.Equal(t, map[string]any{
			"address": map[string]any{"city": "London"},
			"items":   []any{map[string]any{"sku": "A-1"}},
		}, rec.Requests()[0].Data)
	})

	t.Run("NilDataStaysNil", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)
		rec.Deliver(bundle.ctx, pending("mail", "a"))

		require.Nil(t, rec.Requests()[0].Data)
	})

	t.Run("RecordedBeforeAnswered", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)
		rec.Script(delivery.Reject(errBounced))
		p := pending("mail", "a")
		rec.Deliver(bundle.ctx, p)

		require.Equal(t, []delivery.Pending{p}, rec.Requests())
	})

	t.Run("Count", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)
		once, twice := pending("mail", "a"), pending("mail", "b")
		rec.Deliver(bundle.ctx, once)
		rec.Deliver(bundle.ctx, twice)
		twice.Attempt = 2
		rec.Deliver(bundle.ctx, twice)

		require.Equal(t, 1, rec.Count(once.ID))
		require.Equal(t, 2, rec.Count(twice.ID))
		require.Zero(t, rec.Count(uuid.New()))
	})
}

func TestDeliveryWait(t *testing.T) {
	t.Parallel()

	t.Run("AlreadyRecorded", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)
		first, second := pending("mail", "a"), pending("mail", "b")
		rec.Deliver(bundle.ctx, first)
		rec.Deliver(bundle.ctx, second)

		got, err := rec.Wait(bundle.ctx, 1)
		require.NoError(t, err)
		require.Equal(t, []delivery.Pending{first}, got)
	})

	t.Run("ZeroReturnsAtOnce", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)

		got, err := rec.Wait(bundle.ctx, 0)
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("ConcurrentDeliveries", func(t *testing.T) {
		t.Parallel()

		const n = 100
		rec, bundle := setup(t)
		ctx, cancel := context.WithTimeout(bundle.ctx, waitTimeout)
		defer cancel()

		// Waiters that start before any request arrives.
		type result struct {
			got []delivery.Pending
			err error
		}
		results := make(chan result, 2)
		var waiters sync.WaitGroup
		for range cap(results) {
			waiters.Go(func() {
				got, err := rec.Wait(ctx, n)
				results <- result{got, err}
			})
		}

		want := make(map[uuid.UUID]bool, n)
		requests := make([]delivery.Pending, n)
		for i := range requests {
			requests[i] = pending("push", fmt.Sprintf("device-%d", i))
			want[requests[i].ID] = true
		}
		var senders sync.WaitGroup
		for _, p := range requests {
			senders.Go(func() {
				rec.Deliver(ctx, p)
			})
		}

		got, err := rec.Wait(ctx, n)
		require.NoError(t, err)
		require.Len(t, got, n)
		seen := make(map[uuid.UUID]bool, n)
		for _, p := range got {
			seen[p.ID] = true
		}
		require.Equal(t, want, seen)

		senders.Wait()
		waiters.Wait()
		close(results)
		for r := range results {
			require.NoError(t, r.err)
			require.Equal(t, got, r.got)
		}
		for id := range want {
			require.Equal(t, 1, rec.Count(id))
		}
	})

	t.Run("TimesOut", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)
		rec.Deliver(bundle.ctx, pending("mail", "a"))
		ctx, cancel := context.WithTimeout(bundle.ctx, 20*time.Millisecond)
		defer cancel()

		got, err := rec.Wait(ctx, 2)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.EqualError(t, err, "recording: waited for 2 requests, got 1: context deadline exceeded")
		require.Nil(t, got)
	})

	t.Run("Cancelled", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)
		ctx, cancel := context.WithCancel(bundle.ctx)
		cancel()

		_, err := rec.Wait(ctx, 1)
		require.ErrorIs(t, err, context.Canceled)
		require.EqualError(t, err, "recording: waited for 1 requests, got 0: context canceled")
	})

	t.Run("ResultIsACopy", func(t *testing.T) {
		t.Parallel()

		rec, bundle := setup(t)
		p := pending("mail", "a")
		p.Data = map[string]any{"name": "Ada"}
		rec.Deliver(bundle.ctx, p)

		got, err := rec.Wait(bundle.ctx, 1)
		require.NoError(t, err)
		got[0].Data["name"] = "changed"
		got[0].Recipient = "changed"

		require.Equal(t, []delivery.Pending{p}, rec.Requests())
	})
}

// A slow provider and one that never answers: both honour the request's
// context, so a caller's timeout and cancellation can be tested.
func TestDeliveryLatencyAndHang(t *testing.T) {
	t.Parallel()

	t.Run("LatencyDelaysTheAnswer", func(t *testing.T) {
		t.Parallel()
		d := recording.New()
		d.SetLatency(50 * time.Millisecond)
		start := time.Now()
		out := d.Deliver(t.Context(), pending("mail", "a"))
		require.Equal(t, delivery.KindDelivered, out.Kind())
		require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	})

	t.Run("LatencyEndsWithTheContext", func(t *testing.T) {
		t.Parallel()
		d := recording.New()
		d.SetLatency(time.Hour)
		// Ended once the call is recorded, and not before: a call on an
		// ended context records nothing.
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		wait, stop := context.WithTimeout(t.Context(), time.Minute)
		defer stop()
		go func() {
			_, _ = d.Wait(wait, 1)
			cancel()
		}()
		out := d.Deliver(ctx, pending("mail", "a"))
		require.Equal(t, delivery.KindRetry, out.Kind())
		require.ErrorIs(t, out.Reason(), context.Canceled)
		require.Equal(t, 1, d.Len(), "recorded all the same")
	})

	// A call on a context that has already ended sends nothing: Retry, not
	// recorded, and the script is left for the next call.
	t.Run("EndedContextSendsNothing", func(t *testing.T) {
		t.Parallel()
		d := recording.New()
		d.Script(delivery.Reject(errBounced))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		out := d.Deliver(ctx, pending("mail", "a"))
		require.Equal(t, delivery.KindRetry, out.Kind(), "%v", out)
		require.ErrorIs(t, out.Reason(), context.Canceled)
		require.Zero(t, d.Len(), "nothing recorded")
		require.Equal(t, delivery.KindReject, d.Deliver(t.Context(), pending("mail", "a")).Kind(), "the script is still there")
	})

	t.Run("HangAnswersOnlyWhenTheContextEnds", func(t *testing.T) {
		t.Parallel()
		d := recording.New()
		d.Script(recording.Hang(), delivery.Delivered())
		ctx, cancel := context.WithCancelCause(t.Context())
		answered := make(chan delivery.Outcome, 1)
		go func() { answered <- d.Deliver(ctx, pending("mail", "a")) }()
		_, err := d.Wait(t.Context(), 1)
		require.NoError(t, err)
		select {
		case out := <-answered:
			t.Fatalf("a hung call answered %s before its context ended", out)
		default:
		}
		stop := errors.New("the caller gave up")
		cancel(stop)
		out := testwait.Recv(t, answered, "the hung call's answer")
		require.Equal(t, delivery.KindRetry, out.Kind())
		require.ErrorIs(t, out.Reason(), stop)
		require.Equal(t, delivery.KindDelivered, d.Deliver(t.Context(), pending("mail", "b")).Kind(), "the script goes on")
	})
}
