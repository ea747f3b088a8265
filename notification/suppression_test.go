package notification_test

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/notification/feedback"
	"github.com/tidings-go/tidings/relay"
)

// A suppression written in the caller's transaction stops every request
// to the address delivered after its commit, critical or not, without a
// provider call, in its scope only, until it is lifted; the request's
// timeline names the suppression and never the address.
func TestSuppressions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg, reader := b.meteredConfig(map[string]notification.Category{"booking": {}, "marketing": {}, "security": {Critical: true}})
	b.run(t, b.dispatcher(t, cfg))

	// stageWith commits a suppression (nil for none) and req in one
	// transaction, and returns the request's final status.
	stageWith := func(t *testing.T, s *notification.Suppression, req notification.Request) (uuid.UUID, notification.Status) {
		t.Helper()
		var id uuid.UUID
		b.inTx(t, func(tx *sql.Tx) {
			if s != nil {
				require.NoError(t, b.client.Suppress(t.Context(), tx, *s))
			}
			var err error
			id, err = b.client.Stage(t.Context(), tx, module, req)
			require.NoError(t, err)
		})
		return id, b.waitOutcome(t, id)
	}
	suppressed := func(t *testing.T, id uuid.UUID, st notification.Status, reason string) {
		t.Helper()
		require.Equal(t, relay.StateProcessed, st.State)
		require.Equal(t, notification.OutcomeSuppressed, st.Outcome)
		require.Equal(t, notification.CodeSuppressed, st.Code)
		require.Zero(t, b.mail.Count(id)+b.sms.Count(id), "the provider is never called for a suppressed address")
		e := ruleEntry(t, st, notification.RuleSuppression)
		require.Equal(t, reason, e.Detail["reason"])
		require.NotContains(t, fmt.Sprint(st.Timeline), "@", "the timeline holds no address")
	}

	t.Run("Cases", func(t *testing.T) { suppressionCases(t, b, stageWith, suppressed) })
	// One sms request was suppressed.
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	require.Equal(t, int64(1), sumCounter(rm, notification.MetricDecisions, notification.AttrChannel, "sms",
		notification.AttrRule, notification.RuleSuppression))
}

