package webhook_test

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/webhook"
)

// Test secrets: keys of 32 bytes, written as Config.Secrets takes them.
var (
	secretA = testSecret("tidings webhook test secret A 32")
	secretB = testSecret("tidings webhook test secret B 32")
	secretC = testSecret("tidings webhook test secret C 32")
)

// testSecret writes key as a whsec_ secret.
func testSecret(key string) string {
	return webhook.SecretPrefix + base64.StdEncoding.EncodeToString([]byte(key))
}

// What must never reach a reason: a token in the endpoint's URL and the
// endpoint's answer.
const (
	tokenMarker = "tok_PATH-TOKEN-4b1d"
	bodyMarker  = "BODY-MARKER-9c2e the endpoint's own words"
)

// stagedAt is the StagedAt of every test request.
var stagedAt = time.Date(2025, 7, 1, 9, 30, 0, 123456000, time.UTC)

// arrival is one request the receiver got.
type arrival struct {
	method string
	path   string
	header http.Header
	body   []byte
	// verifyErr is what webhook.Verify said of the request on arrival,
	// with the receiver's secrets and clock.
	verifyErr error
}

// receiverOptions configure a receiver.
type receiverOptions struct {
	// plain serves http instead of https.
	plain bool
	// secrets are the receiver's secrets; nil means {secretA}.
	secrets []string
	// answer answers each request after it is recorded; nil means 204.
	answer http.HandlerFunc
}

// receiver is a webhook endpoint that verifies and records every request,
// then answers as its options say.
type receiver struct {
	srv *httptest.Server
	// url is the endpoint's URL, with a token in its path.
	url string

	mu       sync.Mutex
	arrivals []arrival
}

// startReceiver starts a receiver, closed when the test ends.
func startReceiver(t *testing.T, opts receiverOptions) *receiver {
	t.Helper()
	secrets := opts.secrets
	if secrets == nil {
		secrets = []string{secretA}
	}
	answer := opts.answer
	if answer == nil {
		answer = func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }
	}
	rcv := &receiver{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		a := arrival{
			method:    r.Method,
			path:      r.URL.Path,
			header:    r.Header.Clone(),
			body:      body,
			verifyErr: webhook.Verify(secrets, r.Header, body, time.Now(), 0),
		}
		rcv.mu.Lock()
		rcv.arrivals = append(rcv.arrivals, a)
		rcv.mu.Unlock()
		answer(w, r)
	})
	if opts.plain {
		rcv.srv = httptest.NewServer(handler)
	} else {
		rcv.srv = httptest.NewTLSServer(handler)
	}
	t.Cleanup(rcv.srv.Close)
	rcv.url = rcv.srv.URL + "/hooks/" + tokenMarker
	return rcv
}

// received returns the requests the receiver got so far.
func (r *receiver) received() []arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]arrival(nil), r.arrivals...)
}

// answerStatus returns an answer with status and a body that must never
// reach a reason.
func answerStatus(status int, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, bodyMarker)
	}
}

// hang returns an answer that never comes: it waits until the client goes
// away or the test ends. arrived, when not nil, is told when a request is
// in.
func hang(t *testing.T, arrived chan<- struct{}) http.HandlerFunc {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // runs before the server's Close
	return func(_ http.ResponseWriter, r *http.Request) {
		if arrived != nil {
			select {
			case arrived <- struct{}{}:
			default:
			}
		}
		select {
		case <-r.Context().Done():
			// The client gave up: abort without an answer. Returning would
			// send an implicit 200 the cancelling client might still read.
			panic(http.ErrAbortHandler)
		case <-release:
		}
	}
}

// testBundle is what a test works with: a receiver and a Delivery for it.
type testBundle struct {
	rcv  *receiver
	cfg  *webhook.Config
	hook *webhook.Delivery
}

// setup starts a receiver with opts and a Delivery that trusts it, signing
// with secretA, after configure changed the Config.
func setup(t *testing.T, opts receiverOptions, configure ...func(*webhook.Config)) *testBundle {
	t.Helper()
	rcv := startReceiver(t, opts)
	cfg := &webhook.Config{
		Secrets:    []string{secretA},
		HTTPClient: rcv.srv.Client(),
	}
	for _, f := range configure {
		f(cfg)
	}
	hook, err := webhook.New(cfg)
	require.NoError(t, err)
	return &testBundle{rcv: rcv, cfg: cfg, hook: hook}
}

// newPending returns a request to url with a fresh id.
func newPending(url string) delivery.Pending {
	return delivery.Pending{
		ID:            uuid.Must(uuid.NewV7()),
		Channel:       "webhook",
		Recipient:     url,
		Template:      "invoice.paid",
		Data:          map[string]any{"invoice": "INV-17", "amount": 1250},
		CorrelationID: "corr-7d2f",
		Attempt:       1,
		StagedAt:      stagedAt,
	}
}

// requireSafeReason fails when the outcome's reason quotes what it must
// not: the URL, its token, its host, or the endpoint's answer.
func requireSafeReason(t *testing.T, o delivery.Outcome, url string) {
	t.Helper()
	require.Error(t, o.Reason())
	text := o.String()
	for _, leak := range []string{tokenMarker, bodyMarker, "BODY-MARKER"} {
		require.NotContains(t, text, leak)
	}
	if url != "" {
		require.NotContains(t, text, url)
		if host := hostOf(url); host != "" {
			require.NotContains(t, text, host)
		}
	}
}

// hostOf returns the host:port of url, or "".
func hostOf(url string) string {
	_, rest, ok := strings.Cut(url, "://")
	if !ok {
		return ""
	}
	host, _, _ := strings.Cut(rest, "/")
	if _, after, ok := strings.Cut(host, "@"); ok {
		host = after
	}
	return host
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
