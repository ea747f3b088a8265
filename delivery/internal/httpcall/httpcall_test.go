package httpcall_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/internal/httpcall"
)

// What must never reach a reason: the body, and the credentials and ids a
// URL can carry.
const (
	bodyMarker  = "BODY-MARKER-7f3a recipient ada@example.com"
	userSecret  = "pa55w0rd-in-userinfo"
	querySecret = "qu3ry-secret-token"
)

type testBundle struct {
	srv *httptest.Server
	// url is the server's URL with credentials in its userinfo and query.
	url string

	mu   sync.Mutex
	keys []string // the Idempotency-Key of every request received
}

func (b *testBundle) received() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.keys...)
}

// setup starts a server that records each request's key and then runs h.
func setup(t *testing.T, h http.HandlerFunc) *testBundle {
	t.Helper()
	b := &testBundle{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.keys = append(b.keys, r.Header.Get(httpcall.KeyHeader))
		b.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(b.srv.Close)
	b.url = secretURL(t, b.srv.URL)
	return b
}

// secretURL returns base with credentials in its userinfo and query.
func secretURL(t *testing.T, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.User = url.UserPassword("user", userSecret)
	u.Path = "/v1/send/ada@example.com"
	u.RawQuery = url.Values{"api_key": {querySecret}}.Encode()
	return u.String()
}

// hang returns a handler that reads the request, signals arrived (if not
// nil), and hangs until release is closed or the client goes away. Close
// release in a cleanup registered after setup's, so that it runs before the
// server's Close, which waits for every handler.
func hang(release <-chan struct{}, arrived chan<- struct{}) http.HandlerFunc {
	return func(_ http.ResponseWriter, r *http.Request) {
		// Once the body is read, the server watches the connection and
		// cancels r.Context() when the client goes away.
		_, _ = io.Copy(io.Discard, r.Body)
		if arrived != nil {
			arrived <- struct{}{}
		}
		select {
		case <-release:
		case <-r.Context().Done():
			panic(http.ErrAbortHandler) // no implicit 200 for a client that gave up
		}
	}
}

func newRequest(t *testing.T, target string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, target, strings.NewReader(`{"to":"ada@example.com"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	return req
}

// requireSafeReason checks that out ends the attempt with a reason that
// names neither the body nor anything of the URL but its scheme.
func requireSafeReason(t *testing.T, out delivery.Outcome, target string) {
	t.Helper()
	require.NotEqual(t, delivery.KindDelivered, out.Kind())
	require.NotEqual(t, delivery.KindInvalid, out.Kind())
	u, err := url.Parse(target)
	require.NoError(t, err)
	reason := out.Reason().Error()
	for _, never := range []string{bodyMarker, "BODY-MARKER", "ada@example.com", userSecret, querySecret, u.Host, u.Hostname(), u.Port(), u.Path, "api_key"} {
		require.NotContains(t, reason, never)
	}
}

const key = "0190b9a4-7c2e-7d1a-9c3b-5e6f7a8b9c0d"

func TestDo(t *testing.T) {
	t.Parallel()

	t.Run("SetsIdempotencyKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Request-Id", "req-1")
			_, _ = io.WriteString(w, "ok:"+r.Header.Get(httpcall.KeyHeader))
		})
		req := newRequest(t, b.url)
		req.Header.Set(httpcall.KeyHeader, "stale-key")

		resp, out, ok := httpcall.Do(t.Context(), b.srv.Client(), req, key)
		require.True(t, ok, "%s", out)
		require.Equal(t, delivery.Outcome{}, out)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "ok:"+key, string(resp.Body))
		require.Equal(t, "req-1", resp.Header.Get("X-Request-Id"))
		require.Equal(t, []string{key}, b.received())
		require.Equal(t, "stale-key", req.Header.Get(httpcall.KeyHeader), "the caller's request is left unchanged")
	})

	t.Run("NilClientIsDefault", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })
		t.Cleanup(http.DefaultClient.CloseIdleConnections)

		resp, out, ok := httpcall.Do(t.Context(), nil, newRequest(t, b.url), key)
		require.True(t, ok, "%s", out)
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
		require.Equal(t, []string{key}, b.received())
	})

	t.Run("OtherStatusesAreTheModules", func(t *testing.T) {
		t.Parallel()
		for _, status := range []int{200, 201, 202, 204, 304, 400, 401, 403, 404, 409, 413, 422} {
			t.Run(fmt.Sprint(status), func(t *testing.T) {
				t.Parallel()
				b := setup(t, func(w http.ResponseWriter, _ *http.Request) {
					w.WriteHeader(status)
					_, _ = io.WriteString(w, bodyMarker)
				})

				resp, out, ok := httpcall.Do(t.Context(), b.srv.Client(), newRequest(t, b.url), key)
				require.True(t, ok, "%s", out)
				require.Equal(t, status, resp.StatusCode)
				if status != 204 && status != 304 { // no body allowed
					require.Equal(t, bodyMarker, string(resp.Body))
				}
			})
		}
	})

	t.Run("RetryStatuses", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			status     int
			retryAfter string // "" sends none; "+1h" sends an HTTP-date an hour ahead
			reason     string
			minAfter   time.Duration
			maxAfter   time.Duration
		}{
			{status: 429, retryAfter: "120", reason: "provider answered 429 Too Many Requests", minAfter: 2 * time.Minute, maxAfter: 2 * time.Minute},
			{status: 500, reason: "provider answered 500 Internal Server Error"},
			{status: 502, retryAfter: "soon", reason: "provider answered 502 Bad Gateway"},
			{status: 503, retryAfter: "+1h", reason: "provider answered 503 Service Unavailable", minAfter: 58 * time.Minute, maxAfter: time.Hour},
			{status: 504, retryAfter: "0", reason: "provider answered 504 Gateway Timeout"},
			{status: 599, retryAfter: "7", reason: "provider answered 599", minAfter: 7 * time.Second, maxAfter: 7 * time.Second},
		}
		for _, tt := range tests {
			t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
				t.Parallel()
				b := setup(t, func(w http.ResponseWriter, _ *http.Request) {
					switch tt.retryAfter {
					case "":
					case "+1h":
						w.Header().Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
					default:
						w.Header().Set("Retry-After", tt.retryAfter)
					}
					// The status line's text is the provider's to choose: never shown.
					w.Header().Set("Content-Type", "text/plain")
					w.WriteHeader(tt.status)
					_, _ = io.WriteString(w, bodyMarker)
				})

				resp, out, ok := httpcall.Do(t.Context(), b.srv.Client(), newRequest(t, b.url), key)
				require.False(t, ok)
				require.Equal(t, httpcall.Response{}, resp)
				require.Equal(t, delivery.KindRetry, out.Kind())
				require.Equal(t, tt.reason, out.Reason().Error())
				serr, isStatus := errors.AsType[*httpcall.StatusError](out.Reason())
				require.True(t, isStatus)
				require.Equal(t, tt.status, serr.StatusCode)
				require.GreaterOrEqual(t, out.After(), tt.minAfter)
				require.LessOrEqual(t, out.After(), tt.maxAfter)
				requireSafeReason(t, out, b.url)
				require.Equal(t, []string{key}, b.received())
			})
		}
	})

	t.Run("BodyLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, strings.Repeat("x", httpcall.BodyLimit+4096))
		})

		resp, out, ok := httpcall.Do(t.Context(), b.srv.Client(), newRequest(t, b.url), key)
		require.True(t, ok, "%s", out)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.Len(t, resp.Body, httpcall.BodyLimit)
	})

	t.Run("CancelledBefore", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(http.ResponseWriter, *http.Request) {})
		ctx, cancel := context.WithCancel(t.Context())
		cancel()

		_, out, ok := httpcall.Do(ctx, b.srv.Client(), newRequest(t, b.url), key)
		require.False(t, ok)
		require.Equal(t, delivery.KindRetry, out.Kind())
		require.Equal(t, "provider call cancelled", out.Reason().Error())
		require.ErrorIs(t, out.Reason(), context.Canceled)
		require.Empty(t, b.received(), "nothing is sent")
	})

	t.Run("CancelledDuring", func(t *testing.T) {
		t.Parallel()
		arrived := make(chan struct{}, 1)
		release := make(chan struct{})
		b := setup(t, hang(release, arrived))
		t.Cleanup(func() { close(release) })
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			<-arrived
			cancel()
		}()

		_, out, ok := httpcall.Do(ctx, b.srv.Client(), newRequest(t, b.url), key)
		require.False(t, ok)
		require.Equal(t, delivery.KindRetry, out.Kind())
		require.Equal(t, "provider call cancelled", out.Reason().Error())
		require.ErrorIs(t, out.Reason(), context.Canceled)
		requireSafeReason(t, out, b.url)
	})

	t.Run("Deadline", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		b := setup(t, hang(release, nil))
		t.Cleanup(func() { close(release) })
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()

		_, out, ok := httpcall.Do(ctx, b.srv.Client(), newRequest(t, b.url), key)
		require.False(t, ok)
		require.Equal(t, delivery.KindRetry, out.Kind())
		require.Equal(t, "provider call timed out after the delivery's deadline", out.Reason().Error())
		require.ErrorIs(t, out.Reason(), context.DeadlineExceeded)
		requireSafeReason(t, out, b.url)
	})

	t.Run("DeadlineWhileReadingBody", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		b := setup(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "partial ")
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		t.Cleanup(func() { close(release) })
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()

		_, out, ok := httpcall.Do(ctx, b.srv.Client(), newRequest(t, b.url), key)
		require.False(t, ok)
		require.Equal(t, "provider call timed out after the delivery's deadline", out.Reason().Error())
		requireSafeReason(t, out, b.url)
	})

	t.Run("ConnectionRefused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		target := secretURL(t, "http://"+ln.Addr().String())
		require.NoError(t, ln.Close())
		client := &http.Client{Transport: &http.Transport{}}

		_, out, ok := httpcall.Do(t.Context(), client, newRequest(t, target), key)
		require.False(t, ok)
		require.Equal(t, delivery.KindRetry, out.Kind())
		require.Equal(t, "provider unreachable: dial: connection refused", out.Reason().Error())
		require.ErrorIs(t, out.Reason(), syscall.ECONNREFUSED)
		_, isURLError := errors.AsType[*url.Error](out.Reason())
		require.False(t, isURLError, "the reason's chain holds no URL")
		requireSafeReason(t, out, target)
	})

	t.Run("ConnectionClosed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		})

		_, out, ok := httpcall.Do(t.Context(), b.srv.Client(), newRequest(t, b.url), key)
		require.False(t, ok)
		require.Equal(t, delivery.KindRetry, out.Kind())
		require.Equal(t, "provider unreachable: request: connection closed by the provider", out.Reason().Error())
		requireSafeReason(t, out, b.url)
	})

	t.Run("UntrustedCertificate", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		t.Cleanup(srv.Close)
		transport := &http.Transport{}
		t.Cleanup(transport.CloseIdleConnections)
		target := secretURL(t, srv.URL)

		_, out, ok := httpcall.Do(t.Context(), &http.Client{Transport: transport}, newRequest(t, target), key)
		require.False(t, ok)
		require.Equal(t, delivery.KindRetry, out.Kind())
		require.Equal(t, "provider unreachable: tls handshake: certificate not trusted", out.Reason().Error())
		requireSafeReason(t, out, target)
	})
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		values []string // nil: no header
		want   time.Duration
	}{
		{name: "Absent", want: 0},
		{name: "Empty", values: []string{""}, want: 0},
		{name: "Seconds", values: []string{"120"}, want: 2 * time.Minute},
		{name: "SecondsSpaces", values: []string{"  30 "}, want: 30 * time.Second},
		{name: "Zero", values: []string{"0"}, want: 0},
		{name: "Negative", values: []string{"-5"}, want: 0},
		{name: "Fraction", values: []string{"1.5"}, want: 0},
		{name: "Garbage", values: []string{"soon"}, want: 0},
		{name: "HugeSeconds", values: []string{"99999999999999999999999"}, want: httpcall.RetryAfterMax},
		{name: "OverMax", values: []string{"86401"}, want: httpcall.RetryAfterMax},
		{name: "AtMax", values: []string{"86400"}, want: httpcall.RetryAfterMax},
		{name: "DateIMF", values: []string{"Sun, 01 Mar 2026 12:05:00 GMT"}, want: 5 * time.Minute},
		{name: "DateRFC850", values: []string{"Sunday, 01-Mar-26 12:00:30 GMT"}, want: 30 * time.Second},
		{name: "DateANSIC", values: []string{"Sun Mar  1 13:00:00 2026"}, want: time.Hour},
		{name: "DatePast", values: []string{"Sun, 01 Mar 2026 11:00:00 GMT"}, want: 0},
		{name: "DateFarAhead", values: []string{"Fri, 01 Mar 2030 12:00:00 GMT"}, want: httpcall.RetryAfterMax},
		{name: "FirstValueCounts", values: []string{"10", "20"}, want: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for _, v := range tt.values {
				h.Add("Retry-After", v)
			}
			require.Equal(t, tt.want, httpcall.RetryAfter(h, now))
		})
	}
}

func TestStatusError(t *testing.T) {
	t.Parallel()

	tests := []struct {
		err  httpcall.StatusError
		want string
	}{
		{err: httpcall.StatusError{StatusCode: 503}, want: "provider answered 503 Service Unavailable"},
		{err: httpcall.StatusError{StatusCode: 400, Code: "validation_error"}, want: "provider answered 400 Bad Request: validation_error"},
		{err: httpcall.StatusError{StatusCode: 422, Code: "21211"}, want: "provider answered 422 Unprocessable Entity: 21211"},
		{err: httpcall.StatusError{StatusCode: 400, Code: "The address ada@example.com is invalid"}, want: "provider answered 400 Bad Request"},
		{err: httpcall.StatusError{StatusCode: 799, Code: "weird"}, want: "provider answered 799: weird"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.err.Error())
		})
	}
}

func TestSafeCode(t *testing.T) {
	t.Parallel()

	for code, want := range map[string]bool{
		"validation_error":                            true,
		"DeviceNotRegistered":                         true,
		"messaging/registration-token-not-registered": true,
		"invalid.recipient":                           true,
		"21211":                                       true,
		"300":                                         true,
		"":                                            false,
		"ada@example.com":                             false,
		"+15550100":                                   false,
		"15550100":                                    false, // digits only, longer than a code: maybe a phone number
		"Invalid to field":                            false,
		"ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]":                        false,
		"a0f3c9e1b2d4a6f8c0e2b4d6f8a0c2e4b6d8f0a2c4e6b8d0f2a4c6e8b0d2f4a6": false, // an APNs device token
		"caf\u00e9":             false,
		"line\nbreak":           false,
		strings.Repeat("a", 48): true,
		strings.Repeat("a", 49): false,
	} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			if want {
				require.Equal(t, code, httpcall.SafeCode(code))
			} else {
				require.Empty(t, httpcall.SafeCode(code))
			}
		})
	}
}

func TestPrefix(t *testing.T) {
	t.Parallel()

	cause := &httpcall.StatusError{StatusCode: 503}
	tests := []struct {
		name string
		in   delivery.Outcome
		want delivery.Outcome
	}{
		{name: "Retry", in: delivery.RetryAfter(cause, time.Minute), want: delivery.RetryAfter(errors.New("resend: provider answered 503 Service Unavailable"), time.Minute)},
		{name: "Reject", in: delivery.Reject(cause), want: delivery.Reject(errors.New("resend: provider answered 503 Service Unavailable"))},
		{name: "Delivered", in: delivery.DeliveredWithReference("re_1"), want: delivery.DeliveredWithReference("re_1")},
		{name: "Zero", in: delivery.Outcome{}, want: delivery.Outcome{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := httpcall.Prefix("resend", tt.in)
			require.Equal(t, tt.want.String(), got.String())
			require.Equal(t, tt.want.Kind(), got.Kind())
			require.Equal(t, tt.want.After(), got.After())
			if tt.in.Reason() != nil {
				require.ErrorIs(t, got.Reason(), cause)
			}
		})
	}
}
