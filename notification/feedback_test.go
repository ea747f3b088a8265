package notification_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1" // Twilio's scheme is HMAC-SHA1.
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/notification/feedback"
	"github.com/tidings-go/tidings/recording"
	"github.com/tidings-go/tidings/relay"
)

// The receivers' credentials in these tests.
const (
	resendSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	twilioToken  = "test-auth-token-7f3a"
	// twilioURL is the public URL Twilio signs; the test server's own URL
	// differs, as it does behind a proxy.
	twilioURL = "https://receiver.example/feedback/twilio"
)

// feedbackRig is a bundle whose relay runs a dispatcher, with the
// module's FeedbackStore behind a real Resend and a real Twilio receiver,
// each on a test server, and the dispatcher's metrics in reader.
type feedbackRig struct {
	testBundle
	resend, twilio *httptest.Server
	store          feedback.Store // what the receivers store through, for reports of other providers
	reader         *sdkmetric.ManualReader
}

// newFeedbackRig starts a relay whose dispatcher has the bundle's config,
// changed by change (nil for none), and the receivers.
func newFeedbackRig(t *testing.T, change func(b testBundle, cfg *notification.Config)) feedbackRig {
	t.Helper()
	r := feedbackRig{testBundle: setup(t), reader: sdkmetric.NewManualReader()}
	cfg := r.config()
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	if change != nil {
		change(r.testBundle, &cfg)
	}
	r.run(t, r.dispatcher(t, cfg))
	var err error
	r.store, err = r.client.FeedbackStore(module)
	require.NoError(t, err)
	resend, err := feedback.NewResend(&feedback.ResendConfig{Secrets: []string{resendSecret}}, r.store)
	require.NoError(t, err)
	twilio, err := feedback.NewTwilio(&feedback.TwilioConfig{URL: twilioURL, AuthTokens: []string{twilioToken}}, r.store)
	require.NoError(t, err)
	r.resend, r.twilio = httptest.NewServer(resend), httptest.NewServer(twilio)
	t.Cleanup(r.resend.Close)
	t.Cleanup(r.twilio.Close)
	return r
}

// postSigned posts body to srv with header and requires a 2xx: the
// report committed.
func postSigned(t *testing.T, srv *httptest.Server, header http.Header, body []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header = header
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 2, resp.StatusCode/100, "the receiver's answer: %s", resp.Status)
}

// postResend posts a Resend event with the Svix id svixID, signed as Svix
// signs: HMAC-SHA256 over "id.timestamp.body" with the secret's key. Each
// post signs anew, as a provider's retry does.
func (r feedbackRig) postResend(t *testing.T, svixID string, event []byte) {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(resendSecret, "whsec_"))
	require.NoError(t, err)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(svixID + "." + ts + "."))
	mac.Write(event)
	h := http.Header{}
	h.Set(feedback.SvixIDHeader, svixID)
	h.Set(feedback.SvixTimestampHeader, ts)
	h.Set(feedback.SvixSignatureHeader, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	h.Set("Content-Type", "application/json")
	postSigned(t, r.resend, h, event)
}

// resendEvent is the body of a Resend event of type typ about the email
// emailID to one address; bounceType is the bounce's type, or "" for
// another event.
func resendEvent(t *testing.T, typ, emailID, to, bounceType string) []byte {
	t.Helper()
	data := map[string]any{"email_id": emailID, "to": []string{to}}
	if bounceType != "" {
		data["bounce"] = map[string]string{"type": bounceType, "subType": "General"}
	}
	body, err := json.Marshal(map[string]any{"type": typ, "created_at": time.Now().UTC().Format(time.RFC3339), "data": data})
	require.NoError(t, err)
	return body
}

