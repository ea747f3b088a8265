package mail_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"mime"
	"net"
	netmail "net/mail"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/mail"
)

func TestDeliver(t *testing.T) {
	t.Parallel()

	t.Run("DeliversMultipart", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{})
		p := newPending("welcome", map[string]any{"name": "Ada <& Bob>", "code": "123456"})

		outcome := b.mailer.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		messageID := "<" + p.ID.String() + "@tidings.example>"
		require.Equal(t, messageID, outcome.Reference())

		got := b.srv.accepted()
		require.Len(t, got, 1)
		require.Equal(t, "no-reply@tidings.example", got[0].From)
		require.Equal(t, []string{testAddress}, got[0].To)
		require.False(t, got[0].TLS)

		m := parseMessage(t, got[0].Data)
		from, err := m.header.AddressList("From")
		require.NoError(t, err)
		require.Equal(t, []*netmail.Address{{Name: "Tidings", Address: "no-reply@tidings.example"}}, from)
		to, err := m.header.AddressList("To")
		require.NoError(t, err)
		require.Equal(t, []*netmail.Address{{Name: "Ada Lovelace", Address: testAddress}}, to)
		require.Equal(t, "Welcome, Ada <& Bob>", m.header.Get("Subject"))
		require.Equal(t, messageID, m.header.Get("Message-ID"))
		require.Equal(t, "1.0", m.header.Get("MIME-Version"))
		date, err := m.header.Date()
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), date, time.Minute)
		require.Empty(t, m.header.Get("Resend-Idempotency-Key"))

		require.True(t, m.multipart)
		require.Equal(t, "Hello Ada <& Bob>,\r\nyour code is 123456.\r\n", m.parts["text/plain"])
		require.Equal(t, "<p>Hello Ada &lt;&amp; Bob&gt;, your code is <b>123456</b>.</p>", m.parts["text/html"])
	})

	t.Run("IdempotencyHeader", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{}, func(cfg *mail.Config) {
			cfg.IdempotencyHeader = "Resend-Idempotency-Key"
		})
		p := newPending("welcome", welcomeData())

		outcome := b.mailer.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)

		got := b.srv.accepted()
		require.Len(t, got, 1)
		m := parseMessage(t, got[0].Data)
		require.Equal(t, p.ID.String(), m.header.Get("Resend-Idempotency-Key"))
		require.Contains(t, m.header.Get("Message-ID"), p.ID.String())
	})

	t.Run("HostnameNamesTheMessageID", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{}, func(cfg *mail.Config) {
			cfg.Hostname = "mailer.internal.example"
		})
		p := newPending("welcome", welcomeData())

		outcome := b.mailer.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		want := "<" + p.ID.String() + "@mailer.internal.example>"
		require.Equal(t, want, outcome.Reference())
		got := b.srv.accepted()
		require.Len(t, got, 1)
		require.Equal(t, want, parseMessage(t, got[0].Data).header.Get("Message-ID"))
	})

	t.Run("SamePendingTwiceSameMessageID", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{})
		p := newPending("welcome", welcomeData())

		first := b.mailer.Deliver(t.Context(), p)
		p.Attempt++
		second := b.mailer.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindDelivered, first.Kind(), "%v", first)
		require.Equal(t, first, second)

		got := b.srv.accepted()
		require.Len(t, got, 2)
		id1 := parseMessage(t, got[0].Data).header.Get("Message-ID")
		id2 := parseMessage(t, got[1].Data).header.Get("Message-ID")
		require.Equal(t, id1, id2)
		require.Contains(t, id1, p.ID.String())

		other := newPending("welcome", welcomeData())
		require.NotEqual(t, first.Reference(), b.mailer.Deliver(t.Context(), other).Reference())
	})

	t.Run("QueueIDIsTheReference", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{dataReply: "Ok: queued as 4Bq9Xz1Lm2"})

		outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
		require.Equal(t, delivery.DeliveredWithReference("4Bq9Xz1Lm2"), outcome)
	})

	t.Run("TextOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{})

		outcome := b.mailer.Deliver(t.Context(), newPending("text-only", map[string]any{"code": "<42>"}))
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		got := b.srv.accepted()
		require.Len(t, got, 1)
		m := parseMessage(t, got[0].Data)
		require.False(t, m.multipart)
		require.Equal(t, map[string]string{"text/plain": "Your code is <42>.\r\n"}, m.parts)
	})

	t.Run("HTMLOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{})

		outcome := b.mailer.Deliver(t.Context(), newPending("html-only", map[string]any{"code": "<42>"}))
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		got := b.srv.accepted()
		require.Len(t, got, 1)
		m := parseMessage(t, got[0].Data)
		require.False(t, m.multipart)
		// SMTP ends a message with a line break, so a single body does too.
		require.Equal(t, map[string]string{"text/html": "<p>Your code is &lt;42&gt;.</p>\r\n"}, m.parts)
	})

	t.Run("NonASCIISubjectIsEncoded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{})
		subject := "Grüße, Zoë: " + strings.Repeat("ünïcödé ", 12) + "✓"

		outcome := b.mailer.Deliver(t.Context(), newPending("verbatim", map[string]any{"subject": subject, "body": "x"}))
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		got := b.srv.accepted()
		require.Len(t, got, 1)
		raw := string(got[0].Data)
		require.Contains(t, raw, "Subject: =?utf-8?q?")
		require.NotContains(t, raw, "Zoë", "8-bit header")

		m := parseMessage(t, got[0].Data)
		decoded, err := new(mime.WordDecoder).DecodeHeader(m.header.Get("Subject"))
		require.NoError(t, err)
		require.Equal(t, subject, decoded)
	})

	t.Run("LongASCIISubjectIsFolded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{})
		subject := strings.TrimSpace(strings.Repeat("Your order has shipped ", 10))

		outcome := b.mailer.Deliver(t.Context(), newPending("verbatim", map[string]any{"subject": subject, "body": "x"}))
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		got := b.srv.accepted()
		require.Len(t, got, 1)
		require.Contains(t, string(got[0].Data), "\r\n Your order")
		require.Equal(t, subject, parseMessage(t, got[0].Data).header.Get("Subject"))
	})

	t.Run("LineBreaksInTheSubjectStayInIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{})
		p := newPending("verbatim", map[string]any{
			"subject": "Hello\r\nBcc: eve@evil.example\r\n\r\nbody",
			"body":    "x",
		})

		outcome := b.mailer.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		got := b.srv.accepted()
		require.Len(t, got, 1)
		m := parseMessage(t, got[0].Data)
		require.Empty(t, m.header.Get("Bcc"))
		require.Equal(t, "Hello  Bcc: eve@evil.example    body", m.header.Get("Subject"))
		require.Equal(t, map[string]string{"text/plain": "x\r\n"}, m.parts)
	})

	t.Run("BodyArrivesIntact", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{})
		// A line of a lone dot would end DATA, one starting with a dot
		// loses it without dot-stuffing, a long line needs soft breaks, and
		// "=" and non-ASCII need quoting.
		body := ".\r\n.hidden line\r\n" + strings.Repeat("long line, ", 120) + "\r\na=b ünïcödé\r\n"

		outcome := b.mailer.Deliver(t.Context(), newPending("verbatim", map[string]any{"subject": "s", "body": body}))
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		got := b.srv.accepted()
		require.Len(t, got, 1)
		require.Equal(t, map[string]string{"text/plain": body}, parseMessage(t, got[0].Data).parts)
	})

	// MAIL FROM says SMTPUTF8 when an address needs it and the server
	// offers it; otherwise the addresses go as they are. A quoted local
	// part stays quoted in the envelope: what it holds neither ends the
	// path nor adds a parameter to RCPT TO, and the server reads the
	// recipient the To header names.
	for _, tt := range []struct {
		name      string
		smtpUTF8  bool
		recipient string
		want      bool
	}{
		{name: "UTF8Address", smtpUTF8: true, recipient: "Zoë <zoë@example.org>", want: true},
		{name: "UTF8AddressWithoutSMTPUTF8", recipient: "Zoë <zoë@example.org>"},
		{name: "ASCIIAddress", smtpUTF8: true, recipient: "Zoë <zoe@example.org>"},
		{name: "QuotedLocalPart", recipient: `"ada lovelace"@example.org`},
		{name: "QuotedPathEnd", recipient: `"attacker@evil.example> NOTIFY=NEVER"@victim.example`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, serverOptions{smtpUTF8: tt.smtpUTF8})
			p := newPending("welcome", welcomeData())
			p.Recipient = tt.recipient

			outcome := b.mailer.Deliver(t.Context(), p)
			require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
			got := b.srv.accepted()
			require.Len(t, got, 1)
			addr, err := netmail.ParseAddress(tt.recipient)
			require.NoError(t, err)
			require.Equal(t, []string{addr.Address}, got[0].To)
			require.Equal(t, tt.want, got[0].UTF8)
		})
	}

	t.Run("NilData", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{}, func(cfg *mail.Config) {
			cfg.Templates["static"] = mail.Template{Subject: "Hi", Text: "Nothing to fill in."}
		})

		outcome := b.mailer.Deliver(t.Context(), newPending("static", nil))
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		require.Len(t, b.srv.accepted(), 1)
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{})
		const n = 20

		var wg sync.WaitGroup
		outcomes := make([]delivery.Outcome, n)
		for i := range n {
			wg.Go(func() {
				data := map[string]any{"name": fmt.Sprintf("user-%d", i), "code": i}
				outcomes[i] = b.mailer.Deliver(t.Context(), newPending("welcome", data))
			})
		}
		wg.Wait()

		for _, o := range outcomes {
			require.Equal(t, delivery.KindDelivered, o.Kind(), "%v", o)
		}
		got := b.srv.accepted()
		require.Len(t, got, n)
		subjects := map[string]bool{}
		for _, m := range got {
			subjects[parseMessage(t, m.Data).header.Get("Subject")] = true
		}
		require.Len(t, subjects, n)
	})
}

