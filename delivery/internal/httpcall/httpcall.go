package httpcall

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/internal/neterr"
)

// BodyLimit is how much of a response body [Do] reads: 64 KiB. A longer
// body is cut there, without an error; an answer worth parsing is far
// shorter.
const BodyLimit = 64 << 10

// RetryAfterMax bounds the wait [RetryAfter] reads from a Retry-After
// header: 24 hours. A longer wait is cut to it, so that a wild header can
// neither overflow a [time.Duration] nor park a request for months.
const RetryAfterMax = 24 * time.Hour

// KeyHeader is the header that carries the idempotency key.
const KeyHeader = "Idempotency-Key"

// Response is the part of a provider's answer that [Do] leaves to the
// module. The zero value is what Do returns when it ended the attempt.
type Response struct {
	// StatusCode is the HTTP status: anything but 429 and 5xx.
	StatusCode int
	// Header is the response's header.
	Header http.Header
	// Body is the response body, cut at BodyLimit bytes. Never quote it in
	// a reason: take a code out of it with SafeCode.
	Body []byte
}

// Do sends req with client, with KeyHeader set to key, and returns the
// provider's answer, or the outcome that ends the attempt with ok false.
//
// ctx governs the call: Do sends a clone of req that carries ctx, with
// its own copy of the header, so req itself is left unchanged and may be
// built with any context. A nil client means [http.DefaultClient].
//
// Do answers ok false, with an outcome whose reason is safe to store and
// log, when:
//   - ctx is done before or during the call: [delivery.Retry] with
//     "provider call cancelled" or "provider call timed out after the
//     delivery's deadline", wrapping ctx.Err();
//   - the provider cannot be reached or the connection fails:
//     [delivery.Retry] with "provider unreachable: <op>: <kind>", such as
//     "provider unreachable: dial: connection refused", wrapping the
//     transport's error (never the *url.Error, which prints the URL);
//   - the provider answers 429 or 5xx: [delivery.RetryAfter] with a
//     [*StatusError] and the wait [RetryAfter] reads from the answer. The
//     body is not read.
//
// Otherwise ok is true, out is the zero Outcome and the module decides from
// the Response. Do is safe for concurrent use when client is.
func Do(ctx context.Context, client *http.Client, req *http.Request, key string) (resp Response, out delivery.Outcome, ok bool) {
	return do(ctx, client, req, key, true)
}

// do is Do, reading the body only when readBody is true.
func do(ctx context.Context, client *http.Client, req *http.Request, key string, readBody bool) (resp Response, out delivery.Outcome, ok bool) {
	if err := ctx.Err(); err != nil {
		return Response{}, ended(err), false
	}
	if client == nil {
		client = http.DefaultClient
	}
	req = req.Clone(ctx)
	if req.Header == nil {
		req.Header = make(http.Header)
	}
	req.Header.Set(KeyHeader, key)

	hresp, err := client.Do(req)
	if err != nil {
		return Response{}, failed(ctx, "provider unreachable", err), false
	}
	defer func() { _ = hresp.Body.Close() }()

	if hresp.StatusCode == http.StatusTooManyRequests || hresp.StatusCode >= 500 {
		after := RetryAfter(hresp.Header, time.Now())
		return Response{}, delivery.RetryAfter(&StatusError{StatusCode: hresp.StatusCode}, after), false
	}
	if !readBody {
		// Drained so that the connection can serve the next call; the
		// answer stands whatever becomes of the body.
		_, _ = io.Copy(io.Discard, io.LimitReader(hresp.Body, BodyLimit))
		return Response{StatusCode: hresp.StatusCode, Header: hresp.Header}, delivery.Outcome{}, true
	}
	body, err := io.ReadAll(io.LimitReader(hresp.Body, BodyLimit))
	if err != nil {
		return Response{}, failed(ctx, "provider answer cut short", err), false
	}
	return Response{StatusCode: hresp.StatusCode, Header: hresp.Header, Body: body}, delivery.Outcome{}, true
}

// RetryAfter returns the wait the Retry-After header of h asks for, as of
// now: delta-seconds ("120") or an HTTP-date. It returns 0 when the header
// is absent, unparsable or names a time not after now, and RetryAfterMax
// when it asks for longer.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if strings.Trim(v, "0123456789") == "" {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs > int64(RetryAfterMax/time.Second) { // err: out of range
			return RetryAfterMax
		}
		return time.Duration(secs) * time.Second
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	return min(max(at.Sub(now), 0), RetryAfterMax)
}

