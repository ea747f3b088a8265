package webhook

import (
	"errors"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/internal/httpcall"
)

// The reasons Deliver gives that are not a transport failure or a status
// httpcall decided on. Match them with [errors.Is] on
// [delivery.Outcome.Reason]. None of them quotes the recipient's URL, the
// payload or a secret.
var (
	// ErrInvalidRecipient: the request's recipient is not a URL Deliver may
	// call: not an absolute URL, not https (and http is not allowed), or
	// one with user info. Deliver answers Reject without any call; the
	// reason says which rule failed, never the URL.
	ErrInvalidRecipient = delivery.NewError(delivery.CodeInvalidRecipient, "webhook: recipient is not an https URL")

	// ErrGone: the endpoint answered 410 Gone, the Standard Webhooks way
	// of saying it wants no more deliveries. Deliver answers Reject; its
	// code is [delivery.CodeRecipientGone].
	ErrGone = delivery.NewError(delivery.CodeRecipientGone, "webhook: endpoint is gone (410)")

	// ErrUnencodable: the request's data does not encode as JSON (a
	// channel, a function, a NaN). Deliver answers Reject; the reason
	// never quotes the value.
	ErrUnencodable = errors.New("webhook: the request's data does not encode as JSON")
)

// StatusError is the reason of an answer Deliver decided on by its status
// alone: any status but 2xx and 410 (Retry), and, together with
// [ErrGone], 410 (Reject). Match it with errors.As or errors.AsType on
// [delivery.Outcome.Reason] to read StatusCode. Its text names the status
// only, never the endpoint's body or status line.
type StatusError = httpcall.StatusError

// The errors of [Verify] and [Sign]. Verify wraps exactly one of them, with
// a text that says more (which header, how far off the clock is); test them
// with [errors.Is]. Their texts never quote a secret or a signature.
var (
	// ErrMissingHeaders: webhook-id, webhook-timestamp or
	// webhook-signature is absent or empty.
	ErrMissingHeaders = errors.New("webhook: missing webhook headers")

	// ErrTimestamp: webhook-timestamp is not unix seconds, or is further
	// from now than the tolerance, in either direction.
	ErrTimestamp = errors.New("webhook: timestamp invalid or outside the tolerance")

	// ErrSignature: no v1 signature in webhook-signature matches the
	// message under any of the secrets (the body, the id or the timestamp
	// was changed, or the sender uses another secret), or the webhook-id
	// contains a '.', which would make the signed content ambiguous.
	ErrSignature = errors.New("webhook: no matching signature")

	// ErrInvalidSecret: a secret is not "whsec_" followed by the standard
	// base64 encoding of 24 to 64 bytes, or there is none. New, Sign and
	// Verify return it naming the secret's position, never its text.
	ErrInvalidSecret = errors.New("webhook: invalid secret")
)

// reasonError is a reason whose text is chosen to be safe to store and
// log, and whose causes stay reachable for errors.Is and errors.As.
type reasonError struct {
	msg  string
	errs []error
}

func (e *reasonError) Error() string { return e.msg }

func (e *reasonError) Unwrap() []error { return e.errs }
