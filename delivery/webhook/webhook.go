package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/internal/httpcall"
)

// Delivery posts a request as a signed Standard Webhooks call to the URL
// its recipient names: a [delivery.Delivery] for the channel that carries
// webhook URLs.
//
// A Delivery is immutable and safe for concurrent use. It holds no
// resources of its own between calls (connections are the HTTP client's),
// so there is nothing to close.
type Delivery struct {
	s   *settings
	now func() time.Time
}

var (
	_ delivery.Delivery = (*Delivery)(nil)
	_ delivery.Repeater = (*Delivery)(nil)
)

// Repeats answers delivery.RepeatDropped: a Standard Webhooks receiver
// deduplicates on webhook-id, which is the request's id (see Verify).
func (d *Delivery) Repeats() delivery.Repeat { return delivery.RepeatDropped }

// New returns a Delivery for cfg, which it validates: every secret (a nil
// cfg has none), Timeout and UserAgent. The error joins every problem
// found, each naming its field, never quoting a secret; a bad secret's
// error wraps [ErrInvalidSecret]. New neither calls anything nor starts a
// goroutine.
func New(cfg *Config) (*Delivery, error) {
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return &Delivery{s: s, now: time.Now}, nil
}

// payload is the body of every call. Its shape is documented in the
// package documentation; change it only compatibly.
type payload struct {
	ID        string         `json:"id"`
	Type      string         `json:"type"`
	Timestamp string         `json:"timestamp"`
	Data      map[string]any `json:"data"`
}

// Deliver posts p to the URL p.Recipient names, as JSON signed with every
// secret, and answers:
//
//   - [delivery.Delivered] when the endpoint answered 2xx;
//   - [delivery.Reject] without any call when the request cannot be sent:
//     p.Recipient is not a URL this Delivery may call
//     ([ErrInvalidRecipient]), p.ID is zero ([delivery.ErrNoID]), or p.Data does
//     not encode as JSON ([ErrUnencodable]);
//   - [delivery.Reject] with [ErrGone] when the endpoint answered 410;
//   - [delivery.Retry] with a [*StatusError] naming the status for any
//     other answer but 2xx (waiting as a Retry-After header asks, see
//     [delivery.RetryAfter]): a 3xx (redirects are not followed), a 4xx
//     such as a 401 while the receiver rotates its secret or a 404 while
//     it is redeployed, a 5xx; and when it could not be reached, when it
//     gave no answer within Config.Timeout, and when ctx ended. The
//     dispatcher's retry policy decides when to give up, as the Standard
//     Webhooks retry schedule spans days.
//
// Deliver decides on the status alone: it never reads the endpoint's
// body, so an endpoint that answers 2xx at once and finishes its work
// before closing the body has accepted the call.
//
// Every attempt carries the same webhook-id and Idempotency-Key
// (p.ID) and the same body; webhook-timestamp is the attempt's time, and
// the signature is computed afresh for it. Reasons never hold the URL,
// the body, a secret or the endpoint's answer.
func (d *Delivery) Deliver(ctx context.Context, p delivery.Pending) delivery.Outcome {
	if p.ID == uuid.Nil {
		return delivery.Reject(delivery.ErrNoID)
	}
	endpoint, err := d.s.endpoint(p.Recipient)
	if err != nil {
		return delivery.Reject(err)
	}
	now := d.now()
	body, err := encode(p, now)
	if err != nil {
		return delivery.Reject(err)
	}

	id := p.ID.String()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint.String(), bytes.NewReader(body))
	if err != nil {
		// The error quotes the URL: keep it out of the reason.
		return delivery.Reject(ErrInvalidRecipient)
	}
	timestamp := strconv.FormatInt(now.Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", d.s.userAgent)
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, timestamp)
	req.Header.Set(HeaderSignature, sign(d.s.keys, id, timestamp, body))
	if validHeaderValue(p.CorrelationID) {
		req.Header.Set(HeaderCorrelationID, p.CorrelationID)
	}

	resp, out, ok := d.s.caller.Call(ctx, req, id)
	if !ok {
		return out
	}

	switch status := resp.StatusCode; {
	case status >= 200 && status <= 299:
		return delivery.Delivered()
	case status == http.StatusGone:
		return delivery.Reject(&reasonError{
			msg:  ErrGone.Error(),
			errs: []error{ErrGone, &StatusError{StatusCode: status}},
		})
	default:
		// Standard Webhooks: every answer but 2xx and 410 is a failure
		// to retry on a schedule.
		after := httpcall.RetryAfter(resp.Header, time.Now())
		return httpcall.Prefix("webhook", delivery.RetryAfter(&StatusError{StatusCode: status}, after))
	}
}

// endpoint parses recipient and checks that this Delivery may call it. Its
// error wraps ErrInvalidRecipient and says which rule failed, never the
// URL.
func (s *settings) endpoint(recipient string) (*url.URL, error) {
	invalid := func(problem string) error {
		return &reasonError{msg: ErrInvalidRecipient.Error() + ": " + problem, errs: []error{ErrInvalidRecipient}}
	}
	if recipient == "" {
		return nil, invalid("the request has no recipient")
	}
	u, err := url.Parse(recipient)
	if err != nil {
		// The parser's error quotes the URL.
		return nil, invalid("it does not parse as a URL")
	}
	if !u.IsAbs() || u.Opaque != "" || u.Host == "" || u.Hostname() == "" {
		return nil, invalid("it is not an absolute URL with a host")
	}
	if u.User != nil {
		return nil, invalid("it carries user info, which this module does not send")
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !s.allowInsecure && !isLoopbackHost(u.Hostname()) {
			return nil, invalid("it is http on a host that is not loopback, and Config.AllowInsecure is false")
		}
	default:
		return nil, invalid("its scheme is neither https nor http")
	}
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}

// isLoopbackHost reports whether host names this machine: "localhost" or
// a loopback IP address.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// encode returns the body for p: the same bytes on every attempt, unless
// p has no StagedAt, in which case now stands in for it.
func encode(p delivery.Pending, now time.Time) ([]byte, error) {
	at := p.StagedAt
	if at.IsZero() {
		at = now
	}
	data := p.Data
	if data == nil {
		data = map[string]any{}
	}
	body, err := json.Marshal(payload{
		ID:        p.ID.String(),
		Type:      p.Template,
		Timestamp: at.UTC().Format(time.RFC3339Nano),
		Data:      data,
	})
	if err != nil {
		// The encoder's message may quote a value: leave it out.
		return nil, ErrUnencodable
	}
	return body, nil
}