// suppressionCases are the cases of TestSuppressions, in parallel.
func suppressionCases(t *testing.T, b testBundle,
	stageWith func(*testing.T, *notification.Suppression, notification.Request) (uuid.UUID, notification.Status),
	suppressed func(*testing.T, uuid.UUID, notification.Status, string)) {
	t.Run("InTheStagingTransaction", func(t *testing.T) {
		t.Parallel()
		// Suppressed in one case, sent to in another: mail addresses
		// compare lower-cased.
		id, st := stageWith(t, &notification.Suppression{Channel: "mail", Address: "Ada@Example.com"},
			notification.Request{Channel: "mail", Recipient: "ada@example.COM", Template: "welcome", Category: "booking"})
		suppressed(t, id, st, feedback.CodeUnsubscribe)
	})
	// The mailbox the mail module sends to is the one compared, however
	// the recipient is written.
	t.Run("WrittenWithACommentOrAName", func(t *testing.T) {
		t.Parallel()
		id, st := stageWith(t, &notification.Suppression{Channel: "mail", Address: "jane@example.com"},
			notification.Request{Channel: "mail", Recipient: "jane@example.com (Jane)", Template: "welcome", Category: "booking"})
		suppressed(t, id, st, feedback.CodeUnsubscribe)
		id, st = stageWith(t, nil, notification.Request{Channel: "mail", Recipient: `"Jane" <Jane@example.com>`, Template: "welcome",
			Category: "booking"})
		suppressed(t, id, st, feedback.CodeUnsubscribe)
	})
	t.Run("CriticalDoesNotBypass", func(t *testing.T) {
		t.Parallel()
		s := notification.Suppression{Channel: "mail", Address: "bounced@example.com", Class: feedback.ClassPermanent,
			Reason: feedback.CodeBouncePermanent}
		id, st := stageWith(t, &s, notification.Request{Channel: "mail", Recipient: "bounced@example.com", Template: "code",
			Category: "security", Critical: true})
		suppressed(t, id, st, feedback.CodeBouncePermanent)
	})
	t.Run("ScopedToACategory", func(t *testing.T) {
		t.Parallel()
		s := notification.Suppression{Channel: "sms", Address: "+15550100", Scope: "marketing"}
		id, st := stageWith(t, &s, notification.Request{Channel: "sms", Recipient: "+15550100", Template: "offer", Category: "marketing"})
		suppressed(t, id, st, feedback.CodeUnsubscribe)
		id, st = stageWith(t, nil, notification.Request{Channel: "sms", Recipient: "+15550100", Template: "booked", Category: "booking"})
		require.Equal(t, notification.OutcomeDelivered, st.Outcome, "another category goes out")
		require.Equal(t, 1, b.sms.Count(id))
		id, st = stageWith(t, nil, notification.Request{Channel: "mail", Recipient: "+15550100", Template: "offer", Category: "marketing"})
		require.Equal(t, notification.OutcomeDelivered, st.Outcome, "another channel goes out")
		require.Equal(t, 1, b.mail.Count(id))
	})
	t.Run("Lifted", func(t *testing.T) {
		t.Parallel()
		s := notification.Suppression{Channel: "mail", Address: "lifted@example.com", Class: feedback.ClassComplaint,
			Reason: feedback.CodeComplaint, Source: "ticket 4411"}
		id, st := stageWith(t, &s, mailTo("lifted@example.com"))
		suppressed(t, id, st, feedback.CodeComplaint)
		b.inTx(t, func(tx *sql.Tx) {
			lifted, err := b.client.Lift(t.Context(), tx, "mail", " LIFTED@example.com", "")
			require.NoError(t, err)
			require.True(t, lifted)
			lifted, err = b.client.Lift(t.Context(), tx, "mail", "lifted@example.com", "")
			require.NoError(t, err)
			require.False(t, lifted, "lifted already")
		})
		id, st = stageWith(t, nil, mailTo("lifted@example.com"))
		require.Equal(t, notification.OutcomeDelivered, st.Outcome)
		require.Equal(t, 1, b.mail.Count(id))
	})
	t.Run("KeepsTheFirstReason", func(t *testing.T) {
		t.Parallel()
		for _, reason := range []string{feedback.CodeBouncePermanent, feedback.CodeComplaint} {
			b.inTx(t, func(tx *sql.Tx) {
				require.NoError(t, b.client.Suppress(t.Context(), tx, notification.Suppression{Channel: "mail",
					Address: "twice@example.com", Class: feedback.ClassPermanent, Reason: reason}))
			})
		}
		got, err := b.client.Suppressions(t.Context(), &notification.SuppressionFilter{Channel: "mail", Address: "Twice@example.com"})
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, feedback.CodeBouncePermanent, got[0].Reason)
		require.Equal(t, feedback.ClassPermanent, got[0].Class)
		require.False(t, got[0].CreatedAt.IsZero())
	})
	// A delivery that answers the address is gone for good (an app removed
	// from the device, a webhook endpoint's 410, an unknown mailbox) or
	// that the person unsubscribed there (an SMS STOP) suppresses it, as
	// the provider's report of it would: the next request to it ends
	// suppressed without a call.
	for code, class := range map[string]feedback.Class{
		delivery.CodeRecipientGone:         feedback.ClassPermanent,
		delivery.CodeRecipientUnsubscribed: feedback.ClassUnsubscribe,
	} {
		t.Run("AnswerSuppresses/"+code, func(t *testing.T) {
			t.Parallel()
			addr := code + "@example.com"
			b.mail.ScriptRecipient(addr, delivery.Reject(delivery.WithCode(code, errors.New("mail: refused"))))
			first, st := stageWith(t, nil, mailTo(addr))
			require.Equal(t, relay.StateDead, st.State)
			require.Equal(t, code, st.Code)
			var got []notification.Suppression
			require.Eventually(t, func() bool {
				var err error
				got, err = b.client.Suppressions(t.Context(), &notification.SuppressionFilter{Channel: "mail", Address: addr})
				return err == nil && len(got) == 1
			}, testwait.Within, 10*time.Millisecond, "the address suppressed after its request's batch")
			require.Equal(t, class, got[0].Class)
			require.Equal(t, code, got[0].Reason)
			require.Equal(t, first.String(), got[0].Source, "the request whose answer said so")

			id, st := stageWith(t, nil, mailTo(addr))
			suppressed(t, id, st, code)
		})
	}
	// A Retry with such a code says nothing for good: nothing is
	// suppressed.
	t.Run("RetryDoesNotSuppress", func(t *testing.T) {
		t.Parallel()
		const addr = "retried@example.com"
		b.mail.ScriptRecipient(addr, delivery.Retry(delivery.WithCode(delivery.CodeRecipientGone, errors.New("mail: not now"))),
			delivery.Delivered())
		id, st := stageWith(t, nil, mailTo(addr))
		require.Equal(t, notification.OutcomeDelivered, st.Outcome, "%+v", st)
		require.Equal(t, 2, b.mail.Count(id), "retried, then delivered")
		got, err := b.client.Suppressions(t.Context(), &notification.SuppressionFilter{Channel: "mail", Address: addr})
		require.NoError(t, err)
		require.Empty(t, got)
	})
	t.Run("RolledBack", func(t *testing.T) {
		t.Parallel()
		tx, err := b.db.BeginTx(t.Context(), nil)
		require.NoError(t, err)
		require.NoError(t, b.client.Suppress(t.Context(), tx, notification.Suppression{Channel: "mail", Address: "back@example.com"}))
		require.NoError(t, tx.Rollback())
		id, st := stageWith(t, nil, mailTo("back@example.com"))
		require.Equal(t, notification.OutcomeDelivered, st.Outcome, "a suppression that did not commit stops nothing")
		require.Equal(t, 1, b.mail.Count(id))
	})
}

