// Package mail is the email module: a [delivery.Delivery] that renders a
// registered template with a request's data and hands the message to an
// SMTP server, such as a provider's submission endpoint or a local relay.
//
// The application registers its messages by name in [Config.Templates]:
// each [Template] has a subject and a text body ([text/template]) and an
// HTML body ([html/template]), at least one body required. [New] validates
// the whole Config and parses every template once; a request then selects
// a template with [delivery.Pending.Template], and [delivery.Pending.Data]
// fills it in.
//
// # What Deliver does
//
// Deliver first turns the request into a message, without any connection:
// it checks that [delivery.Pending.Recipient] is an email address (as
// [net/mail.ParseAddress] reads it), finds the template and renders it. A
// template that refers to a value the request does not carry fails, naming
// the value: a request with a mistake is dead at once with a reason a
// person can act on ([delivery.Reject] with a [*TemplateError]), instead of
// a mail that says "Hello <no value>". Values are rendered when the request
// is delivered, not when it was staged.
//
// The message has From, To, Subject (RFC 2047 encoded when it is not
// ASCII), Date, a Message-ID, the optional idempotency header and a MIME
// body: text/plain and text/html in a multipart/alternative, or the one
// body the template has, quoted-printable, with CRLF line endings.
//
// Then one SMTP exchange: dial (bounded by the context), EHLO, STARTTLS as
// [Config.TLS] says, AUTH when credentials are set (PLAIN, or LOGIN when
// the server offers no PLAIN, with [Config.Password]; XOAUTH2, as Gmail
// and Microsoft 365 want, with a token from [Config.TokenFunc]), MAIL
// FROM, RCPT TO, DATA; on a kept connection (see Connections below) only
// the last three. The whole exchange is bounded by the context's deadline
// and [Config.Timeout]; the connection is closed when the context ends. A
// permanent refusal of the recipient or the message (5xx, and 5.x.x when
// the server sends enhanced codes, such as 5.1.1 for an unknown user) is
// [delivery.Reject], with the code [delivery.CodeRecipientGone] when the
// enhanced code says the address cannot receive mail; anything deferred (4xx or 4.x.x), a refusal of the
// connection, EHLO, STARTTLS, the credentials or the sender (the Config's
// From, the same for every request), a network failure, a timeout or a
// cancellation is [delivery.Retry]; see [Delivery.Deliver].
//
// # Duplicates: what the provider can and cannot drop
//
// SMTP has no idempotency: a server that accepted a message and a client
// that lost the answer (a crash, a timeout after the final "." and before
// the 250) cannot tell each other, and the request is handed again. So the
// message carries the request's id, which is the same on every attempt:
//
//   - Message-ID is <ID@Hostname>, derived from [delivery.Pending.ID]. A
//     second send of the same request has the same Message-ID, so a
//     provider, a mailbox or a reader's client that deduplicates on it
//     keeps one, and an operator can tell a duplicate from a second
//     message.
//   - [Config.IdempotencyHeader] names a header that carries the id as
//     well, for a provider that deduplicates on one. Resend does, over
//     SMTP, on "Resend-Idempotency-Key" (for 24 hours): set
//     IdempotencyHeader to that name when sending through Resend.
//
// A plain SMTP relay that ignores both delivers a duplicate after such a
// crash: that is the provider's limit, and no database commit can close it.
//
// # What is never in a reason
//
// Reasons are stored in the dead row and logged, so they never hold the
// recipient, the template data, the credentials (password or token) or
// the message. A
// server's reply text can quote the recipient, so a [*ReplyError] keeps
// only the command and the codes ("server refused the recipient: 550
// 5.1.1"); a network failure is described without addresses; a failure of
// [Config.TokenFunc] is named, not quoted. The errors a reason wraps (for [errors.Is] and [errors.As]) can hold more: never print
// them on their own.
//
// # Connections
//
// A [Delivery] is safe for concurrent use. Each Deliver sends on a
// connection of its own, so the relay bounds the connections to the
// server: without an idempotency header each request commits alone, and
// a channel has at most three quarters of the relay's Connections in
// flight (50 by default); with one, a batch sends all of its requests at
// once, and the channel's two batches in flight send up to the relay's
// LaneLimit (375 by default). After an accepted message the connection is
// kept for the next Deliver, which then sends MAIL FROM, RCPT TO and DATA
// only: up to [Config.MaxIdleConns] connections, each closed after
// [Config.IdleTimeout] unused or by [Delivery.Close], and not kept again
// once 5 minutes old. Against the test server on loopback, a message on a
// kept connection takes about a third of the time of one on a new
// connection in the clear, and a tenth with STARTTLS and AUTH
// (BenchmarkDeliver); over a network it also saves the round trips of the
// greeting, EHLO, STARTTLS, the TLS handshake and AUTH.
//
// A kept connection that the server closed while it was idle, or that it
// answers with 421, fails at MAIL FROM, before any of the message went
// out: the message goes on a new connection. A connection that fails
// later, or carried a refused message, is closed and never kept.
//
// mail imports only [delivery], its internal helpers, the standard
// library, and github.com/emersion/go-smtp and github.com/emersion/go-sasl
// for the SMTP client and its authentication.
package mail
