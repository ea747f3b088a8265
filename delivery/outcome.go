package delivery

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Kind says which of the three answers an [Outcome] is.
//
// The zero value is [KindInvalid], so a zero Outcome (one no constructor
// built) is detectably not an answer.
type Kind int

const (
	// KindInvalid is the Kind of the zero Outcome: not an answer.
	KindInvalid Kind = iota
	// KindDelivered: the provider accepted the message.
	KindDelivered
	// KindRetry: a transient failure; offer the request again per the
	// retry policy.
	KindRetry
	// KindReject: a permanent failure; the request is dead at once.
	KindReject
)

// String returns "invalid", "delivered", "retry" or "reject", and "Kind(n)"
// for a value outside those.
func (k Kind) String() string {
	switch k {
	case KindInvalid:
		return "invalid"
	case KindDelivered:
		return "delivered"
	case KindRetry:
		return "retry"
	case KindReject:
		return "reject"
	default:
		return "Kind(" + strconv.Itoa(int(k)) + ")"
	}
}

// errNoReason replaces a nil reason given to Retry, RetryAfter or Reject, so
// that a dead row always says something.
var errNoReason = errors.New("delivery: no reason given")

// Outcome is what a delivery says about one request: delivered, retry or
// reject, with a reason for the last two. It is a value, not an error.
//
// Build one with [Delivered], [DeliveredWithReference], [Retry],
// [RetryAfter] or [Reject]. An Outcome is immutable and safe to copy and to
// share between goroutines. The zero value has [KindInvalid]: it is not an
// answer, and the dispatcher treats it as a bug in the delivery.
type Outcome struct {
	kind   Kind
	reason error
	after  time.Duration
	ref    string
}

// Delivered reports that the provider accepted the message.
func Delivered() Outcome {
	return Outcome{kind: KindDelivered}
}

// DeliveredWithReference reports that the provider accepted the message and
// gave it the id ref (the receipt). ref is stored with the request and shown
// in status queries, so it must not contain personal data. An empty ref is
// the same as [Delivered].
func DeliveredWithReference(ref string) Outcome {
	return Outcome{kind: KindDelivered, ref: ref}
}

// Retry reports a transient failure: the request is offered again per the
// retry policy, and is dead with this reason once the policy's attempts run
// out. A nil reason is replaced by an error saying "no reason given".
func Retry(reason error) Outcome {
	return Outcome{kind: KindRetry, reason: orNoReason(reason)}
}

// RetryAfter is [Retry] when the provider named how long to wait, as in a
// Retry-After header. The dispatcher waits at least that long before the
// next attempt. A negative after is treated as 0, which means "as the retry
// policy says". A nil reason is replaced by an error saying "no reason
// given".
func RetryAfter(reason error, after time.Duration) Outcome {
	return Outcome{kind: KindRetry, reason: orNoReason(reason), after: max(after, 0)}
}

// Reject reports a permanent failure: the request is dead at once, with
// reason as its failure_reason. A nil reason is replaced by an error saying
// "no reason given".
func Reject(reason error) Outcome {
	return Outcome{kind: KindReject, reason: orNoReason(reason)}
}

func orNoReason(reason error) error {
	if reason == nil {
		return errNoReason
	}
	return reason
}

// Kind returns which answer o is; [KindInvalid] for the zero Outcome.
func (o Outcome) Kind() Kind {
	return o.kind
}

// Reason returns why the request was not delivered: never nil for a retry
// or a reject, nil for a delivered or zero Outcome. Test it with [errors.Is]
// and [errors.As].
func (o Outcome) Reason() error {
	return o.reason
}

// After returns the wait the provider asked for with [RetryAfter], or 0
// when it named none or o is not a retry.
func (o Outcome) After() time.Duration {
	return o.after
}

// Reference returns the provider's id for a delivered message, as given to
// [DeliveredWithReference], or "" when there is none.
func (o Outcome) Reference() string {
	return o.ref
}

// String describes o for logs and test failures: "delivered",
// "delivered (reference <ref>)", "retry: <reason>",
// "retry after 30s: <reason>", "reject: <reason>" or "invalid". The text is
// not API: match on [Outcome.Kind] and [Outcome.Reason] instead.
func (o Outcome) String() string {
	switch o.kind {
	case KindDelivered:
		if o.ref != "" {
			return "delivered (reference " + o.ref + ")"
		}
		return "delivered"
	case KindRetry:
		if o.after > 0 {
			return fmt.Sprintf("retry after %s: %v", o.after, o.reason)
		}
		return "retry: " + o.reason.Error()
	case KindReject:
		return "reject: " + o.reason.Error()
	default:
		return o.kind.String()
	}
}