// StatusError is a reason for a provider's HTTP status. Its text is
// "provider answered 503 Service Unavailable", or, with a Code, "provider
// answered 400 Bad Request: validation_error".
//
// Do builds one for 429 and 5xx; a module builds one for the statuses it
// decides on, such as a 4xx it answers with [delivery.Reject].
type StatusError struct {
	// StatusCode is the HTTP status the provider answered.
	StatusCode int
	// Code is the provider's error code, as the module read it from the
	// body. The text shows it only if [SafeCode] accepts it; empty means
	// none.
	Code string
}

// Error returns the status, its standard text and the code, never the
// provider's own status line (which it chooses freely).
func (e *StatusError) Error() string {
	var b strings.Builder
	b.WriteString("provider answered ")
	b.WriteString(strconv.Itoa(e.StatusCode))
	if text := http.StatusText(e.StatusCode); text != "" {
		b.WriteString(" ")
		b.WriteString(text)
	}
	if code := SafeCode(e.Code); code != "" {
		b.WriteString(": ")
		b.WriteString(code)
	}
	return b.String()
}

// codeMax is the longest text SafeCode accepts.
const codeMax = 48

// digitsMax is the longest text without a letter that SafeCode accepts: a
// numeric code such as 21211, not a phone number.
const digitsMax = 6

// SafeCode returns code if it looks like a provider's error code, and ""
// otherwise: 1 to 48 ASCII letters, digits and "_", "-", ".", "/", with at
// least one letter when longer than 6. It rules out free text (a message
// that may quote the recipient or the request), e-mail addresses, phone
// numbers and device tokens; it cannot tell that a short code-shaped value
// is not personal data, so take the code from the field the provider
// documents for it.
func SafeCode(code string) string {
	if code == "" || len(code) > codeMax {
		return ""
	}
	letter := false
	for i := 0; i < len(code); i++ {
		switch c := code[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
			letter = true
		case '0' <= c && c <= '9', c == '_', c == '-', c == '.', c == '/':
		default:
			return ""
		}
	}
	if !letter && len(code) > digitsMax {
		return ""
	}
	return code
}

// Prefix returns o with its reason prefixed by "name: ", as in "resend:
// provider answered 503 Service Unavailable", keeping its kind and wait
// and wrapping the reason. A delivered or zero outcome is returned as is.
func Prefix(name string, o delivery.Outcome) delivery.Outcome {
	switch o.Kind() {
	case delivery.KindRetry:
		return delivery.RetryAfter(fmt.Errorf("%s: %w", name, o.Reason()), o.After())
	case delivery.KindReject:
		return delivery.Reject(fmt.Errorf("%s: %w", name, o.Reason()))
	default:
		return o
	}
}

// reasonError is a reason whose text is chosen to be safe to store and
// log, and whose cause stays reachable for errors.Is and errors.As.
type reasonError struct {
	msg string
	err error
}

func (e *reasonError) Error() string { return e.msg }

func (e *reasonError) Unwrap() error { return e.err }

// ended is the outcome of a call whose context ended with err.
func ended(err error) delivery.Outcome {
	if errors.Is(err, context.DeadlineExceeded) {
		return delivery.Retry(&reasonError{msg: "provider call timed out after the delivery's deadline", err: err})
	}
	return delivery.Retry(&reasonError{msg: "provider call cancelled", err: err})
}

// failed is the outcome of a call that failed with err: ended when ctx is
// done (the failure is its doing), else a Retry that says what failed
// without the URL or the address.
func failed(ctx context.Context, what string, err error) delivery.Outcome {
	if cerr := ctx.Err(); cerr != nil {
		return ended(cerr)
	}
	// A *url.Error prints the URL, which can hold credentials: keep its
	// cause only.
	if uerr, ok := errors.AsType[*url.Error](err); ok && uerr.Err != nil {
		err = uerr.Err
	}
	return delivery.Retry(&reasonError{msg: what + ": " + neterr.Describe(err, "provider", "request"), err: err})
}
