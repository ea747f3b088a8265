package service

import (
	"errors"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/mail"
	"github.com/tidings-go/tidings/delivery/push"
	"github.com/tidings-go/tidings/delivery/sms"
)

// MailIdempotencyHeader is the header each mail carries its request's id
// in: Resend's, whose SMTP relay drops a second message with the same key
// (a delivery retried after its answer was lost). The example's mail
// provider is Resend, whose webhooks it receives; another server ignores
// the header.
const MailIdempotencyHeader = "Resend-Idempotency-Key"

// Providers locates the providers the service delivers through, and holds
// the credentials it signs in with. The zero value of a field means the
// module's default (mail.Config, push.Config, sms.Config).
type Providers struct {
	SMTPAddr string // host:port of the SMTP server
	MailFrom string
	// SMTPUser and SMTPPassword sign in to the SMTP server (AUTH); both
	// empty means none. Resend's are "resend" and an API key.
	SMTPUser     string
	SMTPPassword string

	PushURL         string // base URL of the Expo push API
	PushAccessToken string

	SMSURL        string // base URL of the Twilio API
	SMSAccountSID string
	SMSAuthToken  string
	SMSFrom       string
	// SMSStatusCallback is the public URL of the service's
	// /feedback/twilio, sent with each text so that Twilio posts its
	// statuses there (an undelivered text, an unknown number); "" sends
	// none.
	SMSStatusCallback string
}

// Channels builds the mail, push and SMS deliveries, with the service's
// templates, rendered when each notification is delivered.
func (p Providers) Channels() (map[string]delivery.Delivery, error) {
	m, mErr := mail.New(&mail.Config{
		Addr: p.SMTPAddr, From: p.MailFrom, Username: p.SMTPUser, Password: p.SMTPPassword,
		IdempotencyHeader: MailIdempotencyHeader,
		Templates: map[string]mail.Template{
			"booking_confirmed": {
				Subject: "Booking {{.booking_id}} is confirmed",
				Text:    "Hello {{.name}},\n\nyour parking at {{.place}} on {{.starts_at}} is confirmed.\n",
				HTML:    "<p>Hello {{.name}},</p><p>your parking at <b>{{.place}}</b> on {{.starts_at}} is confirmed.</p>",
			},
			"booking_confirmed_host": {
				Subject: "You have a confirmed booking at {{.place}}",
				Text:    "Hello {{.name}},\n\nbooking {{.booking_id}} at {{.place}} on {{.starts_at}} is confirmed.\n",
			},
			"password_changed": {
				Subject: "Your password was changed",
				Text:    "Hello {{.name}},\n\nyour password was just changed. If it was not you, reply to this mail.\n",
			},
		},
	})
	p2, pErr := push.New(&push.Config{
		BaseURL: p.PushURL, AccessToken: p.PushAccessToken,
		Templates: map[string]push.Template{
			"booking_confirmed":      {Title: "Booking confirmed", Body: "{{.place}}, {{.starts_at}}"},
			"booking_confirmed_host": {Title: "New booking", Body: "{{.place}}, {{.starts_at}}"},
		},
	})
	s, sErr := sms.New(&sms.Config{
		BaseURL: p.SMSURL, AccountSID: p.SMSAccountSID, AuthToken: p.SMSAuthToken, From: p.SMSFrom,
		StatusCallback: p.SMSStatusCallback,
		Templates: map[string]string{
			"booking_confirmed": "Booking {{.booking_id}} at {{.place}} is confirmed.",
			"verify_phone":      "Your parking verification code is {{.code}}.",
		},
	})
	if err := errors.Join(mErr, pErr, sErr); err != nil {
		return nil, err
	}
	return map[string]delivery.Delivery{"mail": m, "push": p2, "sms": s}, nil
}
