package feedback

import (
	"errors"
	"net/http"
)

// The errors a receiver meets on a request, each with the status it
// answers. Errors wrap one of them with what failed, never a value of the
// request: no secret, signature, address or body. Match them with
// [errors.Is].
var (
	// ErrMissingHeader: a header the provider's scheme signs with is
	// missing or empty. Answered 401; the Store is not called.
	ErrMissingHeader = errors.New("feedback: signature header missing")

	// ErrTimestamp: the signed timestamp is not a number of seconds, or
	// lies outside the receiver's tolerance, in the past or in the future.
	// Answered 401; the Store is not called.
	ErrTimestamp = errors.New("feedback: timestamp outside the tolerance")

	// ErrSignature: no configured secret or key verifies the signature,
	// or the request is not what the scheme signs (an SNS body that is not
	// an SNS message). Answered 401; the Store is not called.
	ErrSignature = errors.New("feedback: signature does not verify")

	// ErrCredentials: Postmark's request carries no basic-auth
	// credentials, or other ones than configured. Answered 401 with a
	// WWW-Authenticate header; the Store is not called.
	ErrCredentials = errors.New("feedback: credentials do not match")

	// ErrTopic: the SNS message comes from a topic not in
	// SESConfig.TopicARNs. Answered 401; the Store is not called.
	ErrTopic = errors.New("feedback: topic not allowed")

	// ErrCertificate: the SNS signing certificate's URL is not https on an
	// allowed host, or what it serves is not a valid RSA certificate.
	// Answered 401; the Store is not called.
	ErrCertificate = errors.New("feedback: signing certificate refused")

	// ErrCertificateFetch: the SNS signing certificate could not be
	// fetched (the host did not answer, or answered 5xx). Answered 503, so
	// that SNS tries again; the Store is not called.
	ErrCertificateFetch = errors.New("feedback: signing certificate unavailable")

	// ErrConfirm: the GET of an SNS SubscribeURL failed. Answered 503;
	// SNS sends the confirmation again.
	ErrConfirm = errors.New("feedback: subscription confirmation failed")

	// ErrPayload: the request is verified but its body is not a report
	// this package can read. Answered 400; the Store is not called.
	ErrPayload = errors.New("feedback: payload not understood")

	// ErrStore: the Store returned an error, which this one wraps.
	// Answered 503, so that the provider sends the report again.
	ErrStore = errors.New("feedback: reports not stored")

	// ErrTooLarge: the body is longer than HandlerConfig.MaxBodyBytes.
	// Answered 413; the Store is not called.
	ErrTooLarge = errors.New("feedback: body too large")
)

// answers maps each error of a request to the status it is answered
// with. The body of the answer is the sentinel's text alone.
var answers = []struct {
	err    error
	status int
}{
	{ErrMissingHeader, http.StatusUnauthorized},
	{ErrTimestamp, http.StatusUnauthorized},
	{ErrSignature, http.StatusUnauthorized},
	{ErrCredentials, http.StatusUnauthorized},
	{ErrTopic, http.StatusUnauthorized},
	{ErrCertificate, http.StatusUnauthorized},
	{ErrTooLarge, http.StatusRequestEntityTooLarge},
	{ErrPayload, http.StatusBadRequest},
	{ErrCertificateFetch, http.StatusServiceUnavailable},
	{ErrConfirm, http.StatusServiceUnavailable},
	{ErrStore, http.StatusServiceUnavailable},
}

// answer returns the status and the text to answer err with: the
// sentinel's, or 500 for an error that wraps none.
func answer(err error) (int, string) {
	for _, a := range answers {
		if errors.Is(err, a.err) {
			return a.status, a.err.Error()
		}
	}
	return http.StatusInternalServerError, "feedback: internal error"
}

// Retryable reports whether the operation that returned err may succeed
// if tried again as it is: for [Expo.Receipts], a 429, a 5xx, a timeout or
// a connection that failed. It is false for nil and for any error that
// does not say so.
func Retryable(err error) bool {
	var r interface{ Retryable() bool }
	return errors.As(err, &r) && r.Retryable()
}
