package delivery

import "errors"

// Codes of the reasons the dispatcher gives when a delivery's own reason
// carries none: stable machine codes beside a reason's text, so that dead
// requests can be grouped, counted and re-emitted by cause.
const (
	CodeRejected    = "provider.rejected"    // a Reject whose reason has no code
	CodeUnavailable = "provider.unavailable" // a Retry whose reason has no code
	CodeTimeout     = "delivery.timeout"     // the delivery overran its deadline
	CodePanic       = "delivery.panic"       // the delivery panicked
)

// Codes of the reasons the delivery modules give.
const (
	CodeNoID                  = "request.no_id"          // ErrNoID
	CodeInvalidRecipient      = "recipient.invalid"      // the recipient is no address the module understands
	CodeRecipientGone         = "recipient.gone"         // the provider says the address cannot receive messages, for good (an app removed, an endpoint's 410, an unknown mailbox, a landline for a text): a Reject with it suppresses the address
	CodeRecipientUnsubscribed = "recipient.unsubscribed" // the provider says the person asked it for no more messages (an SMS STOP): a Reject with it suppresses the address as their unsubscribe, which their resubscribe lifts
	CodeUnknownTemplate       = "template.unknown"       // the request names a template the module does not have
	CodeMissingValue          = "template.missing_value" // a template needs a value the request does not carry
	CodeTemplateFailed        = "template.failed"        // a template failed to render otherwise
)

// Coder is an error that carries a stable machine code beside its text,
// such as "recipient.invalid": lower case, dots and underscores, the same
// for every request of the same cause. The dispatcher keeps the code of a
// Retry's or a Reject's reason on the request and in its timeline.
type Coder interface {
	error
	Code() string
}

// CodeOf returns the code of the first error in err's chain that is a
// Coder, or "".
func CodeOf(err error) string {
	if c, ok := errors.AsType[Coder](err); ok {
		return c.Code()
	}
	return ""
}

// WithCode returns err with code: a Coder whose text is err's, and which
// unwraps to err. A nil err stays nil.
func WithCode(code string, err error) error {
	if err == nil {
		return nil
	}
	return &codedError{code: code, err: err}
}

// NewError returns a new error with text and code, for a module's sentinel
// errors: errors.Is matches it, and CodeOf finds its code.
func NewError(code, text string) error {
	return &codedError{code: code, err: errors.New(text)}
}

// ErrNoID is the reason every module rejects a request without an id:
// there would be no idempotency key to give the provider.
var ErrNoID = NewError(CodeNoID, "delivery: the request has no id")

type codedError struct {
	code string
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Code() string  { return e.code }
func (e *codedError) Unwrap() error { return e.err }