// A request that cannot become a message is rejected before any
// connection, with a reason that names what is wrong and quotes nothing of
// the request's.
func TestDeliverRejectsWithoutConnecting(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		pending func() delivery.Pending
		target  error  // errors.Is; nil when the reason is a *TemplateError
		reason  string // the reason's text
		missing string // TemplateError.Missing
	}{
		{
			name:    "MissingVariable",
			pending: func() delivery.Pending { return newPending("welcome", map[string]any{"code": "123456"}) },
			reason:  `mail: template "welcome" needs "name", which the request does not carry`,
			missing: "name",
		},
		{
			name:    "MissingVariableNilData",
			pending: func() delivery.Pending { return newPending("welcome", nil) },
			reason:  `mail: template "welcome" needs "name", which the request does not carry`,
			missing: "name",
		},
		{
			name:    "MissingNestedVariable",
			pending: func() delivery.Pending { return newPending("nested", map[string]any{"user": map[string]any{}}) },
			reason:  `mail: template "nested" needs "user.name", which the request does not carry`,
			missing: "user.name",
		},
		{
			name:    "MissingHTMLVariable",
			pending: func() delivery.Pending { return newPending("html-only", map[string]any{"name": "Ada"}) },
			reason:  `mail: template "html-only" needs "code", which the request does not carry`,
			missing: "code",
		},
		{
			name: "TemplateFailsOtherwise",
			pending: func() delivery.Pending {
				return newPending("index", map[string]any{"items": []any{"ada@example.org"}})
			},
			reason: `mail: template "index" failed to render its text body at index:1:9 <index .items 5>`,
		},
		{
			name:    "UnknownTemplate",
			pending: func() delivery.Pending { return newPending("farewell", welcomeData()) },
			target:  mail.ErrUnknownTemplate,
			reason:  `mail: unknown template: "farewell" is not in Config.Templates`,
		},
		{
			name:    "NoTemplate",
			pending: func() delivery.Pending { return newPending("", welcomeData()) },
			target:  mail.ErrUnknownTemplate,
			reason:  "mail: unknown template: the request names none",
		},
		{
			name: "InvalidRecipient",
			pending: func() delivery.Pending {
				p := newPending("welcome", welcomeData())
				p.Recipient = "ada at example.org"
				return p
			},
			target: mail.ErrInvalidRecipient,
			reason: "mail: recipient is not an email address",
		},
		{
			name: "RecipientWithHeaderInjection",
			pending: func() delivery.Pending {
				p := newPending("welcome", welcomeData())
				p.Recipient = "ada@example.org\r\nBcc: eve@evil.example"
				return p
			},
			target: mail.ErrInvalidRecipient,
			reason: "mail: recipient is not an email address",
		},
		{
			name: "NoID",
			pending: func() delivery.Pending {
				p := newPending("welcome", welcomeData())
				p.ID = [16]byte{}
				return p
			},
			target: delivery.ErrNoID,
			reason: "delivery: the request has no id",
		},
		{
			name: "SubjectWordTooLong",
			pending: func() delivery.Pending {
				return newPending("verbatim", map[string]any{"subject": strings.Repeat("x", 1000), "body": "x"})
			},
			target: mail.ErrHeaderTooLong,
			reason: "mail: header line longer than 998 characters: Subject",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, serverOptions{})
			p := tt.pending()

			outcome := b.mailer.Deliver(t.Context(), p)
			require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
			require.EqualError(t, outcome.Reason(), tt.reason)
			if tt.target != nil {
				require.ErrorIs(t, outcome.Reason(), tt.target)
			} else {
				terr, ok := errors.AsType[*mail.TemplateError](outcome.Reason())
				require.True(t, ok, "a *TemplateError")
				require.Equal(t, p.Template, terr.Template)
				require.Equal(t, tt.missing, terr.Missing)
				require.Error(t, terr.Err)
			}
			requireClean(t, outcome, "Ada", "123456", "eve@")
			require.Zero(t, b.srv.connections(t), "the server saw a connection")
		})
	}
}

