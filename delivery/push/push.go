package push

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/internal/httpcall"
	"github.com/tidings-go/tidings/delivery/internal/render"
)

// Delivery sends a request as a push notification through Expo's push
// service: a [delivery.Delivery] for the channel that carries Expo push
// tokens.
//
// A Delivery is immutable and safe for concurrent use. It holds nothing to
// close: its HTTP client's idle connections are the client's.
type Delivery struct {
	s *settings
}

var _ delivery.Delivery = (*Delivery)(nil)

// New returns a Delivery for cfg, which it validates: BaseURL,
// AccessToken, Timeout, and every template, which it parses once. The
// error joins every problem found, each naming its field; none quotes
// AccessToken. New neither calls Expo nor starts a goroutine.
func New(cfg *Config) (*Delivery, error) {
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return &Delivery{s: s}, nil
}

// tokenPattern is an Expo push token: ExponentPushToken[...],
// ExpoPushToken[...], or the bare UUID form Expo's own SDK also accepts.
var tokenPattern = regexp.MustCompile(`^(?:(?:ExponentPushToken|ExpoPushToken)\[[^\[\]\s]+\]|` +
	`(?i:[a-z0-9]{8}-[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{12}))$`)

// ticketIDPattern is what a ticket id may look like to be a reference.
var ticketIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// message is one push, as Expo takes it.
type message struct {
	To    string      `json:"to"`
	Title string      `json:"title,omitempty"`
	Body  string      `json:"body"`
	Data  messageData `json:"data"`
}

// messageData is the data a push carries to the app: the request's id,
// so the app can tell a duplicate.
type messageData struct {
	ID string `json:"id"`
}

