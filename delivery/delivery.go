package delivery

import "context"

// Delivery is what a notification module implements: perform one request
// and say how it went.
//
// Deliver is called at least once per request, possibly concurrently for
// different requests, and possibly again for the same [Pending.ID] after a
// crash between the provider's accept and the dispatcher's commit: give
// p.ID to the provider as its idempotency key. Deliver honours ctx, whose
// deadline is the delivery timeout. It must not keep p.Data after it
// returns, and must not put the recipient, the data or credentials into a
// reason. A panic is recovered by the dispatcher and treated as [Retry].
// See the package documentation for the whole contract.
type Delivery interface {
	Deliver(ctx context.Context, p Pending) Outcome
}

// Func adapts a plain function to [Delivery], as [net/http.HandlerFunc] does
// for handlers. A nil Func panics when called.
type Func func(ctx context.Context, p Pending) Outcome

// Deliver calls f(ctx, p).
func (f Func) Deliver(ctx context.Context, p Pending) Outcome {
	return f(ctx, p)
}

var _ Delivery = Func(nil)
