package feedback_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/notification/feedback"
)

// recordingStore is a Store that records every call and answers err.
type recordingStore struct {
	mu    sync.Mutex
	calls [][]feedback.Report
	err   error
}

// Store records reports and answers s.err.
func (s *recordingStore) Store(_ context.Context, reports []feedback.Report) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, reports)
	return s.err
}

// Calls returns what Store was called with so far.
func (s *recordingStore) Calls() [][]feedback.Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]feedback.Report(nil), s.calls...)
}

// errStoreDown is what a failing recordingStore answers.
var errStoreDown = errors.New("store is down")

// post sends a POST of body with header to h and returns the answer.
func post(t *testing.T, h http.Handler, header http.Header, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "https://receiver.example/feedback", bytes.NewReader(body))
	for name, values := range header {
		req.Header[name] = values
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// sample reads a provider's sample payload from testdata.
func sample(t testing.TB, parts ...string) []byte {
	t.Helper()
	body, err := os.ReadFile(filepath.Join(append([]string{"testdata"}, parts...)...))
	require.NoError(t, err)
	return body
}

// requireValid checks what every report must have.
func requireValid(t testing.TB, reports []feedback.Report) {
	t.Helper()
	for _, r := range reports {
		require.NotEmpty(t, r.Provider, "provider")
		require.NotEmpty(t, r.EventID, "event id")
		require.True(t, r.Class.Valid(), "class %q", r.Class)
		require.NotEmpty(t, r.Channel, "channel")
		require.NotEmpty(t, r.Code, "code")
	}
}

// handlerCase is one request to a receiver and what it must answer.
type handlerCase struct {
	name   string
	method string // "" means POST
	header http.Header
	body   []byte
	// storeErr is what the Store answers.
	storeErr error
	status   int
	// stored is whether the Store must have been called, once.
	stored bool
	// errText is what the answer's body must hold, when not empty.
	errText string
}

// runHandlerCases sends each case to a receiver that newHandler builds
// around a recordingStore and checks the status and the Store's calls:
// exactly one with reports when stored, none otherwise. It returns the
// reports of the stored cases, by name.
func runHandlerCases(t *testing.T, newHandler func(feedback.Store) http.Handler, cases []handlerCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := &recordingStore{err: tc.storeErr}
			h := newHandler(store)
			var rec *httptest.ResponseRecorder
			if tc.method != "" && tc.method != http.MethodPost {
				req := httptest.NewRequestWithContext(t.Context(), tc.method, "https://receiver.example/feedback", nil)
				rec = httptest.NewRecorder()
				h.ServeHTTP(rec, req)
			} else {
				rec = post(t, h, tc.header, tc.body)
			}
			require.Equal(t, tc.status, rec.Code, "answer: %s", rec.Body.String())
			if tc.errText != "" {
				require.Contains(t, rec.Body.String(), tc.errText)
			}
			calls := store.Calls()
			if !tc.stored {
				require.Empty(t, calls, "the Store was called")
				return
			}
			require.Len(t, calls, 1, "Store calls")
			require.NotEmpty(t, calls[0])
			requireValid(t, calls[0])
		})
	}
}
