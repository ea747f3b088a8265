// Command soak runs the relay and the notification dispatcher for minutes
// at a steady staging rate while it injects faults at random, and proves
// at the end that nothing was lost or doubled.
//
//	go run ./examples/soak -minutes 10 -rate 200 -faults kill,terminate,restart,wakeup
//
// The relay runs in a child process (this program run again), with a
// delivery that posts every request to a local provider server that
// answers after 5-50 ms and records what it receives. The faults:
//
//   - kill: SIGKILL the relay process and start it again;
//   - terminate: pg_terminate_backend of every session of the relay, five
//     times a second for ten seconds;
//   - restart: stop PostgreSQL in immediate mode, as a crash would, and
//     start it again (throwaway cluster only);
//   - wakeup: kill the relay's LISTEN session, losing the wake-ups sent
//     until it is back.
//
// Every 10 s it prints one line: elapsed time, events staged, delivered
// (processed) and their rate, duplicates the provider saw, queue depth
// (pending rows), dead tuples of the outbox, latency from staging to the
// provider (p50, p99) of the events first received in the interval, the
// relay process's RSS, and the faults so far. At the end it stops staging,
// waits for the queue to drain, and prints the ledger (see
// internal/ledger): it exits 1 if an event was lost, claimed other than
// once, or received again outside the window of a fault.
//
// It uses the database -database names (default DATABASE_URL), in a schema
// of its own ("soak", dropped and created again at start), or else starts a
// durable throwaway PostgreSQL cluster and removes it on exit.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/internal/child"
	"github.com/tidings-go/tidings/internal/ledger"
	"github.com/tidings-go/tidings/internal/pgtemp"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

const (
	schema   = "soak"
	module   = "soak"
	consumer = "soak_notify"
	channel  = "provider"

	// Application names of the sessions: the relay's pool, its LISTEN
	// session, and this program's own, which no fault touches.
	appRelay  = "soak_relay"
	appListen = "soak_listen"
	appSoak   = "soak_main"

	reportEvery = 10 * time.Second
	stageEvery  = 100 * time.Millisecond
)

var allFaults = []string{"kill", "terminate", "restart", "wakeup"}

// options are the command's flags.
type options struct {
	minutes       float64
	rate          int
	faults        []string
	database      string
	faultInterval time.Duration
	drain         time.Duration
}