// Suppress refuses what it cannot keep, naming the field, and writes
// nothing; Suppressions pages through what it keeps, by channel, address
// and scope.
func TestSuppressionsAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t.Run("Invalid", func(t *testing.T) {
		for name, tc := range map[string]struct {
			s    notification.Suppression
			want string
		}{
			"Channel":      {notification.Suppression{Channel: "Mail!", Address: "a@example.com"}, "Channel"},
			"Address":      {notification.Suppression{Channel: "mail", Address: "  "}, "Address is empty"},
			"AddressLong":  {notification.Suppression{Channel: "mail", Address: string(make([]byte, notification.RecipientMaxLen+1))}, "Address"},
			"Class":        {notification.Suppression{Channel: "mail", Address: "a@example.com", Class: feedback.ClassDelivered}, "Class"},
			"Reason":       {notification.Suppression{Channel: "mail", Address: "a@example.com", Reason: "a\nb"}, "Reason"},
			"Source":       {notification.Suppression{Channel: "mail", Address: "a@example.com", Source: "\x00"}, "Source"},
			"Scope":        {notification.Suppression{Channel: "mail", Address: "a@example.com", Scope: "Not A Category"}, "Scope"},
			"AddressCtrl":  {notification.Suppression{Channel: "sms", Address: "+1555\x07"}, "Address"},
			"ReasonLength": {notification.Suppression{Channel: "mail", Address: "a@example.com", Reason: string(make([]byte, 201))}, "Reason"},
		} {
			t.Run(name, func(t *testing.T) {
				b.inTx(t, func(tx *sql.Tx) {
					err := b.client.Suppress(t.Context(), tx, tc.s)
					require.ErrorIs(t, err, notification.ErrInvalidRequest)
					require.ErrorContains(t, err, tc.want)
				})
			})
		}
		got, err := b.client.Suppressions(t.Context(), nil)
		require.NoError(t, err)
		require.Empty(t, got, "nothing written")
		require.ErrorContains(t, b.client.Suppress(t.Context(), nil, notification.Suppression{Channel: "mail", Address: "a@example.com"}), "tx")
	})
	t.Run("Pages", func(t *testing.T) {
		var want []string
		b.inTx(t, func(tx *sql.Tx) {
			for _, s := range []notification.Suppression{
				{Channel: "sms", Address: "+15550101"},
				{Channel: "mail", Address: "b@example.com", Scope: "marketing"},
				{Channel: "mail", Address: "b@example.com"},
				{Channel: "mail", Address: "a@example.com"},
				{Channel: "push", Address: "ExponentPushToken[x]"},
			} {
				require.NoError(t, b.client.Suppress(t.Context(), tx, s))
			}
		})
		want = []string{"mail a@example.com ", "mail b@example.com ", "mail b@example.com marketing", "push ExponentPushToken[x] ",
			"sms +15550101 "}
		var got []string
		f := notification.SuppressionFilter{Limit: 2}
		for range 4 {
			page, err := b.client.Suppressions(t.Context(), &f)
			require.NoError(t, err)
			if len(page) == 0 {
				break
			}
			require.LessOrEqual(t, len(page), 2)
			for _, s := range page {
				got = append(got, s.Channel+" "+s.Address+" "+s.Scope)
			}
			f.After = &page[len(page)-1]
		}
		require.Equal(t, want, got)
		page, err := b.client.Suppressions(t.Context(), &notification.SuppressionFilter{Channel: "mail", Address: "B@EXAMPLE.com"})
		require.NoError(t, err)
		require.Len(t, page, 2, "both scopes of the address")
		_, err = b.client.Suppressions(t.Context(), &notification.SuppressionFilter{Limit: notification.SuppressionsLimitMax + 1})
		require.ErrorContains(t, err, "Limit")

		// A transaction never begun is a mistake, not an operator's lift.
		_, err = b.client.Lift(t.Context(), (*sql.Tx)(nil), "sms", "+15550101", "")
		require.ErrorIs(t, err, notification.ErrInvalidRequest)
		require.ErrorContains(t, err, "tx is a nil *sql.Tx")
		// An operator's lift, without a transaction of its own.
		lifted, err := b.client.Lift(t.Context(), nil, "sms", "+15550101", "")
		require.NoError(t, err)
		require.True(t, lifted)
		page, err = b.client.Suppressions(t.Context(), &notification.SuppressionFilter{Channel: "sms"})
		require.NoError(t, err)
		require.Empty(t, page)
	})
}
