package httpcall_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/internal/httpcall"
)

func TestCaller(t *testing.T) {
	t.Parallel()

	newCaller := func(b *testBundle, timeout time.Duration) *httpcall.Caller {
		return &httpcall.Caller{
			Name:        "acme",
			Client:      b.srv.Client(),
			Timeout:     timeout,
			TimeoutText: "acme: provider took longer than Config.Timeout",
		}
	}

	t.Run("Answers", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "created")
		})

		resp, out, ok := newCaller(b, time.Minute).Call(t.Context(), newRequest(t, b.url), key)
		require.True(t, ok, "%s", out)
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		require.Equal(t, "created", string(resp.Body))
		require.Equal(t, []string{key}, b.received())
	})

	t.Run("ZeroTimeoutIsNoBound", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })

		resp, out, ok := newCaller(b, 0).Call(t.Context(), newRequest(t, b.url), key)
		require.True(t, ok, "%s", out)
		require.Equal(t, http.StatusOK, resp.StatusCode)
	})

	t.Run("PrefixesReason", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusServiceUnavailable)
		})

		resp, out, ok := newCaller(b, time.Minute).Call(t.Context(), newRequest(t, b.url), key)
		require.False(t, ok)
		require.Equal(t, httpcall.Response{}, resp)
		require.Equal(t, delivery.KindRetry, out.Kind())
		require.Equal(t, 30*time.Second, out.After())
		require.Equal(t, "acme: provider answered 503 Service Unavailable", out.Reason().Error())
		_, isStatus := errors.AsType[*httpcall.StatusError](out.Reason())
		require.True(t, isStatus)
	})

	// Whichever ends first, the Caller's timeout or the delivery's
	// deadline, says so.
	for _, tt := range []struct {
		name              string
		timeout, deadline time.Duration
		reason            string
	}{
		{name: "Timeout", timeout: 100 * time.Millisecond, deadline: time.Minute, reason: "acme: provider took longer than Config.Timeout (100ms)"},
		{name: "DeliveryDeadline", timeout: time.Minute, deadline: 100 * time.Millisecond, reason: "acme: provider call timed out after the delivery's deadline"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			b := setup(t, hang(release, nil))
			t.Cleanup(func() { close(release) })
			ctx, cancel := context.WithTimeout(t.Context(), tt.deadline)
			defer cancel()

			_, out, ok := newCaller(b, tt.timeout).Call(ctx, newRequest(t, b.url), key)
			require.False(t, ok)
			require.Equal(t, delivery.KindRetry, out.Kind())
			require.Equal(t, tt.reason, out.Reason().Error())
			require.ErrorIs(t, out.Reason(), context.DeadlineExceeded)
			requireSafeReason(t, out, b.url)
		})
	}
}

func TestNoRedirect(t *testing.T) {
	t.Parallel()
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	})
	client := b.srv.Client()
	client.CheckRedirect = httpcall.NoRedirect

	resp, out, ok := httpcall.Do(t.Context(), client, newRequest(t, b.url), key)
	require.True(t, ok, "%s", out)
	require.Equal(t, http.StatusFound, resp.StatusCode)
	require.Len(t, b.received(), 1, "the redirect is not followed")
}

func TestBaseURL(t *testing.T) {
	t.Parallel()

	for base, want := range map[string]string{
		"https://api.example.com":          "https://api.example.com",
		"https://api.example.com/":         "https://api.example.com",
		"http://127.0.0.1:8080//":          "http://127.0.0.1:8080",
		"https://user:pw@api.example.com/": "https://user:pw@api.example.com",
		"https://api.example.com/v2/":      "https://api.example.com/v2",
		"":                                 "",
		"api.example.com":                  "",
		"ftp://api.example.com":            "",
		"https://":                         "",
		"https://api.example.com/?k=v":     "",
		"https://api.example.com/#top":     "",
		"https://api.example.com/%zz":      "",
	} {
		t.Run(base, func(t *testing.T) {
			t.Parallel()
			got, ok := httpcall.BaseURL(base)
			require.Equal(t, want, got)
			require.Equal(t, want != "", ok)
		})
	}
}
