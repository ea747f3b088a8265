package service

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/notification/feedback"
)

// Feedback is what the service hears back from its providers: the
// webhooks they post (a bounce, a complaint, a STOP), verified and staged
// by the receivers mounted at /feedback/resend and /feedback/twilio, and
// the push receipts fetched after each push. The dispatcher applies each
// report once: it suppresses the address, and requests to it end
// suppressed from then on, without a provider call. The zero value hears
// nothing.
type Feedback struct {
	// ResendSecrets are the signing secrets ("whsec_...") of the Resend
	// webhook that posts to /feedback/resend; two during a rotation. None
	// mounts no receiver there.
	ResendSecrets []string

	// TwilioURL is the public URL of /feedback/twilio exactly as the
	// number's messaging webhook names it at Twilio, which signs it. ""
	// mounts no receiver there.
	TwilioURL string
	// TwilioAuthTokens are the account's auth tokens the webhook is
	// signed with.
	TwilioAuthTokens []string

	// PushReceipts fetches Expo's push receipts, ReceiptsAfter (default 15
	// minutes) after each push; a DeviceNotRegistered suppresses the token.
	// Nil fetches none.
	PushReceipts  *feedback.Expo
	ReceiptsAfter time.Duration
}

// receipts is the dispatcher's Config.Receipts.
func (f Feedback) receipts() map[string]notification.Receipts {
	if f.PushReceipts == nil {
		return nil
	}
	return map[string]notification.Receipts{"push": {Fetcher: f.PushReceipts, After: f.ReceiptsAfter}}
}

// mount mounts the webhook receivers on mux. Each verifies the provider's
// signature on the raw body, stages the reports in store, and answers 2xx
// only once they are committed, so that the provider sends again what
// was not.
func (f Feedback) mount(mux *http.ServeMux, store feedback.Store, logger *slog.Logger) error {
	hc := feedback.HandlerConfig{Logger: logger}
	if len(f.ResendSecrets) > 0 {
		h, err := feedback.NewResend(&feedback.ResendConfig{HandlerConfig: hc, Secrets: f.ResendSecrets}, store)
		if err != nil {
			return err
		}
		mux.Handle("POST /feedback/resend", h)
	}
	if f.TwilioURL != "" {
		h, err := feedback.NewTwilio(&feedback.TwilioConfig{HandlerConfig: hc, URL: f.TwilioURL, AuthTokens: f.TwilioAuthTokens}, store)
		if err != nil {
			return err
		}
		mux.Handle("POST /feedback/twilio", h)
	}
	return nil
}
