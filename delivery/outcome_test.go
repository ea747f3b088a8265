package delivery_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
)

var errProvider = errors.New("mail: provider answered 503")

func TestKindString(t *testing.T) {
	t.Parallel()

	for kind, want := range map[delivery.Kind]string{
		delivery.KindInvalid:   "invalid",
		delivery.KindDelivered: "delivered",
		delivery.KindRetry:     "retry",
		delivery.KindReject:    "reject",
		delivery.Kind(7):       "Kind(7)",
		delivery.Kind(-1):      "Kind(-1)",
	} {
		t.Run(want, func(t *testing.T) {
			t.Parallel()

			require.Equal(t, want, kind.String())
		})
	}
}

func TestOutcome(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name      string
		outcome   delivery.Outcome
		kind      delivery.Kind
		reason    error // checked with errors.Is; nil means Reason must be nil
		after     time.Duration
		reference string
		str       string
	}{
		{
			name:    "Zero",
			outcome: delivery.Outcome{},
			kind:    delivery.KindInvalid,
			str:     "invalid",
		},
		{
			name:    "Delivered",
			outcome: delivery.Delivered(),
			kind:    delivery.KindDelivered,
			str:     "delivered",
		},
		{
			name:      "DeliveredWithReference",
			outcome:   delivery.DeliveredWithReference("msg-42"),
			kind:      delivery.KindDelivered,
			reference: "msg-42",
			str:       "delivered (reference msg-42)",
		},
		{
			name:    "DeliveredWithEmptyReference",
			outcome: delivery.DeliveredWithReference(""),
			kind:    delivery.KindDelivered,
			str:     "delivered",
		},
		{
			name:    "Retry",
			outcome: delivery.Retry(errProvider),
			kind:    delivery.KindRetry,
			reason:  errProvider,
			str:     "retry: mail: provider answered 503",
		},
		{
			name:    "RetryWrapped",
			outcome: delivery.Retry(fmt.Errorf("send: %w", errProvider)),
			kind:    delivery.KindRetry,
			reason:  errProvider,
			str:     "retry: send: mail: provider answered 503",
		},
		{
			name:    "RetryAfter",
			outcome: delivery.RetryAfter(errProvider, 30*time.Second),
			kind:    delivery.KindRetry,
			reason:  errProvider,
			after:   30 * time.Second,
			str:     "retry after 30s: mail: provider answered 503",
		},
		{
			name:    "RetryAfterZero",
			outcome: delivery.RetryAfter(errProvider, 0),
			kind:    delivery.KindRetry,
			reason:  errProvider,
			str:     "retry: mail: provider answered 503",
		},
		{
			name:    "RetryAfterNegative",
			outcome: delivery.RetryAfter(errProvider, -time.Minute),
			kind:    delivery.KindRetry,
			reason:  errProvider,
			str:     "retry: mail: provider answered 503",
		},
		{
			name:    "Reject",
			outcome: delivery.Reject(errProvider),
			kind:    delivery.KindReject,
			reason:  errProvider,
			str:     "reject: mail: provider answered 503",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			require.Equal(t, tt.kind, tt.outcome.Kind())
			if tt.reason == nil {
				require.NoError(t, tt.outcome.Reason())
			} else {
				require.ErrorIs(t, tt.outcome.Reason(), tt.reason)
			}
			require.Equal(t, tt.after, tt.outcome.After())
			require.Equal(t, tt.reference, tt.outcome.Reference())
			require.Equal(t, tt.str, tt.outcome.String())
		})
	}
}

// A nil reason is replaced at construction, so a dead row always has one.
func TestOutcomeNilReason(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		outcome delivery.Outcome
		kind    delivery.Kind
		prefix  string
	}{
		{name: "Retry", outcome: delivery.Retry(nil), kind: delivery.KindRetry, prefix: "retry: "},
		{name: "RetryAfter", outcome: delivery.RetryAfter(nil, time.Second), kind: delivery.KindRetry, prefix: "retry after 1s: "},
		{name: "Reject", outcome: delivery.Reject(nil), kind: delivery.KindReject, prefix: "reject: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			require.Equal(t, tt.kind, tt.outcome.Kind())
			require.Error(t, tt.outcome.Reason())
			require.Contains(t, tt.outcome.Reason().Error(), "no reason given")
			require.Equal(t, tt.prefix+tt.outcome.Reason().Error(), tt.outcome.String())
		})
	}
}

type providerError struct{ status int }

func (e *providerError) Error() string { return fmt.Sprintf("provider answered %d", e.status) }

func TestOutcomeReasonAs(t *testing.T) {
	t.Parallel()

	outcome := delivery.Reject(fmt.Errorf("sms: %w", &providerError{status: 400}))

	perr, ok := errors.AsType[*providerError](outcome.Reason())
	require.True(t, ok)
	require.Equal(t, 400, perr.status)
}

// Outcome is a value: copying it and constructing it again yield equal values.
func TestOutcomeIsValue(t *testing.T) {
	t.Parallel()

	outcome := delivery.RetryAfter(errProvider, time.Second)
	cp := outcome
	require.Equal(t, outcome, cp)
	require.Equal(t, delivery.RetryAfter(errProvider, time.Second), outcome)
	require.NotEqual(t, delivery.Retry(errProvider), outcome)
}
