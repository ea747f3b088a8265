package notification_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

// A slow provider holds at most ChannelLimit of the relay's slots: with
// every slot it could take stuck in slow SMS deliveries, mail staged after
// them is still delivered, and the SMS requests held back are delivered
// once the provider answers, without an attempt counted against them.
func TestChannelLimitKeepsASlowChannelFromTakingEverySlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	slow := newBlocked()
	cfg := b.config()
	cfg.Deliveries = map[string]delivery.Delivery{"mail": b.mail, "sms": slow}
	cfg.ChannelLimit = 2
	rc := b.relayConfig(t)
	rc.Concurrency = 3 // without the limit, three slow SMS would take them all
	b.runWith(t, rc, b.dispatcher(t, cfg))

	sms := make([]notification.Request, 6)
	for i := range sms {
		sms[i] = notification.Request{Channel: "sms", Recipient: "+15005550006", Template: "reminder"}
	}
	smsIDs := b.stage(t, sms...)
	for range 2 {
		select {
		case <-slow.started:
		case <-time.After(10 * time.Second):
			t.Fatal("the slow channel's deliveries did not start")
		}
	}

	mailIDs := b.stage(t, mailTo("ada@example.com"), mailTo("grace@example.com"), mailTo("alan@example.com"))
	for _, id := range mailIDs {
		require.Equal(t, relay.StateProcessed, b.waitSettled(t, id).State)
	}
	require.Equal(t, 2, slow.callCount(), "never more than ChannelLimit slow deliveries at once")

	for range sms {
		slow.answer <- delivery.Delivered()
	}
	for _, id := range smsIDs {
		st := b.waitSettled(t, id)
		require.Equal(t, relay.StateProcessed, st.State)
		require.Equal(t, 0, st.Attempts)
	}
	require.Equal(t, 6, slow.callCount())
}
