package push_test

import (
	"cmp"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/internal/transporttest"
	"github.com/tidings-go/tidings/delivery/push"
	"github.com/tidings-go/tidings/internal/fakeapi"
)

func TestTransportFaults(t *testing.T) {
	t.Parallel()
	transporttest.Run(t, transporttest.Module[expoRequest]{
		Name: "push", Provider: "expo",
		New: func(t *testing.T, o transporttest.Options) (delivery.Delivery, *fakeapi.Server[expoRequest]) {
			b := setup(t, func(cfg *push.Config) {
				cfg.Timeout, cfg.HTTPClient = o.Timeout, o.Client
				cfg.BaseURL = cmp.Or(o.BaseURL, cfg.BaseURL)
			})
			return b.pusher, b.expo.Server
		},
		Pending: func() delivery.Pending { return newPending("comment", commentData()) },
	})
}

func TestDeliver(t *testing.T) {
	t.Parallel()

	t.Run("DeliversWithReference", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := newPending("comment", commentData())

		outcome := b.pusher.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`, outcome.Reference())

		got := b.expo.Requests()
		require.Len(t, got, 1)
		r := got[0]
		require.Equal(t, http.MethodPost, r.Method)
		require.Equal(t, "/--/api/v2/push/send", r.Path)
		require.Equal(t, "application/json", r.ContentType)
		require.Equal(t, "application/json", r.Accept)
		require.Equal(t, "Bearer "+testAccessToken, r.Authorization)
		require.Equal(t, p.ID.String(), r.IdempotencyKey)
		require.Equal(t, []expoMessage{{
			To:    testRecipient,
			Title: "New comment from " + dataSecret,
			Body:  dataSecret + " wrote: nice post",
			Data:  map[string]any{"id": p.ID.String()},
		}}, r.Messages)
	})

	// The other token forms, among them the bare UUID form Expo's SDK
	// takes, and a template without a title.
	for name, token := range map[string]string{
		"ExpoPushTokenAndNoTitle": "ExpoPushToken[yyyyyyyyyyyyyyyyyyyyyy]",
		"UUIDFormTokenAndNoTitle": "0F8FAD5B-d9cb-469f-a165-70867728950e",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			p := newPending("no-title", commentData())
			p.Recipient = token

			outcome := b.pusher.Deliver(t.Context(), p)
			require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
			got := b.expo.Requests()
			require.Len(t, got, 1)
			require.Equal(t, []expoMessage{{
				To:   p.Recipient,
				Body: "Ping " + dataSecret,
				Data: map[string]any{"id": p.ID.String()},
			}}, got[0].Messages)
		})
	}

	t.Run("NoAccessToken", func(t *testing.T) {
		t.Parallel()
		expo := startExpo(t, "")
		pusher, err := push.New(&push.Config{BaseURL: expo.URL, Templates: testTemplates()})
		require.NoError(t, err)

		outcome := pusher.Deliver(t.Context(), newPending("comment", commentData()))
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		require.Empty(t, expo.Requests()[0].Authorization)
	})

	t.Run("RedeliverySendsTwice", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := newPending("comment", commentData())

		// The second hand of the same request, as after a crash between
		// Expo's accept and the commit: the key is the same, and Expo,
		// which has no deduplication, pushes again. The app can tell by
		// data.id.
		first := b.pusher.Deliver(t.Context(), p)
		p.Attempt = 2
		second := b.pusher.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindDelivered, first.Kind(), "%v", first)
		require.Equal(t, delivery.KindDelivered, second.Kind(), "%v", second)
		require.NotEqual(t, first.Reference(), second.Reference())

		require.Equal(t, []string{p.ID.String(), p.ID.String()}, b.expo.keys())
		require.Equal(t, 2, b.expo.pushes())
		got := b.expo.Requests()
		require.Equal(t, got[0].Messages, got[1].Messages)
	})

	t.Run("InvalidRecipient", func(t *testing.T) {
		t.Parallel()
		for _, recipient := range []string{
			"",
			"xxxxxxxxxxxxxxxxxxxxxx",
			"ExponentPushToken[]",
			"ExponentPushToken[xxxx",
			"ExponentPushToken xxxx]",
			"ExponentPushToken[xx xx]",
			"ExponentPushToken[xx]trailing",
			"exponentpushtoken[xxxx]",
			"SomethingPushToken[xxxx]",
			"0f8fad5b-d9cb-469f-a165-70867728950",   // a digit short
			"0f8fad5b-d9cb-469f-a165-70867728950e ", // a space after
			"0f8fad5bd9cb469fa16570867728950e",      // no dashes
			"+14155550100",
			"ada@example.org",
		} {
			t.Run(recipient, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				p := newPending("comment", commentData())
				p.Recipient = recipient

				outcome := b.pusher.Deliver(t.Context(), p)
				require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
				require.ErrorIs(t, outcome.Reason(), push.ErrInvalidRecipient)
				require.Equal(t, "push: recipient is not an Expo push token", outcome.Reason().Error())
				require.Empty(t, b.expo.Requests())
			})
		}
	})

	t.Run("MissingValue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := newPending("comment", map[string]any{"author": dataSecret})

		outcome := b.pusher.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
		te, ok := errors.AsType[*push.TemplateError](outcome.Reason())
		require.True(t, ok, "%v", outcome.Reason())
		require.Equal(t, "comment", te.Template)
		require.Equal(t, "body", te.Part)
		require.Equal(t, "text", te.Missing)
		require.Equal(t, `push: template "comment" needs "text", which the request does not carry`, outcome.Reason().Error())
		requireClean(t, outcome.Reason(), p)
		require.Empty(t, b.expo.Requests())
	})

	t.Run("MissingValueInTitle", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		outcome := b.pusher.Deliver(t.Context(), newPending("comment", map[string]any{"text": dataSecret}))
		require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
		te, ok := errors.AsType[*push.TemplateError](outcome.Reason())
		require.True(t, ok, "%v", outcome.Reason())
		require.Equal(t, "title", te.Part)
		require.Equal(t, "author", te.Missing)
		require.Empty(t, b.expo.Requests())
	})

	t.Run("MissingNestedValue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		outcome := b.pusher.Deliver(t.Context(), newPending("nested", nil))
		require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
		require.Equal(t, `push: template "nested" needs "user", which the request does not carry`, outcome.Reason().Error())
		require.Empty(t, b.expo.Requests())
	})

	t.Run("UnknownTemplate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		outcome := b.pusher.Deliver(t.Context(), newPending("no-such-template", commentData()))
		require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), push.ErrUnknownTemplate)
		require.Contains(t, outcome.Reason().Error(), `"no-such-template"`)

		outcome = b.pusher.Deliver(t.Context(), newPending("", commentData()))
		require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), push.ErrUnknownTemplate)
		require.Empty(t, b.expo.Requests())
	})

	t.Run("NoID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := newPending("comment", commentData())
		p.ID = [16]byte{}

		outcome := b.pusher.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), delivery.ErrNoID)
		require.Empty(t, b.expo.Requests())
	})

	t.Run("DeviceNotRegistered", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := newPending("comment", commentData())
		p.Recipient = unregisteredToken

		outcome := b.pusher.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
		require.Equal(t, "push: expo: DeviceNotRegistered", outcome.Reason().Error())
		apiErr, ok := errors.AsType[*push.APIError](outcome.Reason())
		require.True(t, ok)
		require.Equal(t, &push.APIError{StatusCode: 200, Ticket: true, Code: "DeviceNotRegistered"}, apiErr)
		require.Equal(t, delivery.CodeRecipientGone, delivery.CodeOf(outcome.Reason()), "told apart from other rejects")
		requireClean(t, outcome.Reason(), p, "registered push notification recipient")
		require.Len(t, b.expo.Requests(), 1)
	})

	for _, tt := range []struct {
		code   string
		kind   delivery.Kind
		reason string
	}{
		{"MessageTooBig", delivery.KindReject, "push: expo: MessageTooBig"},
		{"MessageRateExceeded", delivery.KindRetry, "push: expo: MessageRateExceeded"},
		{"InvalidCredentials", delivery.KindRetry, "push: expo: InvalidCredentials"},
		{"MismatchSenderId", delivery.KindRetry, "push: expo: MismatchSenderId"},
		{"SomethingNew", delivery.KindReject, "push: expo: SomethingNew"},
		{"not a code: ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]", delivery.KindReject, "push: expo refused the message"},
	} {
		t.Run("Ticket"+strings.Fields(tt.code)[0], func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.expo.ticketError(tt.code)
			p := newPending("comment", commentData())

			outcome := b.pusher.Deliver(t.Context(), p)
			require.Equal(t, tt.kind, outcome.Kind(), "%v", outcome)
			require.Equal(t, tt.reason, outcome.Reason().Error())
			requireClean(t, outcome.Reason(), p, "Could not send", "nice post")
		})
	}

	t.Run("WrongAccessToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(cfg *push.Config) { cfg.AccessToken = "rotated-" + testAccessToken })
		p := newPending("comment", commentData())

		// The fake answers Expo's 401 itself: an operator can fix it, so the
		// request is kept.
		outcome := b.pusher.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.Equal(t, "push: expo refused the access token (401): UNAUTHORIZED", outcome.Reason().Error())
		requireClean(t, outcome.Reason(), p, b.cfg.AccessToken, "bearer")
	})

	for _, tt := range []struct {
		name   string
		status int
		body   string
		kind   delivery.Kind
		reason string
	}{
		{
			name:   "ValidationError",
			status: 400,
			body:   expoErrorsBody("VALIDATION_ERROR", `"to" ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx] with "Ada-data-secret" is invalid`),
			kind:   delivery.KindReject,
			reason: "push: expo rejected the request (400): VALIDATION_ERROR",
		},
		{
			name:   "TooManyExperienceIds",
			status: 400,
			body:   expoErrorsBody("PUSH_TOO_MANY_EXPERIENCE_IDS", "All push notification messages in the same request must be for the same project"),
			kind:   delivery.KindReject,
			reason: "push: expo rejected the request (400): PUSH_TOO_MANY_EXPERIENCE_IDS",
		},
		{
			name:   "Forbidden",
			status: 403,
			body:   expoErrorsBody("FORBIDDEN", "The access token cannot push to this project"),
			kind:   delivery.KindRetry,
			reason: "push: expo refused the access token (403): FORBIDDEN",
		},
		{
			// Not Expo's verdict on the push (a proxy's, say): kept.
			name:   "NotJSON",
			status: 400,
			body:   "<html>bad request for ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]</html>",
			kind:   delivery.KindRetry,
			reason: "push: provider answered 400 Bad Request",
		},
		{
			// A Config.BaseURL with a wrong path: the operator's to fix.
			name:   "NotFoundWithoutErrors",
			status: 404,
			body:   "404 page not found",
			kind:   delivery.KindRetry,
			reason: "push: provider answered 404 Not Found",
		},
		{
			name:   "ErrorsOn200",
			status: 200,
			body:   expoErrorsBody("VALIDATION_ERROR", "bad"),
			kind:   delivery.KindReject,
			reason: "push: expo rejected the request (200): VALIDATION_ERROR",
		},
		{
			name:   "TicketAsObject",
			status: 200,
			body:   `{"data": {"status": "error", "message": "no", "details": {"error": "MessageTooBig"}}}`,
			kind:   delivery.KindReject,
			reason: "push: expo: MessageTooBig",
		},
		{
			name:   "NoTicket",
			status: 200,
			body:   `{"data": []}`,
			kind:   delivery.KindRetry,
			reason: "push: expo's answer holds no ticket",
		},
		{
			name:   "TwoTickets",
			status: 200,
			body:   `{"data": [{"status": "ok", "id": "a"}, {"status": "ok", "id": "b"}]}`,
			kind:   delivery.KindRetry,
			reason: "push: expo's answer holds no ticket",
		},
		{
			name:   "NotAnAnswer",
			status: 200,
			body:   "<html>welcome to the captive portal</html>",
			kind:   delivery.KindRetry,
			reason: "push: expo's answer holds no ticket",
		},
		{
			name:   "ServerError",
			status: 500,
			body:   expoErrorsBody("INTERNAL_SERVER_ERROR", "An unknown error occurred for ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]"),
			kind:   delivery.KindRetry,
			reason: "push: provider answered 500 Internal Server Error",
		},
		{
			name:   "Unavailable",
			status: 503,
			body:   "down",
			kind:   delivery.KindRetry,
			reason: "push: provider answered 503 Service Unavailable",
		},
		{
			name:   "Redirect",
			status: 301,
			body:   "moved",
			kind:   delivery.KindRetry,
			reason: "push: provider answered 301 Moved Permanently",
		},
	} {
		t.Run("Answer"+tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.expo.FailWith(tt.status, tt.body, "Location", "/elsewhere")
			p := newPending("comment", commentData())

			outcome := b.pusher.Deliver(t.Context(), p)
			require.Equal(t, tt.kind, outcome.Kind(), "%v", outcome)
			require.Equal(t, tt.reason, outcome.Reason().Error())
			require.Zero(t, outcome.After())
			requireClean(t, outcome.Reason(), p, "html", "unknown error", "same project")
			require.Len(t, b.expo.Requests(), 1)
		})
	}

	t.Run("OkTicketWithOddID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.expo.FailWith(200, ticketBody(map[string]any{"status": "ok", "id": "id for " + testRecipient}))

		outcome := b.pusher.Deliver(t.Context(), newPending("comment", commentData()))
		require.Equal(t, delivery.Delivered(), outcome)
	})

	t.Run("TooManyRequestsWithRetryAfter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.expo.FailWith(http.StatusTooManyRequests, expoErrorsBody("TOO_MANY_REQUESTS", "slow down"), "Retry-After", "30")
		p := newPending("comment", commentData())

		outcome := b.pusher.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.Equal(t, 30*time.Second, outcome.After())
		require.Equal(t, "push: provider answered 429 Too Many Requests", outcome.Reason().Error())
		requireClean(t, outcome.Reason(), p)
	})

	t.Run("RequestTimeoutWithRetryAfter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.expo.FailWith(http.StatusRequestTimeout, "<html>timed out</html>", "Retry-After", "45")
		p := newPending("comment", commentData())

		outcome := b.pusher.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.Equal(t, 45*time.Second, outcome.After())
		require.Equal(t, "push: provider answered 408 Request Timeout", outcome.Reason().Error())
	})

	t.Run("UnavailableWithRetryAfterDate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		at := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
		b.expo.FailWith(http.StatusServiceUnavailable, "", "Retry-After", at)

		outcome := b.pusher.Deliver(t.Context(), newPending("comment", commentData()))
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.InDelta(t, time.Hour.Seconds(), outcome.After().Seconds(), 5)
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 20
		outcomes := make([]delivery.Outcome, n)
		var wg sync.WaitGroup
		for i := range n {
			p := newPending("comment", commentData())
			wg.Go(func() { outcomes[i] = b.pusher.Deliver(t.Context(), p) })
		}
		wg.Wait()

		refs := map[string]bool{}
		for i, o := range outcomes {
			require.Equal(t, delivery.KindDelivered, o.Kind(), "%d: %v", i, o)
			refs[o.Reference()] = true
		}
		require.Len(t, refs, n)
		require.Equal(t, n, b.expo.pushes())
	})
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestDefaultBaseURL(t *testing.T) {
	t.Parallel()
	var got *http.Request
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r
		return &http.Response{
			StatusCode: http.StatusOK,
			Header:     http.Header{"Content-Type": {"application/json"}},
			Body:       io.NopCloser(strings.NewReader(`{"data": [{"status": "ok", "id": "XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX"}]}`)),
			Request:    r,
		}, nil
	})}
	pusher, err := push.New(&push.Config{Templates: testTemplates(), HTTPClient: client})
	require.NoError(t, err)

	outcome := pusher.Deliver(t.Context(), newPending("comment", commentData()))
	require.Equal(t, delivery.DeliveredWithReference("XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX"), outcome)
	require.Equal(t, "https://exp.host/--/api/v2/push/send", got.URL.String())
	require.Empty(t, got.Header.Get("Authorization"))
}

func TestNew(t *testing.T) {
	t.Parallel()

	valid := func() *push.Config {
		return &push.Config{AccessToken: testAccessToken, Templates: testTemplates()}
	}

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()
		cfg := valid()
		_, err := push.New(cfg)
		require.NoError(t, err)
		require.Empty(t, cfg.BaseURL, "New changed the caller's Config")
		require.Zero(t, cfg.Timeout, "New changed the caller's Config")
	})

	t.Run("NilConfig", func(t *testing.T) {
		t.Parallel()
		_, err := push.New(nil)
		require.ErrorContains(t, err, "Config is nil")
	})

	for _, tt := range []struct {
		name   string
		change func(*push.Config)
		want   string
	}{
		{"BadBaseURL", func(c *push.Config) { c.BaseURL = "ftp://user:" + testAccessToken + "@example.com" }, "Config.BaseURL is not an absolute http or https URL"},
		{"RelativeBaseURL", func(c *push.Config) { c.BaseURL = "exp.host" }, "Config.BaseURL"},
		{"BaseURLWithQuery", func(c *push.Config) { c.BaseURL = "https://exp.host/?token=" + testAccessToken }, "Config.BaseURL"},
		{"AccessTokenWithNewline", func(c *push.Config) { c.AccessToken = testAccessToken + "\n" }, "Config.AccessToken"},
		{"NegativeTimeout", func(c *push.Config) { c.Timeout = -time.Second }, "Config.Timeout is negative"},
		{"NoTemplates", func(c *push.Config) { c.Templates = nil }, "Config.Templates is empty"},
		{"NoBody", func(c *push.Config) { c.Templates["title-only"] = push.Template{Title: "Hi"} }, `Config.Templates["title-only"].Body is empty`},
		{"UnnamedTemplate", func(c *push.Config) { c.Templates[""] = push.Template{Body: "Hi"} }, "Config.Templates: a template's name is empty"},
		{"TitleDoesNotParse", func(c *push.Config) { c.Templates["broken"] = push.Template{Title: "{{.x", Body: "Hi"} }, `Config.Templates["broken"].Title: template: broken:1: unclosed action`},
		{"BodyDoesNotParse", func(c *push.Config) { c.Templates["broken"] = push.Template{Body: "{{end}}"} }, `Config.Templates["broken"].Body: template: broken:1: unexpected {{end}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := valid()
			tt.change(cfg)
			_, err := push.New(cfg)
			require.ErrorContains(t, err, tt.want)
			require.ErrorContains(t, err, "push: ")
			require.NotContains(t, err.Error(), testAccessToken)
		})
	}

	t.Run("JoinsEveryProblem", func(t *testing.T) {
		t.Parallel()
		_, err := push.New(&push.Config{BaseURL: "nope", Timeout: -1})
		for _, field := range []string{"Config.BaseURL", "Config.Timeout", "Config.Templates"} {
			require.ErrorContains(t, err, field)
		}
	})
}
