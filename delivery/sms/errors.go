package sms

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/internal/httpcall"
	"github.com/tidings-go/tidings/delivery/internal/render"
)

// The reasons Deliver gives that are not Twilio's answer. Match them with
// [errors.Is] on [delivery.Outcome.Reason].
var (
	// ErrInvalidRecipient: the request's recipient is not an E.164 phone
	// number (+ and up to 15 digits). The reason never quotes it. Deliver
	// answers Reject without calling Twilio.
	ErrInvalidRecipient = delivery.NewError(delivery.CodeInvalidRecipient, "sms: recipient is not an E.164 phone number")

	// ErrUnknownTemplate: the request names no template, or one that is
	// not in Config.Templates. Deliver answers Reject, naming the template,
	// without calling Twilio.
	ErrUnknownTemplate = delivery.NewError(delivery.CodeUnknownTemplate, "sms: unknown template")

	// ErrEmptyText: the template rendered nothing but white space, a text
	// Twilio refuses (error 21602). Deliver answers Reject, naming the
	// template, without calling Twilio.
	ErrEmptyText = delivery.NewError(delivery.CodeTemplateFailed, "sms: the text is empty")

	// ErrUnreadableAnswer: Twilio answered 2xx with a body that is not a
	// Message resource, so whether it took the message is unknown.
	// Deliver answers Retry: the text may then go twice, which is better
	// than never.
	ErrUnreadableAnswer = errors.New("sms: twilio's answer is not a message resource")
)

// TemplateError is the reason of a request whose template did not render:
// Deliver answers Reject, without calling Twilio, with a reason that wraps
// it, as in `sms: template "otp" needs "code", which the request does not
// carry`. It names the template and the value the request does not carry
// ([TemplateError.Missing]), or the place in the template that failed;
// never a value of the request. Its Err can quote the data: never print it
// on its own.
type TemplateError = render.Error

// APIError is the reason of a call Twilio answered with a 4xx status
// other than 429: Deliver answers Retry for 401 and 403 (the account's
// credentials or standing, which the operator can fix) and Reject for the
// rest. A Reject for error 21211 carries the code
// [delivery.CodeInvalidRecipient], for 21614 [delivery.CodeRecipientGone],
// for 21610 [delivery.CodeRecipientUnsubscribed].
//
// Its text holds the status and Twilio's error code, never Twilio's
// message, which quotes the phone number: "sms: twilio rejected the
// message (400): error 21211" or "sms: twilio refused the credentials
// (401): error 20003".
type APIError struct {
	// StatusCode is the HTTP status Twilio answered.
	StatusCode int
	// Code is Twilio's error code from the body, such as 21211 (invalid
	// To number) or 21610 (the recipient unsubscribed), listed at
	// https://www.twilio.com/docs/api/errors; 0 when the body had none.
	Code int
}

// Error says what Twilio refused, with the status and the code.
func (e *APIError) Error() string {
	msg := "sms: twilio rejected the message (" + strconv.Itoa(e.StatusCode) + ")"
	switch {
	case e.Credentials():
		msg = "sms: twilio refused the credentials (" + strconv.Itoa(e.StatusCode) + ")"
	case e.Sender():
		msg = "sms: twilio refused the sender (" + strconv.Itoa(e.StatusCode) + ")"
	case e.Deferred():
		msg = "sms: twilio deferred the message (" + strconv.Itoa(e.StatusCode) + ")"
	}
	if e.Code != 0 {
		msg += ": error " + strconv.Itoa(e.Code)
	}
	return msg
}

// Credentials reports whether Twilio refused the account rather than the
// message: a 401 (wrong AccountSID or AuthToken) or a 403 (the account may
// not do this, such as a suspended account).
func (e *APIError) Credentials() bool {
	return e.StatusCode == 401 || e.StatusCode == 403
}

// Sender reports whether Twilio refused the sender rather than the
// message: Config.From is not a valid number (21212), not one of the
// account's (21601, 21659), not message-capable, for this destination or
// at all (21606, 21661, such as a number still being ported).
func (e *APIError) Sender() bool {
	switch e.Code {
	case 21212, 21601, 21606, 21659, 21661:
		return true
	default:
		return false
	}
}

// Deferred reports whether Twilio refused the message for now, not for
// good: error 21611, the sender's queue of messages at Twilio is full, and
// drains as Twilio sends them.
func (e *APIError) Deferred() bool {
	return e.Code == 21611
}

// recipientCodes are the delivery codes of Twilio's errors that refuse
// the recipient's number: not a number that can exist (21211), not one
// that can take a text, such as a landline (21614), or one whose owner
// replied STOP to this sender (21610). On the last two the dispatcher
// suppresses the number, as the status callback's report would.
var recipientCodes = map[int]string{
	21211: delivery.CodeInvalidRecipient,
	21614: delivery.CodeRecipientGone,
	21610: delivery.CodeRecipientUnsubscribed,
}

// newAPIError reads Twilio's error code from body, when it has a
// plausible one.
func newAPIError(status int, body []byte) *APIError {
	e := &APIError{StatusCode: status}
	var answer struct {
		Code int `json:"code"`
	}
	if json.Unmarshal(body, &answer) == nil && answer.Code > 0 && httpcall.SafeCode(strconv.Itoa(answer.Code)) != "" {
		e.Code = answer.Code // at most 6 digits: a code, not a phone number
	}
	return e
}