// The connection's deadline, set from the delivery's, can fire a moment
// before the context's own timer: the reason is the deadline's all the
// same, not a network timeout.
func TestReasonAtTheDeadline(t *testing.T) {
	t.Parallel()
	inner, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err := mail.Failure(pastDeadline{inner}, "connect", os.ErrDeadlineExceeded)
	require.EqualError(t, err, "mail: connect: timed out after the delivery's deadline")
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// pastDeadline is a context whose deadline has passed and whose timer has
// not fired yet.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

func TestDeliverServerAnswers(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name     string
		phase    string
		code     int
		enhanced smtp.EnhancedCode
		kind     delivery.Kind
		reason   string
		command  string
		dcode    string // the reason's delivery code
	}{
		{
			name: "TempFailureAtRcpt", phase: phaseRcpt, code: 451, enhanced: smtp.EnhancedCode{4, 2, 2},
			kind: delivery.KindRetry, reason: "mail: server deferred the recipient: 451 4.2.2", command: "RCPT TO",
		},
		{
			name: "PermFailureAtRcpt", phase: phaseRcpt, code: 550, enhanced: smtp.EnhancedCode{5, 1, 1},
			kind: delivery.KindReject, reason: "mail: server refused the recipient: 550 5.1.1", command: "RCPT TO",
			dcode: delivery.CodeRecipientGone,
		},
		// The address cannot receive mail, for good: the dispatcher
		// suppresses it on the code, as it would on the bounce's report.
		{
			name: "NoSuchDomainAtRcpt", phase: phaseRcpt, code: 550, enhanced: smtp.EnhancedCode{5, 1, 2},
			kind: delivery.KindReject, reason: "mail: server refused the recipient: 550 5.1.2", command: "RCPT TO",
			dcode: delivery.CodeRecipientGone,
		},
		{
			name: "MovedAtRcpt", phase: phaseRcpt, code: 551, enhanced: smtp.EnhancedCode{5, 1, 6},
			kind: delivery.KindReject, reason: "mail: server refused the recipient: 551 5.1.6", command: "RCPT TO",
			dcode: delivery.CodeRecipientGone,
		},
		{
			name: "NullMXAtRcpt", phase: phaseRcpt, code: 556, enhanced: smtp.EnhancedCode{5, 1, 10},
			kind: delivery.KindReject, reason: "mail: server refused the recipient: 556 5.1.10", command: "RCPT TO",
			dcode: delivery.CodeRecipientGone,
		},
		{
			name: "UnknownUserAtData", phase: phaseData, code: 550, enhanced: smtp.EnhancedCode{5, 1, 1},
			kind: delivery.KindReject, reason: "mail: server refused the message: 550 5.1.1", command: "DATA",
			dcode: delivery.CodeRecipientGone,
		},
		// A refusal by policy says nothing of the address: no code, and
		// nothing is suppressed.
		{
			name: "PolicyAtRcpt", phase: phaseRcpt, code: 550, enhanced: smtp.EnhancedCode{5, 7, 1},
			kind: delivery.KindReject, reason: "mail: server refused the recipient: 550 5.7.1", command: "RCPT TO",
		},
		{
			name: "TempFailureAtData", phase: phaseData, code: 451, enhanced: smtp.EnhancedCode{4, 3, 0},
			kind: delivery.KindRetry, reason: "mail: server deferred the message: 451 4.3.0", command: "DATA",
		},
		{
			name: "PermFailureAtData", phase: phaseData, code: 554, enhanced: smtp.EnhancedCode{5, 7, 1},
			kind: delivery.KindReject, reason: "mail: server refused the message: 554 5.7.1", command: "DATA",
		},
		// The sender is the Config's, the same for every request: a refusal
		// of it would kill the whole backlog at once.
		{
			name: "PermFailureAtMail", phase: phaseMail, code: 553, enhanced: smtp.EnhancedCode{5, 7, 1},
			kind: delivery.KindRetry, reason: "mail: server refused the sender: 553 5.7.1", command: "MAIL FROM",
		},
		// So would a server that refuses this client (a blocked address, a
		// Hostname it does not take).
		{
			name: "PermFailureAtEHLO", phase: phaseEHLO, code: 554, enhanced: smtp.EnhancedCode{5, 7, 1},
			kind: delivery.KindRetry, reason: "mail: server refused EHLO: 554 5.7.1", command: "EHLO",
		},
		{
			name: "TempFailureAtMail", phase: phaseMail, code: 421, enhanced: smtp.EnhancedCode{4, 7, 0},
			kind: delivery.KindRetry, reason: "mail: server deferred the sender: 421 4.7.0", command: "MAIL FROM",
		},
		{
			name: "TempFailureAtEHLO", phase: phaseEHLO, code: 421, enhanced: smtp.EnhancedCode{4, 3, 2},
			kind: delivery.KindRetry, reason: "mail: server deferred EHLO: 421 4.3.2", command: "EHLO",
		},
		{
			name: "NoEnhancedCode", phase: phaseRcpt, code: 550, enhanced: smtp.NoEnhancedCode,
			kind: delivery.KindReject, reason: "mail: server refused the recipient: 550", command: "RCPT TO",
		},
		{
			name: "NoEnhancedCodeTemporary", phase: phaseRcpt, code: 450, enhanced: smtp.NoEnhancedCode,
			kind: delivery.KindRetry, reason: "mail: server deferred the recipient: 450", command: "RCPT TO",
		},
		// RFC 3463 has the code and the enhanced code agree; when they do
		// not, the request is tried again rather than lost.
		{
			name: "PermanentCodeTemporaryEnhancedCode", phase: phaseRcpt, code: 552, enhanced: smtp.EnhancedCode{4, 2, 2},
			kind: delivery.KindRetry, reason: "mail: server deferred the recipient: 552 4.2.2", command: "RCPT TO",
		},
		{
			name: "TemporaryCodePermanentEnhancedCode", phase: phaseData, code: 452, enhanced: smtp.EnhancedCode{5, 3, 4},
			kind: delivery.KindRetry, reason: "mail: server deferred the message: 452 5.3.4", command: "DATA",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, serverOptions{})
			// The server's text quotes the recipient, as real servers do.
			b.srv.failAt(tt.phase, tt.code, tt.enhanced, "<ada@example.org>: Ada Lovelace cannot take mail now")

			outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
			require.Equal(t, tt.kind, outcome.Kind(), "%v", outcome)
			require.EqualError(t, outcome.Reason(), tt.reason)
			rerr, ok := errors.AsType[*mail.ReplyError](outcome.Reason())
			require.True(t, ok, "a *ReplyError")
			require.Equal(t, tt.command, rerr.Command)
			require.Equal(t, tt.code, rerr.Code)
			if tt.enhanced == smtp.NoEnhancedCode {
				require.Empty(t, rerr.EnhancedCode)
			} else {
				require.Equal(t, fmt.Sprintf("%d.%d.%d", tt.enhanced[0], tt.enhanced[1], tt.enhanced[2]), rerr.EnhancedCode)
			}
			require.Equal(t, strings.Contains(tt.reason, "deferred"), rerr.Temporary())
			require.Equal(t, strings.Contains(tt.reason, "refused"), rerr.Permanent())
			require.Equal(t, tt.dcode, delivery.CodeOf(outcome.Reason()))
			requireClean(t, outcome, "cannot take mail", "Ada", "123456")
			require.Empty(t, b.srv.accepted())
		})
	}

	t.Run("ServerUnreachable", func(t *testing.T) {
		t.Parallel()
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := lis.Addr().String()
		require.NoError(t, lis.Close())
		mailer, err := mail.New(&mail.Config{Addr: addr, From: testFrom, Templates: testTemplates()})
		require.NoError(t, err)

		outcome := mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.EqualError(t, outcome.Reason(), "mail: connect: dial: connection refused")
		require.NotContains(t, outcome.String(), addr)
	})
}

