package push

import (
	"errors"
	"strconv"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/internal/render"
)

// The reasons Deliver gives that are not Expo's answer. Match them with
// [errors.Is] on [delivery.Outcome.Reason].
var (
	// ErrInvalidRecipient: the request's recipient is not an Expo push
	// token (ExponentPushToken[...], ExpoPushToken[...], or the bare UUID
	// form Expo's SDK accepts). The reason never quotes it. Deliver
	// answers Reject without calling Expo.
	ErrInvalidRecipient = delivery.NewError(delivery.CodeInvalidRecipient, "push: recipient is not an Expo push token")

	// ErrUnknownTemplate: the request names no template, or one that is
	// not in Config.Templates. Deliver answers Reject, naming the template,
	// without calling Expo.
	ErrUnknownTemplate = delivery.NewError(delivery.CodeUnknownTemplate, "push: unknown template")

	// ErrUnreadableAnswer: Expo answered 2xx with a body that holds no
	// ticket for the message, so whether it took the message is unknown.
	// Deliver answers Retry, which may send the push twice (Expo has no
	// deduplication) rather than lose it.
	ErrUnreadableAnswer = errors.New("push: expo's answer holds no ticket")
)

// TemplateError is the reason of a request whose template did not render:
// Deliver answers Reject, without calling Expo, with a reason that wraps
// it, as in `push: template "comment" needs "author", which the request
// does not carry`. It names the template and the value the request does
// not carry ([TemplateError.Missing]), or the place in the template that
// failed; never a value of the request. Its Err can quote the data: never
// print it on its own.
type TemplateError = render.Error

// APIError is the reason of a push Expo refused: either the message's
// ticket said "error" (Ticket is true), or Expo refused the whole request
// with an "errors" list (and a 4xx status other than 429, or a 2xx).
//
// Its text holds Expo's error code, never Expo's message, which can quote
// the push token: "push: expo: DeviceNotRegistered" for a ticket, "push:
// expo rejected the request (400): VALIDATION_ERROR" or "push: expo
// refused the access token (401)" for a request. [Delivery.Deliver]
// documents which are Retry and which Reject.
type APIError struct {
	// StatusCode is the HTTP status Expo answered: 200 for a ticket.
	StatusCode int
	// Ticket reports whether the error is the message's ticket (its
	// details.error) rather than the request's.
	Ticket bool
	// Code is Expo's error code, such as "DeviceNotRegistered",
	// "MessageTooBig" or "MessageRateExceeded" for a ticket, and
	// "VALIDATION_ERROR" for a request; "" when the answer had none, or
	// none that looks like a code.
	Code string
}

// Error says what Expo refused, with the code.
func (e *APIError) Error() string {
	var msg string
	switch {
	case e.Ticket && e.Code != "":
		return "push: expo: " + e.Code
	case e.Ticket:
		return "push: expo refused the message"
	case e.credentials():
		msg = "push: expo refused the access token (" + strconv.Itoa(e.StatusCode) + ")"
	default:
		msg = "push: expo rejected the request (" + strconv.Itoa(e.StatusCode) + ")"
	}
	if e.Code != "" {
		msg += ": " + e.Code
	}
	return msg
}

// credentials reports whether Expo refused the request's access token.
func (e *APIError) credentials() bool {
	return !e.Ticket && (e.StatusCode == 401 || e.StatusCode == 403)
}

// retry reports whether the push may succeed later as it is: the device
// was sent too many pushes (MessageRateExceeded), or a credential problem
// the operator can fix: the project's FCM or APNs credentials
// (InvalidCredentials, MismatchSenderId), or the access token (401, 403).
func (e *APIError) retry() bool {
	switch {
	case e.credentials():
		return true
	case !e.Ticket:
		return false
	}
	switch e.Code {
	case "MessageRateExceeded", "InvalidCredentials", "MismatchSenderId":
		return true
	default:
		return false
	}
}
