package mail_test

import (
	"bytes"
	"context"
	"net/http"
	netmail "net/mail"
	"testing"

	"github.com/emersion/go-smtp"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/deliverytest"
	"github.com/tidings-go/tidings/delivery/mail"
)

// The mail module passes the shared conformance suite against a real SMTP
// server that requires AUTH, with a password and with an OAuth2 token, so
// the credentials are among the secrets.
func TestConformance(t *testing.T) {
	t.Parallel()

	const token = "ya29.conformance-token"
	auths := map[string]struct {
		opts      serverOptions
		configure func(*mail.Config)
		secrets   []string
	}{
		"PLAIN": {
			opts:      serverOptions{username: testUsername, password: testPassword},
			configure: func(cfg *mail.Config) { cfg.Username, cfg.Password = testUsername, testPassword },
			secrets:   []string{testUsername, testPassword},
		},
		"XOAUTH2": {
			opts: serverOptions{username: testUsername, mechanisms: []string{"XOAUTH2"}, tokenOK: func(got string) bool { return got == token }},
			configure: func(cfg *mail.Config) {
				cfg.Username, cfg.TokenFunc = testUsername, func(context.Context) (string, error) { return token, nil }
			},
			secrets: []string{testUsername, token},
		},
	}
	for name, auth := range auths {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			deliverytest.Run(t, deliverytest.Features{Remote: true}, func(t *testing.T) deliverytest.Subject {
				return conformanceSubject(t, auth.opts, auth.configure, auth.secrets)
			})
		})
	}
}

// conformanceSubject is the Delivery of setup(opts, configure), for the
// conformance suite.
func conformanceSubject(t *testing.T, opts serverOptions, configure func(*mail.Config), secrets []string) deliverytest.Subject {
	t.Helper()
	b := setup(t, opts, configure)
	return deliverytest.Subject{
		Delivery: b.mailer,
		Pending: func() delivery.Pending {
			// No value of the data is hex, so none can turn up in a
			// Message-ID by chance.
			return newPending("welcome", map[string]any{"name": "Ada Lovelace", "code": "code-QZ7X"})
		},
		Keys: func() []string {
			var keys []string
			for _, m := range b.srv.received() {
				keys = append(keys, messageID(m.Data))
			}
			return keys
		},
		Stall: func() { b.srv.stallAt(phaseData) },
		Fail: func(status int, body string) {
			// An HTTP-style status as the nearest SMTP answer to DATA:
			// 429 and 5xx are "try again later", any other 4xx a refusal.
			code, enhanced := 550, smtp.EnhancedCode{5, 0, 0}
			if status == http.StatusTooManyRequests || status >= 500 {
				code, enhanced = 451, smtp.EnhancedCode{4, 3, 0}
			}
			b.srv.failAt(phaseData, code, enhanced, body)
		},
		Secrets: secrets,
	}
}

// messageID returns the Message-ID of the raw message, or "" when it has
// none or does not parse.
func messageID(raw []byte) string {
	msg, err := netmail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return ""
	}
	return msg.Header.Get("Message-ID")
}
