package service

import (
	"errors"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/mail"
	"github.com/tidings-go/tidings/delivery/push"
	"github.com/tidings-go/tidings/delivery/sms"
)

// Providers locates the providers the service delivers through.
type Providers struct {
	SMTPAddr string // host:port of the SMTP server
	MailFrom string

	PushURL         string // base URL of the Expo push API
	PushAccessToken string

	SMSURL        string // base URL of the Twilio API
	SMSAccountSID string
	SMSAuthToken  string
	SMSFrom       string
}

// Channels builds the mail, push and SMS deliveries, with the service's
// templates, rendered when each notification is delivered.
func (p Providers) Channels() (map[string]delivery.Delivery, error) {
	m, mErr := mail.New(&mail.Config{
		Addr: p.SMTPAddr, From: p.MailFrom,
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