// postTwilio posts Twilio's form params, signed as Twilio signs: base64
// HMAC-SHA1 over the public URL and every parameter, sorted by name.
func (r feedbackRig) postTwilio(t *testing.T, params url.Values) {
	t.Helper()
	signed := twilioURL
	for _, name := range slices.Sorted(maps.Keys(params)) {
		for _, v := range params[name] {
			signed += name + v
		}
	}
	mac := hmac.New(sha1.New, []byte(twilioToken))
	mac.Write([]byte(signed))
	h := http.Header{}
	h.Set(feedback.TwilioSignatureHeader, base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	postSigned(t, r.twilio, h, []byte(params.Encode()))
}

// twilioInbound is an incoming SMS of body from a number.
func twilioInbound(sid, from, body string) url.Values {
	return url.Values{"MessageSid": {sid}, "From": {from}, "To": {"+15550000"}, "Body": {body}, "SmsStatus": {"received"}}
}

// twilioStatus is a status callback of the message sid to a number.
func twilioStatus(sid, to, status, errorCode string) url.Values {
	return url.Values{"MessageSid": {sid}, "To": {to}, "MessageStatus": {status}, "ErrorCode": {errorCode}}
}

// reportID is the record id of the report of provider's event.
func reportID(provider, eventID string) uuid.UUID {
	return notification.ReportID(feedback.Report{Provider: provider, EventID: eventID})
}

// waitApplied waits until the report of provider's event is applied and
// returns its record's status.
func (r feedbackRig) waitApplied(t *testing.T, provider, eventID string) relay.Status {
	t.Helper()
	st := r.waitSettled(t, reportID(provider, eventID))
	require.Equal(t, relay.StateProcessed, st.State, "the report: %+v", st)
	require.Equal(t, notification.CodeReportApplied, st.Code)
	return st
}

// suppressionsOf returns the suppressions of address on channel.
func (r feedbackRig) suppressionsOf(t *testing.T, channel, address string) []notification.Suppression {
	t.Helper()
	s, err := r.client.Suppressions(t.Context(), &notification.SuppressionFilter{Channel: channel, Address: address})
	require.NoError(t, err)
	return s
}

// requireSuppressed requires that address on channel has one suppression,
// of class and reason.
func (r feedbackRig) requireSuppressed(t *testing.T, channel, address string, class feedback.Class, reason string) notification.Suppression {
	t.Helper()
	s := r.suppressionsOf(t, channel, address)
	require.Len(t, s, 1, "suppressions of the address")
	require.Equal(t, class, s[0].Class)
	require.Equal(t, reason, s[0].Reason)
	return s[0]
}

// requireStopped stages a request of channel to address and requires
// that it ends suppressed without a call to provider.
func (r feedbackRig) requireStopped(t *testing.T, channel, address string, provider interface{ Count(uuid.UUID) int }) {
	t.Helper()
	id := r.stage(t, notification.Request{Channel: channel, Recipient: address, Template: "welcome"})[0]
	st := r.waitOutcome(t, id)
	require.Equal(t, notification.OutcomeSuppressed, st.Outcome, "a request to a suppressed address: %+v", st)
	require.Equal(t, notification.CodeSuppressed, st.Code)
	require.Zero(t, provider.Count(id), "the provider is never called for a suppressed address")
}

// requireDelivered stages a request of channel to address and requires
// that it is delivered, once.
func (r feedbackRig) requireDelivered(t *testing.T, channel, address string, provider interface{ Count(uuid.UUID) int }) {
	t.Helper()
	id := r.stage(t, notification.Request{Channel: channel, Recipient: address, Template: "welcome"})[0]
	require.Equal(t, notification.OutcomeDelivered, r.waitOutcome(t, id).Outcome)
	require.Equal(t, 1, provider.Count(id))
}

// deliveredWith stages a request of channel to recipient that provider
// delivers with reference, waits until it is, and returns its id.
func (r feedbackRig) deliveredWith(t *testing.T, provider *recording.Delivery, channel, recipient, reference string) uuid.UUID {
	t.Helper()
	provider.ScriptRecipient(recipient, delivery.DeliveredWithReference(reference))
	id := r.stage(t, notification.Request{Channel: channel, Recipient: recipient, Template: "welcome"})[0]
	st := r.waitOutcome(t, id)
	require.Equal(t, notification.OutcomeDelivered, st.Outcome)
	require.Equal(t, reference, st.Reference)
	return id
}

// notes returns the "feedback" entries of id's timeline.
func (r feedbackRig) notes(t *testing.T, id uuid.UUID) []relay.Entry {
	t.Helper()
	st, err := r.client.Status(t.Context(), id)
	require.NoError(t, err)
	var out []relay.Entry
	for _, e := range st.Timeline {
		if e.Event == "feedback" {
			out = append(out, e)
		}
	}
	return out
}

// A hard bounce posted by Resend suppresses the address it names: the
// message it is about gets a "feedback" entry, a pending request to the
// address (in another case) ends suppressed, and so does the next one,
// without a provider call; a pending request on another channel, or to an
// address that holds this one, is not ended. No timeline holds the
// address.
func TestFeedbackBounce(t *testing.T) {
	t.Parallel()
	r := newFeedbackRig(t, nil)
	sent := r.deliveredWith(t, r.mail, "mail", "Ada@Example.com", "email-1")
	later := mailTo("ADA@example.com")
	later.NotBefore = time.Now().Add(time.Hour)
	held := r.stage(t, later)[0]
	otherChannel := notification.Request{Channel: "sms", Recipient: "ada@example.com", Template: "code", NotBefore: later.NotBefore}
	longer := mailTo("lada@example.com")
	longer.NotBefore = later.NotBefore
	untouched := r.stage(t, otherChannel, longer)

	r.postResend(t, "msg_bounce_1", resendEvent(t, "email.bounced", "email-1", "Ada@Example.com", "Permanent"))
	rep := r.waitApplied(t, feedback.ProviderResend, "msg_bounce_1")
	report := reportID(feedback.ProviderResend, "msg_bounce_1")

	s := r.requireSuppressed(t, "mail", "ada@example.com", feedback.ClassPermanent, feedback.CodeBouncePermanent)
	require.Equal(t, feedback.ProviderResend, s.Provider)
	require.Equal(t, "msg_bounce_1", s.Source)

	notes := r.notes(t, sent)
	require.Len(t, notes, 1, "the bounced message's timeline")
	require.Equal(t, feedback.CodeBouncePermanent, notes[0].Code)
	require.Equal(t, report.String(), notes[0].Detail["report"])
	require.Equal(t, true, notes[0].Detail["suppressed"])

	st := r.waitOutcome(t, held)
	require.Equal(t, notification.OutcomeSuppressed, st.Outcome, "the pending request: %+v", st)
	require.Equal(t, notification.CodeSuppressed, st.Code)
	require.Zero(t, r.mail.Count(held))
	require.Equal(t, report.String(), ruleEntry(t, st, notification.RuleSuppression).Detail["report"])
	require.Equal(t, float64(1), rep.Timeline[len(rep.Timeline)-1].Detail["ended"], "the report's own timeline")
	for _, id := range untouched {
		st, err := r.client.Status(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, relay.StatePending, st.State, "a request to another channel or address ended: %+v", st)
	}

	r.requireStopped(t, "mail", "ada@example.com", r.mail)

	sentStatus, err := r.client.Status(t.Context(), sent)
	require.NoError(t, err)
	for _, tl := range [][]relay.Entry{sentStatus.Timeline, st.Timeline, rep.Timeline} {
		require.NotContains(t, strings.ToLower(fmt.Sprint(tl)), "example.com", "no address in a timeline")
	}
}

// A spam complaint suppresses the address for every category: the next
// request to it ends suppressed without a provider call.
func TestReportComplaint(t *testing.T) {
	t.Parallel()
	r := newFeedbackRig(t, nil)
	r.deliveredWith(t, r.mail, "mail", "cy@example.com", "email-2")
	r.postResend(t, "msg_complaint_1", resendEvent(t, "email.complained", "email-2", "cy@example.com", ""))
	r.waitApplied(t, feedback.ProviderResend, "msg_complaint_1")
	r.requireSuppressed(t, "mail", "cy@example.com", feedback.ClassComplaint, feedback.CodeComplaint)
	r.requireStopped(t, "mail", "cy@example.com", r.mail)
}

// A SendGrid group's unsubscribe or resubscribe is the provider's to
// enforce (its groups are not the dispatcher's categories): it suppresses
// nobody, and lifts no unsubscribe of the person's own.
func TestReportGroupIsTheProvidersToEnforce(t *testing.T) {
	t.Parallel()
	r := newFeedbackRig(t, nil)
	const grouped, kept = "grouped@example.com", "kept@example.com"
	require.NoError(t, r.client.Suppress(t.Context(), r.db, notification.Suppression{Channel: "mail", Address: kept}))
	require.NoError(t, r.store.Store(t.Context(), []feedback.Report{
		{Provider: feedback.ProviderSendGrid, EventID: "sg-group-1", Type: "group_unsubscribe", Class: feedback.ClassUnsubscribe,
			Code: feedback.CodeGroupUnsubscribe, Channel: "mail", Address: grouped},
		{Provider: feedback.ProviderSendGrid, EventID: "sg-group-2", Type: "group_resubscribe", Class: feedback.ClassResubscribe,
			Code: feedback.CodeGroupResubscribe, Channel: "mail", Address: kept},
	}))
	r.waitApplied(t, feedback.ProviderSendGrid, "sg-group-1")
	r.waitApplied(t, feedback.ProviderSendGrid, "sg-group-2")
	require.Empty(t, r.suppressionsOf(t, "mail", grouped))
	r.requireDelivered(t, "mail", grouped, r.mail)
	r.requireSuppressed(t, "mail", kept, feedback.ClassUnsubscribe, feedback.CodeUnsubscribe)
}

// A report that names no address stands for the address of the one
// request its message id names; when the id names several, none is
// guessed and nobody is suppressed.
func TestReportWithoutAnAddress(t *testing.T) {
	t.Parallel()
	r := newFeedbackRig(t, nil)
	const first, second = "first@example.com", "second@example.com"
	r.deliveredWith(t, r.mail, "mail", first, "email-shared")
	r.deliveredWith(t, r.mail, "mail", second, "email-shared")
	require.NoError(t, r.store.Store(t.Context(), []feedback.Report{{Provider: feedback.ProviderResend, EventID: "no-address-1",
		Type: "email.bounced", Class: feedback.ClassPermanent, Code: feedback.CodeBouncePermanent, Channel: "mail",
		MessageID: "email-shared"}}))
	r.waitApplied(t, feedback.ProviderResend, "no-address-1")
	require.Empty(t, r.suppressionsOf(t, "mail", first))
	require.Empty(t, r.suppressionsOf(t, "mail", second))
}

// A report a provider posts twice (its retry) is one record, applied
// once: one inbox claim, one timeline entry, a transient failure counted
// once, even when its record is handed again.
func TestReportPostedTwice(t *testing.T) {
	t.Parallel()
	r := newFeedbackRig(t, nil)
	reports := func(t *testing.T, eventID string) int {
		t.Helper()
		var n int
		require.NoError(t, r.db.QueryRowContext(t.Context(), `SELECT count(*) FROM "`+r.schema+`".outbox
			WHERE kind = $1 AND payload->>'event_id' = $2`, notification.KindReport, eventID).Scan(&n))
		return n
	}

	for _, tc := range []struct {
		name, typ, bounce, to string
		// then checks what the report changed.
		then func(t *testing.T, id uuid.UUID, rep relay.Status)
	}{
		{"Bounce", "email.bounced", "Permanent", "bea@example.com", func(t *testing.T, _ uuid.UUID, _ relay.Status) {
			r.requireSuppressed(t, "mail", "bea@example.com", feedback.ClassPermanent, feedback.CodeBouncePermanent)
		}},
		{"Transient", "email.delivery_delayed", "", "cy@example.com", func(t *testing.T, id uuid.UUID, rep relay.Status) {
			require.Equal(t, float64(1), rep.Timeline[len(rep.Timeline)-1].Detail["transient_failures"])
			// The record handed again, as after a lost answer to its
			// commit: the inbox claim says it was applied.
			var payload []byte
			require.NoError(t, r.db.QueryRowContext(t.Context(), `SELECT payload FROM "`+r.schema+`".outbox WHERE id = $1`, id).
				Scan(&payload))
			res := r.prepared(t, r.config()).Handle(t.Context(), relay.Record{ID: id, Module: module, Lane: notification.LaneFeedback,
				Kind: notification.KindReport, Payload: payload})
			require.Equal(t, "done", res.String())
			require.Equal(t, 1, r.claims(t, id))
			require.Equal(t, 1, r.transientFailures(t, "mail", "cy@example.com"), "counted once")
			require.Empty(t, r.suppressionsOf(t, "mail", "cy@example.com"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			svixID, emailID := "msg_twice_"+tc.name, "email-twice-"+tc.name
			sent := r.deliveredWith(t, r.mail, "mail", tc.to, emailID)
			event := resendEvent(t, tc.typ, emailID, tc.to, tc.bounce)
			r.postResend(t, svixID, event)
			r.postResend(t, svixID, event)
			rep := r.waitApplied(t, feedback.ProviderResend, svixID)
			r.postResend(t, svixID, event) // after it was applied
			id := reportID(feedback.ProviderResend, svixID)
			tc.then(t, id, rep)
			require.Equal(t, 1, reports(t, svixID))
			require.Equal(t, 1, r.claims(t, id))
			require.Len(t, r.notes(t, sent), 1, "the message's timeline")
		})
	}
}

// transientFailures is how many transient failures of address on channel
// count.
func (r feedbackRig) transientFailures(t *testing.T, channel, address string) int {
	t.Helper()
	var n int
	err := r.db.QueryRowContext(t.Context(), `SELECT cardinality(failed_at) FROM "`+r.schema+`".transient_failure
		WHERE channel = $1 AND address = $2`, channel, address).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0
	}
	require.NoError(t, err)
	return n
}

// TransientLimit transient failures of an address within the window
// suppress it, with reason transient.limit; fewer do not.
func TestReportTransientLimit(t *testing.T) {
	t.Parallel()
	r := newFeedbackRig(t, func(_ testBundle, cfg *notification.Config) { cfg.TransientLimit = 3 })
	delayed := func(t *testing.T, to string, n int) {
		t.Helper()
		for i := range n {
			id := fmt.Sprintf("msg_%s_%d", strings.Split(to, "@")[0], i)
			r.postResend(t, id, resendEvent(t, "email.delivery_delayed", "email-"+id, to, ""))
			r.waitApplied(t, feedback.ProviderResend, id)
		}
	}
	for _, tc := range []struct {
		name     string
		failures int
		// Twilio's unreachable handset instead of Resend's delay.
		sms        bool
		suppressed bool
	}{
		{"BelowTheLimit", 2, false, false},
		{"AtTheLimit", 3, false, true},
		{"SMSAtTheLimit", 3, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			channel, address := "mail", strings.ToLower(tc.name)+"@example.com"
			if tc.sms {
				channel, address = "sms", "+1555010"+strconv.Itoa(tc.failures)
				for i := range tc.failures {
					sid := fmt.Sprintf("SM-unreachable-%d", i)
					r.postTwilio(t, twilioStatus(sid, address, "undelivered", "30003"))
					r.waitApplied(t, feedback.ProviderTwilio, sid+":undelivered")
				}
			} else {
				delayed(t, address, tc.failures)
			}
			if !tc.suppressed {
				require.Empty(t, r.suppressionsOf(t, channel, address))
				require.Equal(t, tc.failures, r.transientFailures(t, channel, address))
				r.requireDelivered(t, channel, address, map[string]*recording.Delivery{"mail": r.mail, "sms": r.sms}[channel])
				return
			}
			r.requireSuppressed(t, channel, address, feedback.ClassTransient, notification.ReasonTransientLimit)
			require.Zero(t, r.transientFailures(t, channel, address), "the count starts over")
			r.requireStopped(t, channel, address, map[string]*recording.Delivery{"mail": r.mail, "sms": r.sms}[channel])
		})
	}
	// Failures older than TransientWindow (14 days) no longer count: two
	// of them and a fresh one stay below the limit.
	t.Run("OldFailuresAgeOut", func(t *testing.T) {
		t.Parallel()
		const address = "aged@example.com"
		delayed(t, address, 2)
		_, err := r.db.ExecContext(t.Context(), `UPDATE "`+r.schema+`".transient_failure
			SET failed_at = ARRAY(SELECT f - interval '15 days' FROM unnest(failed_at) f) WHERE channel = 'mail' AND address = $1`, address)
		require.NoError(t, err)
		r.postResend(t, "msg_aged_late", resendEvent(t, "email.delivery_delayed", "email-aged-late", address, ""))
		r.waitApplied(t, feedback.ProviderResend, "msg_aged_late")
		require.Empty(t, r.suppressionsOf(t, "mail", address))
		r.requireDelivered(t, "mail", address, r.mail)
	})
}

// A provider reports a message delayed at each of its retries (SendGrid's
// deferred, with an event id of its own each time): the message is one
// transient failure of its address, however many times it is reported.
func TestReportTransientLimitCountsAMessageOnce(t *testing.T) {
	t.Parallel()
	r := newFeedbackRig(t, func(_ testBundle, cfg *notification.Config) { cfg.TransientLimit = 3 })
	const to = "greylisted@example.com"
	for i := range 4 {
		id := fmt.Sprintf("msg_retry_%d", i)
		r.postResend(t, id, resendEvent(t, "email.delivery_delayed", "email-slow", to, ""))
		r.waitApplied(t, feedback.ProviderResend, id)
	}
	require.Empty(t, r.suppressionsOf(t, "mail", to))
	require.Equal(t, 1, r.transientFailures(t, "mail", to))
	r.requireDelivered(t, "mail", to, r.mail)
}

// An SMS STOP suppresses the number; a START lifts it and the next SMS is
// delivered. A START does not lift what a permanent failure suppressed.
func TestReportUnsubscribe(t *testing.T) {
	t.Parallel()
	r := newFeedbackRig(t, nil)

	t.Run("StopThenStart", func(t *testing.T) {
		t.Parallel()
		const number = "+15550100"
		r.postTwilio(t, twilioInbound("SM-stop-1", number, "Stop"))
		r.waitApplied(t, feedback.ProviderTwilio, "SM-stop-1")
		r.requireSuppressed(t, "sms", number, feedback.ClassUnsubscribe, feedback.CodeUnsubscribe)
		r.requireStopped(t, "sms", number, r.sms)

		r.postTwilio(t, twilioInbound("SM-start-1", number, "START"))
		rep := r.waitApplied(t, feedback.ProviderTwilio, "SM-start-1")
		require.Equal(t, float64(1), rep.Timeline[len(rep.Timeline)-1].Detail["lifted"])
		require.Empty(t, r.suppressionsOf(t, "sms", number))
		r.requireDelivered(t, "sms", number, r.sms)
	})

	// A verified report with a NUL (PostgreSQL keeps none) is taken, the
	// NUL replaced, rather than refused with a 503 on every post again.
	t.Run("NUL", func(t *testing.T) {
		t.Parallel()
		r.postTwilio(t, twilioInbound("SM-stop-nul", "+1555\x000101", "Stop"))
		r.waitApplied(t, feedback.ProviderTwilio, "SM-stop-nul")
		r.requireSuppressed(t, "sms", "+1555\uFFFD0101", feedback.ClassUnsubscribe, feedback.CodeUnsubscribe)
	})

	t.Run("StartKeepsAPermanentFailure", func(t *testing.T) {
		t.Parallel()
		const number = "+15550199"
		r.postTwilio(t, twilioStatus("SM-unknown", number, "undelivered", "30005"))
		r.waitApplied(t, feedback.ProviderTwilio, "SM-unknown:undelivered")
		r.requireSuppressed(t, "sms", number, feedback.ClassPermanent, "twilio.30005")

		r.postTwilio(t, twilioInbound("SM-start-2", number, "START"))
		rep := r.waitApplied(t, feedback.ProviderTwilio, "SM-start-2")
		require.NotContains(t, rep.Timeline[len(rep.Timeline)-1].Detail, "lifted")
		r.requireSuppressed(t, "sms", number, feedback.ClassPermanent, "twilio.30005")
		r.requireStopped(t, "sms", number, r.sms)
	})
}

// A report of a problem on our side (a carrier's spam filter) suppresses
// nobody: the number still gets messages, the message's timeline says
// what happened, and the report is counted as our_side.
func TestReportOurSide(t *testing.T) {
	t.Parallel()
	r := newFeedbackRig(t, nil)
	const number = "+15550142"
	sent := r.deliveredWith(t, r.sms, "sms", number, "SM-filtered")
	r.postTwilio(t, twilioStatus("SM-filtered", number, "undelivered", "30007"))
	r.waitApplied(t, feedback.ProviderTwilio, "SM-filtered:undelivered")

	require.Empty(t, r.suppressionsOf(t, "sms", number))
	notes := r.notes(t, sent)
	require.Len(t, notes, 1)
	require.Equal(t, "twilio.30007", notes[0].Code)
	require.Equal(t, string(feedback.ClassOurSide), notes[0].Detail["class"])
	r.requireDelivered(t, "sms", number, r.sms)

	// Counted once the report's commit is known, a moment after it.
	var counted int64
	require.Eventually(t, func() bool {
		var rm metricdata.ResourceMetrics
		require.NoError(t, r.reader.Collect(t.Context(), &rm))
		counted = sumCounter(rm, notification.MetricFeedback, notification.AttrProvider, feedback.ProviderTwilio,
			notification.AttrClass, string(feedback.ClassOurSide))
		return counted != 0
	}, testwait.Within, time.Millisecond, "the report counted as our_side")
	require.Equal(t, int64(1), counted)
}

// A bounce that suppresses an address while a delivery to it is running
// waits for the delivery's claim: a delivery that commits stays
// delivered; one that fails ends suppressed and is not tried again.
// Either way the provider was called once, the suppression holds, and
// nothing is left pending.
func TestReportRacesDelivery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		answer  delivery.Outcome
		outcome notification.Outcome
	}{
		{"DeliveryCommits", delivery.DeliveredWithReference("email-race"), notification.OutcomeDelivered},
		{"DeliveryFails", delivery.Retry(errors.New("mailbox server busy")), notification.OutcomeSuppressed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			slow := newBlocked()
			calls := &callCounter{n: map[uuid.UUID]int{}}
			r := newFeedbackRig(t, func(_ testBundle, cfg *notification.Config) {
				cfg.Deliveries = map[string]delivery.Delivery{"mail": calls.wrap(slow)}
			})
			id := r.stage(t, mailTo("race@example.com"))[0]
			testwait.Recv(t, slow.started, "the delivery")

			// A bounce of an earlier message to the address.
			r.postResend(t, "msg_race", resendEvent(t, "email.bounced", "email-earlier", "race@example.com", "Permanent"))
			r.waitReportMeetsClaim(t, reportID(feedback.ProviderResend, "msg_race"))
			slow.answer <- tc.answer

			st := r.waitOutcome(t, id)
			rep := r.waitApplied(t, feedback.ProviderResend, "msg_race")
			require.Equal(t, tc.outcome, st.Outcome, "%+v", st)
			require.Equal(t, 1, calls.Count(id), "the provider was called once")
			require.Equal(t, 1, r.claims(t, id))
			r.requireSuppressed(t, "mail", "race@example.com", feedback.ClassPermanent, feedback.CodeBouncePermanent)
			ended := rep.Timeline[len(rep.Timeline)-1].Detail["ended"]
			if tc.outcome == notification.OutcomeDelivered {
				require.Equal(t, "email-race", st.Reference)
				require.Nil(t, ended, "the report ends no delivered request")
			} else {
				require.Equal(t, notification.CodeSuppressed, st.Code)
				require.Equal(t, float64(1), ended)
			}
			r.requireStopped(t, "mail", "race@example.com", calls)
		})
	}
}

