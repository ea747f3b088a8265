// Package service is the booking service of the example: an HTTP API whose
// "confirm booking" call updates the booking and, in the same transaction,
// stages the notifications for the driver and the host; the relay that
// delivers them by mail, push, SMS and in-app; and the receivers of what
// the providers report back (bounces, STOPs, uninstalled apps), which
// suppress the addresses that can take no more.
package service

import (
	"cmp"
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lib/pq"

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
	Logger        *slog.Logger                 // nil discards
	ShutdownGrace time.Duration                // HTTP and relay drain time; default 10 s
	// QuietHoursJitter spreads what quiet hours held back after each
	// window (notification.Config.QuietHoursJitter); default 5 minutes.
	QuietHoursJitter time.Duration
	// Feedback is what the providers report back, and how it is checked.
	Feedback Feedback
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
// requests, the relay its in-flight deliveries. Run owns ln: it closes it
// before it returns, also when it fails before it serves, so that a client
// waiting on ln learns at once that no service will answer.
func Run(ctx context.Context, cfg Config, ln net.Listener) error {
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	mux, disp, err := prepare(ctx, cfg)
	if err != nil {
		_ = ln.Close()
		return err
	}
	return serve(ctx, cfg, ln, mux, disp)
}

// prepare migrates the database and builds the service's routes, the
// providers' report receivers among them, and the dispatcher of its
// relay.
func prepare(ctx context.Context, cfg Config) (*http.ServeMux, *notification.Dispatcher, error) {
	if err := Migrate(ctx, cfg.DB); err != nil {
		return nil, nil, err
	}
	ia, err := inapp.New(&inapp.Config{DB: cfg.DB})
	if err != nil {
		return nil, nil, err
	}
	deliveries := map[string]delivery.Delivery{"inapp": ia}
	for ch, d := range cfg.Channels {
		deliveries[ch] = d
	}
	notes, err := notification.NewClient(cfg.DB, nil)
	if err != nil {
		return nil, nil, err
	}
	disp, err := notification.NewDispatcher(&notification.Config{Deliveries: deliveries, Categories: categories,
		Resolvers:        map[string]notification.Resolver{"sms": phoneBook(cfg.DB)},
		QuietHoursJitter: cfg.QuietHoursJitter, Receipts: cfg.Feedback.receipts(), Logger: cfg.Logger})
	if err != nil {
		return nil, nil, err
	}
	s := &Service{db: cfg.DB, inapp: ia, notes: notes, log: cfg.Logger.With("component", "bookings")}
	mux := s.routes()
	// The providers' reports ride the module's relay, which the
	// dispatcher applies them from.
	reports, err := notes.FeedbackStore(Module)
	if err != nil {
		return nil, nil, err
	}
	if err := cfg.Feedback.mount(mux, reports, cfg.Logger); err != nil {
		return nil, nil, err
	}
	return mux, disp, nil
}

// serve serves mux on ln and runs the relay with disp as its sink until
// ctx ends or either fails.
func serve(ctx context.Context, cfg Config, ln net.Listener, mux *http.ServeMux, disp *notification.Dispatcher) error {
	log := cfg.Logger.With("component", "bookings")
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }}
	// Either one failing stops the other: a relay without its API, or an
	// API without its relay, is no service.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
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
	stop() // the relay finishes its in-flight deliveries
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

// phoneBook resolves the recipient of a text addressed to a user (a
// booking's) to the user's phone number, looked up when the text is
// delivered, not when it was staged: a number corrected after a failure
// is the one a re-emitted request uses, and a number that texted STOP is
// suppressed however its texts are addressed. A text addressed to a
// number (a verification code for it) goes to that number.
func phoneBook(db *sql.DB) notification.Resolver {
	return notification.ResolverFunc(func(ctx context.Context, recipients []string) (map[string]string, error) {
		numbers := map[string]string{}
		var users []string
		for _, r := range recipients {
			if strings.HasPrefix(r, "+") {
				numbers[r] = r
			} else {
				users = append(users, r)
			}
		}
		if len(users) == 0 {
			return numbers, nil
		}
		rows, err := db.QueryContext(ctx, `SELECT id, phone FROM bookings.users WHERE id = ANY($1) AND phone <> ''`, pq.Array(users))
		if err != nil {
			return nil, fmt.Errorf("look up the phone numbers: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var id, phone string
			if err := rows.Scan(&id, &phone); err != nil {
				return nil, fmt.Errorf("look up the phone numbers: %w", err)
			}
			numbers[id] = phone
		}
		return numbers, rows.Err()
	})
}
