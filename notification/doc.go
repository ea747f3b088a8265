// Package notification is the consumer side of the notification contract:
// staging a request inside an application's write, and delivering it
// through the delivery registered for its channel, once.
//
// Stage writes a Request as an outbox record of kind Kind in the caller's
// transaction; it renders nothing and calls no provider. The Dispatcher is
// the relay's sink for those records. For each request it opens one
// transaction, claims (consumer, request id) in the inbox, calls the
// delivery, and commits only if the delivery answered Delivered:
//
//   - a redelivered request whose claim committed is not delivered again;
//     two relays handing the same request at once serialize on the claim;
//   - Retry rolls the claim back; the request is offered again when the
//     retry policy says (never inside the backoff window) and is dead,
//     "exhausted after N attempts: <last reason>", when the policy's
//     attempts run out. The attempt count lives on the outbox row, so it
//     survives restarts and is shared by every instance;
//   - Reject rolls the claim back and the request is dead at once with the
//     delivery's reason; an unknown channel or an undecodable payload is
//     dead with a reason that says so; re-emit it (relay.Outbox.Reemit)
//     once the cause is fixed;
//   - a delivery that panics or overruns DeliveryTimeout is a Retry with
//     that reason;
//   - a failure of the claim's own transaction (the database went away, a
//     commit lost its answer) is no fault of the delivery: the request is
//     offered again without counting an attempt or a hand (relay.Unsure).
//     Only a transaction that fails relay.Config.MaxUnsure times (5 by
//     default), a fault of the setup such as a server that ends idle
//     transactions before the provider answers, makes the request dead,
//     with a reason that says so.
//
// No database can make a provider's send atomic with a commit: a crash
// after the provider accepted a message and before the commit delivers it
// again. That is why delivery.Pending.ID, stable for the request's whole
// life, is the idempotency key each delivery gives its provider.
//
// The delivery runs inside the staging write's trace and correlation id;
// anything it stages gets the request's id as its causation id without the
// delivery doing anything.
package notification
