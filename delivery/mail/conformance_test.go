package mail_test

import (
	"bytes"
	"net/http"
	netmail "net/mail"
	"testing"

	"github.com/emersion/go-smtp"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/deliverytest"
	"github.com/tidings-go/tidings/delivery/mail"
)

// The mail module passes the shared conformance suite against a real SMTP
// server that requires AUTH, so the credentials are among the secrets.
func TestConformance(t *testing.T) {
	t.Parallel()

	deliverytest.Run(t, deliverytest.Features{Remote: true}, func(t *testing.T) deliverytest.Subject {
		b := setup(t, serverOptions{username: testUsername, password: testPassword}, func(cfg *mail.Config) {
			cfg.Username, cfg.Password = testUsername, testPassword
		})
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
			Secrets: []string{testUsername, testPassword},
		}
	})
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
