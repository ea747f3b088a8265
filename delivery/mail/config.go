package mail

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidings-go/tidings/delivery/internal/render"
)

// TimeoutDefault is the default of [Config.Timeout]: how long one
// Deliver's exchange with the server may take.
const TimeoutDefault = 30 * time.Second

// MaxIdleConnsDefault is the default of [Config.MaxIdleConns]: how many
// connections Deliver keeps open between deliveries.
const MaxIdleConnsDefault = 4

// IdleTimeoutDefault is the default of [Config.IdleTimeout]: how long a
// kept connection may stay unused before it is closed.
const IdleTimeoutDefault = 2 * time.Second

// TLSMode says whether and how the connection to the server is encrypted.
// The zero value is [TLSDefault].
type TLSMode int

const (
	// TLSDefault, the zero value and default, is [TLSRequired] for a
	// server that is not on a loopback address and [TLSNone] for one that
	// is: traffic to this machine never leaves it, and a relay or a test
	// server on it seldom has a certificate. The address is the one
	// dialled, not the name in Config.Addr. Set TLSRequired for a server
	// on this machine that wants STARTTLS.
	TLSDefault TLSMode = iota
	// TLSRequired upgrades the connection with STARTTLS, and answers
	// [delivery.Retry] with [ErrNoStartTLS] when the server does not offer
	// it: a server can be fixed, and a man in the middle can strip the
	// offer. Use it, or the default, for a provider's submission port
	// (587).
	TLSRequired
	// TLSImplicit speaks TLS from the first byte (SMTPS, usually port 465).
	TLSImplicit
	// TLSNone never encrypts: for a relay on the same machine or a test
	// server. New refuses it together with credentials unless Addr is a
	// loopback address.
	TLSNone
)

// String returns "default", "required", "implicit", "none", or
// "TLSMode(n)" for a value outside those.
func (m TLSMode) String() string {
	switch m {
	case TLSDefault:
		return "default"
	case TLSRequired:
		return "required"
	case TLSImplicit:
		return "implicit"
	case TLSNone:
		return "none"
	default:
		return "TLSMode(" + strconv.Itoa(int(m)) + ")"
	}
}

// Template is one message the application can send, registered by name
// in [Config.Templates] and selected by [delivery.Pending.Template].
//
// Each field is template source, rendered with the request's
// [delivery.Pending.Data] as dot. Subject and Text are [text/template]
// sources, HTML is an [html/template] source, so values are escaped in the
// HTML body only. No functions beyond the template packages' own are
// defined.
//
// A reference to a value the request does not carry fails the delivery
// with a [*TemplateError] that names it, instead of printing "<no value>".
// That holds inside {{if}} and {{with}} too: a request carries an optional
// value as null or "" rather than leaving it out. A null prints as
// "<no value>" in Subject and Text (and as nothing in HTML), so test an
// optional value with {{if}} or {{with}} before printing it.
type Template struct {
	// Subject is the subject line; required. Line breaks and other control
	// characters in the rendered subject become spaces.
	Subject string
	// Text is the text/plain body; optional when HTML is set.
	Text string
	// HTML is the text/html body; optional when Text is set. With both,
	// the message is multipart/alternative and the reader's client picks.
	HTML string
}

