// Package notification is the consumer side of the notification contract:
// staging a request inside an application's write, delivering it through
// the delivery registered for its channel, once, and looking after it.
//
// A Client stages a Request as an outbox record of kind Kind in the
// caller's transaction (Stage and StageBatch do so in the default schema);
// it renders nothing and calls no provider. The same Client tells how a
// request went (Status, Wait), finds the requests of a correlation id
// (FindByCorrelation), cancels one, and lists and re-emits dead ones: an
// API process needs nothing else, and the operators' page (package
// console) reads and changes through it.
//
// The Dispatcher is the relay's sink for those records. The relay claims a
// batch of due records, at most LaneLimit of a lane (a request's lane is
// its channel; half of it for a channel that shares commits, so that two
// of its batches are in flight) and no more than its connections allow (a
// transaction per request of a channel that commits each, per batch of
// one that shares commits: the Dispatcher is a relay.LaneSharer), and
// hands it whole:
//
//	relay.Supervise ─ claim ─► batch ─► Dispatcher.HandleBatch
//	                                      │ per channel (CommitShared):
//	                                      │   BEGIN
//	                                      │   claim the requests in the inbox (one statement)
//	                                      │   deliver each, in its own context and deadline
//	                                      │   release the claims of those not delivered
//	                                      │   write every outcome on the outbox (Batch.SettleIn)
//	                                      │   COMMIT: claims and outcomes together
//	                                      │ per request (CommitEach):
//	                                      │   BEGIN, claim it, deliver it
//	                                      │   COMMIT the claim if delivered, else roll it back
//	                                      └─  the relay settles the outcome after, with others
//
// So:
//
//   - a request whose claim committed is not delivered again; two relays
//     handing the same request at once serialize on the claim;
//   - Retry releases the claim; the request is offered again when the
//     retry policy says (never inside the backoff window) and is dead,
//     "exhausted after N attempts: <last reason>", when the policy's
//     attempts run out. The attempt count lives on the outbox row, so it
//     survives restarts and is shared by every instance;
//   - Reject releases the claim and the request is dead at once with the
//     delivery's reason; an unknown channel or an undecodable payload is
//     dead with a reason that says so; re-emit it (Client.Reemit) once the
//     cause is fixed;
//   - a delivery that panics or overruns DeliveryTimeout is a Retry with
//     that reason;
//   - a failure of the transaction itself (the database went away, a
//     commit lost its answer) is no fault of the delivery: a delivered
//     request is offered again without counting an attempt or a hand
//     (relay.Unsure). Only a transaction that fails relay.Config.MaxUnsure
//     times (5 by default), a fault of the setup such as a server that
//     ends idle transactions before the provider answers, makes the
//     request dead, with a reason that says so.
//
// Whether a channel's requests share a transaction follows what its
// delivery declares (delivery.Repeat): a provider that drops a repeated
// idempotency key, or a delivery that writes in the claim's transaction,
// shares it (one commit for a batch of the channel); a provider without
// protection (plain SMTP) gets a transaction per request, the smallest
// window for a repeated send. Config.Commit chooses otherwise.
//
// No database can make a provider's send atomic with a commit: a crash
// after the provider accepted a message and before the commit delivers it
// again. That is why delivery.Pending.ID, stable for the request's whole
// life, is the idempotency key each delivery gives its provider.
//
// The delivery runs in a span of its own inside the staging write's trace,
// linked to the staging span, and with its correlation id; anything it
// stages gets the request's id as its causation id without the delivery
// doing anything. The relay counts what became of each request
// (relay.MetricSettled, by lane: the channel); the dispatcher times each
// delivery (MetricDeliveryDuration).
package notification
