// Package push is the push notification module: a [delivery.Delivery]
// that renders a registered template with a request's data and asks Expo's
// push service to send it to a device.
//
// The application registers its notifications by name in
// [Config.Templates]: each [Template] has an optional title and a body,
// both [text/template] sources. [New] validates the whole Config and parses
// every template once; a request then selects a template with
// [delivery.Pending.Template], and [delivery.Pending.Data] fills it in,
// when the request is delivered.
//
// # What Deliver does
//
// Deliver first turns the request into a push, without any call: it checks
// that [delivery.Pending.Recipient] is an Expo push token
// ("ExponentPushToken[...]" or "ExpoPushToken[...]", as the app got it from
// getExpoPushTokenAsync, or the bare UUID form Expo's SDK also accepts),
// finds the template and renders it. A template
// that refers to a value the request does not carry fails, naming the
// value: the request is dead at once ([delivery.Reject] with a
// [*TemplateError]) instead of a notification that says "<no value>".
//
// Then one call: POST {BaseURL}/--/api/v2/push/send with a JSON array of
// one message, {"to": token, "title": ..., "body": ..., "data": {"id":
// request id}}, and "Authorization: Bearer" when [Config.AccessToken] is
// set. Expo answers with a ticket for the message, which decides the
// outcome:
//
//   - "ok" is delivered, with the ticket id as the reference. A ticket
//     means Expo took the push, not that the device got it: Apple or
//     Google answer later, in a receipt that this module does not fetch;
//   - "error" with DeviceNotRegistered (the app was removed from the
//     device: stop sending to the token) or MessageTooBig is
//     [delivery.Reject], with the reason "push: expo: DeviceNotRegistered"
//     (its code [delivery.CodeRecipientGone], on which the dispatcher
//     suppresses the token);
//   - "error" with MessageRateExceeded (too many pushes to the device) is
//     [delivery.Retry];
//   - "error" with InvalidCredentials or MismatchSenderId is
//     [delivery.Retry], not Reject, and so is a 401 or 403 for the access
//     token: the project's credentials are wrong, not the push. Every push
//     would fail the same way, and the operator can fix it: retrying keeps
//     the requests until the retry policy's attempts run out instead of
//     making the whole backlog dead at once;
//   - a 4xx with Expo's request-level "errors" is [delivery.Reject] with
//     the first error's code, such as "push: expo rejected the request
//     (400): VALIDATION_ERROR";
//   - 429 and 5xx, a 4xx without Expo's "errors" (a proxy's 408, a 404
//     from a [Config.BaseURL] with a wrong path), an unreachable Expo, a
//     cancelled context, the delivery's deadline or [Config.Timeout] are
//     [delivery.Retry], after the wait a Retry-After header names.
//
// # Duplicates: Expo cannot drop them
//
// Every call carries the request's id, which is the same on every attempt,
// as Idempotency-Key, as every module sends it, and in the push's data as
// "id". But Expo has no server-side deduplication: it ignores the header
// and pushes every message it is given.
//
// So when the process crashes after Expo accepted the push but before the
// dispatcher committed the answer, or when Expo's answer is lost to a
// timeout or a dropped connection, the request is handed again and the
// device gets the notification twice. No commit can close that window;
// only the app can, by ignoring a push whose data.id it has already shown.
// The same goes for a 2xx answer without a readable ticket
// ([ErrUnreadableAnswer]), which is retried rather than risk losing the
// push.
//
// # What is never in a reason
//
// Reasons are stored in the dead row and logged, so they never hold the
// push token, the template data, the access token or the text. Expo's
// error messages quote the token, so an [*APIError] keeps only the status
// and Expo's error code; a network failure is described without addresses
// or URLs. The errors a reason wraps (for [errors.Is] and [errors.As]) can
// hold more: never print them on their own.
//
// # Concurrency
//
// A [Delivery] is safe for concurrent use, and each Deliver makes one
// call with one message, so the relay bounds the calls in flight: Expo
// does not drop a repeated push, so each request commits alone and holds
// a connection, and a channel has at most three quarters of the relay's
// Connections in flight (50 by default). Expo allows 600 pushes a second
// per project; beyond that it answers 429, which is retried.
//
// push imports only [delivery], its internal helpers and the standard
// library.
package push