// Config configures a [Delivery]. Addr, From and Templates are required;
// the zero value of every other field means its default. New copies what
// it needs: changing a Config after New has no effect on the Delivery.
type Config struct {
	// Addr is the SMTP server as host:port, such as "smtp.resend.com:587"
	// or "localhost:25". Required.
	Addr string

	// Username and Password are the credentials for AUTH: PLAIN when the
	// server offers it, else LOGIN. Both empty (the default) means no AUTH,
	// unless TokenFunc is set; setting one requires the other. They are
	// sent only over TLS or to a loopback address, and never appear in a
	// reason.
	Username string
	Password string

	// TokenFunc returns an OAuth2 access token for Username, for AUTH
	// XOAUTH2, the mechanism of Gmail and Microsoft 365. Nil (the
	// default) means Username and Password; setting it requires Username
	// (the mailbox, such as "no-reply@example.com") and no Password.
	//
	// It is called with Deliver's context each time a connection is
	// opened, after the server offered XOAUTH2, so it should return a
	// cached token while that is fresh and a new one before it expires,
	// as an oauth2.TokenSource does. It must be safe for concurrent use.
	// An error is a [delivery.Retry] whose reason says that TokenFunc
	// failed and wraps the error, without its text, which can quote the
	// token endpoint's answer; log it in TokenFunc to see it. The token
	// is sent and checked like a password, and never appears in a
	// reason.
	TokenFunc func(ctx context.Context) (string, error)

	// TLS says whether and how the connection is encrypted. The zero value
	// is TLSDefault: STARTTLS is required unless the server is on a
	// loopback address.
	TLS TLSMode

	// TLSConfig configures the TLS client for STARTTLS and TLSImplicit.
	// Nil means the defaults of [crypto/tls] with the host of Addr as the
	// server name; a given config is cloned, and its ServerName set to that
	// host when empty.
	TLSConfig *tls.Config

	// From is the sender, for the From header and MAIL FROM, such as
	// "Tidings <no-reply@example.com>". Required; parsed with
	// [net/mail.ParseAddress].
	From string

	// Hostname names this client in EHLO and is the right-hand side of the
	// Message-ID. The default is the domain of From.
	Hostname string

	// IdempotencyHeader is the name of a header that also carries the
	// request's id, for a provider that deduplicates on it, such as
	// "Resend-Idempotency-Key". Empty (the default) means no such header;
	// the Message-ID, derived from the same id, is always set.
	IdempotencyHeader string

	// Timeout bounds one Deliver's exchange with the server, from the
	// dial (or MAIL FROM, on a kept connection) to the server's answer to
	// the message, on top of the deadline of the context Deliver gets. A
	// QUIT that follows takes 2 seconds at most. Zero means
	// TimeoutDefault; negative is an error.
	Timeout time.Duration

	// MaxIdleConns is how many connections Deliver keeps open after a
	// message, for the next deliveries to send on without dialling,
	// greeting, STARTTLS and AUTH again. Zero means MaxIdleConnsDefault;
	// negative means none: every Deliver opens and closes its own. A kept
	// connection is closed after IdleTimeout unused or by
	// [Delivery.Close], and is not kept again once 5 minutes old; one
	// that the server closed meanwhile costs a new connection, never the
	// message. Connections in use are as many as concurrent calls of
	// Deliver: with more of those than MaxIdleConns, the surplus
	// connections are closed after their message.
	MaxIdleConns int

	// IdleTimeout is how long a kept connection may stay unused before it
	// is closed. Zero means IdleTimeoutDefault, 2 seconds, as Postfix
	// keeps its own (smtp_connection_cache_time_limit): long enough for
	// the requests of a batch to share connections, short enough not to
	// hold a server's connection slots between batches. Negative is an
	// error.
	IdleTimeout time.Duration

	// Templates holds the messages the application can send, by name. At
	// least one is required. New parses each once; a template that does not
	// parse is an error of New, naming it.
	Templates map[string]Template
}

// headerNamePattern is an RFC 5322 field name: printable ASCII but ':'.
var headerNamePattern = regexp.MustCompile(`^[!-9;-~]+$`)

// hostnamePattern is a domain name of letters, digits and hyphens, or an
// address literal such as [192.0.2.1].
var hostnamePattern = regexp.MustCompile(`^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Za-z:.]+\])$`)

// ownHeaders are the headers a message always has; IdempotencyHeader may
// not be one of them.
var ownHeaders = []string{
	"from", "to", "subject", "date", "message-id", "mime-version",
	"content-type", "content-transfer-encoding",
}

// settings is a validated Config with its defaults applied.
type settings struct {
	addr       string
	host       string // of addr
	username   string
	password   string
	tokenFunc  func(context.Context) (string, error)
	tlsMode    TLSMode
	tlsConfig  *tls.Config
	from       *mail.Address
	hostname   string
	idemHeader string
	timeout    time.Duration
	maxIdle    int
	idleTime   time.Duration
	templates  map[string]*parsedTemplate
}

// parsedTemplate is a Template parsed once, in New. Templates are safe for
// concurrent execution.
type parsedTemplate struct {
	subject *render.Template
	text    *render.Template // nil when the Template has no Text
	html    *render.Template // nil when the Template has no HTML
}

