// Package webhook is the webhook module: a [delivery.Delivery] that posts
// each request as JSON to the URL its recipient names, signed the Standard
// Webhooks way (https://www.standardwebhooks.com/), so that any Standard
// Webhooks library can verify it. [Verify] is the receiving half, for
// applications that receive such calls and for tests.
//
// # What is sent
//
// [delivery.Pending.Recipient] is the endpoint's URL. It must be absolute
// and https, without user info; http is allowed on a loopback host, and on
// any host with [Config.AllowInsecure]. A recipient that breaks a rule is a
// [delivery.Reject] before any call, with [ErrInvalidRecipient] as the
// reason, which never quotes the URL (a URL can carry a token).
//
// The call is a POST whose body is one compact JSON object, shown here
// spread out and annotated:
//
//	{
//	  "id":        "0190f5d2-7c1e-7b3a-9f0e-2d4c5b6a7e81",  // Pending.ID, also webhook-id
//	  "type":      "invoice.paid",                          // Pending.Template ("" when none)
//	  "timestamp": "2025-07-01T09:30:00.123456Z",           // Pending.StagedAt, RFC 3339, UTC
//	  "data":      {"invoice": "INV-17"}                     // Pending.Data ({} when nil)
//	}
//
// The body is the same on every attempt. Its headers are:
//
//	Content-Type:           application/json
//	User-Agent:             Config.UserAgent
//	webhook-id:             Pending.ID, the same on every attempt
//	webhook-timestamp:      the attempt's time, unix seconds
//	webhook-signature:      v1,<base64 HMAC-SHA256> for each secret, space-separated
//	Idempotency-Key:        Pending.ID, as every HTTP module sends it
//	tidings-correlation-id: Pending.CorrelationID, when it has one (not signed)
//
// # Signatures and rotation
//
// A secret is "whsec_" followed by the standard base64 encoding of a key of
// 24 to 64 bytes ([NewSecret] makes one). Each signature is the HMAC-SHA256,
// under one key, of "{webhook-id}.{webhook-timestamp}.{body}", base64
// encoded and prefixed "v1,". The timestamp is the attempt's, so each
// attempt is signed afresh; the id is the request's, so a receiver sees
// one id however often the request is sent.
//
// Deliver signs with every secret in [Config.Secrets] and sends all the
// signatures, and a receiver accepts a request when any one verifies. To
// rotate a secret without losing a call: add the new secret to
// Config.Secrets (both are now sent), give it to the receiver and let it
// switch (it may check both for a while: [Verify] takes several secrets),
// then remove the old one.
//
// # What receivers must do
//
//   - Verify before acting: [Verify] with the secret, the headers and the
//     body exactly as received (not parsed and re-encoded: one changed
//     space fails the signature). It checks that webhook-timestamp is
//     within a tolerance of the receiver's clock, in both directions
//     (5 minutes by default), and compares signatures in constant time
//     with [hmac.Equal]. Answer 401 or 400 when it fails.
//   - Deduplicate on webhook-id. A request can arrive more than once, and
//     the receiver is the only place where that can be undone: tidings
//     relays at least once, and when this process crashes (or the answer is
//     lost) after the endpoint accepted a call but before the dispatcher
//     committed that answer, the request is sent again, with the same
//     webhook-id and a new timestamp and signature. A valid request can
//     also be replayed by someone who captured it, within the tolerance.
//     Record each webhook-id processed, in the same transaction as the
//     work it causes where possible, and keep the records longer than the
//     retry schedule of the sender (days, not minutes); a request whose id
//     is recorded is answered 2xx and ignored. This package keeps no such
//     store: a unique key on a table of ids is the usual one.
//   - Answer 2xx fast: accept, record, and do slow work afterwards. A call
//     that takes longer than [Config.Timeout] (10 seconds by default) is a
//     failure here and is sent again.
//   - Answer 410 Gone to stop deliveries for good: the request is
//     rejected at once, and the dispatcher suppresses the URL
//     ([delivery.CodeRecipientGone]). Any other answer but 2xx is a failure, as the
//     Standard Webhooks specification has it: the request is retried
//     per the dispatcher's retry policy (honouring Retry-After), and so
//     are unreachable endpoints. A 401 while you rotate a secret, or a
//     404 while you redeploy, loses nothing. Redirects are not followed:
//     a 3xx is a failure too (update the URL instead).
//
// # Safety
//
// Reasons are stored and logged, so they never hold the URL, the body, a
// secret or the endpoint's answer: an answer is reported by its status
// code alone. Recipients choose the URLs this module calls; when they are
// not trusted, give [Config.HTTPClient] a transport that refuses internal
// addresses (see its documentation).
//
// A [Delivery] is safe for concurrent use, and keeps nothing between calls
// but the HTTP client's connection pool.
//
// webhook imports [delivery], its internal httpcall helper, uuid and the
// standard library.
package webhook
