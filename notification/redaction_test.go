package notification_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/sms"
	"github.com/tidings-go/tidings/delivery/webhook"
	"github.com/tidings-go/tidings/internal/logbuf"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/retrypolicy"
)

// Marker strings put into what must stay private. None may appear in a
// log line, a span, a metric attribute or a reason stored in the outbox.
const (
	redactRecipient = "MARKER-RECIPIENT-7f3a"
	redactData      = "MARKER-DATA-91c2"
	redactBody      = "MARKER-BODY-55d0"   // what providers answer
	redactToken     = "MARKER-TOKEN-c0de"  // a credential
	redactSecret    = "MARKER-SECRET-5e7b" // a request's Secrets value, such as a one-time code
	// SMS recipients must be E.164 numbers: these stand for
	// redactRecipient on that channel, each asking the fake Twilio for
	// one answer.
	redactPhoneAccepted   = "+4915739120001"
	redactPhoneRejected   = "+4915739120002"
	redactPhoneAuth       = "+4915739120003"
	redactPhoneDown       = "+4915739120004"
	redactPhoneUnreadable = "+4915739120005"
)

// redactMarkers are the strings that must not leak: the SMS numbers also
// without their plus sign.
var redactMarkers = []string{redactRecipient, redactData, redactBody, redactToken, redactSecret,
	redactPhoneAccepted[1:], redactPhoneRejected[1:], redactPhoneAuth[1:], redactPhoneDown[1:], redactPhoneUnreadable[1:]}

// requireNoRedactMarker fails when text, found in where, holds a marker.
func requireNoRedactMarker(t *testing.T, where, text string) {
	t.Helper()
	for _, m := range redactMarkers {
		require.NotContains(t, text, m, "%s leaks %s", where, m)
	}
}

// redactProviderLog records what the fake providers received, to show that the
// markers did reach them.
type redactProviderLog struct {
	mu     sync.Mutex
	bodies []string
}

func (l *redactProviderLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bodies = append(l.bodies, s)
}

func (l *redactProviderLog) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.bodies, "\n")
}

const redactTwilioAccount = "AC0123456789abcdef0123456789abcdef"

