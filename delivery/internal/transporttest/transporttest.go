// Package transporttest checks how a delivery module that calls a
// provider's HTTP API answers the transport's failures, against a fake
// provider of package fakeapi.
package transporttest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/fakeapi"
)

// Module is a delivery module that calls a provider's HTTP API.
type Module[R any] struct {
	// Name prefixes the module's reasons ("sms"), and Provider names the
	// provider in them ("twilio").
	Name, Provider string
	// New returns the module's delivery, configured with opts, and the
	// fake provider it calls.
	New func(t *testing.T, opts Options) (delivery.Delivery, *fakeapi.Server[R])
	// Pending returns a valid request with a fresh id.
	Pending func() delivery.Pending
}

// Options are the settings of a module's Config that Run sets; a zero
// field leaves the module's own.
type Options struct {
	Timeout time.Duration // Config.Timeout
	Client  *http.Client  // Config.HTTPClient
	BaseURL string        // Config.BaseURL
}

// Run checks what a module answers when the call fails before the
// provider answers: the context was cancelled, the provider stalled past
// the delivery's deadline or the module's Config.Timeout, or nothing
// listens at its address. Each is a retry whose reason says so, names the
// module, and leaves the provider's address out.
func Run[R any](t *testing.T, m Module[R]) {
	requireRetry := func(t *testing.T, outcome delivery.Outcome, cause error, reason string) {
		t.Helper()
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		if cause != nil {
			require.ErrorIs(t, outcome.Reason(), cause)
		}
		require.Equal(t, m.Name+": "+reason, outcome.Reason().Error())
	}

	t.Run("CancelledContext", func(t *testing.T) {
		t.Parallel()
		d, srv := m.New(t, Options{})
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		outcome := d.Deliver(ctx, m.Pending())
		requireRetry(t, outcome, context.Canceled, "provider call cancelled")
		require.Empty(t, srv.Requests(), "a cancelled call reaches no provider")
	})

	t.Run("StalledProviderAndDeadline", func(t *testing.T) {
		t.Parallel()
		d, srv := m.New(t, Options{})
		srv.Stall()
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		outcome := d.Deliver(ctx, m.Pending())
		require.Less(t, time.Since(start), 5*time.Second)
		requireRetry(t, outcome, context.DeadlineExceeded, "provider call timed out after the delivery's deadline")
		require.Len(t, srv.Requests(), 1)
	})

	t.Run("StalledProviderAndTimeout", func(t *testing.T) {
		t.Parallel()
		// A client of our own, without a Timeout: Config.Timeout still
		// bounds the call.
		client := &http.Client{Transport: &http.Transport{}}
		t.Cleanup(client.CloseIdleConnections)
		d, srv := m.New(t, Options{Timeout: 200 * time.Millisecond, Client: client})
		srv.Stall()
		start := time.Now()
		outcome := d.Deliver(t.Context(), m.Pending())
		require.Less(t, time.Since(start), 5*time.Second)
		requireRetry(t, outcome, context.DeadlineExceeded, m.Provider+" took longer than Config.Timeout (200ms)")
	})

	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		gone := httptest.NewServer(http.NotFoundHandler())
		gone.Close() // nothing listens there any more
		d, _ := m.New(t, Options{BaseURL: gone.URL})
		outcome := d.Deliver(t.Context(), m.Pending())
		requireRetry(t, outcome, nil, "provider unreachable: dial: connection refused")
		require.NotContains(t, outcome.Reason().Error(), strings.TrimPrefix(gone.URL, "http://"))
	})
}
