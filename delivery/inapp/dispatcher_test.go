package inapp_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

// counting is the in-app delivery behind a wrapper that counts its calls.
type counting struct {
	next  delivery.Delivery
	calls atomic.Int32
}

func (c *counting) Deliver(ctx context.Context, p delivery.Pending) delivery.Outcome {
	c.calls.Add(1)
	return c.next.Deliver(ctx, p)
}

// Repeats passes on what the wrapped delivery declares: a wrapper that did
// not would have the dispatcher take it for one that calls a provider, and
// give it no transaction.
func (c *counting) Repeats() delivery.Repeat { return delivery.RepeatsOf(c.next) }

// inTx is a delivery function that writes through the claim's transaction.
type inTx delivery.Func

func (f inTx) Deliver(ctx context.Context, p delivery.Pending) delivery.Outcome { return f(ctx, p) }

func (inTx) Repeats() delivery.Repeat { return delivery.RepeatImpossible }

func TestThroughTheDispatcher(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, testThroughTheDispatcher)
}

func testThroughTheDispatcher(t *testing.T, _ drivertest.Driver) {

	t.Run("StagedRequestsBecomeRows", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		d := b.run(t, b.inapp)
		ctx := relay.WithCorrelationID(t.Context(), "order-7")
		staged := b.stage(ctx, t,
			notification.Request{Channel: channel, Recipient: "user-1", Template: "order.shipped",
				Data: map[string]any{"order": "A-7", "items": 3, "gift": true}},
			notification.Request{Channel: channel, Recipient: "user-1", Template: "order.delivered"},
			notification.Request{Channel: channel, Recipient: "user-2", Template: "welcome",
				Data: map[string]any{"name": "Ada", "tags": []any{"new"}}},
		)
		for _, id := range staged {
			st := waitSettled(t, d, id)
			require.Equal(t, relay.StateProcessed, st.State, st.LastError)
			require.Equal(t, id.String(), st.Result, "the reference is the id")
		}

		user1, err := b.inapp.List(t.Context(), "user-1", nil)
		require.NoError(t, err)
		require.Len(t, user1, 2)
		byID := map[uuid.UUID]int{user1[0].ID: 0, user1[1].ID: 1}
		shipped := user1[byID[staged[0]]]
		require.Equal(t, "order.shipped", shipped.Template)
		require.Equal(t, map[string]any{"order": "A-7", "items": float64(3), "gift": true}, shipped.Data)
		require.Equal(t, "order-7", shipped.CorrelationID)
		require.False(t, shipped.Read())
		require.False(t, shipped.CreatedAt.IsZero())
		delivered := user1[byID[staged[1]]]
		require.Equal(t, "order.delivered", delivered.Template)
		require.Empty(t, delivered.Data)
		require.NotNil(t, delivered.Data)

		user2, err := b.inapp.List(t.Context(), "user-2", nil)
		require.NoError(t, err)
		require.Len(t, user2, 1)
		require.Equal(t, staged[2], user2[0].ID)
		require.Equal(t, map[string]any{"name": "Ada", "tags": []any{"new"}}, user2[0].Data)

		n, err := b.inapp.UnreadCount(t.Context(), "user-1")
		require.NoError(t, err)
		require.Equal(t, 2, n)
	})

	// The first attempt writes its row, then answers Retry: the dispatcher
	// rolls the claim back, and the row with it.
	t.Run("RolledBackAttemptLeavesOneRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var (
			calls                     atomic.Int32
			insideFirst, outsideFirst atomic.Int32
			errFlaky                  = errors.New("test: the first attempt fails after the write")
			countSQL                  = `SELECT count(*) FROM "` + b.schema + `".inapp_notifications WHERE id = $1`
			firstInner                atomic.Value
		)
		flaky := inTx(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
			calls.Add(1)
			out := b.inapp.Deliver(ctx, p)
			if p.Attempt > 1 || out.Kind() != delivery.KindDelivered {
				return out
			}
			firstInner.Store(out.String())
			// Seen inside the claim's transaction, not outside it.
			tx, _ := delivery.TxFrom(ctx)
			var inside, outside int32
			if err := tx.QueryRowContext(ctx, countSQL, p.ID).Scan(&inside); err != nil {
				return delivery.Retry(err)
			}
			if err := b.db.QueryRowContext(ctx, countSQL, p.ID).Scan(&outside); err != nil {
				return delivery.Retry(err)
			}
			insideFirst.Store(inside)
			outsideFirst.Store(outside)
			return delivery.Retry(errFlaky)
		})
		d := b.run(t, flaky)
		id := b.stage(t.Context(), t, notification.Request{Channel: channel, Recipient: "user-1", Template: "t"})[0]

		st := waitSettled(t, d, id)
		require.Equal(t, relay.StateProcessed, st.State, st.LastError)
		require.Equal(t, 1, st.Attempts, "one retry")
		require.Equal(t, int32(2), calls.Load())
		require.Equal(t, "delivered (reference "+id.String()+")", firstInner.Load())
		require.Equal(t, int32(1), insideFirst.Load(), "the first attempt wrote its row in the claim's transaction")
		require.Equal(t, int32(0), outsideFirst.Load(), "uncommitted")
		require.Equal(t, 1, b.rows(t, id))
	})

	t.Run("RedeliveryAddsNoRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dl := &counting{next: b.inapp}
		d := b.run(t, dl)
		id := b.stage(t.Context(), t, notification.Request{Channel: channel, Recipient: "user-1", Template: "t"})[0]
		require.Equal(t, relay.StateProcessed, waitSettled(t, d, id).State)
		require.Equal(t, 1, b.rows(t, id))

		// The settle is lost (a crash after the claim's commit): the record
		// is pending and due again.
		_, err := b.db.ExecContext(t.Context(),
			`UPDATE "`+b.schema+`".outbox SET processed_at = NULL, available_at = now() WHERE id = $1`, id)
		require.NoError(t, err)
		waitSettled(t, d, b.wake(t))
		st := waitSettled(t, d, id)
		require.Equal(t, relay.StateProcessed, st.State)
		require.Equal(t, 2, st.Hands, "handed again")
		require.Equal(t, int32(1), dl.calls.Load(), "the claim stops the second delivery")
		require.Equal(t, 1, b.rows(t, id))
	})

	// Even when the claim is gone (purged too early) and the delivery runs
	// again, the row's key keeps it single.
	t.Run("RedeliveryWithoutClaimAddsNoRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dl := &counting{next: b.inapp}
		d := b.run(t, dl)
		id := b.stage(t.Context(), t, notification.Request{Channel: channel, Recipient: "user-1", Template: "t"})[0]
		require.Equal(t, relay.StateProcessed, waitSettled(t, d, id).State)

		_, err := b.db.ExecContext(t.Context(), `DELETE FROM "`+b.schema+`".inbox WHERE event_id = $1`, id)
		require.NoError(t, err)
		_, err = b.db.ExecContext(t.Context(),
			`UPDATE "`+b.schema+`".outbox SET processed_at = NULL, available_at = now() WHERE id = $1`, id)
		require.NoError(t, err)
		waitSettled(t, d, b.wake(t))
		st := waitSettled(t, d, id)
		require.Equal(t, relay.StateProcessed, st.State, st.LastError)
		require.Equal(t, 2, st.Hands)
		require.Equal(t, int32(2), dl.calls.Load(), "delivered again")
		require.Equal(t, 1, b.rows(t, id))
	})
}
