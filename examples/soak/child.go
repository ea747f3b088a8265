package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/ledger"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
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

func isChild() bool { return os.Getenv(envChildDSN) != "" }

// runChild runs the relay with the dispatcher until SIGTERM, and returns
// the process's exit code.
func runChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Warnings come by the hundred under faults: only errors by default.
	level := slog.LevelError
	if os.Getenv("TIDINGS_SOAK_LOG") != "" {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := child(ctx, log); err != nil {
		fmt.Fprintln(os.Stderr, "soak relay:", err)
		return 2
	}
	return 0
}

func child(ctx context.Context, log *slog.Logger) error {
	db, err := sql.Open("postgres", os.Getenv(envChildDSN))
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
		DeliveryTimeout: 4 * time.Second,
		Logger:          log,
	})
	if err != nil {
		return err
	}
	return relay.Supervise(ctx, db, &relay.Config{
		Module:        module,
		Schema:        schema,
		ListenDSN:     os.Getenv(envChildListen),
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

// childProcess is one run of the relay process.
type childProcess struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	err  error         // what Wait returned; read after done
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
func (s *soak) spawn() (*childProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envChildDSN+"="+s.dsn(appRelay), envChildListen+"="+s.dsn(appListen),
		envChildProvider+"="+s.provider.URL())
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// The relay dies with this process, even on SIGKILL.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the relay process: %w", err)
	}
	c := &childProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (s *soak) currentChild() *childProcess {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.child
}

func (c *childProcess) pid() int { return c.cmd.Process.Pid }

// exited reports whether the process has exited, and how.
func (c *childProcess) exited() (bool, error) {
	select {
	case <-c.done:
		return true, c.err
	default:
		return false, nil
	}
}

// kill sends SIGKILL and waits until the process is gone.
func (c *childProcess) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// stop asks the relay to shut down, and kills it after within.
func (c *childProcess) stop(within time.Duration) error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.err
	case <-time.After(within):
		c.kill()
		return fmt.Errorf("still running %s after SIGTERM; killed", within)
	}
}

// rss reads the process's resident set size, in KiB, from /proc.
func (c *childProcess) rss() int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(c.pid()) + "/status")
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
