package mail

import (
	"context"
	"errors"
	"net/mail"
	"regexp"
	"time"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/internal/render"
)

// Delivery sends a request as an email through one SMTP server: a
// [delivery.Delivery] for the channel that carries email addresses.
//
// A Delivery is safe for concurrent use. Every Deliver renders its own
// message and sends it on a connection of its own, which it keeps open
// afterwards for the next Deliver, up to [Config.MaxIdleConns]
// connections for [Config.IdleTimeout] each. [Delivery.Close] closes them
// at once; without it they close when idle.
type Delivery struct {
	s    *settings
	pool *pool
}

var (
	_ delivery.Delivery = (*Delivery)(nil)
	_ delivery.Repeater = (*Delivery)(nil)
)

// Repeats answers delivery.RepeatDropped when Config.IdempotencyHeader
// names a header the provider deduplicates on (Resend's
// Resend-Idempotency-Key), and delivery.RepeatSends otherwise: a plain
// SMTP server sends a repeat again.
func (d *Delivery) Repeats() delivery.Repeat {
	if d.s.idemHeader != "" {
		return delivery.RepeatDropped
	}
	return delivery.RepeatSends
}

// New returns a Delivery for cfg, which it validates: Addr, From, the
// credentials, TLS, Hostname, IdempotencyHeader, Timeout and IdleTimeout,
// and every template, which it parses once. The error joins every problem found,
// each naming its field. New neither connects to the server nor starts a
// goroutine.
func New(cfg *Config) (*Delivery, error) {
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return &Delivery{s: s, pool: &pool{max: s.maxIdle, timeout: s.idleTime, maxAge: maxSessionAge}}, nil
}

// Close closes the connections d keeps for reuse, waiting for their QUIT
// (2 seconds at most each), and keeps none from then on: a Deliver after
// Close opens and closes its own connection. Call it when the dispatcher
// that uses d has stopped. It returns nil.
func (d *Delivery) Close() error {
	d.pool.close()
	return nil
}

// Deliver renders the template p names with p.Data and p.Secrets, and sends the message
// to p.Recipient, whose local part the envelope quotes as the To header
// does. It answers:
//
//   - [delivery.DeliveredWithReference] when the server accepted the
//     message, with the queue id of the server's last reply when it named
//     one ("queued as ..."), and the Message-ID otherwise;
//   - [delivery.Reject] without connecting when the request cannot become a
//     message: p.Recipient is not an email address ([ErrInvalidRecipient]),
//     the template is unknown ([ErrUnknownTemplate]) or needs a value p.Data
//     does not carry ([*TemplateError]);
//   - [delivery.Reject] with a [*ReplyError] when the server refused the
//     recipient or the message for good ([ReplyError.Permanent]: a 5xx
//     code with a 5.x.x enhanced code or none, such as "550 5.1.1" for an
//     unknown recipient); with the code [delivery.CodeRecipientGone],
//     on which the dispatcher suppresses the address, when the enhanced
//     code says the address cannot receive mail (5.1.1, 5.1.2, 5.1.6,
//     5.1.10);
//   - [delivery.Retry] with a [*ReplyError] when the server deferred
//     anything (a 4xx code or a 4.x.x enhanced code), or refused the
//     connection, EHLO, STARTTLS, the credentials or the sender: those
//     answers say nothing about the request but about the Config or the
//     server (a blocked address, a sender it does not take, a login it
//     wants first), and every request would die of them at once; the
//     request goes out once they are fixed (Postfix's
//     smtp_sasl_auth_soft_bounce defers a refused login for the same
//     reason);
//   - [delivery.Retry] when the connection failed or timed out, when ctx
//     ended, or when the server lacks what the Config requires
//     ([ErrNoStartTLS], [ErrCleartextAuth], [ErrNoAuthMechanism]), or
//     when Config.TokenFunc failed.
//
// The exchange ends at ctx's deadline or after Config.Timeout, whichever
// comes first.
func (d *Delivery) Deliver(ctx context.Context, p delivery.Pending) delivery.Outcome {
	if p.ID == ([16]byte{}) {
		return delivery.Reject(delivery.ErrNoID)
	}
	to, err := mail.ParseAddress(p.Recipient)
	if err != nil {
		return delivery.Reject(ErrInvalidRecipient)
	}
	t, err := render.Lookup(d.s.templates, p.Template, ErrUnknownTemplate)
	if err != nil {
		return delivery.Reject(err)
	}
	r, err := t.render(p.TemplateData())
	if err != nil {
		return delivery.Reject(err)
	}
	msg, err := d.s.compose(p, to, r, time.Now())
	if err != nil {
		return delivery.Reject(err)
	}

	reply, err := d.send(ctx, envelope(to.Address), msg)
	if err != nil {
		if re, ok := errors.AsType[*ReplyError](err); ok && re.Permanent() && re.ofRequest() {
			if re.gone() {
				err = delivery.WithCode(delivery.CodeRecipientGone, err)
			}
			return delivery.Reject(err)
		}
		return delivery.Retry(err)
	}
	if id := queueID(reply); id != "" {
		return delivery.DeliveredWithReference(id)
	}
	return delivery.DeliveredWithReference(d.s.messageID(p))
}

// envelope is addr as the SMTP envelope carries it (RFC 5321's Mailbox):
// its local part quoted when it needs quotes, as in the To header. Parsed,
// an address loses its quotes, and a '>' or a space of a quoted local part
// would otherwise end the path or add a parameter to the command: another
// recipient than the one the message names.
func envelope(addr string) string {
	s := (&mail.Address{Address: addr}).String() // "<local@domain>"
	return s[1 : len(s)-1]
}

// queueIDPattern finds the queue id in a server's reply to the end of
// DATA: Postfix and most others say "queued as ID", Exim says "id=ID".
var queueIDPattern = regexp.MustCompile(`(?i)(?:\bqueued as|\bid=)\s*<?([A-Za-z0-9][A-Za-z0-9._:-]{0,99})`)

// queueID returns the queue id in reply, or "" when it names none.
func queueID(reply string) string {
	if m := queueIDPattern.FindStringSubmatch(reply); m != nil {
		return m[1]
	}
	return ""
}
