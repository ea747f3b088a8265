package notification_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/notification"
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