// Deliver renders the template p names with p.Data and p.Secrets and asks Expo to push
// it to p.Recipient, with p.ID as the idempotency key and as the push's
// data.id. It answers:
//
//   - [delivery.DeliveredWithReference] with the ticket id when Expo's
//     ticket says "ok";
//   - [delivery.Reject] without calling Expo when the request cannot
//     become a push: p.Recipient is not an Expo push token
//     ([ErrInvalidRecipient]), the template is unknown
//     ([ErrUnknownTemplate]) or needs a value p.Data does not carry
//     ([*TemplateError]), or p has no id ([delivery.ErrNoID]);
//   - [delivery.Reject] with an [*APIError] when the ticket says
//     DeviceNotRegistered (the app is gone from the device: drop the
//     token; the reason's code is [delivery.CodeRecipientGone]),
//     MessageTooBig (the same push will never fit) or another code, and
//     when Expo refused the whole request with a 4xx status and its
//     errors list, such as 400 VALIDATION_ERROR;
//   - [delivery.Retry] with an [*APIError] when the ticket says
//     MessageRateExceeded (too many pushes to the device: later), or
//     InvalidCredentials or MismatchSenderId (the project's FCM or APNs
//     credentials), and when Expo answered 401 or 403 (the AccessToken):
//     credential problems are the operator's to fix, and would otherwise
//     make every push dead at once;
//   - [delivery.Retry] (honouring Retry-After) when Expo answered 429 or
//     5xx, was unreachable, or ctx ended or Config.Timeout passed first;
//     when it answered a 4xx without Expo's errors list (a proxy's 408, a
//     404 from a Config.BaseURL with a wrong path: not Expo's verdict on
//     the push); and when it answered 2xx without a ticket
//     ([ErrUnreadableAnswer]) or another status, such as a redirect.
func (d *Delivery) Deliver(ctx context.Context, p delivery.Pending) delivery.Outcome {
	if p.ID == ([16]byte{}) {
		return delivery.Reject(delivery.ErrNoID)
	}
	if !tokenPattern.MatchString(p.Recipient) {
		return delivery.Reject(ErrInvalidRecipient)
	}
	msg, err := d.render(p)
	if err != nil {
		return delivery.Reject(err)
	}

	body, err := json.Marshal([]message{msg})
	if err != nil {
		// Strings only: this cannot happen, and the error could quote them.
		return delivery.Reject(errors.New("push: cannot encode the push"))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.s.endpoint, bytes.NewReader(body))
	if err != nil {
		// The endpoint was validated in New: this is a bug, and the error
		// could quote the URL.
		return delivery.Retry(errors.New("push: cannot build the request"))
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Content-Type", "application/json")
	if d.s.accessToken != "" {
		req.Header.Set("Authorization", "Bearer "+d.s.accessToken)
	}

	resp, out, ok := d.s.caller.Call(ctx, req, p.ID.String())
	if !ok {
		return out
	}
	return answer(resp)
}

// render returns the push p asks for.
func (d *Delivery) render(p delivery.Pending) (message, error) {
	t, err := render.Lookup(d.s.templates, p.Template, ErrUnknownTemplate)
	if err != nil {
		return message{}, err
	}
	msg := message{To: p.Recipient, Data: messageData{ID: p.ID.String()}}
	data := p.TemplateData()
	if t.title != nil {
		if msg.Title, err = t.title.Execute(data); err != nil {
			return message{}, fmt.Errorf("push: %w", err)
		}
	}
	if msg.Body, err = t.body.Execute(data); err != nil {
		return message{}, fmt.Errorf("push: %w", err)
	}
	return msg, nil
}

// sendAnswer is Expo's answer to a send: tickets, or the request's errors.
type sendAnswer struct {
	// Data is an array of tickets, one per message sent; or one ticket,
	// when one message was sent on its own.
	Data   json.RawMessage `json:"data"`
	Errors []struct {
		Code string `json:"code"`
	} `json:"errors"`
}

// ticket is Expo's answer for one message.
type ticket struct {
	Status  string `json:"status"`
	ID      string `json:"id"`
	Details struct {
		Error string `json:"error"`
	} `json:"details"`
}

// answer turns Expo's answer, neither 429 nor 5xx, into an outcome.
func answer(resp httpcall.Response) delivery.Outcome {
	var a sendAnswer
	parsed := json.Unmarshal(resp.Body, &a) == nil
	refused := parsed && len(a.Errors) > 0 // the request's errors, in Expo's shape
	code := resp.StatusCode
	switch {
	case code >= 400 && code < 500 && refused, code >= 200 && code < 300 && refused && len(a.Data) == 0:
		return decide(&APIError{StatusCode: code, Code: httpcall.SafeCode(a.Errors[0].Code)})
	case code < 200 || code >= 300:
		after := httpcall.RetryAfter(resp.Header, time.Now())
		return httpcall.Prefix("push", delivery.RetryAfter(&httpcall.StatusError{StatusCode: code}, after))
	case !parsed:
		return delivery.Retry(ErrUnreadableAnswer)
	}

	t, ok := oneTicket(a.Data)
	if !ok {
		return delivery.Retry(ErrUnreadableAnswer)
	}
	switch t.Status {
	case "ok":
		if !ticketIDPattern.MatchString(t.ID) {
			return delivery.Delivered() // accepted, under an id not fit to store
		}
		return delivery.DeliveredWithReference(t.ID)
	case "error":
		return decide(&APIError{StatusCode: code, Ticket: true, Code: httpcall.SafeCode(t.Details.Error)})
	default:
		return delivery.Retry(ErrUnreadableAnswer)
	}
}

// oneTicket reads the one ticket in data: an array of one, or a ticket on
// its own.
func oneTicket(data json.RawMessage) (ticket, bool) {
	var tickets []ticket
	if json.Unmarshal(data, &tickets) == nil {
		if len(tickets) != 1 {
			return ticket{}, false
		}
		return tickets[0], true
	}
	var t ticket
	if json.Unmarshal(data, &t) != nil || t.Status == "" {
		return ticket{}, false
	}
	return t, true
}

// decide is Retry or Reject for e.
func decide(e *APIError) delivery.Outcome {
	switch {
	case e.retry():
		return delivery.Retry(e)
	case e.Ticket && e.Code == "DeviceNotRegistered":
		return delivery.Reject(delivery.WithCode(delivery.CodeRecipientGone, e))
	default:
		return delivery.Reject(e)
	}
}
