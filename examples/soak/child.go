package main

import (
	"context"
	"database/sql"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/child"
	"github.com/tidings-go/tidings/internal/ledger"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/pqlisten"
	"github.com/tidings-go/tidings/retrypolicy"
)

// The relay process is this program run again with these variables set.
const (
	envChildDSN      = "TIDINGS_SOAK_CHILD_DSN"
	envChildListen   = "TIDINGS_SOAK_CHILD_LISTEN_DSN"
	envChildProvider = "TIDINGS_SOAK_CHILD_PROVIDER"
)

// concurrency is the relay's: hands at once, each holding a connection.
const concurrency = 50

// deliveryTimeout is the child's DeliveryTimeout; the ledger explains a
// repeat whose previous send reached the provider only after it.
const deliveryTimeout = 4 * time.Second

// runChild runs the relay with the dispatcher until SIGTERM when this
// process is the relay process, and reports whether it was.
func runChild() bool {
	return child.Run(envChildDSN, func(ctx context.Context, dsn string) error {
		// Warnings come by the hundred under faults: only errors by default.
		level := slog.LevelError
		if os.Getenv("TIDINGS_SOAK_LOG") != "" {
			level = slog.LevelInfo
		}
		return runRelay(ctx, dsn, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	})
}

func runRelay(ctx context.Context, dsn string, log *slog.Logger) error {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	// A connection per hand, kept open: database/sql keeps two idle
	// connections by default, and a relay would fork a backend per hand.
	db.SetMaxOpenConns(concurrency + 10)
	db.SetMaxIdleConns(concurrency + 10)

	client := ledger.NewClient(os.Getenv(envChildProvider))
	defer client.Close()
	post := delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
		if err := client.Send(ctx, p.ID, p.StagedAt); err != nil {
			return delivery.Retry(err)
		}
		return delivery.Delivered()
	})
	d, err := notification.NewDispatcher(&notification.Config{
		Consumer:        consumer,
		Deliveries:      map[string]delivery.Delivery{channel: post},
		Policy:          retrypolicy.Policy{BaseDelay: time.Second, MaxDelay: 10 * time.Second},
		DeliveryTimeout: deliveryTimeout,
		Logger:          log,
	})
	if err != nil {
		return err
	}
	return relay.Supervise(ctx, db, &relay.Config{
		Module:        module,
		Schema:        schema,
		Listener:      pqlisten.New(os.Getenv(envChildListen)),
		Concurrency:   concurrency,
		HandTimeout:   5 * time.Second,
		Lease:         10 * time.Second,
		SweepInterval: 5 * time.Second,
		GracePeriod:   5 * time.Second,
		Logger:        log,
	}, stamped{d})
}

// stamped is the dispatcher handing each batch with the time its hand
// began, which the delivery passes on to the provider: the start of the
// window in which a fault can doom the claim's transaction and make the
// provider see a request again.
type stamped struct{ *notification.Dispatcher }

func (s stamped) HandleBatch(ctx context.Context, b *relay.Batch) {
	s.Dispatcher.HandleBatch(ledger.WithHandStart(ctx, time.Now().Round(0)), b)
}

// startChild starts the relay process.
func (s *soak) startChild() error {
	c, err := s.spawn()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.child = c
	s.mu.Unlock()
	return nil
}

// spawn starts a relay process; the caller makes it s.child.
func (s *soak) spawn() (*child.Process, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return child.Start(self, nil, map[string]string{envChildDSN: s.dsn(appRelay), envChildListen: s.dsn(appListen),
		envChildProvider: s.provider.URL()}, false)
}

func (s *soak) currentChild() *child.Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.child
}

// rss reads a process's resident set size, in KiB, from /proc.
func rss(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb
		}
	}
	return 0
}