func main() {
	if runChild() {
		return
	}
	var o options
	var faults string
	flag.Float64Var(&o.minutes, "minutes", 10, "how long to stage and inject faults, in minutes")
	flag.IntVar(&o.rate, "rate", 200, "events staged per second")
	flag.StringVar(&faults, "faults", strings.Join(allFaults, ","), "faults to inject at random, comma separated (kill, terminate, restart, wakeup); empty for none")
	flag.StringVar(&o.database, "database", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default DATABASE_URL); empty starts a durable throwaway cluster")
	flag.DurationVar(&o.faultInterval, "fault-interval", 30*time.Second, "mean time between faults; each interval is drawn from 50-150 % of it")
	flag.DurationVar(&o.drain, "drain", 3*time.Minute, "how long to wait, after staging stops, for the queue to drain")
	flag.Parse()
	for f := range strings.SplitSeq(faults, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !slices.Contains(allFaults, f) {
			fmt.Fprintf(os.Stderr, "soak: unknown fault %q (known: %s)\n", f, strings.Join(allFaults, ", "))
			os.Exit(2)
		}
		o.faults = append(o.faults, f)
	}
	if o.minutes <= 0 || o.rate <= 0 || o.faultInterval <= 0 {
		fmt.Fprintln(os.Stderr, "soak: -minutes, -rate and -fault-interval must be positive")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ok, err := run(ctx, os.Stdout, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// soak is one run: its database, provider, relay process and books.
type soak struct {
	out      io.Writer
	opts     options
	cluster  *pgtemp.Cluster // nil with -database
	base     string          // connection string, without application_name
	db       *sql.DB         // staging and looking
	ob       *relay.Outbox
	provider *ledger.Provider
	faults   ledger.Faults

	mu     sync.Mutex
	child  *child.Process
	known  []string // ids whose staging committed
	failed int      // staging batches that failed (the server was away)
	counts map[string]int
	rep    reporter // used by the report loop, then by settle
}

// run soaks and reports whether the ledger holds. Everything it starts is
// stopped before it returns.
func run(ctx context.Context, out io.Writer, o options) (ok bool, err error) {
	s := &soak{out: out, opts: o, counts: map[string]int{}, rep: reporter{seen: map[uuid.UUID]struct{}{}}}
	if o.database == "" {
		fmt.Fprintln(out, "starting a durable throwaway PostgreSQL cluster")
		s.cluster, err = pgtemp.Start(ctx, &pgtemp.Options{Durable: true, Settings: map[string]string{"track_commit_timestamp": "on"}})
		if err != nil {
			return false, err
		}
		defer func() { err = errors.Join(err, s.cluster.Stop()) }()
		s.base = s.cluster.URL()
	} else {
		s.base = o.database
		if i := slices.Index(s.opts.faults, "restart"); i >= 0 {
			fmt.Fprintln(out, "note: restart needs a throwaway cluster; not injected against -database")
			s.opts.faults = slices.Delete(s.opts.faults, i, i+1)
		}
	}
	if s.db, err = sql.Open("postgres", s.dsn(appSoak)); err != nil {
		return false, err
	}
	defer func() { err = errors.Join(err, s.db.Close()) }()
	if err := s.prepare(ctx); err != nil {
		return false, err
	}
	if s.provider, err = ledger.StartProvider(5*time.Millisecond, 50*time.Millisecond); err != nil {
		return false, err
	}
	defer func() { err = errors.Join(err, s.provider.Close()) }()

	if err := s.startChild(); err != nil {
		return false, err
	}
	defer func() { _ = s.currentChild().Kill() }()

	fmt.Fprintf(out, "soak: %s, %g min at %d events/s, faults %q about every %s, relay in pid %d\n",
		time.Now().UTC().Format(time.RFC3339), o.minutes, o.rate, strings.Join(s.opts.faults, ","), o.faultInterval,
		s.currentChild().PID())
	start := time.Now()
	runFor := time.Duration(o.minutes * float64(time.Minute))
	loadCtx, stopLoad := context.WithTimeout(ctx, runFor)
	defer stopLoad()
	var wg sync.WaitGroup
	wg.Go(func() { s.stageLoop(loadCtx) })
	wg.Go(func() { s.faultLoop(loadCtx, start) })
	reportCtx, stopReport := context.WithCancel(ctx)
	wg.Go(func() { s.reportLoop(reportCtx, start) })

	<-loadCtx.Done()
	if ctx.Err() != nil {
		stopReport()
		wg.Wait()
		return false, ctx.Err()
	}
	fmt.Fprintf(out, "staging stopped at %s; draining\n", since(start))
	drained := s.waitDrained(ctx, o.drain)
	stopReport()
	wg.Wait()
	s.report(ctx, start, time.Now()) // one last line
	if !drained {
		fmt.Fprintf(out, "the queue did not drain within %s\n", o.drain)
	}

	if err := s.currentChild().Stop(30 * time.Second); err != nil {
		fmt.Fprintln(out, "the relay process did not stop cleanly:", err)
	}
	return s.settle(ctx, start, drained)
}

func since(start time.Time) string {
	d := time.Since(start).Round(time.Second)
	return fmt.Sprintf("%02d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}

// dsn is the base connection string with application_name app.
func (s *soak) dsn(app string) string {
	u, err := url.Parse(s.base)
	if err != nil {
		// Not a URL: a key=value connection string.
		return s.base + " application_name=" + app
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// prepare gives the run a fresh schema.
func (s *soak) prepare(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+pq.QuoteIdentifier(schema)+` CASCADE`); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	if err := tidings.Migrate(ctx, s.db, schema); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var err error
	s.ob, err = relay.NewOutbox(&relay.OutboxConfig{Schema: schema})
	return err
}

// stageLoop stages rate events a second, in a batch every 100 ms, until
// ctx ends. A batch that fails (the server is away) is not retried: its
// commit may have happened, and the ledger counts the outbox anyway.
func (s *soak) stageLoop(ctx context.Context) {
	tick := time.NewTicker(stageEvery)
	defer tick.Stop()
	perTick := float64(s.opts.rate) * stageEvery.Seconds()
	var owed float64
	n := 0
	for {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		owed += perTick
		k := int(owed)
		if k == 0 {
			continue
		}
		owed -= float64(k)
		msgs := make([]relay.Message, k)
		for i := range msgs {
			n++
			msg, err := notification.Request{Channel: channel, Recipient: fmt.Sprintf("user%d@example.invalid", n),
				Template: "soak", Data: map[string]any{"n": n}}.Message(module)
			if err != nil {
				panic(err) // a constant request: a bug here
			}
			msgs[i] = msg
		}
		ids, err := s.ob.StageBatch(ctx, s.db, msgs)
		s.mu.Lock()
		if err != nil {
			if ctx.Err() == nil {
				s.failed++
			}
		} else {
			for _, id := range ids {
				s.known = append(s.known, id.String())
			}
		}
		s.mu.Unlock()
	}
}

// waitDrained waits until no row is pending, for at most within.
func (s *soak) waitDrained(ctx context.Context, within time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		var pending int
		err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM `+pq.QuoteIdentifier(schema)+`.outbox
			WHERE module = $1 AND processed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL`, module).Scan(&pending)
		if err == nil && pending == 0 {
			return true
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return false
		}
	}
}
