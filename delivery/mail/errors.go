package mail

import (
	"context"
	"errors"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/internal/neterr"
	"github.com/tidings-go/tidings/delivery/internal/render"
)

// The reasons Deliver gives that are not a server's answer. Match them with
// [errors.Is] on [delivery.Outcome.Reason].
var (
	// ErrInvalidRecipient: the request's recipient is not an email
	// address. The reason never quotes it. Deliver answers Reject.
	ErrInvalidRecipient = delivery.NewError(delivery.CodeInvalidRecipient, "mail: recipient is not an email address")

	// ErrUnknownTemplate: the request names no template, or one that is not
	// in Config.Templates. Deliver answers Reject, naming the template.
	ErrUnknownTemplate = delivery.NewError(delivery.CodeUnknownTemplate, "mail: unknown template")

	// ErrHeaderTooLong: a header line of the message would be longer
	// than SMTP allows (998 characters), such as a subject with a word that
	// long. Deliver answers Reject.
	ErrHeaderTooLong = errors.New("mail: header line longer than 998 characters")

	// ErrNoStartTLS: the server does not offer STARTTLS, which Config.TLS
	// requires: TLSRequired, or the default to a server that is not on a
	// loopback address. Deliver answers Retry: a server can be fixed, and
	// a man in the middle can strip the offer.
	ErrNoStartTLS = errors.New("mail: server does not offer STARTTLS, which Config.TLS requires")

	// ErrCleartextAuth: the connection is neither TLS nor to a loopback
	// address, so the credentials are not sent. New refuses a Config that
	// would always do that; it happens when Config.TLS is TLSNone and the
	// name in Config.Addr, such as "localhost", led to an address that is
	// not loopback. Deliver answers Retry.
	ErrCleartextAuth = errors.New("mail: refusing to send credentials over a connection that is neither TLS nor loopback")

	// ErrNoAuthMechanism: credentials are configured and the server offers
	// no AUTH mechanism for them: neither PLAIN nor LOGIN for a password,
	// no XOAUTH2 for Config.TokenFunc. Deliver answers Retry.
	ErrNoAuthMechanism = errors.New("mail: server offers no AUTH mechanism for the configured credentials")
)

// TemplateError is the reason of a request whose template did not render:
// Deliver answers Reject, before it connects to the server. Its text names
// the template and the missing value, or the place in the template that
// failed; never a value of the request, as in `mail: template "welcome"
// needs "name", which the request does not carry`.
//
// Its fields: Template is the template's name; Part is what failed to
// render: "subject", "text body" or "html body"; Missing is the value the
// template refers to and the request does not carry, such as "name" or
// "user.name", or empty when the failure is another; Location is where the
// template failed, such as `welcome:3:12 <index .items 5>`, or empty when
// unknown; Prefix starts the text, and is "mail: " in every TemplateError
// Deliver returns; Err is the template package's error, whose text can
// quote values of the request: never print it on its own.
type TemplateError = render.Error

// prefixed gives err, the *TemplateError that rendering a part returned,
// the Prefix "mail: ": the reason is the TemplateError itself, where sms
// and push wrap theirs in a reason of their own.
func prefixed(err error) error {
	if terr, ok := errors.AsType[*TemplateError](err); ok {
		terr.Prefix = "mail: "
	}
	return err
}

// ReplyError is the reason of a send the server answered with a failure.
// Deliver answers Reject when the reply to RCPT TO or DATA is
// [ReplyError.Permanent], such as "550 5.1.1" (no such user) at RCPT TO,
// and Retry otherwise, such as "451 4.3.0"; and Retry for any refusal of
// the connection, EHLO, STARTTLS, AUTH or MAIL FROM, whose cause is the
// Config or the server and not the request. A Reject whose enhanced code
// says the address cannot receive mail (5.1.1, 5.1.2, 5.1.6, 5.1.10)
// carries the code [delivery.CodeRecipientGone].
//
// Its text is the command, the code and the enhanced status code, as in
// "mail: server refused the recipient: 550 5.1.1". It never holds the
// server's own text, which may quote the recipient.
type ReplyError struct {
	// Command is what the server answered: "greeting", "EHLO", "STARTTLS",
	// "AUTH", "MAIL FROM", "RCPT TO" or "DATA".
	Command string
	// Code is the server's reply code, such as 550.
	Code int
	// EnhancedCode is the enhanced status code (RFC 3463) the reply began
	// with, such as "5.1.1", or "" when it had none.
	EnhancedCode string
}

