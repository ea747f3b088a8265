package notification_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

// events lists a timeline's events in order.
func events(st notification.Status) []string {
	var out []string
	for _, e := range st.Timeline {
		out = append(out, e.Event)
	}
	return out
}

func TestTimeline(t *testing.T) {
	t.Parallel()

	// "Why did Ada not get her booking mail?" is one lookup: a request that
	// was retried, died, and was re-emitted and delivered shows every life,
	// with codes, reasons, due times and the provider's reference.
	t.Run("BothLivesOfAReemittedRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := b.config()
		cfg.Policy.MaxAttempts = 2
		b.mail.Script(delivery.Retry(errors.New("provider busy")), delivery.Reject(errors.New("mailbox full")),
			delivery.DeliveredWithReference("msg-7"))
		b.run(t, b.dispatcher(t, cfg))
		ctx := relay.WithCorrelationID(t.Context(), "booking-7")
		id, err := b.client.Stage(ctx, b.db, module, mailTo("ada@example.com"))
		require.NoError(t, err)

		dead, err := b.client.Wait(waitCtx(t), id)
		require.NoError(t, err)
		require.Equal(t, relay.StateDead, dead.State)
		require.Equal(t, "mail", dead.Channel)
		require.Equal(t, delivery.CodeRejected, dead.Code)
		require.Equal(t, "booking-7", dead.CorrelationID)

		n, err := b.client.Reemit(t.Context(), &notification.DeadFilter{Code: delivery.CodeRejected, Channel: "mail"})
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		st, err := b.client.Wait(waitCtx(t), id)
		require.NoError(t, err)
		require.Equal(t, relay.StateProcessed, st.State)
		require.Equal(t, "msg-7", st.Reference)
		require.Equal(t, notification.CodeDelivered, st.Code)

		require.Equal(t, []string{"staged", "retry", "dead", "reemitted", "done"}, events(st))
		tl := st.Timeline
		require.Equal(t, delivery.CodeUnavailable, tl[1].Code)
		require.Equal(t, "provider busy", tl[1].Reason)
		require.Equal(t, 1, tl[1].Hand)
		require.Contains(t, tl[1].Detail, "due")
		require.Contains(t, tl[1].Detail, "took_ms")
		require.Equal(t, delivery.CodeRejected, tl[2].Code)
		require.Equal(t, "mailbox full", tl[2].Reason)
		require.Equal(t, 2, tl[2].Hand)
		require.Equal(t, "dead", tl[3].Detail["was"], "the re-emit says what it found")
		require.EqualValues(t, 2, tl[3].Detail["attempts"])
		require.Equal(t, "mailbox full", tl[3].Reason)
		require.Equal(t, notification.CodeDelivered, tl[4].Code)
		require.Equal(t, "msg-7", tl[4].Reason, "the provider's reference")
		require.Equal(t, 1, tl[4].Hand, "the first hand of its second life")
		var attempts []int
		for _, p := range b.mail.Requests() {
			require.Equal(t, id, p.ID, "one idempotency key across both lives")
			attempts = append(attempts, p.Attempt)
		}
		require.Equal(t, []int{1, 2, 1}, attempts, "Pending.Attempt starts again at 1 in the second life")
		for i := 1; i < len(tl); i++ {
			require.False(t, tl[i].At.Before(tl[i-1].At), "in order")
		}
		for _, e := range tl {
			for k, v := range e.Detail {
				require.NotContains(t, e.Reason+k+fmt.Sprint(v), "ada@example.com", "no recipient in a timeline")
			}
		}
	})

	t.Run("CancelledAndUnknownChannel", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.run(t, b.dispatcher(t, b.config()))
		fax, err := b.client.Stage(t.Context(), b.db, module, notification.Request{Channel: "fax", Recipient: "+15551234"})
		require.NoError(t, err)
		st, err := b.client.Wait(waitCtx(t), fax)
		require.NoError(t, err)
		require.Equal(t, notification.CodeUnknownChannel, st.Code)
		require.Equal(t, []string{"staged", "dead"}, events(st))

		req := mailTo("a@example.com")
		req.NotBefore = time.Now().Add(time.Hour)
		later, err := b.client.Stage(t.Context(), b.db, module, req)
		require.NoError(t, err)
		st, err = b.client.Cancel(t.Context(), later)
		require.NoError(t, err)
		require.Equal(t, relay.StateCancelled, st.State)
		require.Equal(t, relay.CodeCancelled, st.Code)
		require.Equal(t, []string{"staged", "cancelled"}, events(st))
	})

	// Dead requests are listed by cause and channel, a page at a time.
	t.Run("ListDeadByCodeAndChannelInPages", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.mail.Script(delivery.Reject(errors.New("no")))
		b.sms.Script(delivery.Reject(delivery.WithCode(delivery.CodeInvalidRecipient, errors.New("not a number"))))
		reqs := []notification.Request{mailTo("a@example.com"),
			{Channel: "sms", Recipient: "x"}, {Channel: "fax", Recipient: "y"}, {Channel: "fax", Recipient: "z"}}
		ids := b.stage(t, reqs...)
		b.run(t, b.dispatcher(t, b.config()))
		for _, id := range ids {
			require.Equal(t, relay.StateDead, b.waitSettled(t, id).State)
		}
		byCode := func(code, channel string) []uuid.UUID {
			dead, err := b.client.ListDead(t.Context(), &notification.DeadFilter{Code: code, Channel: channel})
			require.NoError(t, err)
			var out []uuid.UUID
			for _, d := range dead {
				out = append(out, d.ID)
			}
			return out
		}
		require.Equal(t, []uuid.UUID{ids[0]}, byCode(delivery.CodeRejected, ""))
		require.Equal(t, []uuid.UUID{ids[1]}, byCode(delivery.CodeInvalidRecipient, "sms"))
		require.Empty(t, byCode(delivery.CodeInvalidRecipient, "mail"))
		require.ElementsMatch(t, ids[2:], byCode(notification.CodeUnknownChannel, ""))

		var paged []uuid.UUID
		f := &notification.DeadFilter{Limit: 3}
		for {
			page, err := b.client.ListDead(t.Context(), f)
			require.NoError(t, err)
			for _, d := range page {
				paged = append(paged, d.ID)
			}
			if len(page) < f.Limit {
				break
			}
			f.After = &page[len(page)-1]
		}
		require.ElementsMatch(t, ids, paged, "every dead request once, over the pages")
		require.Len(t, paged, 4)
	})
}