// validate checks cfg and returns its settings, or every problem found,
// joined, each naming its field.
func (cfg *Config) validate() (*settings, error) {
	if cfg == nil {
		return nil, errors.New("mail: Config is nil: Addr, From and Templates are required")
	}
	s := &settings{
		addr:       cfg.Addr,
		username:   cfg.Username,
		password:   cfg.Password,
		tokenFunc:  cfg.TokenFunc,
		tlsMode:    cfg.TLS,
		idemHeader: cfg.IdempotencyHeader,
		timeout:    cfg.Timeout,
	}
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("mail: "+format, args...))
	}

	if cfg.Addr == "" {
		fail("Config.Addr is required")
	} else if host, port, err := net.SplitHostPort(cfg.Addr); err != nil || host == "" || port == "" {
		fail("Config.Addr %q is not host:port", cfg.Addr)
	} else {
		s.host = host
	}

	switch {
	case cfg.TokenFunc != nil && cfg.Password != "":
		fail("Config.Password and Config.TokenFunc are both set: set one")
	case cfg.TokenFunc != nil && cfg.Username == "":
		fail("Config.TokenFunc is set without Config.Username, the mailbox the token is for")
	case cfg.TokenFunc == nil && (cfg.Username == "") != (cfg.Password == ""):
		fail("Config.Username and Config.Password must be set together")
	}

	switch cfg.TLS {
	case TLSDefault, TLSRequired, TLSImplicit:
		if cfg.TLSConfig != nil {
			s.tlsConfig = cfg.TLSConfig.Clone()
		} else {
			s.tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if s.tlsConfig.ServerName == "" {
			s.tlsConfig.ServerName = s.host
		}
	case TLSNone:
		if cfg.TLSConfig != nil {
			fail("Config.TLSConfig is set but Config.TLS is TLSNone")
		}
		if cfg.Username != "" && s.host != "" && !isLoopbackHost(s.host) {
			fail("Config.TLS is TLSNone and Config.Addr is not a loopback address: refusing to send the credentials in the clear")
		}
	default:
		fail("Config.TLS is %s, not one of the TLSMode constants", cfg.TLS)
	}

	if cfg.From == "" {
		fail("Config.From is required")
	} else if from, err := mail.ParseAddress(cfg.From); err != nil {
		fail("Config.From %q is not an email address: %v", cfg.From, err)
	} else {
		s.from = from
	}

	s.hostname = cfg.Hostname
	if s.hostname == "" && s.from != nil {
		s.hostname = s.from.Address[strings.LastIndexByte(s.from.Address, '@')+1:]
		if !hostnamePattern.MatchString(s.hostname) {
			fail("Config.Hostname is empty and the domain of Config.From, %q, is not a host name: set Hostname", s.hostname)
		}
	} else if s.hostname != "" && !hostnamePattern.MatchString(s.hostname) {
		fail("Config.Hostname %q is not a host name", s.hostname)
	}

	if h := cfg.IdempotencyHeader; h != "" {
		switch {
		case !headerNamePattern.MatchString(h):
			fail("Config.IdempotencyHeader %q is not a header name", h)
		case slices.Contains(ownHeaders, strings.ToLower(h)):
			fail("Config.IdempotencyHeader %q is a header the message sets itself", h)
		}
	}

	switch {
	case cfg.Timeout < 0:
		fail("Config.Timeout is negative: %s", cfg.Timeout)
	case cfg.Timeout == 0:
		s.timeout = TimeoutDefault
	}

	switch {
	case cfg.MaxIdleConns == 0:
		s.maxIdle = MaxIdleConnsDefault
	case cfg.MaxIdleConns > 0:
		s.maxIdle = cfg.MaxIdleConns
	}
	switch {
	case cfg.IdleTimeout < 0:
		fail("Config.IdleTimeout is negative: %s", cfg.IdleTimeout)
	case cfg.IdleTimeout == 0:
		s.idleTime = IdleTimeoutDefault
	default:
		s.idleTime = cfg.IdleTimeout
	}

	if len(cfg.Templates) == 0 {
		fail("Config.Templates is empty: register at least one template")
	}
	s.templates = make(map[string]*parsedTemplate, len(cfg.Templates))
	names := make([]string, 0, len(cfg.Templates))
	for name := range cfg.Templates {
		names = append(names, name)
	}
	slices.Sort(names) // errors in a stable order
	for _, name := range names {
		t, err := parseTemplate(name, cfg.Templates[name])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.templates[name] = t
	}

	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// parseTemplate parses the three sources of t, with missing keys as
// errors, and escapes the HTML body now, so that an escaping error is an
// error of New and not of a delivery.
func parseTemplate(name string, t Template) (*parsedTemplate, error) {
	field := fmt.Sprintf("Config.Templates[%q]", name)
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("mail: "+field+format, args...))
	}

	if name == "" {
		fail(": a template's name is empty")
	}
	if t.Subject == "" {
		fail(".Subject is empty")
	}
	if t.Text == "" && t.HTML == "" {
		fail(" has neither Text nor HTML: at least one body is required")
	}

	p := &parsedTemplate{}
	var err error
	if t.Subject != "" {
		if p.subject, err = render.Parse(name, "subject", t.Subject); err != nil {
			fail(".Subject: %v", err)
		}
	}
	if t.Text != "" {
		if p.text, err = render.Parse(name, "text body", t.Text); err != nil {
			fail(".Text: %v", err)
		}
	}
	if t.HTML != "" {
		if p.html, err = render.ParseHTML(name, "html body", t.HTML); err != nil {
			fail(".HTML: %v", err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// isLoopbackHost reports whether host names this machine: "localhost" or
// a loopback IP address.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
