package mail_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery/mail"
)

// token is a Config.TokenFunc that New accepts; it is never called.
func token(context.Context) (string, error) {
	return "", errors.New("token called")
}

// validConfig returns a Config New accepts.
func validConfig() *mail.Config {
	return &mail.Config{
		Addr: "127.0.0.1:2525",
		From: testFrom,
		Templates: map[string]mail.Template{
			"welcome": {Subject: "Welcome, {{.name}}", Text: "Hello {{.name}}", HTML: "<p>Hello {{.name}}</p>"},
		},
	}
}

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()
		for name, configure := range map[string]func(*mail.Config){
			"Minimal":              func(*mail.Config) {},
			"Credentials":          func(c *mail.Config) { c.Username, c.Password = "u", "p" },
			"CredentialsLocalhost": func(c *mail.Config) { c.Addr, c.TLS, c.Username, c.Password = "localhost:25", mail.TLSNone, "u", "p" },
			"CredentialsRemoteTLS": func(c *mail.Config) {
				c.Addr, c.TLS, c.Username, c.Password = "smtp.example.com:587", mail.TLSRequired, "u", "p"
			},
			"TokenFunc": func(c *mail.Config) {
				c.Addr, c.Username, c.TokenFunc = "smtp.gmail.com:587", "no-reply@example.com", token
			},
			"Implicit":          func(c *mail.Config) { c.Addr, c.TLS = "smtp.example.com:465", mail.TLSImplicit },
			"ServiceName":       func(c *mail.Config) { c.Addr = "smtp.example.com:submission" },
			"Hostname":          func(c *mail.Config) { c.Hostname = "mailer-1.example.com" },
			"HostnameLiteral":   func(c *mail.Config) { c.Hostname = "[192.0.2.1]" },
			"IdempotencyHeader": func(c *mail.Config) { c.IdempotencyHeader = "Resend-Idempotency-Key" },
			"Timeout":           func(c *mail.Config) { c.Timeout = time.Second },
			"MaxIdleConns":      func(c *mail.Config) { c.MaxIdleConns = 16 },
			"NoKeptConnections": func(c *mail.Config) { c.MaxIdleConns = -1 },
			"IdleTimeout":       func(c *mail.Config) { c.IdleTimeout = time.Minute },
			"AddressOnlyFrom":   func(c *mail.Config) { c.From = "no-reply@example.com" },
			"TextOnlyTemplate":  func(c *mail.Config) { c.Templates["t"] = mail.Template{Subject: "s", Text: "t"} },
			"HTMLOnlyTemplate":  func(c *mail.Config) { c.Templates["h"] = mail.Template{Subject: "s", HTML: "<p>h</p>"} },
			"TLSConfigDefault":  func(c *mail.Config) { c.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS13} },
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				cfg := validConfig()
				configure(cfg)
				d, err := mail.New(cfg)
				require.NoError(t, err)
				require.NotNil(t, d)
			})
		}
	})

	t.Run("Nil", func(t *testing.T) {
		t.Parallel()
		d, err := mail.New(nil)
		require.Nil(t, d)
		require.EqualError(t, err, "mail: Config is nil: Addr, From and Templates are required")
	})

	tests := []struct {
		name      string
		configure func(*mail.Config)
		want      string // the error
	}{
		{"NoAddr", func(c *mail.Config) { c.Addr = "" }, "mail: Config.Addr is required"},
		{"AddrWithoutPort", func(c *mail.Config) { c.Addr = "smtp.example.com" }, `mail: Config.Addr "smtp.example.com" is not host:port`},
		{"AddrWithoutHost", func(c *mail.Config) { c.Addr = ":25" }, `mail: Config.Addr ":25" is not host:port`},
		{"UsernameOnly", func(c *mail.Config) { c.Username = "u" }, "mail: Config.Username and Config.Password must be set together"},
		{"PasswordOnly", func(c *mail.Config) { c.Password = "p" }, "mail: Config.Username and Config.Password must be set together"},
		{
			"CredentialsInTheClear",
			func(c *mail.Config) {
				c.Addr, c.TLS, c.Username, c.Password = "smtp.example.com:25", mail.TLSNone, "u", "p"
			},
			"mail: Config.TLS is TLSNone and Config.Addr is not a loopback address: refusing to send the credentials in the clear",
		},
		{
			"TokenInTheClear",
			func(c *mail.Config) {
				c.Addr, c.TLS, c.Username, c.TokenFunc = "smtp.example.com:25", mail.TLSNone, "u", token
			},
			"mail: Config.TLS is TLSNone and Config.Addr is not a loopback address: refusing to send the credentials in the clear",
		},
		{
			"TokenFuncAndPassword",
			func(c *mail.Config) { c.Username, c.Password, c.TokenFunc = "u", "p", token },
			"mail: Config.Password and Config.TokenFunc are both set: set one",
		},
		{
			"TokenFuncWithoutUsername",
			func(c *mail.Config) { c.TokenFunc = token },
			"mail: Config.TokenFunc is set without Config.Username, the mailbox the token is for",
		},
		{"UnknownTLSMode", func(c *mail.Config) { c.TLS = mail.TLSMode(9) }, "mail: Config.TLS is TLSMode(9), not one of the TLSMode constants"},
		{
			"TLSConfigWithoutTLS",
			func(c *mail.Config) { c.TLS, c.TLSConfig = mail.TLSNone, &tls.Config{} },
			"mail: Config.TLSConfig is set but Config.TLS is TLSNone",
		},
		{"NoFrom", func(c *mail.Config) { c.From = "" }, "mail: Config.From is required"},
		{"InvalidFrom", func(c *mail.Config) { c.From = "no reply" }, `mail: Config.From "no reply" is not an email address: mail: no angle-addr`},
		{
			"FromDomainIsNoHostname",
			func(c *mail.Config) { c.From = "no-reply@exämple.com" },
			`mail: Config.Hostname is empty and the domain of Config.From, "exämple.com", is not a host name: set Hostname`,
		},
		{"InvalidHostname", func(c *mail.Config) { c.Hostname = "mail host" }, `mail: Config.Hostname "mail host" is not a host name`},
		{"HostnameWithLineBreak", func(c *mail.Config) { c.Hostname = "a.example\r\nRCPT TO:<x@y>" }, `mail: Config.Hostname "a.example\r\nRCPT TO:<x@y>" is not a host name`},
		{"InvalidHeader", func(c *mail.Config) { c.IdempotencyHeader = "Idempotency Key:" }, `mail: Config.IdempotencyHeader "Idempotency Key:" is not a header name`},
		{"OwnHeader", func(c *mail.Config) { c.IdempotencyHeader = "message-id" }, `mail: Config.IdempotencyHeader "message-id" is a header the message sets itself`},
		{"NegativeTimeout", func(c *mail.Config) { c.Timeout = -time.Second }, "mail: Config.Timeout is negative: -1s"},
		{"NegativeIdleTimeout", func(c *mail.Config) { c.IdleTimeout = -time.Second }, "mail: Config.IdleTimeout is negative: -1s"},
		{"NoTemplates", func(c *mail.Config) { c.Templates = nil }, "mail: Config.Templates is empty: register at least one template"},
		{
			"EmptyTemplateName",
			func(c *mail.Config) { c.Templates[""] = mail.Template{Subject: "s", Text: "t"} },
			`mail: Config.Templates[""]: a template's name is empty`,
		},
		{
			"NoSubject",
			func(c *mail.Config) { c.Templates["welcome"] = mail.Template{Text: "t"} },
			`mail: Config.Templates["welcome"].Subject is empty`,
		},
		{
			"NoBody",
			func(c *mail.Config) { c.Templates["welcome"] = mail.Template{Subject: "s"} },
			`mail: Config.Templates["welcome"] has neither Text nor HTML: at least one body is required`,
		},
		{
			"SubjectDoesNotParse",
			func(c *mail.Config) { c.Templates["welcome"] = mail.Template{Subject: "{{.name", Text: "t"} },
			`mail: Config.Templates["welcome"].Subject: template: welcome:1: unclosed action`,
		},
		{
			"TextDoesNotParse",
			func(c *mail.Config) { c.Templates["welcome"] = mail.Template{Subject: "s", Text: "{{if .x}}"} },
			`mail: Config.Templates["welcome"].Text: template: welcome:1: unexpected EOF`,
		},
		{
			"HTMLDoesNotParse",
			func(c *mail.Config) { c.Templates["welcome"] = mail.Template{Subject: "s", HTML: "{{end}}"} },
			`mail: Config.Templates["welcome"].HTML: template: welcome:1: unexpected {{end}}`,
		},
		{
			"HTMLDoesNotEscape",
			func(c *mail.Config) {
				c.Templates["welcome"] = mail.Template{Subject: "s", HTML: `{{if .x}}<a href="{{end}}">link</a>`}
			},
			`mail: Config.Templates["welcome"].HTML: html/template:welcome:1:5: {{if}} branches end in different contexts: `,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := validConfig()
			tt.configure(cfg)
			d, err := mail.New(cfg)
			require.Nil(t, d)
			require.Error(t, err)
			if strings.HasSuffix(tt.want, ": ") { // the rest is the template package's
				require.True(t, strings.HasPrefix(err.Error(), tt.want), "%v", err)
				return
			}
			require.EqualError(t, err, tt.want)
		})
	}

	t.Run("JoinsEveryProblem", func(t *testing.T) {
		t.Parallel()
		_, err := mail.New(&mail.Config{Timeout: -1, Templates: map[string]mail.Template{"a": {}}})
		require.Error(t, err)
		for _, field := range []string{"Config.Addr", "Config.From", "Config.Timeout", `Config.Templates["a"].Subject`, `Config.Templates["a"] has neither`} {
			require.Contains(t, err.Error(), field)
		}
	})

	// New keeps its own copy: the caller's Config and TLSConfig stay as
	// they were, and later changes to them do not reach the Delivery.
	t.Run("LeavesTheConfigAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{}, func(cfg *mail.Config) {
			cfg.TLSConfig = &tls.Config{}
		})
		require.Empty(t, b.cfg.TLSConfig.ServerName)
		require.Zero(t, b.cfg.Timeout)
		require.Zero(t, b.cfg.MaxIdleConns)
		require.Zero(t, b.cfg.IdleTimeout)
		require.Empty(t, b.cfg.Hostname)

		b.cfg.Templates["welcome"] = mail.Template{Subject: "changed", Text: "changed"}
		b.cfg.From = "changed@changed.example"
		outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
		require.Equal(t, "delivered", outcome.Kind().String(), "%v", outcome)
		got := b.srv.accepted()
		require.Len(t, got, 1)
		m := parseMessage(t, got[0].Data)
		require.Equal(t, "Welcome, Ada", m.header.Get("Subject"))
		require.Equal(t, "no-reply@tidings.example", got[0].From)
	})
}

func TestTLSModeString(t *testing.T) {
	t.Parallel()
	for mode, want := range map[mail.TLSMode]string{
		mail.TLSDefault:  "default",
		mail.TLSRequired: "required",
		mail.TLSImplicit: "implicit",
		mail.TLSNone:     "none",
		mail.TLSMode(-1): "TLSMode(-1)",
	} {
		t.Run(want, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, want, mode.String())
		})
	}
}
