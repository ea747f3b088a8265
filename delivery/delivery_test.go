package delivery_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
)

func TestFunc(t *testing.T) {
	t.Parallel()

	type ctxKey struct{}

	t.Run("PassesContextAndPending", func(t *testing.T) {
		t.Parallel()

		want := delivery.Pending{
			ID:            uuid.New(),
			Channel:       "push",
			Recipient:     "device-token",
			Template:      "welcome",
			Data:          map[string]any{"name": "Ada"},
			CorrelationID: "corr-1",
			CausationID:   "cause-1",
			Attempt:       3,
			StagedAt:      time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		}
		ctx := context.WithValue(t.Context(), ctxKey{}, "marker")

		var (
			gotCtx     context.Context
			gotPending delivery.Pending
		)
		var d delivery.Delivery = delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
			gotCtx, gotPending = ctx, p
			return delivery.DeliveredWithReference("ref-1")
		})

		outcome := d.Deliver(ctx, want)
		require.Equal(t, delivery.DeliveredWithReference("ref-1"), outcome)
		require.Equal(t, "marker", gotCtx.Value(ctxKey{}))
		require.Equal(t, want, gotPending)
	})

	t.Run("ReturnsOutcomeUnchanged", func(t *testing.T) {
		t.Parallel()

		want := delivery.RetryAfter(errProvider, time.Minute)
		d := delivery.Func(func(context.Context, delivery.Pending) delivery.Outcome { return want })

		got := d.Deliver(t.Context(), delivery.Pending{ID: uuid.New(), Attempt: 1})
		require.Equal(t, want, got)
		require.ErrorIs(t, got.Reason(), errProvider)
	})

	t.Run("HonoursContext", func(t *testing.T) {
		t.Parallel()

		d := delivery.Func(func(ctx context.Context, _ delivery.Pending) delivery.Outcome {
			<-ctx.Done()
			return delivery.Retry(ctx.Err())
		})

		ctx, cancel := context.WithCancel(t.Context())
		cancel()

		outcome := d.Deliver(ctx, delivery.Pending{ID: uuid.New(), Attempt: 1})
		require.Equal(t, delivery.KindRetry, outcome.Kind())
		require.ErrorIs(t, outcome.Reason(), context.Canceled)
	})
}
