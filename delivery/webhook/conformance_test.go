package webhook_test

import (
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/deliverytest"
	"github.com/tidings-go/tidings/delivery/webhook"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	deliverytest.Run(t, deliverytest.Features{Remote: true}, func(t *testing.T) deliverytest.Subject {
		fake := newSwitchable(t)
		b := setup(t, receiverOptions{answer: fake.serve})
		return deliverytest.Subject{
			Delivery: b.hook,
			Pending:  func() delivery.Pending { return newPending(b.rcv.url) },
			Keys: func() []string {
				var keys []string
				for _, a := range b.rcv.received() {
					// A request that does not verify, or whose two keys
					// differ, does not count as carrying the id.
					key := a.header.Get(webhook.HeaderID)
					switch other := a.header.Get("Idempotency-Key"); {
					case a.verifyErr != nil:
						key = "unverified: " + a.verifyErr.Error()
					case other != key:
						key = "webhook-id " + key + " differs from Idempotency-Key " + other
					}
					keys = append(keys, key)
				}
				return keys
			},
			Stall:   fake.stall,
			Fail:    fake.fail,
			Secrets: []string{secretA},
		}
	})
}

// switchable answers 204 until told to hang or to fail. It is safe for
// concurrent use.
type switchable struct {
	release chan struct{}

	mu      sync.Mutex
	stalled bool
	status  int // a failure to answer; 0: none
	body    string
}

func newSwitchable(t *testing.T) *switchable {
	s := &switchable{release: make(chan struct{})}
	t.Cleanup(func() { close(s.release) }) // runs before the server's Close
	return s
}

func (s *switchable) stall() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalled = true
}

func (s *switchable) fail(status int, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body = status, body
}

func (s *switchable) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	stalled, status, body := s.stalled, s.status, s.body
	s.mu.Unlock()
	switch {
	case stalled:
		select {
		case <-r.Context().Done():
			panic(http.ErrAbortHandler) // no implicit 200 for a client that gave up
		case <-s.release:
		}
	case status != 0:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}
