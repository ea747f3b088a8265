// Package fakeapi is the part every fake provider API of the tests
// shares: a local HTTP server that records each request as the provider's
// fake reads it, and that a test can make stall, or answer every request
// with a canned reply, before the fake's own handler sees it.
package fakeapi

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Server is a local HTTP server playing a provider's API, recording each
// request as an R.
type Server[R any] struct {
	// URL is the server's base URL.
	URL string

	srv    *httptest.Server
	record func(*http.Request) R
	answer func(http.ResponseWriter, *http.Request, R)
	stop   chan struct{} // closed when the test ends: releases a stall

	mu       sync.Mutex
	requests []R
	stalled  bool
	canned   *canned
}

// canned is a reply to every request.
type canned struct {
	status int
	body   string
	header http.Header
}

// Start starts a server, closed when tb ends. record reads a request into
// an R, recorded before anything else; answer is the provider's handler,
// which a stall or a canned reply stands in for.
func Start[R any](tb testing.TB, record func(*http.Request) R, answer func(w http.ResponseWriter, r *http.Request, req R)) *Server[R] {
	tb.Helper()
	s := &Server[R]{record: record, answer: answer, stop: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL, s.srv = srv.URL, srv
	tb.Cleanup(srv.Close)
	tb.Cleanup(func() { close(s.stop) }) // runs first: a stalled handler returns
	return s
}

// Client returns an HTTP client for the server, whose connections close
// with it.
func (s *Server[R]) Client() *http.Client { return s.srv.Client() }

// Requests returns a copy of the requests so far.
func (s *Server[R]) Requests() []R {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]R(nil), s.requests...)
}

// FailWith makes the server answer every request with status, body and
// the header pairs in kv.
func (s *Server[R]) FailWith(status int, body string, kv ...string) {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.canned = &canned{status: status, body: body, header: h}
}

// Stall makes the server hold every request until the test ends or the
// client goes away.
func (s *Server[R]) Stall() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalled = true
}

func (s *Server[R]) serve(w http.ResponseWriter, r *http.Request) {
	req := s.record(r)
	s.mu.Lock()
	s.requests = append(s.requests, req)
	stalled, c := s.stalled, s.canned
	s.mu.Unlock()
	switch {
	case stalled:
		select {
		case <-s.stop:
		case <-r.Context().Done():
			panic(http.ErrAbortHandler) // no implicit 200 for a client that gave up
		}
	case c != nil:
		for k, v := range c.header {
			w.Header()[k] = v
		}
		w.WriteHeader(c.status)
		_, _ = w.Write([]byte(c.body))
	default:
		s.answer(w, r, req)
	}
}