// waitReportMeetsClaim waits until the report's transaction waits on a
// delivery's inbox claim, or (when it does not wait) the report is
// applied.
func (r feedbackRig) waitReportMeetsClaim(t *testing.T, report uuid.UUID) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, r.db.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%"`+r.schema+`".inbox%'`).Scan(&waiting))
		return waiting > 0 || r.status(t, report).Settled()
	}, 15*time.Second, 5*time.Millisecond)
}

// callCounter counts a delivery's calls per request.
type callCounter struct {
	mu sync.Mutex
	n  map[uuid.UUID]int
}

// wrap returns d, counting its calls.
func (c *callCounter) wrap(d delivery.Delivery) delivery.Delivery {
	return delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
		c.mu.Lock()
		c.n[p.ID]++
		c.mu.Unlock()
		return d.Deliver(ctx, p)
	})
}

// Count is how many times the delivery was called for id.
func (c *callCounter) Count(id uuid.UUID) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

// expoReceipts plays Expo's getReceipts endpoint: a ticket's receipt is
// answered once it is ready, and every asked id is recorded.
type expoReceipts struct {
	mu     sync.Mutex
	ready  map[string]json.RawMessage // ticket -> its receipt
	asked  map[string]int
	server *httptest.Server
}

func newExpoReceipts(t *testing.T) *expoReceipts {
	t.Helper()
	e := &expoReceipts{ready: map[string]json.RawMessage{}, asked: map[string]int{}}
	e.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body struct {
			IDs []string `json:"ids"`
		}
		if req.URL.Path != "/--/api/v2/push/getReceipts" || json.NewDecoder(req.Body).Decode(&body) != nil {
			http.Error(w, `{"errors":[{"code":"VALIDATION_ERROR"}]}`, http.StatusBadRequest)
			return
		}
		data := map[string]json.RawMessage{}
		e.mu.Lock()
		for _, id := range body.IDs {
			e.asked[id]++
			if rc, ok := e.ready[id]; ok {
				data[id] = rc
			}
		}
		e.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
	}))
	t.Cleanup(e.server.Close)
	return e
}

