package notification_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/dbtx/pgxtx"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

// Settings of the relay and the dispatcher that cannot work together stop
// Supervise before it starts, with an error that names both.
func TestSuperviseRefusesSettingsThatDisagree(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(rc *relay.Config, dc *notification.Config)
		names  []string
	}{
		{"AttemptsNotBelowHands", func(rc *relay.Config, dc *notification.Config) { rc.MaxHands, dc.Policy.MaxAttempts = 5, 5 },
			[]string{"Policy.MaxAttempts (5)", "Config.MaxHands (5)"}},
		{"AttemptsByDefaultNotBelowHands", func(rc *relay.Config, dc *notification.Config) { rc.MaxHands = 10 },
			[]string{"Policy.MaxAttempts (10)", "Config.MaxHands (10)"}},
		{"DeliveryTimeoutNotBelowHandTimeout", func(rc *relay.Config, dc *notification.Config) { dc.DeliveryTimeout = rc.HandTimeout },
			[]string{"DeliveryTimeout (5s)", "Config.HandTimeout (5s)"}},
		{"InboxRetentionShorterThanTheRetries", func(rc *relay.Config, dc *notification.Config) {
			dc.Policy.MaxAttempts, dc.Policy.BaseDelay, dc.Policy.Multiplier = 3, time.Hour, 1
			dc.InboxRetention = 2 * time.Hour
		}, []string{"InboxRetention (2h0m0s)", "Config.Lease (10s)", "retry schedule (2h0m0s)"}},
		// A schedule longer than a time.Duration holds: the Lease added to
		// it must not wrap round below any retention.
		{"RetriesLongerThanADuration", func(rc *relay.Config, dc *notification.Config) {
			dc.Policy.MaxAttempts, dc.Policy.BaseDelay, dc.Policy.MaxDelay = 3, math.MaxInt64/2, math.MaxInt64
		}, []string{"InboxRetention (672h0m0s)", "retry schedule (2562047h47m16.854775807s)"}},
		{"PipelineOfAnotherDriver", func(rc *relay.Config, dc *notification.Config) { rc.Pipeline = pgxtx.Pipeline },
			[]string{"Config.Pipeline", "pgx's stdlib"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rc, dc := b.relayConfig(t), b.config()
			tc.change(&rc, &dc)
			d := b.dispatcher(t, dc)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err := relay.Supervise(ctx, b.db, &rc, d)
			require.ErrorIs(t, err, notification.ErrConfig)
			for _, name := range tc.names {
				require.ErrorContains(t, err, name)
			}
		})
	}

	// One dispatcher serves the relays of one schema.
	t.Run("SecondSchema", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		d := b.prepared(t, b.config())
		rc := b.relayConfig(t)
		rc.Schema = "elsewhere"
		err := relay.Supervise(t.Context(), b.db, &rc, d)
		require.ErrorIs(t, err, notification.ErrConfig)
		require.ErrorContains(t, err, `Config.Schema "elsewhere"`)
		require.ErrorContains(t, err, `serving schema "`+b.schema+`"`)
	})
}

// The delivery timeout defaults to five sixths of the relay's hand timeout,
// and the reason of a delivery that overran names the deadline that fired:
// the relay's, when the claim waited so long that the hand's deadline came
// first.
func TestDeliveryTimeoutFollowsTheRelayAndTheReasonNamesTheDeadline(t *testing.T) {
	t.Parallel()
	hang := delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
		<-ctx.Done()
		return delivery.Retry(ctx.Err())
	})

	t.Run("Derived", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dc := b.config()
		dc.Deliveries = map[string]delivery.Delivery{"mail": hang}
		dc.Policy.MaxAttempts = 1
		rc := b.relayConfig(t)
		// The hand's deadline leaves a second between the two, time for
		// the claim before the delivery starts on a loaded machine (with
		// 100 ms it ran out once under a second race suite).
		rc.HandTimeout = 6 * time.Second
		rc.Lease = 30 * time.Second
		b.runWith(t, rc, b.dispatcher(t, dc))
		id := b.stage(t, mailTo("a@example.com"))[0]
		st := b.waitSettled(t, id)
		require.Equal(t, relay.StateDead, st.State)
		require.Contains(t, st.Reason, `delivery for channel "mail" timed out: DeliveryTimeout of 5s passed`)
	})

	t.Run("TheHandsDeadlineFiredFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dc := b.config()
		dc.Deliveries = map[string]delivery.Delivery{"mail": hang}
		dc.Policy.MaxAttempts = 1
		dc.DeliveryTimeout = 900 * time.Millisecond
		rc := b.relayConfig(t)
		rc.HandTimeout = time.Second
		id := b.stage(t, mailTo("a@example.com"))[0]
		// Another transaction holds the request's claim for half a second,
		// so the delivery starts late and the hand's deadline comes first.
		tx, err := b.db.BeginTx(t.Context(), nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(t.Context(), `INSERT INTO "`+b.schema+`".inbox (consumer, event_id) VALUES ($1, $2)`, consumer, id)
		require.NoError(t, err)
		b.runWith(t, rc, b.dispatcher(t, dc))
		b.waitBlockedOnClaim(t)
		time.Sleep(500 * time.Millisecond) // pacing: the claim waits this long
		require.NoError(t, tx.Rollback())
		st := b.waitSettled(t, id)
		require.Equal(t, relay.StateDead, st.State)
		require.Contains(t, st.Reason, `delivery for channel "mail" timed out: relay: hand timeout: HandTimeout of 1s passed`)
	})
}
