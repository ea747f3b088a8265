package notification_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

// inTx runs fn in a transaction of b's pool and commits it.
func (b testBundle) inTx(t *testing.T, fn func(tx *sql.Tx)) {
	t.Helper()
	tx, err := b.db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	fn(tx)
	require.NoError(t, tx.Commit())
}

// waitOutcome waits until id is settled and returns its status.
func (b testBundle) waitOutcome(t *testing.T, id uuid.UUID) notification.Status {
	t.Helper()
	st, err := b.client.Wait(waitCtx(t), id)
	require.NoError(t, err, "waiting for %s to settle", id)
	return st
}

// eachCommit runs test, in parallel, once for each way the claims of the
// channels mail and sms commit: the rules decide inside a claim's
// transaction, which a shared commit commits with the outcomes of the
// requests a rule ends and a commit per request rolls back.
func eachCommit(t *testing.T, test func(t *testing.T, commit map[string]notification.Commit)) {
	for name, mode := range map[string]notification.Commit{"Each": notification.CommitEach, "Shared": notification.CommitShared} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, map[string]notification.Commit{"mail": mode, "sms": mode})
		})
	}
}

// ruleEntry returns the last timeline entry of st that names rule.
func ruleEntry(t *testing.T, st notification.Status, rule string) relay.Entry {
	t.Helper()
	for _, e := range slices.Backward(st.Timeline) {
		if e.Detail["rule"] == rule {
			return e
		}
	}
	t.Fatalf("no timeline entry of rule %s in %+v", rule, st.Timeline)
	return relay.Entry{}
}

// Preferences decide at delivery, by the rows committed with the write
// that staged the request, each as a table test end to end: the provider
// is never called for a skipped request, which ends skipped with the rule
// and the row in its timeline, and no bulk re-emit sends it.
func TestPreferences(t *testing.T) {
	t.Parallel()
	eachCommit(t, func(t *testing.T, commit map[string]notification.Commit) {
		b := setup(t)
		cfg, reader := b.meteredConfig(map[string]notification.Category{
			"booking":   {},
			"marketing": {Defaults: map[string]bool{"": false, "mail": true}},
			"security":  {Critical: true},
		})
		cfg.Commit = commit
		b.run(t, b.dispatcher(t, cfg))
		t.Run("Cases", func(t *testing.T) { preferenceCases(t, b) })
		t.Run("NotReemitted", func(t *testing.T) {
			n, err := b.client.Reemit(t.Context(), nil)
			require.NoError(t, err)
			require.Zero(t, n, "skipped requests are not dead")
		})
		t.Run("Counted", func(t *testing.T) {
			var rm metricdata.ResourceMetrics
			require.NoError(t, reader.Collect(t.Context(), &rm))
			require.Equal(t, int64(4),
				sumCounter(rm, notification.MetricDecisions, notification.AttrChannel, "sms", notification.AttrRule, notification.RulePreference)+
					sumCounter(rm, notification.MetricDecisions, notification.AttrChannel, "mail", notification.AttrRule, notification.RulePreference))
		})
	})
}

