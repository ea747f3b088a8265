// Package sms is the text message module: a [delivery.Delivery] that
// renders a registered template with a request's data and asks Twilio's
// Messages API to send it to a phone number.
//
// The application registers its messages by name in [Config.Templates]:
// each is a [text/template] source for the message body. [New] validates
// the whole Config and parses every template once; a request then selects
// a template with [delivery.Pending.Template], and [delivery.Pending.Data]
// fills it in, when the request is delivered.
//
// # What Deliver does
//
// Deliver first turns the request into a message, without any call: it
// checks that [delivery.Pending.Recipient] is a phone number in E.164 form
// (+ then up to 15 digits, as "+14155550100"), finds the template and
// renders it. A template that refers to a value the request does not carry
// fails, naming the value: the request is dead at once ([delivery.Reject]
// with a [*TemplateError]) instead of a text that says "Your code is <no
// value>"; so does one that renders nothing but white space
// ([ErrEmptyText]), which Twilio would refuse.
//
// Then one call: POST {BaseURL}/2010-04-01/Accounts/{AccountSID}/Messages.json,
// form-encoded To, From or MessagingServiceSid, and Body, with HTTP basic
// auth (AccountSID:AuthToken). Twilio's answer decides the outcome:
//
//   - 200 or 201 is delivered, with the Message SID ("SM...") as the
//     reference;
//   - 400 and other 4xx are [delivery.Reject] with an [*APIError] that
//     carries Twilio's error code, such as 21211 (invalid To number) or
//     21610 (the recipient replied STOP; its reason's code
//     [delivery.CodeRecipientUnsubscribed] has the dispatcher suppress the
//     number, as 21614, not a mobile number, does with
//     [delivery.CodeRecipientGone]), but for error 21611 (the
//     sender's queue at Twilio is full), a [delivery.Retry]: the queue
//     drains as Twilio sends;
//   - 401 and 403 are [delivery.Retry], not Reject: Twilio refused the
//     account (a wrong or rotated AuthToken, a suspended account), not the
//     message. Every message would fail the same way, and the operator can
//     fix it: retrying keeps the requests until the retry policy's attempts
//     run out, with the reason "sms: twilio refused the credentials (401)",
//     instead of making the whole backlog dead at once. So are the errors
//     that refuse Config.From ([APIError.Sender]: 21212, 21601, 21606,
//     21659, 21661, such as a number still being ported), with "sms:
//     twilio refused the sender (400): error 21606";
//   - 429 and 5xx, an unreachable Twilio, a cancelled context, the
//     delivery's deadline or [Config.Timeout] are [delivery.Retry], after
//     the wait a Retry-After header names.
//
// # Duplicates: what Twilio can and cannot drop
//
// Every call carries the request's id, which is the same on every attempt,
// as Idempotency-Key, as every module sends it. Twilio's Messages API
// documents no idempotency key, though: it creates a message for every
// call it accepts. (Its I-Twilio-Idempotency-Token is a header of the
// webhooks Twilio sends, not one it reads.)
//
// So when the process crashes after Twilio accepted the message but before
// the dispatcher committed the answer, or when the answer is lost to a
// timeout, the request is handed again and the recipient gets a second
// text. [Delivery.Repeats] says so (delivery.RepeatSends), and the
// dispatcher's default gives each text a transaction and a commit of its
// own, the smallest window for that repeat. A re-emit after a fix is meant
// to send, and does.
//
// # What is never in a reason
//
// Reasons are stored in the dead row and logged, so they never hold the
// phone number, the template data, the AuthToken or the text. Twilio's
// error message quotes the number, so an [*APIError] keeps only the status
// and Twilio's numeric error code ("sms: twilio rejected the message (400):
// error 21211"); a network failure is described without addresses or URLs.
// The errors a reason wraps (for [errors.Is] and [errors.As]) can hold
// more: never print them on their own.
//
// # Concurrency
//
// A [Delivery] is safe for concurrent use, and each Deliver makes one
// call, so the relay bounds the calls in flight: Twilio does not drop a
// repeated message, so each request commits alone and holds a connection,
// and a channel has at most three quarters of the relay's Connections in
// flight (50 by default). An account's concurrency limit answers the
// excess with 429, which is retried; set Connections below that limit to
// avoid it.
//
// sms imports only [delivery], its internal helpers and the standard
// library.
package sms