// set makes ticket's receipt ready.
func (e *expoReceipts) set(ticket, receipt string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ready[ticket] = json.RawMessage(receipt)
}

// timesAsked is how often ticket was asked for.
func (e *expoReceipts) timesAsked(ticket string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.asked[ticket]
}

// receiptsRecord waits for the receipts record staged with the delivery
// of the request whose reference is ticket, and returns its id.
func (r feedbackRig) receiptsRecord(t *testing.T, ticket string) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	require.NoError(t, r.db.QueryRowContext(t.Context(), `SELECT id FROM "`+r.schema+`".outbox
		WHERE kind = $1 AND payload->'references' ? $2`, notification.KindReceipts, ticket).Scan(&id))
	return id
}

// Expo's receipts are fetched some time after a push is delivered: a
// token Expo reports DeviceNotRegistered is suppressed (the receipt names
// only the ticket: the request says which token), and the next push to
// it ends suppressed; a receipt not ready yet is asked for again.
func TestReceiptsExpo(t *testing.T) {
	t.Parallel()
	expo := newExpoReceipts(t)
	fetcher, err := feedback.NewExpo(&feedback.ExpoConfig{BaseURL: expo.server.URL, HTTPClient: expo.server.Client()})
	require.NoError(t, err)
	push := recording.New()
	r := newFeedbackRig(t, func(_ testBundle, cfg *notification.Config) {
		cfg.Deliveries["push"] = push
		cfg.Receipts = map[string]notification.Receipts{"push": {Fetcher: fetcher, After: 200 * time.Millisecond}}
	})

	t.Run("DeviceNotRegistered", func(t *testing.T) {
		t.Parallel()
		const token = "ExponentPushToken[gone-AAAA]"
		expo.set("ticket-1", `{"status":"error","message":"not registered","details":{"error":"DeviceNotRegistered"}}`)
		sent := r.deliveredWith(t, push, "push", token, "ticket-1")
		rec := r.waitSettled(t, r.receiptsRecord(t, "ticket-1"))
		require.Equal(t, notification.CodeReceiptsFetched, rec.Code, "%+v", rec)

		r.waitApplied(t, feedback.ProviderExpo, "ticket-1")
		r.requireSuppressed(t, "push", token, feedback.ClassPermanent, "expo.device_not_registered")
		notes := r.notes(t, sent)
		require.Len(t, notes, 1)
		require.Equal(t, "expo.device_not_registered", notes[0].Code)
		r.requireStopped(t, "push", token, push)
	})

	t.Run("AddressedToAUser", func(t *testing.T) {
		t.Parallel()
		// The request names the user, not the token, which its Resolver
		// gives at delivery: the receipt, which names neither, suppresses
		// the token the push went to.
		push := recording.New()
		r := newFeedbackRig(t, func(_ testBundle, cfg *notification.Config) {
			cfg.Deliveries["push"] = push
			cfg.Receipts = map[string]notification.Receipts{"push": {Fetcher: fetcher, After: 200 * time.Millisecond}}
			// The user's token is looked up at delivery.
			cfg.Resolvers = map[string]notification.Resolver{"push": notification.ResolverFunc(
				func(context.Context, []string) (map[string]string, error) {
					return map[string]string{"user-7": "ExponentPushToken[user-7s-AAAA]"}, nil
				})}
		})
		expo.set("ticket-u7", `{"status":"error","details":{"error":"DeviceNotRegistered"}}`)
		push.ScriptRecipient("ExponentPushToken[user-7s-AAAA]", delivery.DeliveredWithReference("ticket-u7"))
		sent := r.stage(t, notification.Request{Channel: "push", Recipient: "user-7", Template: "welcome"})[0]
		require.Equal(t, notification.OutcomeDelivered, r.waitOutcome(t, sent).Outcome)
		r.waitSettled(t, r.receiptsRecord(t, "ticket-u7"))
		r.waitApplied(t, feedback.ProviderExpo, "ticket-u7")
		require.Len(t, r.notes(t, sent), 1)
		require.Empty(t, r.suppressionsOf(t, "push", "user-7"), "a user id is no push token")
		r.requireSuppressed(t, "push", "ExponentPushToken[user-7s-AAAA]", feedback.ClassPermanent, "expo.device_not_registered")
		next := r.stage(t, notification.Request{Channel: "push", Recipient: "user-7", Template: "welcome"})[0]
		require.Equal(t, notification.OutcomeSuppressed, r.waitOutcome(t, next).Outcome)
		require.Zero(t, push.Count(next))
	})

	t.Run("NotReadyYet", func(t *testing.T) {
		t.Parallel()
		const token = "ExponentPushToken[late-BBBB]"
		sent := r.deliveredWith(t, push, "push", token, "ticket-2")
		id := r.receiptsRecord(t, "ticket-2")
		// Asked once, not ready: the record waits for another look.
		require.Eventually(t, func() bool {
			st := r.status(t, id)
			return slices.ContainsFunc(st.Timeline, func(e relay.Entry) bool { return e.Code == notification.CodeReceiptsPending })
		}, 15*time.Second, 5*time.Millisecond)
		require.Equal(t, relay.StatePending, r.status(t, id).State)
		expo.set("ticket-2", `{"status":"ok"}`)

		rec := r.waitSettled(t, id)
		require.Equal(t, notification.CodeReceiptsFetched, rec.Code, "%+v", rec)
		require.GreaterOrEqual(t, expo.timesAsked("ticket-2"), 2)
		r.waitApplied(t, feedback.ProviderExpo, "ticket-2")
		notes := r.notes(t, sent)
		require.Len(t, notes, 1)
		require.Equal(t, feedback.CodeDelivered, notes[0].Code)
		require.Empty(t, r.suppressionsOf(t, "push", token))
	})
}