// preferenceCases is the truth table of TestPreferences, each case a
// subject of its own, in parallel.
func preferenceCases(t *testing.T, b testBundle) {
	type pref struct {
		category, channel string
		on                bool
	}
	for _, tc := range []struct {
		name     string
		prefs    []pref
		category string
		channel  string
		critical bool
		sent     bool
	}{
		{"NoPreference", nil, "booking", "sms", false, true},
		{"EverythingOff", []pref{{"", "", false}}, "booking", "mail", false, false},
		{"EverythingOffSecurityMailGoes", []pref{{"", "", false}}, "security", "mail", false, true},
		{"EverythingOffCriticalRequestGoes", []pref{{"", "", false}}, "booking", "mail", true, true},
		{"BookingSMSOff", []pref{{"booking", "sms", false}}, "booking", "sms", false, false},
		{"BookingSMSOffMailGoes", []pref{{"booking", "sms", false}}, "booking", "mail", false, true},
		{"SMSOffBookingOn", []pref{{"", "sms", false}, {"booking", "", true}}, "booking", "sms", false, false},
		{"SMSOffBookingSMSOn", []pref{{"", "sms", false}, {"booking", "sms", true}}, "booking", "sms", false, true},
		{"MarketingSMSOffByDefault", nil, "marketing", "sms", false, false},
		{"MarketingMailOnByDefault", nil, "marketing", "mail", false, true},
		{"MarketingSMSOptedIn", []pref{{"marketing", "sms", true}}, "marketing", "sms", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			subject := "user-" + tc.name
			req := notification.Request{Channel: tc.channel, Recipient: "r-" + tc.name, Subject: subject,
				Category: tc.category, Critical: tc.critical}
			var id uuid.UUID
			// The preferences commit with the request.
			b.inTx(t, func(tx *sql.Tx) {
				for _, p := range tc.prefs {
					require.NoError(t, b.client.SetPreference(t.Context(), tx, subject,
						notification.Preference{Category: p.category, Channel: p.channel, Enabled: p.on}))
				}
				var err error
				id, err = b.client.Stage(t.Context(), tx, module, req)
				require.NoError(t, err)
			})
			st := b.waitOutcome(t, id)
			require.Equal(t, relay.StateProcessed, st.State)
			provider := map[string]interface{ Count(uuid.UUID) int }{"mail": b.mail, "sms": b.sms}[tc.channel]
			if tc.sent {
				require.Equal(t, notification.OutcomeDelivered, st.Outcome)
				require.Equal(t, 1, provider.Count(id))
				return
			}
			require.Equal(t, notification.OutcomeSkipped, st.Outcome)
			require.Equal(t, notification.CodeSkipped, st.Code)
			require.Zero(t, provider.Count(id), "the provider is never called for a skipped request")
			var e relay.Entry
			if len(tc.prefs) == 0 {
				e = ruleEntry(t, st, "category_default")
			} else {
				e = ruleEntry(t, st, notification.RulePreference)
				require.Contains(t, []string{tc.category, ""}, e.Detail["category"], "the row that decided")
				require.Equal(t, false, e.Detail["enabled"])
			}
			require.NotContains(t, fmt.Sprint(e.Detail), subject, "no subject in a timeline")
		})
	}
}

// A category not declared in Config.Categories ends its requests dead,
// and Config.Categories is the dispatcher's own copy.
func TestUndeclaredCategoryIsDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.Categories = map[string]notification.Category{"booking": {Defaults: map[string]bool{"mail": true}}}
	b.run(t, b.dispatcher(t, cfg))
	// The dispatcher keeps its own: what the caller changes afterwards
	// changes nothing (and races with nothing).
	cfg.Categories["bookings"] = notification.Category{}
	cfg.Categories["booking"].Defaults["mail"] = false
	id := b.stage(t, notification.Request{Channel: "mail", Recipient: "a@example.com", Category: "bookings"})[0]
	st := b.waitOutcome(t, id)
	require.Equal(t, relay.StateDead, st.State)
	require.Equal(t, notification.CodeUnknownCategory, st.Code)
	require.Contains(t, st.Reason, `category "bookings" is not declared`)
	id = b.stage(t, notification.Request{Channel: "mail", Recipient: "a@example.com", Category: "booking"})[0]
	require.Equal(t, notification.OutcomeDelivered, b.waitOutcome(t, id).Outcome, "its default as configured")
}

