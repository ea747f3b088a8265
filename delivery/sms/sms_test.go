package sms_test

import (
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/internal/transporttest"
	"github.com/tidings-go/tidings/delivery/sms"
	"github.com/tidings-go/tidings/internal/fakeapi"
)

func TestTransportFaults(t *testing.T) {
	t.Parallel()
	transporttest.Run(t, transporttest.Module[twilioRequest]{
		Name: "sms", Provider: "twilio",
		New: func(t *testing.T, o transporttest.Options) (delivery.Delivery, *fakeapi.Server[twilioRequest]) {
			b := setup(t, func(cfg *sms.Config) {
				cfg.Timeout, cfg.HTTPClient = o.Timeout, o.Client
				cfg.BaseURL = cmp.Or(o.BaseURL, cfg.BaseURL)
			})
			return b.sender, b.twilio.Server
		},
		Pending: func() delivery.Pending { return newPending("otp", otpData()) },
	})
}

func TestDeliver(t *testing.T) {
	t.Parallel()

	t.Run("DeliversWithReference", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := newPending("otp", otpData())

		outcome := b.sender.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		require.Regexp(t, `^SM[0-9a-f]{32}$`, outcome.Reference())

		got := b.twilio.Requests()
		require.Len(t, got, 1)
		r := got[0]
		require.Equal(t, http.MethodPost, r.Method)
		require.Equal(t, "/2010-04-01/Accounts/"+testAccountSID+"/Messages.json", r.Path)
		require.Equal(t, testAccountSID, r.User)
		require.Equal(t, testAuthToken, r.Password)
		require.Equal(t, "application/x-www-form-urlencoded", r.ContentType)
		require.Equal(t, "application/json", r.Accept)
		require.Equal(t, p.ID.String(), r.IdempotencyKey)
		require.Equal(t, map[string][]string{
			"To":   {testRecipient},
			"From": {testFrom},
			"Body": {"Your code is " + dataSecret + "."},
		}, map[string][]string(r.Form))
	})

	t.Run("MessagingService", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(cfg *sms.Config) {
			cfg.From = ""
			cfg.MessagingServiceSID = testServiceSID
		})

		outcome := b.sender.Deliver(t.Context(), newPending("otp", otpData()))
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)

		got := b.twilio.Requests()
		require.Len(t, got, 1)
		require.Equal(t, testServiceSID, got[0].Form.Get("MessagingServiceSid"))
		require.NotContains(t, got[0].Form, "From")
	})

	// Twilio posts a message's statuses only where the create call, or a
	// Messaging Service, names a callback: with From, only StatusCallback
	// brings the reports of undelivered texts.
	t.Run("StatusCallback", func(t *testing.T) {
		t.Parallel()
		const callback = "https://hooks.example.com/feedback/twilio?app=bookings"
		b := setup(t, func(cfg *sms.Config) { cfg.StatusCallback = callback })

		outcome := b.sender.Deliver(t.Context(), newPending("otp", otpData()))
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		require.Equal(t, callback, b.twilio.Requests()[0].Form.Get("StatusCallback"))
	})

	t.Run("NestedValues", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		outcome := b.sender.Deliver(t.Context(), newPending("nested", map[string]any{"user": map[string]any{"name": "Ada"}}))
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		require.Equal(t, "Hello Ada", b.twilio.Requests()[0].Form.Get("Body"))
	})

	t.Run("RedeliverySendsAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := newPending("otp", otpData())

		// The second hand of the same request, as after a crash between
		// Twilio's accept and the commit: the same key, but Twilio drops
		// no repeat, so the module says a repeat sends, and the
		// dispatcher's default commits each text alone.
		first := b.sender.Deliver(t.Context(), p)
		p.Attempt = 2
		second := b.sender.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindDelivered, first.Kind(), "%v", first)
		require.Equal(t, delivery.KindDelivered, second.Kind(), "%v", second)
		require.NotEqual(t, first.Reference(), second.Reference())

		require.Equal(t, []string{p.ID.String(), p.ID.String()}, b.twilio.keys())
		require.Equal(t, 2, b.twilio.messages())
		require.Equal(t, delivery.RepeatSends, delivery.RepeatsOf(b.sender))
	})

	t.Run("InvalidRecipient", func(t *testing.T) {
		t.Parallel()
		for _, recipient := range []string{
			"",
			"14155550100",       // no +
			"+04155550100",      // no country code starts with 0
			"+1",                // too short
			"+1234567890123456", // 16 digits
			"+1 415 555 0100",   // spaces
			"+1415555O100",      // a letter O
			"ada@example.org",   // an address
			"+14155550100\n",    // a trailing newline
			"+١٤١٥٥٥٥٠١٠٠",      // non-ASCII digits
			"ExponentPushToken[x]",
		} {
			t.Run(recipient, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				p := newPending("otp", otpData())
				p.Recipient = recipient

				outcome := b.sender.Deliver(t.Context(), p)
				require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
				require.ErrorIs(t, outcome.Reason(), sms.ErrInvalidRecipient)
				require.Equal(t, "sms: recipient is not an E.164 phone number", outcome.Reason().Error())
				require.Empty(t, b.twilio.Requests())
			})
		}
	})

	t.Run("MissingValue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := newPending("otp", map[string]any{"other": dataSecret})

		outcome := b.sender.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
		te, ok := errors.AsType[*sms.TemplateError](outcome.Reason())
		require.True(t, ok, "%v", outcome.Reason())
		require.Equal(t, "otp", te.Template)
		require.Equal(t, "code", te.Missing)
		require.Equal(t, `sms: template "otp" needs "code", which the request does not carry`, outcome.Reason().Error())
		requireClean(t, outcome.Reason(), p)
		require.Empty(t, b.twilio.Requests())
	})

	t.Run("MissingNestedValue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		outcome := b.sender.Deliver(t.Context(), newPending("nested", map[string]any{"user": map[string]any{}}))
		require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
		require.Equal(t, `sms: template "nested" needs "user.name", which the request does not carry`, outcome.Reason().Error())
		require.Empty(t, b.twilio.Requests())
	})

	t.Run("NilDataIsNoValues", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		outcome := b.sender.Deliver(t.Context(), newPending("otp", nil))
		require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
		require.Contains(t, outcome.Reason().Error(), `needs "code"`)
		require.Empty(t, b.twilio.Requests())
	})

	// Twilio refuses an empty text (error 21602): the request is dead
	// before the call, naming its template.
	t.Run("EmptyText", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		outcome := b.sender.Deliver(t.Context(), newPending("note", map[string]any{"note": " \n\t"}))
		require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), sms.ErrEmptyText)
		require.Equal(t, `sms: the text is empty: template "note" rendered only white space`, outcome.Reason().Error())
		require.Equal(t, delivery.CodeTemplateFailed, delivery.CodeOf(outcome.Reason()))
		require.Empty(t, b.twilio.Requests())
	})

	t.Run("UnknownTemplate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		outcome := b.sender.Deliver(t.Context(), newPending("no-such-template", otpData()))
		require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), sms.ErrUnknownTemplate)
		require.Contains(t, outcome.Reason().Error(), `"no-such-template"`)

		outcome = b.sender.Deliver(t.Context(), newPending("", otpData()))
		require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), sms.ErrUnknownTemplate)
		require.Empty(t, b.twilio.Requests())
	})

	t.Run("NoID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := newPending("otp", otpData())
		p.ID = [16]byte{}

		outcome := b.sender.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), delivery.ErrNoID)
		require.Empty(t, b.twilio.Requests())
	})

	// Twilio refuses an invalid number for good; a full queue of the
	// sender's drains as Twilio sends, and the request is kept.
	for _, tt := range []struct {
		name, recipient string
		kind            delivery.Kind
		reason          string
		code            int
		dcode           string // the reason's delivery code
	}{
		{"InvalidNumberAtTwilio", invalidNumber, delivery.KindReject, "sms: twilio rejected the message (400): error 21211", 21211,
			delivery.CodeInvalidRecipient},
		{"SendersQueueFull", queueFullNumber, delivery.KindRetry, "sms: twilio deferred the message (400): error 21611", 21611, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			p := newPending("otp", otpData())
			p.Recipient = tt.recipient

			outcome := b.sender.Deliver(t.Context(), p)
			require.Equal(t, tt.kind, outcome.Kind(), "%v", outcome)
			require.Equal(t, tt.reason, outcome.Reason().Error())
			apiErr, ok := errors.AsType[*sms.APIError](outcome.Reason())
			require.True(t, ok)
			require.Equal(t, &sms.APIError{StatusCode: 400, Code: tt.code}, apiErr)
			require.Equal(t, tt.dcode, delivery.CodeOf(outcome.Reason()))
			requireClean(t, outcome.Reason(), p, "not a valid phone number", "queued messages")
			require.Len(t, b.twilio.Requests(), 1)
		})
	}

	// Twilio refusing Config.From refuses every text alike, and the
	// operator can fix it: kept, not the whole backlog dead at once. An
	// error of the message's own stays a Reject.
	t.Run("SenderRefused", func(t *testing.T) {
		t.Parallel()
		for code, kind := range map[int]delivery.Kind{
			21212: delivery.KindRetry, 21601: delivery.KindRetry, 21606: delivery.KindRetry,
			21659: delivery.KindRetry, 21661: delivery.KindRetry, 21610: delivery.KindReject,
		} {
			b := setup(t)
			b.twilio.FailWith(http.StatusBadRequest, twilioErrorBody(400, code, "The 'From' number +15005550006 is not valid"))
			outcome := b.sender.Deliver(t.Context(), newPending("otp", otpData()))
			require.Equal(t, kind, outcome.Kind(), "error %d: %v", code, outcome)
			if kind == delivery.KindRetry {
				require.Equal(t, fmt.Sprintf("sms: twilio refused the sender (400): error %d", code), outcome.Reason().Error())
			}
		}
	})

	t.Run("WrongCredentials", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(cfg *sms.Config) { cfg.AuthToken = "rotated-" + testAuthToken })
		p := newPending("otp", otpData())

		// The fake answers Twilio's 401 itself: an operator can fix it, so
		// the request is kept.
		outcome := b.sender.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.Equal(t, "sms: twilio refused the credentials (401): error 20003", outcome.Reason().Error())
		requireClean(t, outcome.Reason(), p, b.cfg.AuthToken, "Authenticate")
	})

	for _, tt := range []struct {
		name   string
		status int
		body   string
		kind   delivery.Kind
		reason string
		code   string // the reason's delivery code
	}{
		// The dispatcher suppresses the number on these two codes.
		{
			name:   "Unsubscribed",
			status: 400,
			body:   twilioErrorBody(400, 21610, "Attempt to send to unsubscribed recipient +14155550100"),
			kind:   delivery.KindReject,
			reason: "sms: twilio rejected the message (400): error 21610",
			code:   delivery.CodeRecipientUnsubscribed,
		},
		{
			name:   "NotAMobileNumber",
			status: 400,
			body:   twilioErrorBody(400, 21614, "'To' number +14155550100 is not a valid mobile number"),
			kind:   delivery.KindReject,
			reason: "sms: twilio rejected the message (400): error 21614",
			code:   delivery.CodeRecipientGone,
		},
		{
			name:   "BodyTooLong",
			status: 400,
			body:   twilioErrorBody(400, 21617, "The concatenated message body exceeds the 1600 character limit: 739104-data-secret"),
			kind:   delivery.KindReject,
			reason: "sms: twilio rejected the message (400): error 21617",
		},
		{
			name:   "AccountSuspended",
			status: 403,
			body:   twilioErrorBody(403, 20005, "Account not active"),
			kind:   delivery.KindRetry,
			reason: "sms: twilio refused the credentials (403): error 20005",
		},
		{
			name:   "NotFound",
			status: 404,
			body:   twilioErrorBody(404, 20404, "The requested resource /2010-04-01/Accounts/"+testAccountSID+"/Messages.json was not found"),
			kind:   delivery.KindReject,
			reason: "sms: twilio rejected the message (404): error 20404",
		},
		{
			name:   "NotJSON",
			status: 400,
			body:   "<html>bad request for +14155550100</html>",
			kind:   delivery.KindReject,
			reason: "sms: twilio rejected the message (400)",
		},
		{
			name:   "CodeLikeAPhoneNumber",
			status: 400,
			body:   `{"code": 14155550100, "message": "odd", "status": 400}`,
			kind:   delivery.KindReject,
			reason: "sms: twilio rejected the message (400)",
		},
		{
			name:   "ServerError",
			status: 500,
			body:   twilioErrorBody(500, 20500, "Internal server error for +14155550100"),
			kind:   delivery.KindRetry,
			reason: "sms: provider answered 500 Internal Server Error",
		},
		{
			name:   "Unavailable",
			status: 503,
			body:   "down for +14155550100",
			kind:   delivery.KindRetry,
			reason: "sms: provider answered 503 Service Unavailable",
		},
		{
			name:   "NotAMessage",
			status: 201,
			body:   `<html>hello +14155550100</html>`,
			kind:   delivery.KindRetry,
			reason: "sms: twilio's answer is not a message resource",
		},
		{
			name:   "Redirect",
			status: 302,
			body:   "moved",
			kind:   delivery.KindRetry,
			reason: "sms: provider answered 302 Found",
		},
	} {
		t.Run("Answer"+tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.twilio.FailWith(tt.status, tt.body, "Location", "/elsewhere")
			p := newPending("otp", otpData())

			outcome := b.sender.Deliver(t.Context(), p)
			require.Equal(t, tt.kind, outcome.Kind(), "%v", outcome)
			require.Equal(t, tt.reason, outcome.Reason().Error())
			require.Equal(t, tt.code, delivery.CodeOf(outcome.Reason()))
			require.Zero(t, outcome.After())
			requireClean(t, outcome.Reason(), p, "Account not active", "Internal server error", "html")
			require.Len(t, b.twilio.Requests(), 1)
		})
	}

	t.Run("TooManyRequestsWithRetryAfter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.twilio.FailWith(http.StatusTooManyRequests, twilioErrorBody(429, 20429, "Too Many Requests"), "Retry-After", "120")
		p := newPending("otp", otpData())

		outcome := b.sender.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.Equal(t, 120*time.Second, outcome.After())
		require.Equal(t, "sms: provider answered 429 Too Many Requests", outcome.Reason().Error())
		requireClean(t, outcome.Reason(), p)
	})

	t.Run("UnavailableWithRetryAfter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.twilio.FailWith(http.StatusServiceUnavailable, "", "Retry-After", "7")

		outcome := b.sender.Deliver(t.Context(), newPending("otp", otpData()))
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.Equal(t, 7*time.Second, outcome.After())
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 20
		pending := make([]delivery.Pending, n)
		outcomes := make([]delivery.Outcome, n)
		var wg sync.WaitGroup
		for i := range n {
			pending[i] = newPending("otp", otpData())
			wg.Go(func() { outcomes[i] = b.sender.Deliver(t.Context(), pending[i]) })
		}
		wg.Wait()

		refs := map[string]bool{}
		for i, o := range outcomes {
			require.Equal(t, delivery.KindDelivered, o.Kind(), "%d: %v", i, o)
			refs[o.Reference()] = true
		}
		require.Len(t, refs, n)
		require.Equal(t, n, b.twilio.messages())
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
			StatusCode: http.StatusCreated,
			Header:     http.Header{"Content-Type": {"application/json"}},
			Body:       io.NopCloser(strings.NewReader(`{"sid": "SM0123456789abcdef0123456789abcdef"}`)),
			Request:    r,
		}, nil
	})}
	sender, err := sms.New(&sms.Config{
		AccountSID: testAccountSID,
		AuthToken:  testAuthToken,
		From:       testFrom,
		Templates:  testTemplates(),
		HTTPClient: client,
	})
	require.NoError(t, err)

	outcome := sender.Deliver(t.Context(), newPending("otp", otpData()))
	require.Equal(t, delivery.DeliveredWithReference("SM0123456789abcdef0123456789abcdef"), outcome)
	require.Equal(t, "https://api.twilio.com/2010-04-01/Accounts/"+testAccountSID+"/Messages.json", got.URL.String())
	require.Equal(t, "Basic "+base64.StdEncoding.EncodeToString([]byte(testAccountSID+":"+testAuthToken)), got.Header.Get("Authorization"))
}

