// Package httpcall is what every HTTP delivery module shares: one provider
// call that carries the request's idempotency key and turns everything but
// the provider's own answer into a [delivery.Outcome].
//
// A module builds its request with the delivery's context, then calls
// [Do] with [delivery.Pending.ID] as the key, usually through its
// [Caller], which also bounds the call by the module's Config.Timeout and
// prefixes reasons with the module's name (see [Prefix]). When the call
// answers ok=false the attempt is over and the module returns the outcome
// it gave: the context or the timeout ended, the provider was
// unreachable, or it answered 429 or 5xx. Otherwise the module reads [Response.StatusCode] and [Response.Body]
// and decides: 2xx is Delivered; 4xx is usually Reject with a
// [StatusError] carrying the provider's error code, passed through
// [SafeCode].
//
// The module's Config shares two more pieces: [BaseURL] checks a
// provider's base URL, and [NoRedirect] keeps a client from following
// redirects.
//
// Every reason this package builds is safe to store and log: it never
// holds the request's URL (which can carry credentials or ids), the
// provider's address, a response body or a header value. The errors it
// wraps (for [errors.Is] and [errors.As]) may name the provider's address:
// never print them on their own.
//
// httpcall imports only the standard library, delivery and neterr, so a
// module that uses it still depends on delivery alone.
package httpcall