// A request delivered by a hand whose settle was lost is handed again
// (here by a re-emit) after its subject turned the channel off: its
// committed inbox claim says it was delivered, and no rule ends it as
// skipped. The provider is not called again, and no decision is counted.
func TestARuleDoesNotEndARequestDeliveredBefore(t *testing.T) {
	t.Parallel()
	eachCommit(t, func(t *testing.T, commit map[string]notification.Commit) {
		b := setup(t)
		cfg, reader := b.meteredConfig(map[string]notification.Category{"booking": {}})
		cfg.Commit = commit
		b.run(t, b.dispatcher(t, cfg))
		id := b.stage(t, notification.Request{Channel: "mail", Recipient: "a@example.com", Subject: "user-1", Category: "booking"})[0]
		require.Equal(t, notification.OutcomeDelivered, b.waitOutcome(t, id).Outcome)

		b.inTx(t, func(tx *sql.Tx) {
			require.NoError(t, b.client.SetPreference(t.Context(), tx, "user-1",
				notification.Preference{Category: "booking", Channel: "mail", Enabled: false}))
		})
		b.loseSettleAndReemit(t, id)

		st := b.waitOutcome(t, id)
		require.Equal(t, notification.OutcomeDelivered, st.Outcome, "delivered before; not skipped: %+v", st)
		require.Equal(t, notification.CodeDelivered, st.Code)
		require.Equal(t, 1, b.mail.Count(id), "delivered once")
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(t.Context(), &rm))
		require.Zero(t, sumCounter(rm, notification.MetricDecisions, notification.AttrChannel, "mail", notification.AttrRule, notification.RulePreference))
	})
}

// Quiet hours defer a request that comes due inside the subject's window
// to its end, without spending an attempt or a hand; a critical request
// goes at once; as of staging, one staged before the window goes. Each
// subject's windows are its own, though the dispatcher keeps them
// decoded.
func TestQuietHours(t *testing.T) {
	t.Parallel()
	eachCommit(t, func(t *testing.T, commit map[string]notification.Commit) {
		b := setup(t)
		cfg := b.config()
		cfg.Commit = commit
		cfg.QuietHoursJitter = -1
		b.run(t, b.dispatcher(t, cfg))

		// A window around now, in the subject's zone.
		loc, err := time.LoadLocation("Asia/Kolkata")
		require.NoError(t, err)
		now := time.Now().In(loc)
		start := notification.At(now.Add(-5*time.Minute).Hour(), now.Add(-5*time.Minute).Minute())
		end := notification.At(now.Add(30*time.Minute).Hour(), now.Add(30*time.Minute).Minute())
		later := now.Add(2 * time.Hour)
		b.inTx(t, func(tx *sql.Tx) {
			require.NoError(t, b.client.SetQuietHours(t.Context(), tx, "driver-7", notification.QuietHours{
				TimeZone: "Asia/Kolkata", Windows: []notification.QuietWindow{{Start: start, End: end, Channels: []string{"sms"}}}}))
			require.NoError(t, b.client.SetQuietHours(t.Context(), tx, "driver-9", notification.QuietHours{
				TimeZone: "Asia/Kolkata", Windows: []notification.QuietWindow{{Start: notification.At(later.Hour(), later.Minute()),
					End: notification.At(later.Add(time.Hour).Hour(), later.Minute()), Channels: []string{"sms"}}}}))
		})
		sms := notification.Request{Channel: "sms", Recipient: "+15550001", Subject: "driver-7"}
		critical := sms
		critical.Critical = true
		mail := sms
		mail.Channel = "mail"
		other := sms
		other.Subject, other.Recipient = "driver-9", "+15550003"
		ids := b.stage(t, sms, critical, mail, other)

		require.Equal(t, notification.OutcomeDelivered, b.waitOutcome(t, ids[1]).Outcome, "critical goes at once")
		require.Equal(t, notification.OutcomeDelivered, b.waitOutcome(t, ids[2]).Outcome, "the window holds back sms only")
		require.Equal(t, notification.OutcomeDelivered, b.waitOutcome(t, ids[3]).Outcome, "another subject's window is not open")
		deferred := b.waitDeferred(t, ids[0])
		require.Zero(t, deferred.Attempts)
		require.Equal(t, 0, deferred.Hands, "no hand spent")
		require.Zero(t, b.sms.Count(ids[0]))
		e := ruleEntry(t, deferred, notification.RuleQuietHours)
		require.Equal(t, notification.CodeQuietHours, e.Code)
		require.Equal(t, start.String()+"-"+end.String()+" (sms)", e.Detail["window"])
		require.Equal(t, "Asia/Kolkata", e.Detail["time_zone"])
		require.WithinDuration(t, now.Add(30*time.Minute), deferred.NextAttempt, 2*time.Minute, "due when the window ends")

		// The window ends (the subject lifts it, and the due time comes):
		// handed again, it goes.
		b.inTx(t, func(tx *sql.Tx) {
			require.NoError(t, b.client.SetQuietHours(t.Context(), tx, "driver-7", notification.QuietHours{}))
		})
		b.makeDue(t, ids[0])
		st := b.waitOutcome(t, ids[0])
		require.Equal(t, notification.OutcomeDelivered, st.Outcome)
		require.Equal(t, 1, st.Hands)
		require.Equal(t, 1, b.sms.Count(ids[0]))
	})
}

