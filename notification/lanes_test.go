package notification_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

// G7 by default: a provider that hangs holds its channel's lane at the
// relay's defaults while 100,000 of its requests wait: a channel that
// commits each request alone at three quarters of the default
// Connections, one whose requests share a commit at the default
// LaneLimit, in two batches. The rows that wait stay untouched in the table
// (no claim locks or updates them) while mail drains through the rest of
// the connections.
func TestAHangingChannelWaitsUntouchedWhileAnotherDrains(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		commit notification.Commit
		limit  int // the hanging channel's deliveries in flight
	}{
		{"each", notification.CommitEach, relay.ConnectionsDefault * 3 / 4},
		{"shared", notification.CommitShared, relay.ConcurrencyDefault * 3 / 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hangingChannelWaitsUntouched(t, tc.commit, tc.limit)
		})
	}
}

func hangingChannelWaitsUntouched(t *testing.T, commit notification.Commit, limit int) {
	b := setup(t)
	// The default connections, and a few for the relay's own statements.
	pool := pgtest.Open(t, relay.ConnectionsDefault+10)
	hang := newBlocked() // answers only when its context ends
	cfg := b.config()
	cfg.Deliveries = map[string]delivery.Delivery{"mail": b.mail, "sms": hang}
	cfg.Commit = map[string]notification.Commit{"sms": commit}
	rc := b.relayConfig(t) // the default Concurrency, Connections and LaneLimit
	// The hanging deliveries outlast the test: mail must drain beside
	// them, not in the moments their timeouts free the lane.
	rc.HandTimeout = 4 * testwait.Within
	rc.Lease = 2 * rc.HandTimeout

	const held = 100_000
	for start := 0; start < held; start += 5000 {
		reqs := make([]notification.Request, 5000)
		for i := range reqs {
			reqs[i] = notification.Request{Channel: "sms", Recipient: fmt.Sprintf("+1500555%04d", (start+i)%10000), Template: "reminder"}
		}
		_, err := b.client.StageBatch(t.Context(), b.db, module, reqs)
		require.NoError(t, err)
	}
	supervise(t, pool, rc, b.dispatcher(t, cfg))

	require.Eventually(t, func() bool { return hang.callCount() >= limit }, 30*time.Second, 10*time.Millisecond,
		"the hanging channel fills its lane: want %d deliveries in flight", limit)
	// The row versions of the SMS requests not yet claimed.
	versions := func() map[string]string { return pgtest.RowVersions(t, b.db, b.schema, "lane = 'sms' AND hands = 0") }
	before := versions()

	// Many times the connections left to mail: enough to show it drains
	// through them, few enough to finish well within the wait under -race
	// on a loaded machine (2,000 took 7 to 16 s alone and ran past 30 s
	// beside another test binary).
	mail := make([]notification.Request, 400)
	for i := range mail {
		mail[i] = mailTo(fmt.Sprintf("user%d@example.com", i))
	}
	start := time.Now()
	_, err := b.client.StageBatch(t.Context(), b.db, module, mail)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), testwait.Within)
	defer cancel()
	_, err = b.mail.Wait(ctx, len(mail))
	require.NoError(t, err)
	t.Logf("%d mail delivered in %s beside the hanging channel", len(mail), time.Since(start))

	// Every row that still waits is as it was: neither locked nor
	// updated.
	after := versions()
	require.Greater(t, len(after), held-10*limit, "the lane took no more than its limit at a time")
	for id, v := range after {
		require.Equal(t, before[id], v, "the waiting SMS row %s was locked or updated", id)
	}
	require.LessOrEqual(t, hang.inFlight(), limit, "no more SMS in flight than the lane's limit")
}
