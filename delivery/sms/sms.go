package sms

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/internal/httpcall"
	"github.com/tidings-go/tidings/delivery/internal/render"
)

// Delivery sends a request as a text message through Twilio's Messages
// API: a [delivery.Delivery] for the channel that carries phone numbers.
//
// A Delivery is immutable and safe for concurrent use. It holds nothing to
// close: its HTTP client's idle connections are the client's.
type Delivery struct {
	s *settings
}

var (
	_ delivery.Delivery = (*Delivery)(nil)
	_ delivery.Repeater = (*Delivery)(nil)
)

// Repeats answers delivery.RepeatSends: Twilio's Messages API documents
// no idempotency key, and creates a message for every call it accepts.
func (d *Delivery) Repeats() delivery.Repeat { return delivery.RepeatSends }

// New returns a Delivery for cfg, which it validates: BaseURL, AccountSID,
// AuthToken, From or MessagingServiceSID, Timeout, and every template,
// which it parses once. The error joins every problem found, each naming
// its field; none quotes AuthToken. New neither calls Twilio nor starts a
// goroutine.
func New(cfg *Config) (*Delivery, error) {
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return &Delivery{s: s}, nil
}

// e164Pattern is a phone number in E.164 form.
var e164Pattern = regexp.MustCompile(`^\+[1-9]\d{1,14}$`)

// sidPattern is what a Message SID may look like to be a reference.
var sidPattern = regexp.MustCompile(`^[A-Za-z0-9]{1,64}$`)

// Deliver renders the template p names with p.Data and p.Secrets and asks Twilio to send
// it to p.Recipient, with p.ID as the idempotency key. It answers:
//
//   - [delivery.DeliveredWithReference] with the Message SID when Twilio
//     created the message (200 or 201);
//   - [delivery.Reject] without calling Twilio when the request cannot
//     become a message: p.Recipient is not an E.164 number
//     ([ErrInvalidRecipient]), the template is unknown
//     ([ErrUnknownTemplate]), needs a value p.Data does not carry
//     ([*TemplateError]) or renders an empty text ([ErrEmptyText]), or p
//     has no id ([delivery.ErrNoID]);
//   - [delivery.Reject] with an [*APIError] when Twilio refused the message
//     with a 4xx status, such as 400 with error 21211 (invalid number),
//     with a code for the errors about the number (21211
//     [delivery.CodeInvalidRecipient]; 21614, not a mobile number,
//     [delivery.CodeRecipientGone]; 21610, the person replied STOP,
//     [delivery.CodeRecipientUnsubscribed]), on the last two of which the
//     dispatcher suppresses the number;
//   - [delivery.Retry] with an [*APIError] when Twilio answered 401 or 403:
//     a credential or account problem that the operator can fix, and that
//     would otherwise make every message dead at once; and when it
//     answered error 21611, the sender's queue full ([APIError.Deferred]);
//   - [delivery.Retry] (honouring Retry-After) when Twilio answered 429 or
//     5xx, was unreachable, or ctx ended or Config.Timeout passed first;
//     and when it answered 2xx with a body that is not a message
//     ([ErrUnreadableAnswer]) or another status, such as a redirect.
func (d *Delivery) Deliver(ctx context.Context, p delivery.Pending) delivery.Outcome {
	if p.ID == ([16]byte{}) {
		return delivery.Reject(delivery.ErrNoID)
	}
	if !e164Pattern.MatchString(p.Recipient) {
		return delivery.Reject(ErrInvalidRecipient)
	}
	body, err := d.render(p)
	if err != nil {
		return delivery.Reject(err)
	}

	form := url.Values{"To": {p.Recipient}, "Body": {body}}
	if d.s.serviceSID != "" {
		form.Set("MessagingServiceSid", d.s.serviceSID)
	} else {
		form.Set("From", d.s.from)
	}
	if d.s.callback != "" {
		form.Set("StatusCallback", d.s.callback)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.s.endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		// The endpoint was validated in New: this is a bug, and the error
		// could quote the URL.
		return delivery.Retry(errors.New("sms: cannot build the request"))
	}
	req.SetBasicAuth(d.s.accountSID, d.s.authToken)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")

	resp, out, ok := d.s.caller.Call(ctx, req, p.ID.String())
	if !ok {
		return out
	}
	return answer(resp)
}

// render returns the body of the message p asks for.
func (d *Delivery) render(p delivery.Pending) (string, error) {
	t, err := render.Lookup(d.s.templates, p.Template, ErrUnknownTemplate)
	if err != nil {
		return "", err
	}
	body, err := t.Execute(p.TemplateData())
	if err != nil {
		return "", fmt.Errorf("sms: %w", err)
	}
	if strings.TrimSpace(body) == "" {
		return "", fmt.Errorf("%w: template %q rendered only white space", ErrEmptyText, p.Template)
	}
	return body, nil
}

// answer turns Twilio's answer, neither 429 nor 5xx, into an outcome.
func answer(resp httpcall.Response) delivery.Outcome {
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		var msg struct {
			SID string `json:"sid"`
		}
		if err := json.Unmarshal(resp.Body, &msg); err != nil || msg.SID == "" {
			return delivery.Retry(ErrUnreadableAnswer)
		}
		if !sidPattern.MatchString(msg.SID) {
			return delivery.Delivered() // accepted, under an id not fit to store
		}
		return delivery.DeliveredWithReference(msg.SID)
	case code >= 400 && code < 500:
		e := newAPIError(code, resp.Body)
		if e.Credentials() || e.Sender() || e.Deferred() {
			return delivery.Retry(e)
		}
		if code, ok := recipientCodes[e.Code]; ok {
			return delivery.Reject(delivery.WithCode(code, e))
		}
		return delivery.Reject(e)
	default:
		return httpcall.Prefix("sms", delivery.Retry(&httpcall.StatusError{StatusCode: code}))
	}
}
