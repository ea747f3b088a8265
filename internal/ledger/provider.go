package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Header names of a request to the Provider.
const (
	// HeaderKey carries the idempotency key: the request's id.
	HeaderKey = "Idempotency-Key"
	// HeaderSendStart carries the start of the request's in-flight window,
	// in Unix nanoseconds: when the relay's hand began (a fault from then
	// on can doom the claim's transaction), or when the send began.
	HeaderSendStart = "X-Send-Start"
)

// Receipt is one request the Provider received.
type Receipt struct {
	ID        uuid.UUID // the id in the body
	Key       string    // the Idempotency-Key header
	StagedAt  time.Time // when the request was staged (database clock)
	SendStart time.Time // the start of its in-flight window (see HeaderSendStart); zero if unknown
	At        time.Time // when the provider received it
}

// body is what Client.Send posts.
type body struct {
	ID       uuid.UUID `json:"id"`
	StagedAt time.Time `json:"staged_at"`
}

// Provider is a local HTTP server on 127.0.0.1 that plays a notification
// provider: it records every request it receives, at once, then answers
// 200 after a random latency, as a provider acts on a message before its
// answer reaches the sender. It is safe for concurrent use; Close stops it.
type Provider struct {
	srv        *http.Server
	url        string
	minLatency time.Duration
	maxLatency time.Duration
	served     chan struct{} // closed when Serve has returned

	mu       sync.Mutex
	receipts []Receipt
	distinct map[uuid.UUID]struct{}
	changed  chan struct{} // closed and replaced on every receipt
}

// StartProvider starts a provider that answers each request after a
// latency drawn uniformly from [minLatency, maxLatency].
func StartProvider(minLatency, maxLatency time.Duration) (*Provider, error) {
	if minLatency < 0 || maxLatency < minLatency {
		return nil, fmt.Errorf("ledger: latency [%s, %s] is not a range", minLatency, maxLatency)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("ledger: provider: %w", err)
	}
	p := &Provider{
		url:        "http://" + ln.Addr().String() + "/send",
		minLatency: minLatency,
		maxLatency: maxLatency,
		served:     make(chan struct{}),
		distinct:   map[uuid.UUID]struct{}{},
		changed:    make(chan struct{}),
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(p.served)
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

// URL is where to post requests.
func (p *Provider) URL() string { return p.url }

// Close stops the provider and its connections, and waits for it.
func (p *Provider) Close() error {
	err := p.srv.Close()
	<-p.served
	return err
}

func (p *Provider) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	var b body
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&b); err != nil || b.ID == uuid.Nil {
		http.Error(w, "want a JSON body with an id", http.StatusBadRequest)
		return
	}
	rec := Receipt{ID: b.ID, Key: r.Header.Get(HeaderKey), StagedAt: b.StagedAt, At: time.Now().Round(0)}
	if ns, err := strconv.ParseInt(r.Header.Get(HeaderSendStart), 10, 64); err == nil {
		rec.SendStart = time.Unix(0, ns)
	}
	p.mu.Lock()
	p.receipts = append(p.receipts, rec)
	p.distinct[rec.ID] = struct{}{}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()

	latency := p.minLatency
	if span := p.maxLatency - p.minLatency; span > 0 {
		latency += rand.N(span + 1)
	}
	t := time.NewTimer(latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done(): // the sender went away
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"id":%q}`, b.ID)
}

// Receipts returns a copy of every receipt so far, in arrival order.
func (p *Provider) Receipts() []Receipt {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Receipt(nil), p.receipts...)
}

// ReceiptsFrom returns a copy of the receipts from the i-th on (0 is the
// first), in arrival order: what arrived since an earlier look.
func (p *Provider) ReceiptsFrom(i int) []Receipt {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i >= len(p.receipts) {
		return nil
	}
	return append([]Receipt(nil), p.receipts[max(i, 0):]...)
}

// Counts returns how many requests the provider received, and for how
// many distinct ids.
func (p *Provider) Counts() (receipts, distinct int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.receipts), len(p.distinct)
}

// WaitDistinct blocks until the provider has received at least n distinct
// ids or ctx ends, and returns how many it has.
func (p *Provider) WaitDistinct(ctx context.Context, n int) (int, error) {
	for {
		p.mu.Lock()
		got, changed := len(p.distinct), p.changed
		p.mu.Unlock()
		if got >= n {
			return got, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return got, ctx.Err()
		}
	}
}

// Client posts requests to a Provider. It is safe for concurrent use;
// Close releases its idle connections.
type Client struct {
	url string
	hc  *http.Client
}

// NewClient returns a client of the provider at url.
func NewClient(url string) *Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     30 * time.Second,
	}
	return &Client{url: url, hc: &http.Client{Transport: tr}}
}

// Close closes the client's idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// ErrStatus marks an answer of the provider other than 2xx.
var ErrStatus = errors.New("ledger: provider answered an error")

// Send posts the request id, with id as its idempotency key and the start
// of its in-flight window: the hand start ctx carries (WithHandStart), or
// else the time the send began. It returns nil when the provider answered
// 2xx.
func (c *Client) Send(ctx context.Context, id uuid.UUID, stagedAt time.Time) error {
	payload, err := json.Marshal(body{ID: id, StagedAt: stagedAt})
	if err != nil {
		return fmt.Errorf("ledger: encode: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderKey, id.String())
	start := HandStart(ctx)
	if start.IsZero() {
		start = time.Now()
	}
	req.Header.Set(HeaderSendStart, strconv.FormatInt(start.UnixNano(), 10))
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("ledger: send: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%w: %s", ErrStatus, resp.Status)
	}
	return nil
}

type handStartKey struct{}

// WithHandStart returns ctx carrying t, the start of a relay's hand, for
// Client.Send to pass on as the start of the in-flight window.
func WithHandStart(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, handStartKey{}, t)
}

// HandStart returns the hand start ctx carries, or the zero time.
func HandStart(ctx context.Context) time.Time {
	t, _ := ctx.Value(handStartKey{}).(time.Time)
	return t
}
