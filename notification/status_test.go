package notification_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

func TestStatusScheduleAndCancel(t *testing.T) {
	t.Parallel()

	t.Run("NotTriedYetDiffersFromFailed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		req := mailTo("a@example.com")
		req.NotBefore = time.Now().Add(time.Hour)
		id := b.stage(t, req)[0]
		st, err := b.client.Status(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, relay.StatePending, st.State)
		require.Zero(t, st.Attempts, "not tried yet")
		require.Empty(t, st.LastError)
		require.WithinDuration(t, req.NotBefore, st.NextAttempt, time.Second)

		_, err = b.client.Status(t.Context(), uuid.New())
		require.ErrorIs(t, err, relay.ErrNotFound)
	})

	t.Run("FindByCorrelationListsTheRequestsOfOneWrite", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := relay.WithCorrelationID(t.Context(), "booking-42")
		ids, err := b.client.StageBatch(ctx, b.db, module, []notification.Request{
			mailTo("a@example.com"), {Channel: "sms", Recipient: "+15005550006", Template: "code"}})
		require.NoError(t, err)
		_, err = b.ob.Stage(ctx, b.db, relay.Message{Module: module, Kind: "booking.audited", Payload: []byte(`{}`)})
		require.NoError(t, err)
		_, err = b.client.Stage(t.Context(), b.db, module, mailTo("b@example.com"))
		require.NoError(t, err)

		found, err := b.client.FindByCorrelation(t.Context(), "booking-42", 0)
		require.NoError(t, err)
		require.Len(t, found, 2, "the write's requests, not its other records")
		for i, s := range found {
			require.Equal(t, ids[i], s.ID)
			require.Equal(t, relay.StatePending, s.State)
		}
		require.Equal(t, "mail", found[0].Channel)
		require.Equal(t, "sms", found[1].Channel)

		found, err = b.client.FindByCorrelation(t.Context(), ids[0].String(), 0)
		require.NoError(t, err)
		require.Empty(t, found, "a request staged under a correlation id is not found under its own id")
		_, err = b.client.FindByCorrelation(t.Context(), "", 0)
		require.Error(t, err)
	})

	t.Run("ScheduledIsNotDeliveredBeforeItsTime", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		d := b.dispatcher(t, b.config())
		b.run(t, d)
		req := mailTo("a@example.com")
		req.NotBefore = time.Now().Add(700 * time.Millisecond)
		id := b.stage(t, req)[0]
		st, err := b.client.Wait(waitCtx(t), id)
		require.NoError(t, err)
		require.Equal(t, relay.StateProcessed, st.State)
		got := b.mail.Requests()
		require.Len(t, got, 1)
		require.False(t, st.SettledAt.Before(req.NotBefore.Add(-50*time.Millisecond)), "not before its time")
	})

	t.Run("CancelPendingIsNeverDelivered", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		d := b.dispatcher(t, b.config())
		b.run(t, d)
		req := mailTo("a@example.com")
		req.NotBefore = time.Now().Add(300 * time.Millisecond)
		ids := b.stage(t, req, req)
		st, err := b.client.Cancel(t.Context(), ids[0])
		require.NoError(t, err)
		require.Equal(t, relay.StateCancelled, st.State)

		st, err = b.client.Wait(waitCtx(t), ids[1])
		require.NoError(t, err)
		require.Equal(t, relay.StateProcessed, st.State, "its sibling is delivered after the same wait")
		require.Zero(t, b.mail.Count(ids[0]))
		require.Equal(t, relay.StateCancelled, b.status(t, ids[0]).State)
	})

	t.Run("CancelAfterDeliverySaysSo", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		d := b.dispatcher(t, b.config())
		b.run(t, d)
		id := b.stage(t, mailTo("a@example.com"))[0]
		_, err := b.client.Wait(waitCtx(t), id)
		require.NoError(t, err)
		st, err := b.client.Cancel(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, relay.StateProcessed, st.State)
	})

	t.Run("CancelOfADeadRequestLeavesItToReemit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.mail.Script(delivery.Reject(errors.New("mailbox unknown")))
		d := b.dispatcher(t, b.config())
		b.run(t, d)
		id := b.stage(t, mailTo("a@example.com"))[0]
		require.Equal(t, relay.StateDead, b.waitSettled(t, id).State)
		st, err := b.client.Cancel(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, relay.StateDead, st.State, "a dead request stays dead")

		n, err := b.ob.Reemit(t.Context(), b.db, &relay.DeadFilter{IDs: []uuid.UUID{id}})
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		require.Equal(t, relay.StateProcessed, b.waitSettled(t, id).State)
		require.Equal(t, 2, b.mail.Count(id), "delivered after the re-emit: the cancel left no claim")
	})

	t.Run("CancelDuringADeliveryWaitsForItsAnswer", func(t *testing.T) {
		t.Parallel()
		for _, answer := range []delivery.Outcome{delivery.Delivered(), delivery.Retry(errors.New("busy"))} {
			t.Run(answer.Kind().String(), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				slow := newBlocked()
				cfg := b.config()
				cfg.Deliveries = map[string]delivery.Delivery{"mail": slow}
				b.run(t, b.dispatcher(t, cfg))
				id := b.stage(t, mailTo("a@example.com"))[0]
				testwait.Recv(t, slow.started, "the delivery")

				// Cancelled from another process's client.
				other, err := notification.NewClient(b.db, &notification.ClientConfig{Schema: b.schema, Consumer: consumer})
				require.NoError(t, err)
				cancelled := make(chan notification.Status, 1)
				go func() {
					st, err := other.Cancel(context.Background(), id)
					if err != nil {
						st.State = relay.State("error: " + err.Error())
					}
					cancelled <- st
				}()
				b.waitBlockedOnClaim(t)
				slow.answer <- answer
				st := testwait.Recv(t, cancelled, "Cancel's answer")
				if answer.Kind() == delivery.KindDelivered {
					require.Equal(t, relay.StateProcessed, st.State, "too late: Cancel answers what the delivery decided")
					require.Equal(t, relay.StateProcessed, b.status(t, id).State)
				} else {
					require.Equal(t, relay.StateCancelled, st.State)
					require.Equal(t, relay.StateCancelled, b.status(t, id).State)
				}
				require.Equal(t, 1, slow.callCount())
			})
		}
	})

	t.Run("WaitEndsWithItsContext", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		req := mailTo("a@example.com")
		req.NotBefore = time.Now().Add(time.Hour)
		id := b.stage(t, req)[0]
		// Long enough for a first look on a loaded machine.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		st, err := b.client.Wait(ctx, id)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, relay.StatePending, st.State)
	})
}
