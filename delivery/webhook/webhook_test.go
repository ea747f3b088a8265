package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/webhook"
)

func TestDeliver(t *testing.T) {
	t.Parallel()

	t.Run("SignedRequestVerifies", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{})
		p := newPending(b.rcv.url)

		before := time.Now().Unix()
		outcome := b.hook.Deliver(t.Context(), p)
		after := time.Now().Unix()
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)

		got := b.rcv.received()
		require.Len(t, got, 1)
		a := got[0]
		require.NoError(t, a.verifyErr)
		require.Equal(t, http.MethodPost, a.method)
		require.Equal(t, "/hooks/"+tokenMarker, a.path)
		require.Equal(t, "application/json", a.header.Get("Content-Type"))
		require.Equal(t, webhook.UserAgentDefault, a.header.Get("User-Agent"))
		require.Equal(t, p.ID.String(), a.header.Get(webhook.HeaderID))
		require.Equal(t, p.ID.String(), a.header.Get("Idempotency-Key"))
		require.Equal(t, "corr-7d2f", a.header.Get(webhook.HeaderCorrelationID))

		ts, err := strconv.ParseInt(a.header.Get(webhook.HeaderTimestamp), 10, 64)
		require.NoError(t, err)
		require.GreaterOrEqual(t, ts, before)
		require.LessOrEqual(t, ts, after)

		sigs := strings.Fields(a.header.Get(webhook.HeaderSignature))
		require.Len(t, sigs, 1)
		require.True(t, strings.HasPrefix(sigs[0], "v1,"), sigs[0])
		want, err := webhook.Sign([]string{secretA}, p.ID.String(), time.Unix(ts, 0), a.body)
		require.NoError(t, err)
		require.Equal(t, want, sigs[0])
	})

	t.Run("SameIDOnEveryAttempt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{})
		// Two attempts 90 s apart, without waiting 90 s; both within the
		// receiver's tolerance of its own clock.
		first := time.Now().Add(-time.Minute)
		attempts := []time.Time{first, first.Add(90 * time.Second)}
		webhook.SetClock(b.hook, func() time.Time {
			now := attempts[0]
			attempts = attempts[1:]
			return now
		})
		p := newPending(b.rcv.url)

		require.Equal(t, delivery.KindDelivered, b.hook.Deliver(t.Context(), p).Kind())
		p.Attempt = 2
		require.Equal(t, delivery.KindDelivered, b.hook.Deliver(t.Context(), p).Kind())

		got := b.rcv.received()
		require.Len(t, got, 2)
		for _, a := range got {
			require.NoError(t, a.verifyErr)
			require.Equal(t, p.ID.String(), a.header.Get(webhook.HeaderID))
			require.Equal(t, p.ID.String(), a.header.Get("Idempotency-Key"))
		}
		require.Equal(t, got[0].body, got[1].body, "the body is the same on every attempt")
		require.Equal(t, strconv.FormatInt(first.Unix(), 10), got[0].header.Get(webhook.HeaderTimestamp))
		require.Equal(t, strconv.FormatInt(first.Unix()+90, 10), got[1].header.Get(webhook.HeaderTimestamp))
		require.NotEqual(t, got[0].header.Get(webhook.HeaderSignature), got[1].header.Get(webhook.HeaderSignature),
			"each attempt is signed afresh for its timestamp")
	})

	t.Run("BodyShape", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{})
		p := newPending(b.rcv.url)

		require.Equal(t, delivery.KindDelivered, b.hook.Deliver(t.Context(), p).Kind())

		got := b.rcv.received()
		require.Len(t, got, 1)
		var fields map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(got[0].body, &fields))
		require.Len(t, fields, 4, "%s", got[0].body)
		require.JSONEq(t, strconv.Quote(p.ID.String()), string(fields["id"]))
		require.JSONEq(t, `"invoice.paid"`, string(fields["type"]))
		require.JSONEq(t, `"2025-07-01T09:30:00.123456Z"`, string(fields["timestamp"]))
		require.JSONEq(t, `{"invoice": "INV-17", "amount": 1250}`, string(fields["data"]))

		var body struct {
			Timestamp time.Time `json:"timestamp"`
		}
		require.NoError(t, json.Unmarshal(got[0].body, &body))
		require.True(t, stagedAt.Equal(body.Timestamp), "timestamp is RFC 3339")
	})

	t.Run("BodyShapeOfABareRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{})
		attempt := time.Date(2025, 7, 2, 8, 0, 0, 0, time.UTC)
		webhook.SetClock(b.hook, func() time.Time { return attempt })
		id := uuid.Must(uuid.NewV7())
		p := delivery.Pending{ID: id, Channel: "webhook", Recipient: b.rcv.url, Attempt: 1}

		require.Equal(t, delivery.KindDelivered, b.hook.Deliver(t.Context(), p).Kind())

		got := b.rcv.received()
		require.Len(t, got, 1)
		require.JSONEq(t,
			`{"id": "`+id.String()+`", "type": "", "timestamp": "2025-07-02T08:00:00Z", "data": {}}`,
			string(got[0].body))
		require.Empty(t, got[0].header.Values(webhook.HeaderCorrelationID))
		// The receiver's clock is a year away: it refuses the timestamp.
		require.ErrorIs(t, got[0].verifyErr, webhook.ErrTimestamp)
		require.NoError(t, webhook.Verify([]string{secretA}, got[0].header, got[0].body, attempt, 0))
	})

	t.Run("Rotation", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{secrets: []string{secretB}}, func(cfg *webhook.Config) {
			cfg.Secrets = []string{secretA, secretB}
		})
		p := newPending(b.rcv.url)

		require.Equal(t, delivery.KindDelivered, b.hook.Deliver(t.Context(), p).Kind())

		got := b.rcv.received()
		require.Len(t, got, 1)
		a := got[0]
		require.NoError(t, a.verifyErr, "a receiver that knows only the new secret accepts")
		sigs := strings.Fields(a.header.Get(webhook.HeaderSignature))
		require.Len(t, sigs, 2, "one signature per secret")

		ts, err := strconv.ParseInt(a.header.Get(webhook.HeaderTimestamp), 10, 64)
		require.NoError(t, err)
		at := time.Unix(ts, 0)
		for i, secret := range []string{secretA, secretB} {
			want, err := webhook.Sign([]string{secret}, p.ID.String(), at, a.body)
			require.NoError(t, err)
			require.Equal(t, want, sigs[i], "signatures in the order of Config.Secrets")
			require.NoError(t, webhook.Verify([]string{secret}, a.header, a.body, at, 0))
		}
		require.NoError(t, webhook.Verify([]string{secretC, secretA}, a.header, a.body, at, 0))
		require.ErrorIs(t, webhook.Verify([]string{secretC}, a.header, a.body, at, 0), webhook.ErrSignature)
	})

	t.Run("TamperedBodyIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{})
		p := newPending(b.rcv.url)
		require.Equal(t, delivery.KindDelivered, b.hook.Deliver(t.Context(), p).Kind())

		a := b.rcv.received()[0]
		tampered := []byte(strings.Replace(string(a.body), "INV-17", "INV-18", 1))
		require.NotEqual(t, a.body, tampered)
		err := webhook.Verify([]string{secretA}, a.header, tampered, time.Now(), 0)
		require.ErrorIs(t, err, webhook.ErrSignature)
	})

	t.Run("InvalidCorrelationIDIsLeftOut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{})
		p := newPending(b.rcv.url)
		p.CorrelationID = "corr\r\nX-Injected: 1"

		require.Equal(t, delivery.KindDelivered, b.hook.Deliver(t.Context(), p).Kind())

		a := b.rcv.received()[0]
		require.Empty(t, a.header.Values(webhook.HeaderCorrelationID))
		require.Empty(t, a.header.Values("X-Injected"))
	})

	t.Run("UserAgent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{}, func(cfg *webhook.Config) { cfg.UserAgent = "acme-notify/2.1" })
		require.Equal(t, delivery.KindDelivered, b.hook.Deliver(t.Context(), newPending(b.rcv.url)).Kind())
		require.Equal(t, "acme-notify/2.1", b.rcv.received()[0].header.Get("User-Agent"))
	})

	t.Run("InvalidRecipientIsRejectedWithoutACall", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{})
		host := hostOf(b.rcv.url)

		for name, recipient := range map[string]string{
			"Empty":              "",
			"NotAURL":            "https://" + host + "/hooks/%zz" + tokenMarker,
			"ControlCharacter":   "https://" + host + "/hooks/\n" + tokenMarker,
			"Relative":           "/hooks/" + tokenMarker,
			"NoScheme":           host + "/hooks/" + tokenMarker,
			"Opaque":             "https:" + tokenMarker,
			"NoHost":             "https:///hooks/" + tokenMarker,
			"PortOnly":           "https://:443/hooks/" + tokenMarker,
			"UserInfo":           "https://user:" + tokenMarker + "@" + host + "/hooks/x",
			"UserOnly":           "https://" + tokenMarker + "@" + host + "/hooks/x",
			"HTTPNotLoopback":    "http://hooks.example.com/hooks/" + tokenMarker,
			"OtherScheme":        "ftp://" + host + "/hooks/" + tokenMarker,
			"JavaScript":         "javascript:alert('" + tokenMarker + "')",
			"HTTPLookalikeHost":  "http://localhost.example.com/hooks/" + tokenMarker,
			"HTTPNotLoopbackIP6": "http://[2001:db8::1]/hooks/" + tokenMarker,
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				p := newPending(recipient)

				outcome := b.hook.Deliver(t.Context(), p)

				require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
				require.ErrorIs(t, outcome.Reason(), webhook.ErrInvalidRecipient)
				require.True(t, strings.HasPrefix(outcome.Reason().Error(), "webhook: recipient is not an https URL"),
					outcome.Reason().Error())
				requireSafeReason(t, outcome, recipient)
			})
		}
		// Checked after the subtests above, which run in parallel.
		t.Cleanup(func() { require.Empty(t, b.rcv.received(), "no request for an invalid recipient") })
	})

	t.Run("HTTPOnLoopbackIsAllowed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{plain: true}, func(cfg *webhook.Config) { cfg.HTTPClient = nil })
		require.True(t, strings.HasPrefix(b.rcv.url, "http://127.0.0.1:"), b.rcv.url)

		outcome := b.hook.Deliver(t.Context(), newPending(b.rcv.url))
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)

		viaName := strings.Replace(b.rcv.url, "127.0.0.1", "localhost", 1)
		outcome = b.hook.Deliver(t.Context(), newPending(viaName))
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)

		got := b.rcv.received()
		require.Len(t, got, 2)
		require.NoError(t, got[0].verifyErr)
		require.NoError(t, got[1].verifyErr)
	})

	t.Run("AllowInsecure", func(t *testing.T) {
		t.Parallel()
		var (
			mu   sync.Mutex
			hits []string
		)
		client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			hits = append(hits, r.URL.String())
			mu.Unlock()
			return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
		})}
		hook, err := webhook.New(&webhook.Config{Secrets: []string{secretA}, HTTPClient: client, AllowInsecure: true})
		require.NoError(t, err)
		url := "http://hooks.example.com/hooks/" + tokenMarker + "#fragment"

		outcome := hook.Deliver(t.Context(), newPending(url))

		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"http://hooks.example.com/hooks/" + tokenMarker}, hits)
	})

	t.Run("Answers", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name   string
			answer http.HandlerFunc
			kind   delivery.Kind
			status int // of the *webhook.StatusError in the reason; 0: none
			after  time.Duration
			text   string // the reason's text, when checked
		}{
			{name: "200", answer: answerStatus(200), kind: delivery.KindDelivered},
			{name: "201", answer: answerStatus(201), kind: delivery.KindDelivered},
			{name: "202", answer: answerStatus(202), kind: delivery.KindDelivered},
			{name: "204", answer: answerStatus(204), kind: delivery.KindDelivered},
			// Standard Webhooks: every answer but 2xx and 410 is a failure
			// to retry.
			{name: "400", answer: answerStatus(400), kind: delivery.KindRetry, status: 400,
				text: "webhook: provider answered 400 Bad Request"},
			{name: "401WhileRotating", answer: answerStatus(401), kind: delivery.KindRetry, status: 401},
			{name: "404WhileRedeploying", answer: answerStatus(404), kind: delivery.KindRetry, status: 404},
			{name: "408", answer: answerStatus(408), kind: delivery.KindRetry, status: 408},
			{name: "408RetryAfter", answer: answerStatus(408, "Retry-After", "300"), kind: delivery.KindRetry, status: 408,
				after: 300 * time.Second},
			{name: "422RetryAfter", answer: answerStatus(422, "Retry-After", "60"), kind: delivery.KindRetry, status: 422,
				after: 60 * time.Second, text: "webhook: provider answered 422 Unprocessable Entity"},
			{name: "410", answer: answerStatus(410), kind: delivery.KindReject, status: 410,
				text: "webhook: endpoint is gone (410)"},
			{name: "429", answer: answerStatus(429, "Retry-After", "7"), kind: delivery.KindRetry, status: 429,
				after: 7 * time.Second},
			{name: "500", answer: answerStatus(500), kind: delivery.KindRetry, status: 500},
			{name: "503RetryAfter", answer: answerStatus(503, "Retry-After", "120"), kind: delivery.KindRetry, status: 503,
				after: 120 * time.Second, text: "webhook: provider answered 503 Service Unavailable"},
			{name: "302NotFollowed", answer: answerStatus(302, "Location", "/elsewhere"), kind: delivery.KindRetry, status: 302},
			{name: "308NotFollowed", answer: answerStatus(308, "Location", "/elsewhere"), kind: delivery.KindRetry, status: 308},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, receiverOptions{answer: tc.answer})

				outcome := b.hook.Deliver(t.Context(), newPending(b.rcv.url))

				require.Equal(t, tc.kind, outcome.Kind(), "%v", outcome)
				require.Equal(t, tc.after, outcome.After())
				require.Len(t, b.rcv.received(), 1, "one call, no redirect followed")
				if tc.kind == delivery.KindDelivered {
					return
				}
				requireSafeReason(t, outcome, b.rcv.url)
				if tc.status != 0 {
					se, ok := errors.AsType[*webhook.StatusError](outcome.Reason())
					require.True(t, ok, "%v", outcome)
					require.Equal(t, tc.status, se.StatusCode)
				}
				if tc.status == http.StatusGone {
					require.ErrorIs(t, outcome.Reason(), webhook.ErrGone)
					require.Equal(t, delivery.CodeRecipientGone, delivery.CodeOf(outcome.Reason()))
				}
				if tc.text != "" {
					require.Equal(t, tc.text, outcome.Reason().Error())
				}
			})
		}
	})

	t.Run("CancelledContext", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{})
		ctx, cancel := context.WithCancel(t.Context())
		cancel()

		outcome := b.hook.Deliver(ctx, newPending(b.rcv.url))

		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), context.Canceled)
		requireSafeReason(t, outcome, b.rcv.url)
		require.Empty(t, b.rcv.received())
	})

	t.Run("CancelledDuringTheCall", func(t *testing.T) {
		t.Parallel()
		arrived := make(chan struct{}, 1)
		b := setup(t, receiverOptions{answer: hang(t, arrived)})
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			<-arrived
			cancel()
		}()

		outcome := b.hook.Deliver(ctx, newPending(b.rcv.url))

		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), context.Canceled)
		requireSafeReason(t, outcome, b.rcv.url)
	})

	t.Run("StalledReceiverHitsTheDeadline", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{answer: hang(t, nil)})
		// Long enough for the request to reach the receiver on a loaded
		// machine (200ms was not, once): the stall must be the receiver's.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()

		start := time.Now()
		outcome := b.hook.Deliver(ctx, newPending(b.rcv.url))

		require.Less(t, time.Since(start), 10*time.Second)
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), context.DeadlineExceeded)
		requireSafeReason(t, outcome, b.rcv.url)
		require.Len(t, b.rcv.received(), 1)
	})

	// A receiver that answers 200 at once and finishes its work before
	// ending the body has accepted the call: it is not sent again.
	t.Run("AcceptedThenSlowToEndTheBody", func(t *testing.T) {
		t.Parallel()
		held := hang(t, nil)
		b := setup(t, receiverOptions{answer: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			held(w, r)
		}}, func(cfg *webhook.Config) {
			// Long enough for the dial, the TLS handshake and the answer's
			// headers on a loaded machine (200ms was not, 7 times in 300);
			// the body is held past it.
			cfg.Timeout = 2 * time.Second
		})

		outcome := b.hook.Deliver(t.Context(), newPending(b.rcv.url))

		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		require.Len(t, b.rcv.received(), 1)
	})

	t.Run("StalledReceiverHitsConfigTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{answer: hang(t, nil)}, func(cfg *webhook.Config) {
			cfg.Timeout = 200 * time.Millisecond
		})

		start := time.Now()
		outcome := b.hook.Deliver(t.Context(), newPending(b.rcv.url))

		require.Less(t, time.Since(start), 5*time.Second)
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), context.DeadlineExceeded)
		require.Equal(t, "webhook: no answer within Config.Timeout (200ms)", outcome.Reason().Error())
		requireSafeReason(t, outcome, b.rcv.url)
	})

	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		gone := httptest.NewServer(http.NotFoundHandler())
		url := gone.URL + "/hooks/" + tokenMarker
		gone.Close()
		hook, err := webhook.New(&webhook.Config{Secrets: []string{secretA}})
		require.NoError(t, err)

		outcome := hook.Deliver(t.Context(), newPending(url))

		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.True(t, strings.HasPrefix(outcome.Reason().Error(), "webhook: provider unreachable: "), outcome.Reason().Error())
		requireSafeReason(t, outcome, url)
	})

	t.Run("UntrustedCertificate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{}, func(cfg *webhook.Config) { cfg.HTTPClient = nil })

		outcome := b.hook.Deliver(t.Context(), newPending(b.rcv.url))

		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.Contains(t, outcome.Reason().Error(), "certificate not trusted")
		requireSafeReason(t, outcome, b.rcv.url)
	})

	t.Run("ZeroIDIsRejected", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{})
		p := newPending(b.rcv.url)
		p.ID = uuid.Nil

		outcome := b.hook.Deliver(t.Context(), p)

		require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), delivery.ErrNoID)
		require.Empty(t, b.rcv.received())
	})

	t.Run("UnencodableDataIsRejected", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{})
		for name, data := range map[string]map[string]any{
			"Func": {"f": func() {}},
			"NaN":  {"amount": math.NaN()},
			"Chan": {"c": make(chan int)},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				p := newPending(b.rcv.url)
				p.Data = data

				outcome := b.hook.Deliver(t.Context(), p)

				require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
				require.ErrorIs(t, outcome.Reason(), webhook.ErrUnencodable)
				require.NotContains(t, outcome.Reason().Error(), "NaN")
			})
		}
		t.Cleanup(func() { require.Empty(t, b.rcv.received()) })
	})

	t.Run("ConcurrentDeliveries", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{})
		const n = 16
		ids := make(map[string]bool, n)
		var wg sync.WaitGroup
		outcomes := make([]delivery.Outcome, n)
		for i := range n {
			p := newPending(b.rcv.url)
			ids[p.ID.String()] = true
			wg.Go(func() { outcomes[i] = b.hook.Deliver(t.Context(), p) })
		}
		wg.Wait()

		for _, o := range outcomes {
			require.Equal(t, delivery.KindDelivered, o.Kind(), "%v", o)
		}
		got := b.rcv.received()
		require.Len(t, got, n)
		for _, a := range got {
			require.NoError(t, a.verifyErr)
			require.True(t, ids[a.header.Get(webhook.HeaderID)])
		}
	})

	t.Run("ConfigIsCopied", func(t *testing.T) {
		t.Parallel()
		b := setup(t, receiverOptions{})
		require.Nil(t, b.cfg.HTTPClient.CheckRedirect, "New leaves the caller's client alone")
		b.cfg.Secrets[0] = secretC

		require.Equal(t, delivery.KindDelivered, b.hook.Deliver(t.Context(), newPending(b.rcv.url)).Kind())
		require.NoError(t, b.rcv.received()[0].verifyErr, "still signed with the secret New was given")
	})
}