func TestDeliverAuth(t *testing.T) {
	t.Parallel()

	withCredentials := func(password string) func(*mail.Config) {
		return func(cfg *mail.Config) {
			cfg.Username, cfg.Password = testUsername, password
		}
	}

	// With a password, the mechanism is PLAIN, or LOGIN when the server
	// offers no PLAIN. A refusal of the credentials is no fault of the
	// request: it goes out once they are fixed.
	passwords := []struct {
		name     string
		offered  []string
		password string
		want     string // the mechanism used
	}{
		{name: "PLAIN", offered: []string{sasl.Plain}, password: testPassword, want: sasl.Plain},
		{name: "PLAINBeforeLOGIN", offered: []string{sasl.Login, sasl.Plain}, password: testPassword, want: sasl.Plain},
		{name: "LOGIN", offered: []string{sasl.Login}, password: testPassword, want: sasl.Login},
		{name: "LOGINBesideXOAUTH2", offered: []string{"XOAUTH2", sasl.Login}, password: testPassword, want: sasl.Login},
		{name: "PLAINWrongPassword", offered: []string{sasl.Plain}, password: "not-the-password", want: sasl.Plain},
		{name: "LOGINWrongPassword", offered: []string{sasl.Login}, password: "not-the-password", want: sasl.Login},
	}
	for _, tt := range passwords {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, serverOptions{username: testUsername, password: testPassword, mechanisms: tt.offered},
				withCredentials(tt.password))

			outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
			ok := tt.password == testPassword
			require.Equal(t, []authAttempt{{Mechanism: tt.want, Secret: tt.password, OK: ok}}, b.srv.authAttempts())
			if !ok {
				require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
				require.EqualError(t, outcome.Reason(), "mail: server refused the credentials: 535 5.7.8")
				requireClean(t, outcome, tt.password, testUsername)
				require.Empty(t, b.srv.received())
				return
			}
			require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
			got := b.srv.accepted()
			require.Len(t, got, 1)
			require.Equal(t, testUsername, got[0].Username)
		})
	}

	t.Run("ServerRequiresItAndNoneConfigured", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{username: testUsername, password: testPassword})

		// The Config lacks the credentials: every request would die of it,
		// and each goes out once they are set.
		outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.EqualError(t, outcome.Reason(), "mail: server refused the sender: 502 5.7.0")
	})

	t.Run("ServerDoesNotOfferIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{}, withCredentials(testPassword))

		outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), mail.ErrNoAuthMechanism)
		require.Empty(t, b.srv.received())
	})

	// Credentials never cross a connection that is neither TLS nor
	// loopback: the server offers AUTH, but no STARTTLS, which the default
	// requires of a server that is not on loopback.
	t.Run("NotInTheClearToARemoteServer", func(t *testing.T) {
		t.Parallel()
		ip := nonLoopbackIP(t)
		b := setup(t, serverOptions{listen: net.JoinHostPort(ip, "0"), username: testUsername, password: testPassword},
			withCredentials(testPassword))

		outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), mail.ErrNoStartTLS)
		require.Empty(t, b.srv.authAttempts())
		require.Empty(t, b.srv.received())
	})

	// Over TLS, STARTTLS or implicit, the credentials go to a server that
	// is not on loopback.
	for _, tt := range []struct {
		name string
		opts serverOptions
		mode mail.TLSMode
	}{
		{name: "OverSTARTTLSToARemoteServer", opts: serverOptions{startTLS: true}},
		{name: "OverImplicitTLSToARemoteServer", opts: serverOptions{implicitTLS: true}, mode: mail.TLSImplicit},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := tt.opts
			opts.listen = net.JoinHostPort(nonLoopbackIP(t), "0")
			opts.username, opts.password = testUsername, testPassword
			b := setup(t, opts, withCredentials(testPassword), func(cfg *mail.Config) {
				cfg.TLS = tt.mode
				cfg.TLSConfig = &tls.Config{RootCAs: testCertificate().pool, ServerName: "localhost"}
			})

			outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
			require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
			got := b.srv.accepted()
			require.Len(t, got, 1)
			require.True(t, got[0].TLS)
			require.Equal(t, testUsername, got[0].Username)
		})
	}
}