// receiptsRecordOf is a receipts record of the push references refs, as
// a delivery stages it, for a dispatcher handed records by the test.
func receiptsRecordOf(t *testing.T, refs ...string) relay.Record {
	t.Helper()
	payload, err := json.Marshal(map[string]any{"channel": "push", "references": refs})
	require.NoError(t, err)
	return relay.Record{ID: uuid.New(), Module: module, Lane: notification.LaneFeedback, Kind: notification.KindReceipts,
		Payload: payload}
}

// A fetch of receipts that the provider refuses for a while is tried
// again as the Policy says, no sooner than the provider's Retry-After, and
// is dead with the provider's reason once the Policy's attempts are
// spent; a fetch cut short because the relay is shutting down is tried
// again, not dead.
func TestReceiptsFailing(t *testing.T) {
	t.Parallel()
	// expoDown answers every getReceipts with status, and Retry-After
	// when it is not empty.
	expoDown := func(t *testing.T, status int, retryAfter string) *feedback.Expo {
		t.Helper()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			http.Error(w, `{"errors":[{"code":"TOO_MANY_REQUESTS"}]}`, status)
		}))
		t.Cleanup(srv.Close)
		e, err := feedback.NewExpo(&feedback.ExpoConfig{BaseURL: srv.URL, HTTPClient: srv.Client()})
		require.NoError(t, err)
		return e
	}
	rigWith := func(t *testing.T, fetcher notification.ReceiptFetcher) (feedbackRig, *recording.Delivery) {
		t.Helper()
		push := recording.New()
		r := newFeedbackRig(t, func(_ testBundle, cfg *notification.Config) {
			cfg.Deliveries["push"] = push
			cfg.Policy.MaxAttempts = 2
			cfg.Receipts = map[string]notification.Receipts{"push": {Fetcher: fetcher, After: time.Millisecond}}
		})
		return r, push
	}

	t.Run("DeadAfterTheAttempts", func(t *testing.T) {
		t.Parallel()
		r, push := rigWith(t, expoDown(t, http.StatusServiceUnavailable, ""))
		r.deliveredWith(t, push, "push", "ExponentPushToken[down]", "ticket-down")
		st := r.waitSettled(t, r.receiptsRecord(t, "ticket-down"))
		require.Equal(t, relay.StateDead, st.State, "%+v", st)
		require.Equal(t, notification.CodeReceiptsFailed, st.Code)
		require.Equal(t, 2, st.Attempts)
		require.Contains(t, st.Reason, "503")
	})

	// A fetcher's panic is answered as its failure is, not with the
	// process's end.
	t.Run("FetcherPanics", func(t *testing.T) {
		t.Parallel()
		r, push := rigWith(t, panickingFetcher{})
		r.deliveredWith(t, push, "push", "ExponentPushToken[bug]", "ticket-bug")
		st := r.waitSettled(t, r.receiptsRecord(t, "ticket-bug"))
		require.Equal(t, relay.StateDead, st.State, "%+v", st)
		require.Equal(t, notification.CodeReceiptsFailed, st.Code)
		require.Equal(t, 2, st.Attempts)
		require.Contains(t, st.Reason, `receipt fetcher for channel "push" panicked: a bug`)
	})

	t.Run("RetryAfter", func(t *testing.T) {
		t.Parallel()
		r, push := rigWith(t, expoDown(t, http.StatusTooManyRequests, "3600"))
		r.deliveredWith(t, push, "push", "ExponentPushToken[busy]", "ticket-busy")
		id := r.receiptsRecord(t, "ticket-busy")
		require.Eventually(t, func() bool { return r.status(t, id).Attempts == 1 }, 15*time.Second, 5*time.Millisecond)
		st := r.status(t, id)
		require.Equal(t, relay.StatePending, st.State)
		require.Equal(t, notification.CodeReceiptsFailed, st.Code)
		require.WithinDuration(t, time.Now().Add(time.Hour), st.NextAttempt, 5*time.Minute, "as Expo's Retry-After asks")
	})

	t.Run("ShutDown", func(t *testing.T) {
		t.Parallel()
		asked := make(chan struct{}, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) {
			// The body read, the server notices the caller hang up.
			_, _ = io.Copy(io.Discard, req.Body)
			asked <- struct{}{}
			<-req.Context().Done() // answers only when the caller gives up
		}))
		t.Cleanup(srv.Close)
		fetcher, err := feedback.NewExpo(&feedback.ExpoConfig{BaseURL: srv.URL, HTTPClient: srv.Client()})
		require.NoError(t, err)
		b := setup(t)
		cfg := b.config()
		cfg.Deliveries["push"] = recording.New()
		cfg.Receipts = map[string]notification.Receipts{"push": {Fetcher: fetcher}}
		d := b.prepared(t, cfg)

		ctx, cancel := context.WithCancel(t.Context())
		results := make(chan relay.Result, 1)
		go func() { results <- d.Handle(ctx, receiptsRecordOf(t, "ticket-shutdown")) }()
		testwait.Recv(t, asked, "the fetch")
		cancel() // the relay's grace period ran out
		res := testwait.Recv(t, results, "the receipts record's answer")
		require.NotContains(t, res.String(), "dead", "a shutdown is no reason to give the receipts up")
	})
}

