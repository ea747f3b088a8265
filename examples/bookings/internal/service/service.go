// Package service is the booking service of the example: an HTTP API whose
// "confirm booking" call updates the booking and, in the same transaction,
// stages the notifications for the driver and the host; and the relay that
// delivers them by mail, push, SMS and in-app.
package service

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/inapp"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/pqlisten"
)

// Module is the relay module of the service's notifications.
const Module = "bookings"

//go:embed schema.sql
var schemaSQL string

// Config is what the service needs from its environment.
type Config struct {
	DB            *sql.DB
	DSN           string                       // for the relay's LISTEN session
	Channels      map[string]delivery.Delivery // "mail", "push", "sms"; "inapp" is added
	Logger        *slog.Logger
	ShutdownGrace time.Duration // HTTP and relay drain time; default 10 s
	// QuietHoursJitter spreads what quiet hours held back after each
	// window (notification.Config.QuietHoursJitter); default 5 minutes.
	QuietHoursJitter time.Duration
}

// categories are the service's notification categories: bookings, which
// users can turn off per channel, and security notices, which always go.
var categories = map[string]notification.Category{
	"booking":  {},
	"security": {Critical: true},
}

// Service is the running service's state its handlers share.
type Service struct {
	db    *sql.DB
	inapp *inapp.Delivery
	notes *notification.Client
	log   *slog.Logger
}

// Migrate creates the library's tables and the application's.
func Migrate(ctx context.Context, db *sql.DB) error {
	if err := tidings.Migrate(ctx, db, ""); err != nil {
		return err
	}
	if err := inapp.Migrate(ctx, db, ""); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, schemaSQL); err != nil {
		return fmt.Errorf("application schema: %w", err)
	}
	return nil
}

// Run serves the HTTP API on ln and runs the notification relay until ctx
// ends, then shuts both down gracefully: the HTTP server finishes its
// requests, the relay its in-flight deliveries.
func Run(ctx context.Context, cfg Config, ln net.Listener) error {
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	log := cfg.Logger.With("component", "bookings")
	if err := Migrate(ctx, cfg.DB); err != nil {
		return err
	}
	ia, err := inapp.New(&inapp.Config{DB: cfg.DB})
	if err != nil {
		return err
	}
	deliveries := map[string]delivery.Delivery{"inapp": ia}
	for ch, d := range cfg.Channels {
		deliveries[ch] = d
	}
	if d, ok := deliveries["sms"]; ok {
		deliveries["sms"] = phoneBook(cfg.DB, d)
	}
	disp, err := notification.NewDispatcher(&notification.Config{Deliveries: deliveries, Categories: categories,
		QuietHoursJitter: cfg.QuietHoursJitter, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	notes, err := notification.NewClient(cfg.DB, nil)
	if err != nil {
		return err
	}
	s := &Service{db: cfg.DB, inapp: ia, notes: notes, log: log}

	srv := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 5 * time.Second,
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() {
		err := relay.Supervise(ctx, cfg.DB, &relay.Config{
			Module: Module, Listener: pqlisten.New(cfg.DSN), GracePeriod: cfg.ShutdownGrace, Logger: cfg.Logger,
		}, disp)
		errs <- err
	})
	wg.Go(func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errs <- err
		}
	})
	log.InfoContext(ctx, "serving", "addr", ln.Addr().String())

	var first error
	select {
	case <-ctx.Done():
	case first = <-errs: // the relay refused its config, or the listener failed
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		first = errors.Join(first, err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		first = errors.Join(first, err)
	}
	log.InfoContext(ctx, "stopped")
	return first
}

// phoneBook looks the driver's phone number up when the SMS is delivered,
// not when it was staged: a number corrected after a failure is the one a
// re-emitted request uses. The request's recipient is the user id.
func phoneBook(db *sql.DB, sms delivery.Delivery) delivery.Delivery {
	return delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
		var phone string
		err := db.QueryRowContext(ctx, `SELECT phone FROM bookings.users WHERE id = $1`, p.Recipient).Scan(&phone)
		if errors.Is(err, sql.ErrNoRows) {
			return delivery.Reject(errors.New("sms: no such user"))
		}
		if err != nil {
			return delivery.Retry(fmt.Errorf("sms: look up the phone number: %w", err))
		}
		p.Recipient = phone
		return sms.Deliver(ctx, p)
	})
}