func TestQuietHoursAsOfStaging(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.QuietHoursJitter = -1
	d := b.dispatcher(t, cfg)

	now := time.Now().UTC()
	from := now.Add(-5 * time.Minute)
	to := now.Add(30 * time.Minute)
	b.inTx(t, func(tx *sql.Tx) {
		require.NoError(t, b.client.SetQuietHours(t.Context(), tx, "driver-8", notification.QuietHours{TimeZone: "UTC",
			Windows: []notification.QuietWindow{{Start: notification.At(from.Hour(), from.Minute()), End: notification.At(to.Hour(), to.Minute())}}}))
	})
	asOfStaging := notification.Request{Channel: "sms", Recipient: "+15550002", Subject: "driver-8", QuietHoursAsOfStaging: true}
	asOfHand := asOfStaging
	asOfHand.QuietHoursAsOfStaging = false
	ids := b.stage(t, asOfStaging, asOfHand)
	// Both were staged ten minutes ago, before the window began.
	_, err := b.db.ExecContext(t.Context(), `UPDATE "`+b.schema+`".outbox SET created_at = now() - interval '10 minutes'`)
	require.NoError(t, err)
	b.run(t, d)

	require.Equal(t, notification.OutcomeDelivered, b.waitOutcome(t, ids[0]).Outcome, "decided as of staging: before the window")
	st := b.waitDeferred(t, ids[1])
	require.Equal(t, "hand", ruleEntry(t, st, notification.RuleQuietHours).Detail["as_of"])
}

// The jitter that spreads the end of a quiet window never takes a request
// past its expiry: one that could go when the window ends does.
func TestQuietHoursJitterStaysBeforeExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.QuietHoursJitter = time.Hour
	b.run(t, b.dispatcher(t, cfg))

	now := time.Now().UTC()
	from, to := now.Add(-5*time.Minute), now.Add(30*time.Minute)
	b.inTx(t, func(tx *sql.Tx) {
		require.NoError(t, b.client.SetQuietHours(t.Context(), tx, "driver-5", notification.QuietHours{TimeZone: "UTC",
			Windows: []notification.QuietWindow{{Start: notification.At(from.Hour(), from.Minute()), End: notification.At(to.Hour(), to.Minute())}}}))
	})
	end := to.Truncate(time.Minute)
	expires := end.Add(4 * time.Minute)
	req := notification.Request{Channel: "sms", Recipient: "+15550005", Subject: "driver-5", ExpiresAt: expires}
	for _, id := range b.stage(t, req, req, req, req, req) {
		st := b.waitDeferred(t, id)
		require.False(t, st.NextAttempt.Before(end), "due at %s, before the window ends at %s: %+v", st.NextAttempt, end, st)
		require.True(t, st.NextAttempt.Before(expires), "due at %s, past its expiry at %s", st.NextAttempt, expires)
	}
}