// panickingFetcher is a ReceiptFetcher with a bug.
type panickingFetcher struct{}

func (panickingFetcher) Receipts(context.Context, []string) ([]feedback.Report, error) {
	panic("a bug")
}

// countingFetcher is a ReceiptFetcher that counts its calls and finds no
// receipt.
type countingFetcher struct{ calls atomic.Int32 }

func (f *countingFetcher) Receipts(context.Context, []string) ([]feedback.Report, error) {
	f.calls.Add(1)
	return nil, nil
}

// The relay counts one connection for a batch of the feedback lane
// (SharedLanes), so its reports and its receipts are handled one
// transaction at a time: while a report's transaction waits on a lock,
// the receipts of the same batch are not fetched, let alone staged.
func TestFeedbackLaneHoldsOneTransactionAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fetcher := &countingFetcher{}
	cfg := b.config()
	cfg.Deliveries["push"] = recording.New()
	cfg.Receipts = map[string]notification.Receipts{"push": {Fetcher: fetcher}}

	rep := feedback.Report{Provider: feedback.ProviderResend, EventID: "msg_one_at_a_time", Type: "email.delivery_delayed",
		Class: feedback.ClassTransient, Channel: "mail", Address: "wait@example.com"}
	body, err := json.Marshal(rep)
	require.NoError(t, err)
	reportID := notification.ReportID(rep)
	// Staged together before the relay runs, so one batch holds both.
	_, err = b.ob.StageBatch(t.Context(), b.db, []relay.Message{
		{ID: reportID, Module: module, Kind: notification.KindReport, Lane: notification.LaneFeedback, Payload: body},
		{Module: module, Kind: notification.KindReceipts, Lane: notification.LaneFeedback,
			Payload: json.RawMessage(`{"channel":"push","references":["ticket-one-at-a-time"]}`)},
	})
	require.NoError(t, err)
	// The report's inbox claim waits for this transaction's.
	tx, err := b.db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(t.Context(), `INSERT INTO "`+b.schema+`".inbox (consumer, event_id) VALUES ($1, $2)`,
		cfg.Consumer, reportID)
	require.NoError(t, err)

	b.run(t, b.dispatcher(t, cfg))
	feedbackRig{testBundle: b}.waitReportMeetsClaim(t, reportID)
	// The window the fetch could have happened in, not a wait for an
	// event.
	time.Sleep(time.Second)
	require.Zero(t, fetcher.calls.Load(), "receipts fetched beside a report's transaction")

	require.NoError(t, tx.Rollback())
	require.Eventually(t, func() bool { return fetcher.calls.Load() == 1 }, testwait.Within, 5*time.Millisecond,
		"the receipts fetched once the report was applied")
	require.True(t, b.status(t, reportID).Settled())
}