// XOAUTH2 sends Config.Username and a token from Config.TokenFunc, which is
// called with Deliver's context for every connection.
func TestDeliverXOAUTH2(t *testing.T) {
	t.Parallel()

	// tokens is a TokenFunc that hands out "token-1", "token-2", ...,
	// and the server's check that accepts the last one only, as if each
	// expired when the next was made.
	type tokens struct {
		mu     sync.Mutex
		issued int
	}
	next := func(ts *tokens) func(context.Context) (string, error) {
		return func(context.Context) (string, error) {
			ts.mu.Lock()
			defer ts.mu.Unlock()
			ts.issued++
			return fmt.Sprintf("token-%d", ts.issued), nil
		}
	}
	latest := func(ts *tokens) func(string) bool {
		return func(token string) bool {
			ts.mu.Lock()
			defer ts.mu.Unlock()
			return token == fmt.Sprintf("token-%d", ts.issued)
		}
	}
	withToken := func(f func(context.Context) (string, error)) func(*mail.Config) {
		return func(cfg *mail.Config) {
			cfg.Username, cfg.TokenFunc = testUsername, f
		}
	}
	offering := func(tokenOK func(string) bool, mechanisms ...string) serverOptions {
		return serverOptions{username: testUsername, mechanisms: mechanisms, tokenOK: tokenOK}
	}

	t.Run("Delivers", func(t *testing.T) {
		t.Parallel()
		type key struct{}
		var seen []any
		b := setup(t, offering(func(token string) bool { return token == "ya29.token" }, sasl.Plain, "XOAUTH2"),
			withToken(func(ctx context.Context) (string, error) {
				seen = append(seen, ctx.Value(key{}))
				return "ya29.token", nil
			}))

		ctx := context.WithValue(t.Context(), key{}, "the delivery's")
		outcome := b.mailer.Deliver(ctx, newPending("welcome", welcomeData()))
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		require.Equal(t, []any{"the delivery's"}, seen, "TokenFunc's context")
		require.Equal(t, []authAttempt{{Mechanism: "XOAUTH2", Secret: "ya29.token", OK: true}}, b.srv.authAttempts())
		got := b.srv.accepted()
		require.Len(t, got, 1)
		require.Equal(t, testUsername, got[0].Username)
	})

	// Each connection gets a token of its own: one that expired since the
	// last connection is never sent again.
	t.Run("FreshTokenPerConnection", func(t *testing.T) {
		t.Parallel()
		ts := &tokens{}
		b := setup(t, offering(latest(ts), "XOAUTH2"), withToken(next(ts)), func(cfg *mail.Config) {
			cfg.MaxIdleConns = -1 // a connection per Deliver
		})

		for range 2 {
			outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
			require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
		}
		require.Equal(t, []authAttempt{
			{Mechanism: "XOAUTH2", Secret: "token-1", OK: true},
			{Mechanism: "XOAUTH2", Secret: "token-2", OK: true},
		}, b.srv.authAttempts())
		require.Equal(t, 2, b.srv.connections(t))
	})

	// The server answers a refused token with a challenge, then a 535
	// once the client sent its empty response.
	t.Run("RefusedToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t, offering(nil, "XOAUTH2"), withToken(func(context.Context) (string, error) {
			return "ya29.expired-token", nil
		}))

		outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.EqualError(t, outcome.Reason(), "mail: server refused the credentials: 535 5.7.8")
		requireClean(t, outcome, "ya29.expired-token", testUsername)
		require.Equal(t, []authAttempt{{Mechanism: "XOAUTH2", Secret: "ya29.expired-token"}}, b.srv.authAttempts())
		require.Empty(t, b.srv.received())
	})

	t.Run("TokenFuncFails", func(t *testing.T) {
		t.Parallel()
		errToken := errors.New("oauth2: invalid_grant for refresh token 1//0refresh-secret")
		b := setup(t, offering(nil, "XOAUTH2"), withToken(func(context.Context) (string, error) {
			return "", errToken
		}))

		outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.EqualError(t, outcome.Reason(), "mail: AUTH: Config.TokenFunc failed")
		require.ErrorIs(t, outcome.Reason(), errToken)
		requireClean(t, outcome, "refresh-secret")
		require.Empty(t, b.srv.authAttempts())
		require.Empty(t, b.srv.received())
	})

	t.Run("TokenFuncOutlastsTheDeadline", func(t *testing.T) {
		t.Parallel()
		b := setup(t, offering(nil, "XOAUTH2"), withToken(func(ctx context.Context) (string, error) {
			<-ctx.Done()
			return "", ctx.Err()
		}))
		// Long enough to reach AUTH on a loaded machine: the wait must be
		// TokenFunc's.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()

		outcome := b.mailer.Deliver(ctx, newPending("welcome", welcomeData()))
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), context.DeadlineExceeded)
		require.EqualError(t, outcome.Reason(), "mail: AUTH: timed out after the delivery's deadline")
	})

	t.Run("NotOffered", func(t *testing.T) {
		t.Parallel()
		ts := &tokens{}
		b := setup(t, serverOptions{username: testUsername, password: testPassword, mechanisms: []string{sasl.Plain, sasl.Login}},
			withToken(next(ts)))

		outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), mail.ErrNoAuthMechanism)
		require.Zero(t, ts.issued, "TokenFunc was called")
		require.Empty(t, b.srv.authAttempts())
	})
}

