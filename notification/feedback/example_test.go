package feedback_test

import (
	"context"
	"log"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/tidings-go/tidings/notification/feedback"
)

// stageReports stands for the Store, which notification.Client.FeedbackStore
// gives (this package imports nothing of tidings): in one transaction, it
// stages each report as an outbox record keyed by its provider and event
// id, and commits. The receiver answers the provider 2xx only when it
// returns nil.
func stageReports(ctx context.Context, reports []feedback.Report) error {
	_ = ctx
	_ = reports
	return nil
}

// Example mounts the receivers of Resend, Amazon SES and Twilio on a
// service's mux, each behind the path configured at the provider.
func Example() {
	store := feedback.StoreFunc(stageReports)
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))

	resend, err := feedback.NewResend(&feedback.ResendConfig{
		HandlerConfig: feedback.HandlerConfig{Logger: logger},
		Secrets:       []string{os.Getenv("RESEND_WEBHOOK_SECRET")},
	}, store)
	if err != nil {
		log.Fatal(err)
	}
	ses, err := feedback.NewSES(&feedback.SESConfig{
		HandlerConfig: feedback.HandlerConfig{Logger: logger},
		TopicARNs:     []string{"arn:aws:sns:eu-west-1:123456789012:ses-feedback"},
	}, store)
	if err != nil {
		log.Fatal(err)
	}
	twilio, err := feedback.NewTwilio(&feedback.TwilioConfig{
		HandlerConfig: feedback.HandlerConfig{Logger: logger},
		URL:           "https://api.example.com/feedback/twilio",
		AuthTokens:    []string{os.Getenv("TWILIO_AUTH_TOKEN")},
	}, store)
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("POST /feedback/resend", resend)
	mux.Handle("POST /feedback/ses", ses)
	mux.Handle("POST /feedback/twilio", twilio)
	srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// ExampleExpo_Receipts polls Expo for the receipts of tickets that sends
// got a while ago, and stages their reports.
func ExampleExpo_Receipts() {
	expo, err := feedback.NewExpo(&feedback.ExpoConfig{AccessToken: os.Getenv("EXPO_ACCESS_TOKEN")})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	reports, err := expo.Receipts(ctx, []string{"XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX"})
	if err != nil && !feedback.Retryable(err) {
		log.Fatal(err)
	}
	if err := stageReports(ctx, reports); err != nil {
		log.Fatal(err)
	}
}