// Error says what the server deferred or refused, with the codes.
func (e *ReplyError) Error() string {
	verb := "answered"
	switch {
	case e.Temporary():
		verb = "deferred"
	case e.Permanent():
		verb = "refused"
	}
	var object string
	switch e.Command {
	case "greeting":
		object = "the connection"
	case "AUTH":
		object = "the credentials"
	case "MAIL FROM":
		object = "the sender"
	case "RCPT TO":
		object = "the recipient"
	case "DATA":
		object = "the message"
	default:
		object = e.Command
	}
	msg := "mail: server " + verb + " " + object + ": " + strconv.Itoa(e.Code)
	if e.EnhancedCode != "" {
		msg += " " + e.EnhancedCode
	}
	return msg
}

// Temporary reports whether the server said to try again later: a 4xx
// code, or a 4.x.x enhanced code whatever the code. RFC 3463 has the two
// agree; when they do not, the request is better tried again than lost.
func (e *ReplyError) Temporary() bool {
	return e.Code/100 == 4 || strings.HasPrefix(e.EnhancedCode, "4.")
}

// Permanent reports whether the server refused for good: a 5xx code with
// a 5.x.x enhanced code or none, such as "550 5.1.1" (no such user) or
// "554 5.7.1" (refused by policy).
func (e *ReplyError) Permanent() bool {
	return e.Code/100 == 5 && !e.Temporary()
}

// ofRequest reports whether the reply is to what the request chose: its
// recipient (RCPT TO) or its message (DATA).
func (e *ReplyError) ofRequest() bool {
	return e.Command == "RCPT TO" || e.Command == "DATA"
}

// gone reports whether the server refused the recipient's address for
// good: RFC 3463's bad destination mailbox (5.1.1), bad destination system
// (5.1.2), mailbox moved without a forwarding address (5.1.6) or, after
// RFC 7505, a domain that takes no mail (5.1.10). A reply without an
// enhanced code, such as a bare 550, says too little to tell.
func (e *ReplyError) gone() bool {
	switch e.EnhancedCode {
	case "5.1.1", "5.1.2", "5.1.6", "5.1.10":
		return e.Permanent() && e.ofRequest()
	}
	return false
}

// newReplyError keeps the codes of a server's reply to command and drops
// its text.
func newReplyError(command string, e *smtp.SMTPError) *ReplyError {
	r := &ReplyError{Command: command, Code: e.Code}
	// The client reads an enhanced code at the start of any reply; only
	// one of RFC 3463's classes is one.
	if c := e.EnhancedCode; (c[0] == 2 || c[0] == 4 || c[0] == 5) && 0 <= c[1] && c[1] <= 999 && 0 <= c[2] && c[2] <= 999 {
		r.EnhancedCode = strconv.Itoa(c[0]) + "." + strconv.Itoa(c[1]) + "." + strconv.Itoa(c[2])
	}
	return r
}

// reasonError is a reason whose text is chosen to be safe to store and
// log, and whose cause stays reachable for errors.Is and errors.As.
type reasonError struct {
	msg string
	err error
}

func (e *reasonError) Error() string { return e.msg }

func (e *reasonError) Unwrap() error { return e.err }

// failure turns err, which step of an exchange returned, into a reason: a
// *ReplyError for a server's answer, the context's cause when ctx ended,
// and otherwise a description of the network failure without addresses.
func failure(ctx context.Context, step string, err error) error {
	if se, ok := errors.AsType[*smtp.SMTPError](err); ok {
		return newReplyError(step, se)
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		// The connection's deadline, set from ctx's, fired before ctx's
		// own timer, which fires now: the cause is ctx's all the same.
		<-ctx.Done()
	}
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		what := "cancelled"
		if errors.Is(cause, context.DeadlineExceeded) {
			what = "timed out after the delivery's deadline"
			if te, ok := errors.AsType[*timeoutError](cause); ok {
				what = "timed out after Config.Timeout (" + te.timeout + ")"
			}
		}
		return &reasonError{msg: "mail: " + step + ": " + what, err: cause}
	}
	if isMalformed(err) {
		return &reasonError{msg: "mail: " + step + ": malformed reply from the server", err: err}
	}
	return &reasonError{msg: "mail: " + step + ": " + neterr.Describe(err, "server", "exchange"), err: err}
}

// isMalformed reports whether err says the server's reply did not parse.
func isMalformed(err error) bool {
	_, ok := errors.AsType[textproto.ProtocolError](err)
	return ok || errors.Is(err, smtp.ErrTooLongLine)
}

// timeoutError is the cause of a context that Config.Timeout ended.
type timeoutError struct {
	timeout string
}

func (e *timeoutError) Error() string {
	return "mail: exchange took longer than Config.Timeout (" + e.timeout + ")"
}

func (e *timeoutError) Unwrap() error { return context.DeadlineExceeded }
