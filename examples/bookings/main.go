// Command bookings is the example service main: a booking API whose
// confirmations notify the driver and the host by mail, push, SMS and
// in-app, through tidings. It runs until SIGTERM or Ctrl-C, then finishes
// its requests and deliveries.
//
// Configuration comes from the environment:
//
//	DATABASE_URL      PostgreSQL (required)
//	ADDR              HTTP listen address (default :8080)
//	SMTP_ADDR         SMTP server host:port (required)
//	SMTP_USER, SMTP_PASSWORD  SMTP credentials (optional; for Resend's relay,
//	                  smtp.resend.com:587: "resend" and an API key)
//	MAIL_FROM         sender address (required)
//	EXPO_URL          Expo push API base URL (default https://exp.host)
//	EXPO_TOKEN        Expo access token (optional)
//	TWILIO_URL        Twilio API base URL (default https://api.twilio.com)
//	TWILIO_SID, TWILIO_TOKEN, TWILIO_FROM   Twilio account and sender
//	RESEND_WEBHOOK_SECRETS  when SMTP_ADDR is Resend's: the signing secrets
//	                  (whsec_..., space-separated) of the Resend webhook that
//	                  posts to /feedback/resend (none mounts no receiver)
//	TWILIO_WEBHOOK_URL  the public URL of /feedback/twilio, as the number's
//	                  messaging webhook names it at Twilio (optional); also
//	                  sent with each text as its StatusCallback, so that
//	                  Twilio posts the text's statuses there
//	METRICS_ADDR      where Prometheus scrapes /metrics (default :9464; "off" for none)
//
// examples/bookings/demo runs it on this machine with local stand-ins for
// the database and every provider.
package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	_ "github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/tidings-go/tidings/examples/bookings/internal/service"
	"github.com/tidings-go/tidings/notification/feedback"
	"github.com/tidings-go/tidings/relay"
)

func main() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, logger); err != nil {
		logger.Error("bookings failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger) error {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		return fmt.Errorf("DATABASE_URL is not set")
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	// The dispatcher holds a connection per delivery of a channel that
	// commits each alone (all three providers here): the relay's
	// Connections and a few for claims and settles, kept idle between
	// deliveries instead of a new session each (README, Configuration).
	db.SetMaxOpenConns(relay.ConnectionsDefault + 10)
	db.SetMaxIdleConns(relay.ConnectionsDefault + 10)
	if addr := cmp.Or(os.Getenv("METRICS_ADDR"), ":9464"); addr != "off" {
		stop, err := serveMetrics(addr, logger)
		if err != nil {
			return err
		}
		defer stop()
	}
	channels, err := service.Providers{
		SMTPAddr:          os.Getenv("SMTP_ADDR"),
		MailFrom:          os.Getenv("MAIL_FROM"),
		SMTPUser:          os.Getenv("SMTP_USER"),
		SMTPPassword:      os.Getenv("SMTP_PASSWORD"),
		PushURL:           os.Getenv("EXPO_URL"),
		PushAccessToken:   os.Getenv("EXPO_TOKEN"),
		SMSURL:            os.Getenv("TWILIO_URL"),
		SMSAccountSID:     os.Getenv("TWILIO_SID"),
		SMSAuthToken:      os.Getenv("TWILIO_TOKEN"),
		SMSFrom:           os.Getenv("TWILIO_FROM"),
		SMSStatusCallback: os.Getenv("TWILIO_WEBHOOK_URL"),
	}.Channels()
	if err != nil {
		return err
	}
	// What the providers report back: Resend's and Twilio's signed
	// webhooks, and Expo's push receipts, fetched a while after each push.
	receipts, err := feedback.NewExpo(&feedback.ExpoConfig{BaseURL: os.Getenv("EXPO_URL"), AccessToken: os.Getenv("EXPO_TOKEN")})
	if err != nil {
		return err
	}
	reports := service.Feedback{
		ResendSecrets:    strings.Fields(os.Getenv("RESEND_WEBHOOK_SECRETS")),
		TwilioURL:        os.Getenv("TWILIO_WEBHOOK_URL"),
		TwilioAuthTokens: []string{os.Getenv("TWILIO_TOKEN")},
		PushReceipts:     receipts,
	}
	ln, err := net.Listen("tcp", cmp.Or(os.Getenv("ADDR"), ":8080"))
	if err != nil {
		return err
	}
	return service.Run(ctx, service.Config{DB: db, DSN: dsn, Channels: channels, Feedback: reports, Logger: logger}, ln)
}

// serveMetrics exports the relay's and the dispatcher's metrics, which
// they create through the global MeterProvider, for Prometheus at
// http://addr/metrics, with the Go runtime's; stop ends it.
func serveMetrics(addr string, logger *slog.Logger) (stop func(), err error) {
	exporter, err := otelprom.New()
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	otel.SetMeterProvider(mp)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics server failed", "err", err)
		}
	}()
	return func() {
		_ = srv.Close()
		<-served
		_ = mp.Shutdown(context.Background())
	}, nil
}
