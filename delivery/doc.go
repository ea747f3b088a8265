// Package delivery is the contract between the notification dispatcher and
// the modules that reach people: mail, push, SMS, webhooks, in-app messages.
//
// A module implements [Delivery], one method: it is handed one staged
// request as a [Pending] and answers with an [Outcome]: [Delivered] (the
// provider accepted the message), [Retry] or [RetryAfter] (a transient
// failure: offer the request again per the retry policy) or [Reject] (a
// permanent failure: the request is dead at once with that reason). An
// outcome is a value, not an error; its reason is an error so that the cause
// survives for [errors.Is] and [errors.As]. [Func] turns a plain function
// into a Delivery.
//
// # Contract
//
// Deliver is called at least once per request. It may be called concurrently
// for different requests, and it may be called again for the same request:
// when the process crashes after the provider accepted the message but
// before the dispatcher committed the answer, the request is handed again
// with the same [Pending.ID]. No database can make a provider's send atomic
// with a commit, so give Pending.ID to the provider as its idempotency key
// (an Idempotency-Key header, a Message-ID, a client reference) and the
// provider can drop the duplicate.
//
// Honour ctx: its deadline is the delivery timeout, and a delivery that
// outlives it holds a database transaction open. Return [Retry] with
// ctx.Err() (or the error the provider call returned) when it ends.
//
// A panic in Deliver is recovered by the dispatcher and treated as [Retry]
// with the panic as the reason, but a module should not rely on that.
//
// Reasons are stored in the dead row's failure_reason and written to logs.
// Never put the recipient, the template data or credentials into a reason's
// text: say what failed ("sms: provider answered 400: invalid number"), not
// for whom. The same holds for a panic's value, which becomes a reason.
//
// # Dependencies
//
// delivery is a leaf: it imports nothing of this module, so that a delivery
// module depends on this package alone and never on the dispatcher or the
// relay.
package delivery
