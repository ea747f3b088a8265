package mail_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"log"
	"os"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/mail"
)

// A mail delivery that sends through Resend's SMTP endpoint, with one
// template. The dispatcher would call Deliver; here it is called by hand.
// The example needs a server, so it is compiled but not run.
func ExampleNew() {
	mailer, err := mail.New(&mail.Config{
		Addr:     "smtp.resend.com:587", // STARTTLS, required by default
		Username: "resend",
		Password: os.Getenv("RESEND_API_KEY"),
		From:     "Tidings <no-reply@example.com>",
		// Resend drops a second message with the same key for 24 hours.
		IdempotencyHeader: "Resend-Idempotency-Key",
		Templates: map[string]mail.Template{
			"welcome": {
				Subject: "Welcome, {{.name}}",
				Text:    "Hello {{.name}},\n\nyour account is ready.\n",
				HTML:    "<p>Hello {{.name}},</p><p>your account is ready.</p>",
			},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	// Close the connections it keeps between deliveries once the
	// dispatcher has stopped.
	defer func() { _ = mailer.Close() }()

	// Register it for the "mail" channel; a Delivery is all the dispatcher
	// sees.
	var d delivery.Delivery = mailer

	outcome := d.Deliver(context.Background(), welcomeRequest())
	fmt.Println(outcome)
}

// A mail delivery that sends through Gmail with OAuth2 (AUTH XOAUTH2):
// TokenFunc gives a token for each connection. The example needs a
// server, so it is compiled but not run.
func ExampleConfig_tokenFunc() {
	mailer, err := mail.New(&mail.Config{
		Addr:      "smtp.gmail.com:587",
		Username:  "no-reply@example.com", // the mailbox the token is for
		TokenFunc: accessToken,
		From:      "Tidings <no-reply@example.com>",
		Templates: map[string]mail.Template{
			"welcome": {Subject: "Welcome, {{.name}}", Text: "Hello {{.name}}.\n"},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = mailer.Close() }()

	fmt.Println(mailer.Deliver(context.Background(), welcomeRequest()))
}

// accessToken stands for an OAuth2 token source, such as
// golang.org/x/oauth2's, which keeps a token and fetches a new one before
// it expires.
func accessToken(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	return os.Getenv("GMAIL_ACCESS_TOKEN"), nil
}

// welcomeRequest stands for what the dispatcher hands the delivery.
func welcomeRequest() delivery.Pending {
	p := delivery.Pending{
		Channel:   "mail",
		Recipient: "Ada Lovelace <ada@example.org>",
		Template:  "welcome",
		Data:      map[string]any{"name": "Ada"},
		Attempt:   1,
	}
	_, _ = rand.Read(p.ID[:])
	return p
}
