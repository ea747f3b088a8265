package httpcall

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tidings-go/tidings/delivery"
)

// Caller makes the provider calls of one module: [Do] with the module's
// client, bounded by the module's timeout on top of the delivery's
// context, with the reasons of the outcomes that end an attempt speaking
// for the module. A module sets every field in New, from its validated
// Config. A Caller is safe for concurrent use when its Client is.
type Caller struct {
	// Name is the module's name, such as "sms": Call prefixes the reasons
	// Do gives with it, as [Prefix] does.
	Name string
	// Client sends the calls. Nil means [http.DefaultClient].
	Client *http.Client
	// Timeout bounds each call on top of the context's deadline: the
	// module's Config.Timeout. Zero or negative means no bound of the
	// module's own.
	Timeout time.Duration
	// TimeoutText is the reason's text, before the Timeout in
	// parentheses, for a call that Timeout ended and the context did not:
	// "sms: twilio took longer than Config.Timeout" makes "sms: twilio
	// took longer than Config.Timeout (10s)".
	TimeoutText string
	// StatusOnly is for a module that decides on the status and header
	// alone: Call discards the body and answers whatever becomes of it,
	// so an answer whose body is slow to end (a receiver that answers 200
	// at once and finishes its work before closing) cannot fail an
	// attempt it accepted.
	StatusOnly bool
}

// Call sends req as [Do] does, with key as the idempotency key, and ends
// it after c.Timeout if ctx has not ended it first. It answers as Do
// does (with no Body when c.StatusOnly), except for the outcome that ends
// the attempt (ok false):
//   - when c.Timeout ended the call and ctx is not done, [delivery.Retry]
//     with the reason c.TimeoutText and the timeout, which wraps Do's
//     reason (so errors.Is finds [context.DeadlineExceeded]);
//   - otherwise Do's outcome, its reason prefixed with c.Name by [Prefix].
func (c *Caller) Call(ctx context.Context, req *http.Request, key string) (resp Response, out delivery.Outcome, ok bool) {
	callCtx := ctx
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	resp, out, ok = do(callCtx, c.Client, req, key, !c.StatusOnly)
	if ok {
		return resp, out, true
	}
	if c.Timeout > 0 && ctx.Err() == nil && errors.Is(out.Reason(), context.DeadlineExceeded) {
		// The module's timeout ended the call, not the delivery's deadline.
		return Response{}, delivery.Retry(&reasonError{msg: c.TimeoutText + " (" + c.Timeout.String() + ")", err: out.Reason()}), false
	}
	return Response{}, Prefix(c.Name, out), false
}

// Configure completes c from its module's Config: timeout is
// Config.Timeout, zero meaning def; without a Config.HTTPClient (c.Client
// nil) c gets a client that follows no redirect and gives up after the
// timeout. A negative timeout is an error naming Config.Timeout.
func (c *Caller) Configure(timeout, def time.Duration) error {
	if timeout < 0 {
		return fmt.Errorf("%s: Config.Timeout is negative: %s", c.Name, timeout)
	}
	c.Timeout = cmp.Or(timeout, def)
	if c.Client == nil {
		c.Client = &http.Client{Timeout: c.Timeout, CheckRedirect: NoRedirect}
	}
	return nil
}

// NoRedirect is an [http.Client] CheckRedirect that makes the client
// answer a redirect instead of following it: to a module, a redirect is
// the provider's answer, not a detour.
func NoRedirect(*http.Request, []*http.Request) error {
	return http.ErrUseLastResponse
}

// BaseURL returns base without its trailing slashes, ready for a path to
// be appended, and ok true when base is an absolute http or https URL
// without a query or a fragment; "" and false otherwise. An error that
// says so must not quote base: it may carry credentials.
func BaseURL(base string) (string, bool) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", false
	}
	return strings.TrimRight(base, "/"), true
}