func TestNew(t *testing.T) {
	t.Parallel()

	valid := func() *sms.Config {
		return &sms.Config{
			AccountSID: testAccountSID,
			AuthToken:  testAuthToken,
			From:       testFrom,
			Templates:  testTemplates(),
		}
	}

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()
		cfg := valid()
		_, err := sms.New(cfg)
		require.NoError(t, err)
		require.Empty(t, cfg.BaseURL, "New changed the caller's Config")
		require.Zero(t, cfg.Timeout, "New changed the caller's Config")
	})

	t.Run("NilConfig", func(t *testing.T) {
		t.Parallel()
		_, err := sms.New(nil)
		require.ErrorContains(t, err, "Config is nil")
	})

	for _, tt := range []struct {
		name   string
		change func(*sms.Config)
		want   string
	}{
		{"NoAccountSID", func(c *sms.Config) { c.AccountSID = "" }, "Config.AccountSID is required"},
		{"BadAccountSID", func(c *sms.Config) { c.AccountSID = "SK0123456789abcdef0123456789abcdef" }, "Config.AccountSID is not a Twilio account SID"},
		{"NoAuthToken", func(c *sms.Config) { c.AuthToken = "" }, "Config.AuthToken is required"},
		{"NoSender", func(c *sms.Config) { c.From = "" }, "Config.From or Config.MessagingServiceSID is required"},
		{"TwoSenders", func(c *sms.Config) { c.MessagingServiceSID = testServiceSID }, "Config.From and Config.MessagingServiceSID are both set"},
		{"BadServiceSID", func(c *sms.Config) { c.From = ""; c.MessagingServiceSID = "MG-nope" }, "Config.MessagingServiceSID"},
		{"ControlInFrom", func(c *sms.Config) { c.From = "+1500\n5550006" }, "Config.From contains a control character"},
		{"BadBaseURL", func(c *sms.Config) { c.BaseURL = "ftp://user:" + testAuthToken + "@example.com" }, "Config.BaseURL is not an absolute http or https URL"},
		{"RelativeBaseURL", func(c *sms.Config) { c.BaseURL = "/twilio" }, "Config.BaseURL"},
		{"BaseURLWithQuery", func(c *sms.Config) { c.BaseURL = "https://api.twilio.com?x=1" }, "Config.BaseURL"},
		{"NegativeTimeout", func(c *sms.Config) { c.Timeout = -time.Second }, "Config.Timeout is negative"},
		{"RelativeStatusCallback", func(c *sms.Config) { c.StatusCallback = "/feedback/twilio" }, "Config.StatusCallback is not an absolute"},
		{"StatusCallbackNotHTTP", func(c *sms.Config) { c.StatusCallback = "ftp://user:" + testAuthToken + "@example.com/cb" }, "Config.StatusCallback"},
		{"NoTemplates", func(c *sms.Config) { c.Templates = nil }, "Config.Templates is empty"},
		{"EmptyTemplate", func(c *sms.Config) { c.Templates["blank"] = "" }, `Config.Templates["blank"] is empty`},
		{"UnnamedTemplate", func(c *sms.Config) { c.Templates[""] = "Hi" }, "Config.Templates: a template's name is empty"},
		{"TemplateDoesNotParse", func(c *sms.Config) { c.Templates["broken"] = "Hi {{.name" }, `Config.Templates["broken"]: template: broken:1: unclosed action`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := valid()
			tt.change(cfg)
			_, err := sms.New(cfg)
			require.ErrorContains(t, err, tt.want)
			require.ErrorContains(t, err, "sms: ")
			require.NotContains(t, err.Error(), testAuthToken)
		})
	}

	t.Run("JoinsEveryProblem", func(t *testing.T) {
		t.Parallel()
		_, err := sms.New(&sms.Config{Timeout: -1})
		for _, field := range []string{"Config.AccountSID", "Config.AuthToken", "Config.From", "Config.Timeout", "Config.Templates"} {
			require.ErrorContains(t, err, field)
		}
	})
}