// nonLoopbackIP returns an address of this machine that is not loopback
// (its traffic still never leaves the machine), and fails the test when
// there is none.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatal("the remote-server cases need an IPv4 address of this machine that is not loopback; it has none")
	return ""
}

func TestDeliverTLS(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		opts   serverOptions
		remote bool // the server listens on an address that is not loopback
		mode   mail.TLSMode
		tls    bool  // the message arrived over TLS
		target error // the Retry's reason when not delivered
	}{
		{name: "DefaultToARemoteServer", opts: serverOptions{startTLS: true}, remote: true, tls: true},
		{name: "DefaultToARemoteServerWithoutSTARTTLS", opts: serverOptions{}, remote: true, target: mail.ErrNoStartTLS},
		{name: "DefaultOnLoopback", opts: serverOptions{}},
		{name: "DefaultOnLoopbackWhenOffered", opts: serverOptions{startTLS: true}},
		{name: "RequiredWhenOffered", opts: serverOptions{startTLS: true}, mode: mail.TLSRequired, tls: true},
		{name: "RequiredWhenNotOffered", opts: serverOptions{}, mode: mail.TLSRequired, target: mail.ErrNoStartTLS},
		{name: "RequiredToARemoteServerWhenNotOffered", opts: serverOptions{}, remote: true, mode: mail.TLSRequired, target: mail.ErrNoStartTLS},
		{name: "NoneWhenOffered", opts: serverOptions{startTLS: true}, mode: mail.TLSNone},
		{name: "Implicit", opts: serverOptions{implicitTLS: true}, mode: mail.TLSImplicit, tls: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := tt.opts
			if tt.remote {
				opts.listen = net.JoinHostPort(nonLoopbackIP(t), "0")
			}
			b := setup(t, opts, func(cfg *mail.Config) {
				cfg.TLS = tt.mode
				if tt.mode != mail.TLSNone {
					cfg.TLSConfig = &tls.Config{RootCAs: testCertificate().pool, ServerName: "localhost"}
				}
			})

			outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
			if tt.target != nil {
				require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
				require.ErrorIs(t, outcome.Reason(), tt.target)
				require.Empty(t, b.srv.received())
				return
			}
			require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
			got := b.srv.accepted()
			require.Len(t, got, 1)
			require.Equal(t, tt.tls, got[0].TLS)
		})
	}

	t.Run("UntrustedCertificate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{startTLS: true}, func(cfg *mail.Config) {
			cfg.TLS = mail.TLSRequired
		})

		outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.EqualError(t, outcome.Reason(), "mail: STARTTLS: tls handshake: certificate not trusted")
		require.Empty(t, b.srv.received())
	})
}