// waitDeferred waits until id has a quiet-hours entry and returns its
// status.
func (b testBundle) waitDeferred(t *testing.T, id uuid.UUID) notification.Status {
	t.Helper()
	ctx := waitCtx(t)
	for {
		st, err := b.client.Status(t.Context(), id)
		require.NoError(t, err)
		if st.Code == "" && len(st.Timeline) > 1 && st.Timeline[len(st.Timeline)-1].Code == notification.CodeQuietHours {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waited for %s to be deferred by quiet hours: %+v", id, st)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// makeDue makes id due now, as the passing of its deferral would.
func (b testBundle) makeDue(t *testing.T, id uuid.UUID) {
	t.Helper()
	_, err := b.db.ExecContext(t.Context(), `UPDATE "`+b.schema+`".outbox SET available_at = now() WHERE id = $1`, id)
	require.NoError(t, err)
	_, err = b.db.ExecContext(t.Context(), `SELECT pg_notify($1, $2)`, b.schema+".outbox", module)
	require.NoError(t, err)
}

// A request past its ExpiresAt ends expired instead of going out: at its
// hand, before a retry that would come after it, or when quiet hours
// would hold it past it.
func TestExpiry(t *testing.T) {
	t.Parallel()
	eachCommit(t, func(t *testing.T, commit map[string]notification.Commit) {
		b := setup(t)
		cfg := b.config()
		cfg.Commit = commit
		cfg.Policy.BaseDelay = time.Hour
		b.run(t, b.dispatcher(t, cfg))
		b.sms.ScriptRecipient("+15550003", delivery.Retry(errors.New("carrier busy")))

		// A quiet window around now that ends after the third request
		// expires.
		now := time.Now().UTC()
		b.inTx(t, func(tx *sql.Tx) {
			require.NoError(t, b.client.SetQuietHours(t.Context(), tx, "night-owl", notification.QuietHours{TimeZone: "UTC",
				Windows: []notification.QuietWindow{{Start: notification.TimeOfDayOf(now.Add(-5 * time.Minute)),
					End: notification.TimeOfDayOf(now.Add(time.Hour)), Channels: []string{"mail"}}}}))
		})

		past := notification.Request{Channel: "mail", Recipient: "a@example.com", ExpiresAt: time.Now().Add(-time.Second)}
		retried := notification.Request{Channel: "sms", Recipient: "+15550003", ExpiresAt: time.Now().Add(10 * time.Minute)}
		quiet := notification.Request{Channel: "mail", Recipient: "b@example.com", Subject: "night-owl",
			ExpiresAt: time.Now().Add(10 * time.Minute)}
		ids := b.stage(t, past, retried, quiet)

		st := b.waitOutcome(t, ids[0])
		require.Equal(t, notification.OutcomeExpired, st.Outcome)
		require.Equal(t, notification.CodeExpired, st.Code)
		require.Zero(t, b.mail.Count(ids[0]))
		st = b.waitOutcome(t, ids[1])
		require.Equal(t, notification.OutcomeExpired, st.Outcome, "its next attempt would come after it expires")
		require.Equal(t, 1, b.sms.Count(ids[1]))
		require.Equal(t, "expires before its next attempt", ruleEntry(t, st, notification.RuleExpiry).Detail["why"])
		st = b.waitOutcome(t, ids[2])
		require.Equal(t, notification.OutcomeExpired, st.Outcome, "the quiet window would hold it past its expiry")
		require.Zero(t, b.mail.Count(ids[2]))
		require.Contains(t, ruleEntry(t, st, notification.RuleExpiry).Detail["why"], "expires before the quiet window")
	})
}

// The first request with a dedup key whose delivery commits claims it;
// others that come due afterwards are duplicates that carry its id and
// reference, and the provider never sees them.
func TestDedupKeys(t *testing.T) {
	t.Parallel()
	eachCommit(t, func(t *testing.T, commit map[string]notification.Commit) {
		b := setup(t)
		cfg := b.config()
		cfg.Commit = commit
		b.mail.ScriptRecipient("first@example.com", delivery.DeliveredWithReference("msg-1"))
		b.run(t, b.dispatcher(t, cfg))

		// A double click: two confirmations in one write, one key.
		confirm := notification.Request{Channel: "mail", Recipient: "first@example.com", DedupKey: "booking-7/confirmed"}
		ids := b.stage(t, confirm, confirm)
		first, second := b.waitOutcome(t, ids[0]), b.waitOutcome(t, ids[1])
		sent, dup := first, second
		if first.Outcome == notification.OutcomeDuplicate {
			sent, dup = second, first
		}
		require.Equal(t, notification.OutcomeDelivered, sent.Outcome)
		require.Equal(t, notification.OutcomeDuplicate, dup.Outcome)
		require.Equal(t, "msg-1", dup.Reference, "the first receipt, marked as a duplicate")
		// A provider's report naming msg-1 is about the first only.
		about, err := b.ob.FindByResult(t.Context(), b.db, notification.Kind, "mail", "msg-1")
		require.NoError(t, err)
		require.Len(t, about, 1)
		require.Equal(t, sent.ID, about[0].ID)
		require.Equal(t, sent.ID.String(), ruleEntry(t, dup, notification.RuleDedup).Detail["duplicate_of"])
		require.Equal(t, 1, b.mail.Count(sent.ID)+b.mail.Count(dup.ID), "one provider call")
		if commit["mail"] == notification.CommitShared {
			// One transaction claims its keys in id order, the
			// order of staging: the key goes to the lower id.
			first := slices.MinFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
			require.Equal(t, first, sent.ID, "the request staged first is the one delivered")
		}

		// A first request that fails does not hold the key.
		b.mail.ScriptRecipient("bounce@example.com", delivery.Reject(errors.New("no such mailbox")))
		failing := notification.Request{Channel: "mail", Recipient: "bounce@example.com", DedupKey: "booking-8/confirmed"}
		id := b.stage(t, failing)[0]
		require.Equal(t, relay.StateDead, b.waitOutcome(t, id).State)
		fixed := failing
		fixed.Recipient = "fixed@example.com"
		id = b.stage(t, fixed)[0]
		require.Equal(t, notification.OutcomeDelivered, b.waitOutcome(t, id).Outcome)

		// Nor does one a rule ends, though its claim took the key
		// before the rules were applied.
		expired := notification.Request{Channel: "mail", Recipient: "late@example.com", DedupKey: "booking-9/confirmed",
			ExpiresAt: time.Now().Add(-time.Second)}
		id = b.stage(t, expired)[0]
		require.Equal(t, notification.OutcomeExpired, b.waitOutcome(t, id).Outcome)
		expired.ExpiresAt = time.Time{}
		id = b.stage(t, expired)[0]
		require.Equal(t, notification.OutcomeDelivered, b.waitOutcome(t, id).Outcome, "the key is free")
	})
}

// Two relays deliver requests that share keys at the same time: for each
// key exactly one provider call commits.
func TestDedupKeysAcrossTwoRelays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	var mu sync.Mutex
	calls := map[string]int{}
	cfg.Deliveries["mail"] = delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
		mu.Lock()
		calls[p.Recipient]++
		mu.Unlock()
		select { // long enough for the other relay to reach the same key
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return delivery.Retry(ctx.Err())
		}
		return delivery.DeliveredWithReference("ref-" + p.ID.String())
	})
	const keys = 40
	var reqs []notification.Request
	for k := range keys {
		for range 3 {
			reqs = append(reqs, notification.Request{Channel: "mail", Recipient: fmt.Sprintf("key%d@example.com", k),
				DedupKey: fmt.Sprintf("key-%d", k)})
		}
	}
	ids := b.stage(t, reqs...)
	rc := b.relayConfig(t)
	rc.BatchSize, rc.Concurrency = 5, 10
	b.runWith(t, rc, b.dispatcher(t, cfg))
	b.runWith(t, rc, b.dispatcher(t, cfg))

	delivered := map[string]int{}
	for _, id := range ids {
		st := b.waitOutcome(t, id)
		require.Equal(t, relay.StateProcessed, st.State, "%+v", st)
		if st.Outcome == notification.OutcomeDelivered {
			delivered[st.Reference]++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, calls, keys)
	for recipient, n := range calls {
		require.Equal(t, 1, n, "provider calls for %s", recipient)
	}
	require.Len(t, delivered, keys, "one delivered request per key")
}

// A request's secrets reach the template and nothing else: after the
// request ends, no table of the schema holds a byte of them; a dead
// request re-emitted after its secrets were erased ends dead again,
// saying so, instead of sending an empty code.
func TestSecrets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const code = "493817-secret"
	var mu sync.Mutex
	var seen []string
	cfg := b.config()
	cfg.Deliveries["sms"] = delivery.Func(func(_ context.Context, p delivery.Pending) delivery.Outcome {
		mu.Lock()
		seen = append(seen, fmt.Sprint(p.TemplateData()["code"]))
		mu.Unlock()
		if p.Recipient == "+15550009" {
			return delivery.Reject(errors.New("invalid number"))
		}
		return delivery.Delivered()
	})
	b.run(t, b.dispatcher(t, cfg))

	req := notification.Request{Channel: "sms", Recipient: "+15550004", Template: "otp", Category: "security",
		Data: map[string]any{"app": "Tidings"}, Secrets: map[string]string{"code": code}}
	bad := req
	bad.Recipient = "+15550009"
	ids := b.stage(t, req, bad)
	require.Equal(t, notification.OutcomeDelivered, b.waitOutcome(t, ids[0]).Outcome)
	require.Equal(t, relay.StateDead, b.waitOutcome(t, ids[1]).State)
	mu.Lock()
	require.Equal(t, []string{code, code}, seen, "the template had the code")
	mu.Unlock()
	require.Empty(t, b.dump(t, code), "no table holds the secret after the requests ended")

	dead, err := b.client.ListDead(t.Context(), nil)
	require.NoError(t, err)
	require.NotContains(t, fmt.Sprintf("%+v", dead), code)

	n, err := b.client.Reemit(t.Context(), &notification.DeadFilter{IDs: []uuid.UUID{ids[1]}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	st := b.waitOutcome(t, ids[1])
	require.Equal(t, relay.StateDead, st.State)
	require.Equal(t, notification.CodeSecretErased, st.Code)
	mu.Lock()
	require.Len(t, seen, 2, "not delivered again without its code")
	mu.Unlock()
}

// dump returns the rows of every table of b's schema whose text holds s.
func (b testBundle) dump(t *testing.T, s string) []string {
	t.Helper()
	rows, err := b.db.QueryContext(t.Context(), `SELECT table_name FROM information_schema.tables WHERE table_schema = $1`, b.schema)
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		tables = append(tables, name)
	}
	require.NoError(t, rows.Err())
	rows.Close()
	require.Contains(t, tables, "outbox", "the table that holds the secrets")
	var hits []string
	for _, table := range tables {
		rows, err := b.db.QueryContext(t.Context(), fmt.Sprintf(`SELECT t::text FROM %q.%q t`, b.schema, table))
		require.NoError(t, err)
		for rows.Next() {
			var row string
			require.NoError(t, rows.Scan(&row))
			if strings.Contains(row, s) || strings.Contains(row, fmt.Sprintf("%x", s)) {
				hits = append(hits, table+": "+row)
			}
		}
		require.NoError(t, rows.Err())
		rows.Close()
	}
	return hits
}

// A dedup key is forgotten after DedupRetention: a request with it is
// delivered again. Another dispatcher's keys and claims in the same schema
// are its own to purge, at its own retention.
func TestDedupKeysArePurgedAfterTheirRetention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d := b.dispatcher(t, b.config())
	b.run(t, d)
	req := notification.Request{Channel: "mail", Recipient: "a@example.com", DedupKey: "weekly-digest"}
	first := b.stage(t, req)[0]
	require.Equal(t, notification.OutcomeDelivered, b.waitOutcome(t, first).Outcome)
	_, err := b.db.ExecContext(t.Context(), `INSERT INTO "`+b.schema+`".dedup (consumer, key, event_id)
		VALUES ('digest', 'weekly-digest', gen_random_uuid())`)
	require.NoError(t, err)
	_, err = b.db.ExecContext(t.Context(), `INSERT INTO "`+b.schema+`".inbox (consumer, event_id, claimed_at)
		VALUES ('digest', gen_random_uuid(), now() - interval '400 days')`)
	require.NoError(t, err)

	_, err = b.db.ExecContext(t.Context(), `UPDATE "`+b.schema+`".dedup SET claimed_at = now() - interval '29 days'`)
	require.NoError(t, err)
	n, err := d.Purge(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the key; the inbox claim is younger than its retention")
	for _, table := range []string{"dedup", "inbox"} {
		var left int
		require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT count(*) FROM "`+b.schema+`".`+table+
			` WHERE consumer = 'digest'`).Scan(&left))
		require.Equal(t, 1, left, "another dispatcher's row of %s", table)
	}
	again := b.stage(t, req)[0]
	require.Equal(t, notification.OutcomeDelivered, b.waitOutcome(t, again).Outcome)
	require.Equal(t, 1, b.mail.Count(again))
}

// The rules' setters check their arguments, name the field, and write
// nothing on an error.
func TestRulesRefuseBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	for name, tc := range map[string]struct {
		err  error
		want string
	}{
		"EmptySubject": {b.client.SetPreference(ctx, b.db, "", notification.Preference{}), "subject is empty"},
		"BadChannel":   {b.client.SetPreference(ctx, b.db, "u1", notification.Preference{Channel: "Push!"}), "Channel"},
		"BadCategory":  {b.client.DeletePreference(ctx, b.db, "u1", "a b", ""), "Category"},
		"NilTx":        {b.client.SetPreference(ctx, nil, "u1", notification.Preference{}), "tx is nil"},
		"BadZone": {b.client.SetQuietHours(ctx, b.db, "u1", notification.QuietHours{TimeZone: "Mars/Olympus",
			Windows: []notification.QuietWindow{{Start: notification.At(22, 0), End: notification.At(7, 0)}}}), "QuietHours.TimeZone"},
		// The relay machine's own zone, whichever that is.
		"LocalZone": {b.client.SetQuietHours(ctx, b.db, "u1", notification.QuietHours{TimeZone: "Local",
			Windows: []notification.QuietWindow{{Start: notification.At(22, 0), End: notification.At(7, 0)}}}), `QuietHours.TimeZone "Local"`},
		"EmptyWindow": {b.client.SetQuietHours(ctx, b.db, "u1", notification.QuietHours{TimeZone: "UTC",
			Windows: []notification.QuietWindow{{Start: notification.At(7, 0), End: notification.At(7, 0)}}}), "QuietHours.Windows[0]: Start and End are both 07:00"},
		"BadDay": {b.client.SetQuietHours(ctx, b.db, "u1", notification.QuietHours{TimeZone: "UTC",
			Windows: []notification.QuietWindow{{Days: []time.Weekday{7}, Start: notification.At(1, 0), End: notification.At(2, 0)}}}), "Days holds 7"},
	} {
		require.ErrorIs(t, tc.err, notification.ErrInvalidRequest, name)
		require.ErrorContains(t, tc.err, tc.want, name)
	}
	prefs, err := b.client.Preferences(ctx, "u1")
	require.NoError(t, err)
	require.Empty(t, prefs)
	q, err := b.client.QuietHoursOf(ctx, "u1")
	require.NoError(t, err)
	require.Empty(t, q.Windows)

	// Staging checks the new fields too.
	for name, req := range map[string]notification.Request{
		"Category": {Channel: "mail", Recipient: "a@example.com", Category: "Booking"},
		"Subject":  {Channel: "mail", Recipient: "a@example.com", Subject: "ada\n"},
		"DedupKey": {Channel: "mail", Recipient: "a@example.com", DedupKey: strings.Repeat("k", notification.DedupKeyMaxLen+1)},
		"Secrets":  {Channel: "mail", Recipient: "a@example.com", Data: map[string]any{"code": 1}, Secrets: map[string]string{"code": "2"}},
		"ExpiresAt": {Channel: "mail", Recipient: "a@example.com", NotBefore: time.Now().Add(time.Hour),
			ExpiresAt: time.Now().Add(time.Minute)},
	} {
		_, err := b.client.Stage(ctx, b.db, module, req)
		require.ErrorIs(t, err, notification.ErrInvalidRequest, name)
		require.ErrorContains(t, err, name, name)
		require.NotContains(t, err.Error(), "ada", "no subject quoted")
	}
}