// startRedactTwilio answers as Twilio's Messages API does, by the To number;
// its error bodies quote the number, the message and redactBody, as
// Twilio's own messages quote the number.
func startRedactTwilio(t *testing.T, seen *redactProviderLog) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, "bad form", http.StatusBadRequest)
			return
		}
		to, body := r.PostForm.Get("To"), r.PostForm.Get("Body")
		_, token, _ := r.BasicAuth()
		seen.add(to + " " + body + " " + token)
		answer := func(status int, v any) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(v)
		}
		errorBody := func(code int, text string) map[string]any {
			return map[string]any{"code": code, "status": 0, "more_info": "https://www.twilio.com/docs/errors/" + fmt.Sprint(code),
				"message": fmt.Sprintf("%s: To %s, Body %q, auth %s (%s)", text, to, body, token, redactBody)}
		}
		switch to {
		case redactPhoneAccepted:
			answer(http.StatusCreated, map[string]any{"sid": "SM0123456789abcdef0123456789abcdef", "to": to, "body": body,
				"status": "queued"})
		case redactPhoneRejected:
			answer(http.StatusBadRequest, errorBody(21211, "The 'To' number is not a valid phone number"))
		case redactPhoneAuth:
			answer(http.StatusUnauthorized, errorBody(20003, "Authenticate"))
		case redactPhoneDown:
			w.Header().Set("Retry-After", "0")
			http.Error(w, redactBody+" service unavailable for "+to, http.StatusServiceUnavailable)
		case redactPhoneUnreadable:
			answer(http.StatusCreated, map[string]any{"message": redactBody + " " + to})
		default:
			answer(http.StatusBadRequest, errorBody(21211, "unexpected"))
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// startRedactEndpoint is a webhook receiver that answers by its path, each
// error with a body that quotes redactBody and the request it got.
func startRedactEndpoint(t *testing.T, seen *redactProviderLog) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen.add(r.URL.String() + " " + string(body))
		fail := func(status int) {
			http.Error(w, redactBody+" "+r.URL.String()+" "+string(body), status)
		}
		switch {
		case strings.HasPrefix(r.URL.Path, "/ok/"):
			w.WriteHeader(http.StatusNoContent)
		case strings.HasPrefix(r.URL.Path, "/gone/"):
			fail(http.StatusGone)
		case strings.HasPrefix(r.URL.Path, "/unprocessable/"):
			fail(http.StatusUnprocessableEntity)
		case strings.HasPrefix(r.URL.Path, "/down/"):
			w.Header().Set("Retry-After", "0")
			fail(http.StatusServiceUnavailable)
		case strings.HasPrefix(r.URL.Path, "/redirect/"):
			w.Header().Set("Location", "/ok/"+redactRecipient+"?"+r.URL.RawQuery)
			fail(http.StatusFound)
		default:
			fail(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// redactMail is a delivery of the application's own, answering by the
// template: success, rejects and retries with reasons built from safe text
// only, panics whose text quotes nothing of the request, and an overrun.
var redactMail = delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
	switch p.Template {
	case "ok":
		return delivery.DeliveredWithReference("mail-ref-1")
	case "reject_safe":
		return delivery.Reject(errors.New(`template "reject_safe": the mailbox is closed`))
	case "retry_safe":
		return delivery.Retry(errors.New("provider busy"))
	case "panic_text":
		panic("the renderer exploded")
	case "panic_nil_map":
		var byRecipient map[string]any
		byRecipient[p.Recipient] = p.Data["code"] // assignment to entry in nil map
	case "panic_conversion":
		_ = p.Data["code"].(int) // interface conversion: the types, not the value
	case "panic_index":
		_ = p.Recipient[len(p.Recipient)+int(p.Data["n"].(float64))] // index out of range: the numbers only
	case "slow":
		<-ctx.Done()
		return delivery.Retry(ctx.Err())
	}
	return delivery.Reject(errors.New("unknown template"))
})

// TestRedaction runs a relay and a dispatcher with the real sms and
// webhook modules (against local fakes) and a delivery of the
// application's own, over requests whose recipient and data hold markers,
// with every outcome the library has: delivered, rejected, retried until
// dead, panicked, timed out, unroutable, undecodable, refused by the
// provider with an error body that quotes the request. By default, no
// marker appears in the logs (at Debug), in a span's name, attributes,
// events, links or status, in a metric attribute, or in what the outbox
// keeps as a reason or a result.
func TestRedaction(t *testing.T) {
	t.Parallel()
	b := setup(t)

	var logs logbuf.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	var seen redactProviderLog
	smsModule, err := sms.New(&sms.Config{
		BaseURL:    startRedactTwilio(t, &seen),
		AccountSID: redactTwilioAccount,
		AuthToken:  redactToken,
		From:       "+15005550006",
		Templates:  map[string]string{"otp": "Your code is {{.code}}.", "needs": "Hello {{.missing}}"},
	})
	require.NoError(t, err)
	webhookModule, err := webhook.New(&webhook.Config{Secrets: []string{webhook.NewSecret()}})
	require.NoError(t, err)
	endpoint := startRedactEndpoint(t, &seen)

	cfg := notification.Config{
		Consumer:        consumer,
		Deliveries:      map[string]delivery.Delivery{"mail": redactMail, "sms": smsModule, "webhook": webhookModule},
		Policy:          retrypolicy.Policy{MaxAttempts: 2, BaseDelay: 20 * time.Millisecond, RandFunc: func() float64 { return 0 }},
		DeliveryTimeout: time.Second,
		Logger:          logger,
		TracerProvider:  tp,
		MeterProvider:   mp,
	}
	rcfg := b.relayConfig(t)
	rcfg.Logger, rcfg.TracerProvider, rcfg.MeterProvider = logger, tp, mp
	b.runWith(t, rcfg, b.dispatcher(t, cfg))

	data := map[string]any{"code": redactData, "n": 1.0, "nested": map[string]any{"list": []any{redactData}}}
	hook := func(path string) string {
		return endpoint + path + redactRecipient + "?token=" + url.QueryEscape(redactRecipient)
	}
	type want struct {
		state  relay.State
		reason string // a part of the reason a person can act on
	}
	cases := []struct {
		req  notification.Request
		want want
	}{
		{notification.Request{Channel: "mail", Template: "ok"}, want{relay.StateProcessed, ""}},
		{notification.Request{Channel: "mail", Template: "reject_safe"}, want{relay.StateDead, "the mailbox is closed"}},
		{notification.Request{Channel: "mail", Template: "retry_safe"}, want{relay.StateDead, "exhausted after 2 attempts: provider busy"}},
		{notification.Request{Channel: "mail", Template: "panic_text"}, want{relay.StateDead, "panicked: the renderer exploded"}},
		{notification.Request{Channel: "mail", Template: "panic_nil_map"}, want{relay.StateDead, "assignment to entry in nil map"}},
		{notification.Request{Channel: "mail", Template: "panic_conversion"}, want{relay.StateDead, "interface conversion"}},
		{notification.Request{Channel: "mail", Template: "panic_index"}, want{relay.StateDead, "index out of range"}},
		{notification.Request{Channel: "mail", Template: "slow"}, want{relay.StateDead, "timed out: DeliveryTimeout of 1s passed"}},
		{notification.Request{Channel: "fax", Template: "ok"}, want{relay.StateDead, `no delivery is registered for channel "fax"`}},

		{notification.Request{Channel: "sms", Recipient: redactPhoneAccepted, Template: "otp"}, want{relay.StateProcessed, ""}},
		{notification.Request{Channel: "sms", Recipient: redactPhoneRejected, Template: "otp"}, want{relay.StateDead, "error 21211"}},
		{notification.Request{Channel: "sms", Recipient: redactPhoneAuth, Template: "otp"}, want{relay.StateDead, "refused the credentials (401): error 20003"}},
		{notification.Request{Channel: "sms", Recipient: redactPhoneDown, Template: "otp"}, want{relay.StateDead, "503"}},
		{notification.Request{Channel: "sms", Recipient: redactPhoneUnreadable, Template: "otp"}, want{relay.StateDead, "not a message resource"}},
		{notification.Request{Channel: "sms", Template: "otp"}, want{relay.StateDead, "not an E.164 phone number"}},
		{notification.Request{Channel: "sms", Recipient: redactPhoneAccepted, Template: "needs"}, want{relay.StateDead, `"missing"`}},
		{notification.Request{Channel: "sms", Recipient: redactPhoneAccepted, Template: "unknown"}, want{relay.StateDead, "unknown template"}},

		{notification.Request{Channel: "webhook", Recipient: hook("/ok/"), Template: "invoice.paid"}, want{relay.StateProcessed, ""}},
		{notification.Request{Channel: "webhook", Recipient: hook("/gone/"), Template: "invoice.paid"}, want{relay.StateDead, "gone (410)"}},
		{notification.Request{Channel: "webhook", Recipient: hook("/unprocessable/"), Template: "invoice.paid"}, want{relay.StateDead, "422"}},
		{notification.Request{Channel: "webhook", Recipient: hook("/down/"), Template: "invoice.paid"}, want{relay.StateDead, "503"}},
		{notification.Request{Channel: "webhook", Recipient: hook("/redirect/"), Template: "invoice.paid"}, want{relay.StateDead, "302"}},
		{notification.Request{Channel: "webhook", Recipient: "http://127.0.0.1:1/" + redactRecipient, Template: "invoice.paid"},
			want{relay.StateDead, "unreachable"}},
		{notification.Request{Channel: "webhook", Recipient: "https://" + redactRecipient + ":pw@example.com/hook"},
			want{relay.StateDead, "user info"}},
		{notification.Request{Channel: "webhook", Recipient: "http://[" + redactRecipient + "/hook"},
			want{relay.StateDead, "does not parse"}},
		{notification.Request{Channel: "webhook", Recipient: "ftp://example.com/" + redactRecipient},
			want{relay.StateDead, "scheme"}},
	}
	var msgs []relay.Message
	for _, c := range cases {
		req := c.req
		if req.Recipient == "" {
			req.Recipient = redactRecipient + "@example.com"
		}
		req.Data = data
		req.Secrets = map[string]string{"pin": redactSecret}
		m, err := req.Message(module)
		require.NoError(t, err)
		msgs = append(msgs, m)
	}
	// Payloads the dispatcher cannot decode: their reason names the field
	// and the type, never the value.
	for _, payload := range []string{
		`{"channel":"mail","recipient":["` + redactRecipient + `"]}`,
		`{"channel":"mail","recipient":"` + redactRecipient + `","data":"` + redactData + `"}`,
		`{"channel":"mail","recipient":{"address":"` + redactRecipient + `"}}`,
	} {
		msgs = append(msgs, relay.Message{Module: module, Kind: notification.Kind, Payload: json.RawMessage(payload)})
		cases = append(cases, struct {
			req  notification.Request
			want want
		}{want: want{relay.StateDead, "payload field"}})
	}
	ids, err := b.ob.StageBatch(t.Context(), b.db, msgs)
	require.NoError(t, err)

	for i, id := range ids {
		st := b.waitSettled(t, id)
		require.Equal(t, cases[i].want.state, st.State, "case %d (%s %s): %+v", i, cases[i].req.Channel, cases[i].req.Template, st)
		require.Contains(t, st.Reason, cases[i].want.reason, "case %d: a reason a person can act on", i)
		for _, field := range []string{st.Reason, st.LastError, st.Result} {
			requireNoRedactMarker(t, fmt.Sprintf("the status of case %d", i), field)
		}
	}

	// The markers did reach the places they belong: the outbox's payloads
	// and the providers.
	var staged int
	require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT count(*) FROM "`+b.schema+`".outbox
		WHERE payload::text LIKE '%`+redactRecipient+`%' AND payload::text LIKE '%`+redactData+`%'`).Scan(&staged))
	require.Positive(t, staged)
	for _, m := range []string{redactRecipient, redactData, redactToken, redactPhoneAccepted, redactPhoneRejected} {
		require.Contains(t, seen.all(), m, "the providers got what they need")
	}

	t.Run("Outbox", func(t *testing.T) {
		t.Parallel()
		rows, err := b.db.QueryContext(t.Context(), `SELECT id, coalesce(failure_reason, ''), last_error, result, headers::text
			FROM "`+b.schema+`".outbox`)
		require.NoError(t, err)
		defer rows.Close()
		n := 0
		for rows.Next() {
			var id uuid.UUID
			var reason, lastError, result, headers string
			require.NoError(t, rows.Scan(&id, &reason, &lastError, &result, &headers))
			for what, text := range map[string]string{"failure_reason": reason, "last_error": lastError,
				"result": result, "headers": headers} {
				requireNoRedactMarker(t, fmt.Sprintf("%s of %s", what, id), text)
			}
			n++
		}
		require.NoError(t, rows.Err())
		require.Equal(t, len(ids), n)

		dead, err := b.ob.ListDead(t.Context(), b.db, &relay.DeadFilter{Module: module, Limit: 1000})
		require.NoError(t, err)
		require.NotEmpty(t, dead)
		for _, d := range dead {
			require.NotEmpty(t, d.Reason)
			requireNoRedactMarker(t, "a dead record's reason", d.Reason)
		}
	})

	t.Run("Logs", func(t *testing.T) {
		t.Parallel()
		text := logs.String()
		for _, line := range []string{`"record done"`, `"record will be retried"`, `"record dead"`,
			`"record dead"`, `"delivery panicked"`} {
			require.Contains(t, text, line, "the log was written, at Debug and above")
		}
		requireNoRedactMarker(t, "the log", text)
	})

	t.Run("Spans", func(t *testing.T) {
		t.Parallel()
		got := spans.GetSpans()
		require.NotEmpty(t, got)
		deliver := 0
		for _, s := range got {
			if strings.HasPrefix(s.Name, "deliver ") {
				deliver++
			}
			var sb strings.Builder
			fmt.Fprintf(&sb, "%s %s %s\n", s.Name, s.Status.Code, s.Status.Description)
			redactAttrs(&sb, s.Attributes)
			for _, e := range s.Events {
				fmt.Fprintf(&sb, "event %s\n", e.Name)
				redactAttrs(&sb, e.Attributes)
			}
			for _, l := range s.Links {
				redactAttrs(&sb, l.Attributes)
			}
			redactAttrs(&sb, s.Resource.Attributes())
			requireNoRedactMarker(t, "span "+s.Name, sb.String())
		}
		require.Positive(t, deliver)
	})

	t.Run("Metrics", func(t *testing.T) {
		t.Parallel()
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(t.Context(), &rm))
		var sb strings.Builder
		points := 0
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				fmt.Fprintf(&sb, "%s %s %s\n", m.Name, m.Description, m.Unit)
				var sets []attribute.Set
				switch d := m.Data.(type) {
				case metricdata.Sum[int64]:
					for _, dp := range d.DataPoints {
						sets = append(sets, dp.Attributes)
					}
				case metricdata.Sum[float64]:
					for _, dp := range d.DataPoints {
						sets = append(sets, dp.Attributes)
					}
				case metricdata.Histogram[float64]:
					for _, dp := range d.DataPoints {
						sets = append(sets, dp.Attributes)
					}
				case metricdata.Histogram[int64]:
					for _, dp := range d.DataPoints {
						sets = append(sets, dp.Attributes)
					}
				case metricdata.Gauge[int64]:
					for _, dp := range d.DataPoints {
						sets = append(sets, dp.Attributes)
					}
				case metricdata.Gauge[float64]:
					for _, dp := range d.DataPoints {
						sets = append(sets, dp.Attributes)
					}
				default:
					t.Fatalf("metric %s has data of type %T: teach this test to read it", m.Name, m.Data)
				}
				for _, set := range sets {
					points++
					redactAttrs(&sb, set.ToSlice())
				}
			}
		}
		require.Positive(t, points)
		requireNoRedactMarker(t, "the metrics", sb.String())
	})
}

func redactAttrs(b *strings.Builder, attrs []attribute.KeyValue) {
	for _, kv := range attrs {
		fmt.Fprintf(b, "%s=%s\n", kv.Key, kv.Value.Emit())
	}
}