func TestDeliverContext(t *testing.T) {
	t.Parallel()

	t.Run("Cancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{})
		ctx, cancel := context.WithCancel(t.Context())
		cancel()

		outcome := b.mailer.Deliver(ctx, newPending("welcome", welcomeData()))
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), context.Canceled)
		require.EqualError(t, outcome.Reason(), "mail: connect: cancelled")
		require.Empty(t, b.srv.received())
	})

	t.Run("CancelledMidExchange", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{})
		ctx, cancel := context.WithCancel(t.Context())
		b.srv.whenStalled(t, phaseRcpt, cancel)

		outcome := b.mailer.Deliver(ctx, newPending("welcome", welcomeData()))
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), context.Canceled)
		require.EqualError(t, outcome.Reason(), "mail: RCPT TO: cancelled")
	})

	stalls := []string{phaseEHLO, phaseData}
	for _, phase := range stalls {
		t.Run("StalledAt"+phase+"PastTheDeadline", func(t *testing.T) {
			t.Parallel()
			b := setup(t, serverOptions{})
			b.srv.stallAt(phase)
			// Long enough to reach the stall on a loaded machine: the wait
			// must be the server's.
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()

			start := time.Now()
			outcome := b.mailer.Deliver(ctx, newPending("welcome", welcomeData()))
			require.Less(t, time.Since(start), 5*time.Second)
			require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
			require.ErrorIs(t, outcome.Reason(), context.DeadlineExceeded)
			require.Contains(t, outcome.Reason().Error(), "timed out after the delivery's deadline")
		})
	}

	t.Run("StalledPastConfigTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{}, func(cfg *mail.Config) {
			cfg.Timeout = 200 * time.Millisecond
		})
		b.srv.stallAt(phaseData)

		start := time.Now()
		outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
		require.Less(t, time.Since(start), 5*time.Second)
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), context.DeadlineExceeded)
		// The step is DATA, unless a loaded machine took the 200ms before
		// the exchange got there.
		require.Regexp(t, `^mail: [A-Za-z ]+: timed out after Config\.Timeout \(200ms\)$`, outcome.Reason().Error())
	})
}
