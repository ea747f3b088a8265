package notification_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/notification/feedback"
	"github.com/tidings-go/tidings/relay"
)

// TestClientOperatorViews: what an operator asks of the requests of one
// write (the correlation id), of the dead ones by cause, and of the last
// minutes' rates.
func TestClientOperatorViews(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.sms.ScriptChannel("sms", delivery.Reject(delivery.WithCode(delivery.CodeInvalidRecipient, errors.New("invalid number"))))
	b.run(t, b.dispatcher(t, b.config()))

	ctx := relay.WithCorrelationID(t.Context(), "booking-42")
	ids, err := b.client.StageBatch(ctx, b.db, module, []notification.Request{
		mailTo("ada@example.com"),
		{Channel: "sms", Recipient: "+15005550001", Template: "booking_confirmed"},
	})
	require.NoError(t, err)
	other := b.stage(t, mailTo("grace@example.com"))[0]
	for _, id := range append(ids, other) {
		b.waitSettled(t, id)
	}

	got, err := b.client.FindByCorrelation(t.Context(), "booking-42", 0)
	require.NoError(t, err)
	require.Len(t, got, len(ids), "the write's requests, not the other")
	for i, s := range got {
		require.Equal(t, ids[i], s.ID)
	}

	byCode, err := b.client.CountDead(t.Context(), nil, relay.ByCode)
	require.NoError(t, err)
	require.Len(t, byCode, 1)
	require.Equal(t, delivery.CodeInvalidRecipient, byCode[0].Key)
	require.EqualValues(t, 1, byCode[0].Count)
	byChannel, err := b.client.CountDead(t.Context(), &notification.DeadFilter{Channel: "mail"}, relay.ByLane)
	require.NoError(t, err)
	require.Empty(t, byChannel, "no mail died")

	minutes, err := b.client.Throughput(t.Context(), module, 5)
	require.NoError(t, err)
	require.Len(t, minutes, 5)
	last := minutes[4]
	require.Equal(t, relay.Minute{Start: last.Start, Processed: 2, Dead: 1}, last)
}

// A provider's report that died (its hand kept crashing, say) is the
// operator's as a dead request is: listed, counted in the channel
// "feedback", and re-emitted, after which it is applied.
func TestDeadReportsAreListedAndReemitted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	store, err := b.client.FeedbackStore(module)
	require.NoError(t, err)
	report := feedback.Report{Provider: feedback.ProviderResend, EventID: "evt-dead", Type: "email.bounced",
		Class: feedback.ClassPermanent, Code: feedback.CodeBouncePermanent, Channel: "mail", Address: "gone@example.com"}
	require.NoError(t, store.Store(t.Context(), []feedback.Report{report}))
	id := notification.ReportID(report)
	_, err = b.db.ExecContext(t.Context(), `UPDATE "`+b.schema+`".outbox SET failed_at = now(), code = $2,
		failure_reason = 'handed too many times' WHERE id = $1`, id, relay.CodeMaxHands)
	require.NoError(t, err)

	dead, err := b.client.ListDead(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, id, dead[0].ID)
	require.Equal(t, notification.LaneFeedback, dead[0].Channel)
	byChannel, err := b.client.CountDead(t.Context(), nil, relay.ByLane)
	require.NoError(t, err)
	require.Equal(t, []relay.DeadGroup{{Key: notification.LaneFeedback, Count: 1, First: byChannel[0].First, Last: byChannel[0].Last}},
		byChannel)

	n, err := b.client.Reemit(t.Context(), &notification.DeadFilter{IDs: []uuid.UUID{id}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	b.run(t, b.dispatcher(t, b.config()))
	require.Equal(t, relay.StateProcessed, b.waitSettled(t, id).State)
	page, err := b.client.Suppressions(t.Context(), &notification.SuppressionFilter{Channel: "mail"})
	require.NoError(t, err)
	require.Len(t, page, 1, "the bounce applied")
}
