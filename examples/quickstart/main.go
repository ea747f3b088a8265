// Command quickstart walks one record's life through the relay: an order
// and its record committed together, a rolled-back order whose record never
// existed, a sink that processes records and declares one dead, and an
// operator who lists the dead record, fixes the cause and re-emits it.
//
//	go run ./examples/quickstart
//
// It uses the database DATABASE_URL names, in a schema of its own
// ("quickstart"), or else starts a throwaway PostgreSQL cluster from the
// local server binaries and removes it on exit. The story goes to stdout,
// the relay's logs to stderr.
package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq" // the PostgreSQL driver, and QuoteIdentifier

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/internal/pgtemp"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/pqlisten"
)

const (
	// schema holds the demo's tables, so it never touches the default
	// schema of a database DATABASE_URL points at.
	schema = "quickstart"
	// module is the relay the demo's records go to.
	module = "shop"

	// settleTimeout bounds each wait for the relay; with LISTEN the relay
	// is woken at commit, so it needs well under a second.
	settleTimeout = 10 * time.Second
	// pollInterval is how often a wait looks at the outbox table.
	pollInterval = 20 * time.Millisecond
)

// qschema is schema quoted for SQL. The demo's own queries name their
// schema, because a search_path set on a pool is easy to lose.
var qschema = pq.QuoteIdentifier(schema)

func main() {
	// Ctrl-C or SIGTERM cancels ctx, and run still cleans up behind it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart failed:", err)
		os.Exit(1)
	}
}

// run is the whole demo. Everything it starts (the relay, the pool, the
// throwaway cluster) is stopped before it returns, on every path.
func run(ctx context.Context, stdout io.Writer) (err error) {
	out := &syncWriter{w: stdout} // the sink writes from the relay's goroutines
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	dsn, release, err := database(ctx, logger)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, release()) }()

	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("connect to database: %w", err)
	}

	fmt.Fprintln(out, "== 1. migrate")
	if err := migrate(ctx, db, out); err != nil {
		return err
	}

	fmt.Fprintln(out, "\n== 2. run the relay of module", module)
	sink := newShopSink(out)
	rl := startRelay(ctx, db, &relay.Config{
		Module: module,
		Schema: schema,
		// LISTEN for the wake-up each commit sends, so records are handed
		// at once; the default 30 s sweep is only the safety net.
		Listener: pqlisten.New(dsn),
		Logger:   logger,
	}, sink)
	fmt.Fprintln(out, "supervising in the background; LISTENing for the wake-up each commit sends")
	defer func() {
		if stopErr := rl.stop(); err == nil {
			err = stopErr
		}
	}()

	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: schema})
	if err != nil {
		return err
	}

	fmt.Fprintln(out, "\n== 3. stage records with the writes that cause them")
	ids, err := placeOrders(ctx, db, ob, out, []order{
		{SKU: "TEA-GREEN-100G", Quantity: 2},
		{SKU: "MUG-STONE", Quantity: 1},
		{SKU: "", Quantity: 3}, // a bug upstream let an order through without a SKU
	})
	if err != nil {
		return err
	}
	rolledBack, err := placeOrderRolledBack(ctx, db, ob, out, order{SKU: "TEAPOT-CAST-IRON", Quantity: 1})
	if err != nil {
		return err
	}

	fmt.Fprintln(out, "\n== 4. the relay hands each record to the sink")
	c, err := waitFor(ctx, db, rl, ids, "every record is settled", func(c counts) bool { return c.pending == 0 })
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "settled:", c)

	fmt.Fprintln(out, "\n== 5. operate: list the dead, fix the cause, re-emit")
	if err := reemitDead(ctx, db, ob, sink, out, ids); err != nil {
		return err
	}
	if _, err := waitFor(ctx, db, rl, ids, "every record is processed",
		func(c counts) bool { return c.processed == len(ids) }); err != nil {
		return err
	}

	fmt.Fprintln(out, "\n== 6. summary")
	if err := checkNeverStaged(ctx, db, sink, out, rolledBack); err != nil {
		return err
	}
	c, err = countRecords(ctx, db, ids)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "this run's records:", c)
	return nil
}

// database returns the URL of the database to use and a function that
// releases it. DATABASE_URL wins; without it the demo starts a throwaway
// cluster, which a service would never do: it reads its DSN from its
// configuration.
func database(ctx context.Context, logger *slog.Logger) (dsn string, release func() error, err error) {
	if dsn := os.Getenv("DATABASE_URL"); dsn != "" {
		// Never log the URL itself: it may carry a password.
		logger.InfoContext(ctx, "using the database DATABASE_URL names")
		return dsn, func() error { return nil }, nil
	}
	logger.InfoContext(ctx, "DATABASE_URL is not set; starting a throwaway PostgreSQL cluster")
	cluster, err := pgtemp.Start(ctx, nil)
	if err != nil {
		return "", nil, fmt.Errorf("start a throwaway PostgreSQL cluster: %w", err)
	}
	logger.InfoContext(ctx, "throwaway cluster up", "port", cluster.Port())
	return cluster.URL(), func() error {
		if err := cluster.Stop(); err != nil {
			return fmt.Errorf("stop the throwaway cluster: %w", err)
		}
		logger.InfoContext(ctx, "throwaway cluster stopped and removed")
		return nil
	}, nil
}

// migrate installs the library's tables, and the demo's orders table, in
// schema. Migrate is safe to run at every start, from every replica.
func migrate(ctx context.Context, db *sql.DB, out io.Writer) error {
	before, err := appliedMigrations(ctx, db)
	if err != nil {
		return err
	}
	if err := tidings.Migrate(ctx, db, schema); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	after, err := appliedMigrations(ctx, db)
	if err != nil {
		return err
	}
	var applied []string
	for _, m := range after {
		if !slices.Contains(before, m) {
			applied = append(applied, m)
		}
	}
	if len(applied) == 0 {
		fmt.Fprintf(out, "schema %s was up to date: %s\n", schema, strings.Join(after, ", "))
	} else {
		fmt.Fprintf(out, "schema %s: applied %s\n", schema, strings.Join(applied, ", "))
	}

	// The application's own table. A service keeps it in its own
	// migrations; the demo creates it here to stay one file.
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+qschema+`.orders (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		sku text NOT NULL,
		quantity int NOT NULL CHECK (quantity > 0),
		placed_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("create orders table: %w", err)
	}
	return nil
}

// appliedMigrations lists the migrations recorded in schema, as
// "component/file", or nothing when the schema has none yet.
func appliedMigrations(ctx context.Context, db *sql.DB) ([]string, error) {
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`,
		qschema+".migrations").Scan(&exists); err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	if !exists {
		return nil, nil
	}
	rows, err := db.QueryContext(ctx,
		`SELECT component || '/' || name FROM `+qschema+`.migrations ORDER BY component, version`)
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("list migrations: %w", err)
		}
		names = append(names, name)
	}
	return names, rows.Err()
}

// order is a row of the demo's orders table.
type order struct {
	SKU      string
	Quantity int
}

// orderPlaced is the payload of an "order.placed" record.
type orderPlaced struct {
	OrderID  int64  `json:"order_id"`
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// placeOrders is one checkout: it inserts the orders and stages one record
// for each in the same transaction, so the records exist if and only if the
// orders do. The relay is woken when the transaction commits.
func placeOrders(ctx context.Context, db *sql.DB, ob *relay.Outbox, out io.Writer, orders []order) ([]uuid.UUID, error) {
	// Every record staged with this context shares the correlation id,
	// and the sink sees it on each record: one id to grep for a checkout.
	ctx = relay.WithCorrelationID(ctx, "checkout-"+uuid.NewString())

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("place orders: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit

	var ids []uuid.UUID
	for _, o := range orders {
		id, err := insertOrder(ctx, tx, ob, o)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("place orders: commit: %w", err)
	}
	fmt.Fprintf(out, "committed a checkout of %d orders, with %d records staged in the same transaction\n",
		len(orders), len(ids))
	return ids, nil
}

// placeOrderRolledBack inserts an order and stages its record, then rolls
// back as a failed payment would: the record goes with the order, and the
// relay never sees it. It returns the id the record would have had.
func placeOrderRolledBack(ctx context.Context, db *sql.DB, ob *relay.Outbox, out io.Writer, o order) (uuid.UUID, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return uuid.Nil, fmt.Errorf("place order: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	id, err := insertOrder(ctx, tx, ob, o)
	if err != nil {
		return uuid.Nil, err
	}
	if err := tx.Rollback(); err != nil {
		return uuid.Nil, fmt.Errorf("place order: roll back: %w", err)
	}
	fmt.Fprintf(out, "rolled back an order (payment declined) after staging its record %s\n", id)
	return id, nil
}

// insertOrder writes one order and stages its "order.placed" record in tx.
func insertOrder(ctx context.Context, tx *sql.Tx, ob *relay.Outbox, o order) (uuid.UUID, error) {
	var orderID int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO `+qschema+`.orders (sku, quantity) VALUES ($1, $2) RETURNING id`,
		o.SKU, o.Quantity).Scan(&orderID); err != nil {
		return uuid.Nil, fmt.Errorf("insert order: %w", err)
	}
	payload, err := json.Marshal(orderPlaced{OrderID: orderID, SKU: o.SKU, Quantity: o.Quantity})
	if err != nil {
		return uuid.Nil, fmt.Errorf("encode order %d: %w", orderID, err)
	}
	// ob.Stage, not relay.Stage: the package-level function stages into
	// the default schema, where this demo's relay is not looking.
	id, err := ob.Stage(ctx, tx, relay.Message{Module: module, Kind: "order.placed", Payload: payload})
	if err != nil {
		return uuid.Nil, fmt.Errorf("stage order %d: %w", orderID, err)
	}
	return id, nil
}

// errNoSKU is why the sink declares an order dead: retrying cannot help,
// someone has to fix the cause.
var errNoSKU = errors.New("order has no sku")

// shopSink is the demo's sink: it would ask a warehouse to ship each order.
// It is safe for concurrent use, as the relay hands records concurrently.
type shopSink struct {
	out io.Writer // safe for concurrent use
	// manualReview is the fix the operator deploys: once set, orders
	// without a SKU go to manual review instead of being dead.
	manualReview atomic.Bool

	mu   sync.Mutex
	seen map[uuid.UUID]int // hands per record
}

func newShopSink(out io.Writer) *shopSink {
	return &shopSink{out: out, seen: map[uuid.UUID]int{}}
}

// Handle answers one record. It may see a record again after a crash, so
// a real sink passes rec.ID to the warehouse as an idempotency key.
func (s *shopSink) Handle(ctx context.Context, rec relay.Record) relay.Result {
	s.mu.Lock()
	s.seen[rec.ID]++
	s.mu.Unlock()

	res, what := s.ship(rec)
	fmt.Fprintf(s.out, "sink got %s %s (correlation %s) %s: %s\n",
		rec.Kind, rec.ID, rec.CorrelationID, compact(rec.Payload), what)
	return res
}

// ship decides a record's fate and says what happened, for the story.
func (s *shopSink) ship(rec relay.Record) (relay.Result, string) {
	if rec.Kind != "order.placed" {
		err := fmt.Errorf("unknown kind %q", rec.Kind)
		return relay.Dead(err), "dead, " + err.Error()
	}
	var o orderPlaced
	if err := json.Unmarshal(rec.Payload, &o); err != nil {
		err = fmt.Errorf("decode order: %w", err)
		return relay.Dead(err), "dead, " + err.Error()
	}
	if o.SKU == "" {
		if !s.manualReview.Load() {
			return relay.Dead(errNoSKU), "dead, " + errNoSKU.Error()
		}
		return relay.DoneWith("manual review"), "done, sent to manual review"
	}
	return relay.Done(), "done, shipping requested"
}

// handedCount reports how often the sink saw the record.
func (s *shopSink) handedCount(id uuid.UUID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[id]
}

// compact drops the spaces PostgreSQL's jsonb puts in a payload.
func compact(payload json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, payload); err != nil {
		return string(payload)
	}
	return b.String()
}

// reemitDead lists the dead records of this run, deploys the fix, and
// re-emits them by id.
func reemitDead(ctx context.Context, db *sql.DB, ob *relay.Outbox, sink *shopSink, out io.Writer, ids []uuid.UUID) error {
	dead, err := ob.ListDead(ctx, db, &relay.DeadFilter{Module: module, IDs: ids})
	if err != nil {
		return err
	}
	if len(dead) == 0 {
		return errors.New("expected a dead record, found none")
	}
	deadIDs := make([]uuid.UUID, 0, len(dead))
	for _, d := range dead {
		fmt.Fprintf(out, "dead: %s %s after %d attempt(s): %s\n", d.Kind, d.ID, d.Attempts, d.Reason)
		deadIDs = append(deadIDs, d.ID)
	}

	// Fix the cause first, or the re-emitted records die again.
	sink.manualReview.Store(true)
	fmt.Fprintln(out, "fixed the cause: orders without a SKU now go to manual review")

	// Re-emit by id, never with a nil filter: that re-emits every dead
	// record of every module.
	n, err := ob.Reemit(ctx, db, &relay.DeadFilter{IDs: deadIDs})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "re-emitted %d record(s); the relay is woken at commit\n", n)
	return nil
}

// checkNeverStaged shows that the rolled-back order left no record behind
// and that the sink never saw one.
func checkNeverStaged(ctx context.Context, db *sql.DB, sink *shopSink, out io.Writer, id uuid.UUID) error {
	var rows int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+qschema+`.outbox WHERE id = $1`, id).Scan(&rows); err != nil {
		return fmt.Errorf("look up rolled-back record: %w", err)
	}
	handed := sink.handedCount(id)
	if rows != 0 || handed != 0 {
		return fmt.Errorf("rolled-back record %s: %d outbox rows, handed %d times; want none", id, rows, handed)
	}
	fmt.Fprintf(out, "rolled-back record %s: no outbox row, never handed\n", id)
	return nil
}

// counts are the states of a set of outbox records.
type counts struct {
	processed, dead, pending int
}

func (c counts) String() string {
	return fmt.Sprintf("%d processed, %d dead, %d pending", c.processed, c.dead, c.pending)
}

// countRecords reads the states of the records ids from the outbox table.
// It counts this run's records only: a DATABASE_URL may hold earlier runs.
func countRecords(ctx context.Context, db *sql.DB, ids []uuid.UUID) (counts, error) {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	var c counts
	err := db.QueryRowContext(ctx, `SELECT
			count(*) FILTER (WHERE processed_at IS NOT NULL),
			count(*) FILTER (WHERE failed_at IS NOT NULL),
			count(*) FILTER (WHERE processed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL)
		FROM `+qschema+`.outbox WHERE id = ANY($1::uuid[])`, pq.Array(s)).Scan(&c.processed, &c.dead, &c.pending)
	if err != nil {
		return counts{}, fmt.Errorf("count records: %w", err)
	}
	return c, nil
}

// waitFor polls the outbox until done holds for ids, for at most
// settleTimeout. The sink returning is not enough: the relay settles the
// row in the database just after.
func waitFor(ctx context.Context, db *sql.DB, rl *relayRun, ids []uuid.UUID, what string, done func(counts) bool) (counts, error) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		c, err := countRecords(ctx, db, ids)
		if err != nil {
			return c, fmt.Errorf("wait until %s: %w", what, err)
		}
		if done(c) {
			return c, nil
		}
		select {
		case <-tick.C:
		case <-rl.done:
			return c, fmt.Errorf("wait until %s: the relay stopped: %w", what, rl.exitErr())
		case <-ctx.Done():
			return c, fmt.Errorf("wait until %s: %w (now %s)", what, ctx.Err(), c)
		}
	}
}

// relayRun is a relay supervisor running in its own goroutine.
type relayRun struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Supervise has returned
	err    error         // what Supervise returned; read after done
}

// startRelay runs relay.Supervise until stop. Supervise blocks, returns an
// error only when it cannot start (a bad Config, no outbox table), and
// afterwards retries database failures itself.
func startRelay(ctx context.Context, db *sql.DB, cfg *relay.Config, sink relay.Sink) *relayRun {
	ctx, cancel := context.WithCancel(ctx)
	r := &relayRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = relay.Supervise(ctx, db, cfg, sink)
	}()
	return r
}

// stop cancels the relay and waits until it has drained and returned.
func (r *relayRun) stop() error {
	r.cancel()
	<-r.done
	return r.err
}

// exitErr is why the relay stopped early, for a caller that saw done.
func (r *relayRun) exitErr() error {
	if r.err != nil {
		return r.err
	}
	return errors.New("Supervise returned without an error")
}

// syncWriter serialises writes, so lines from concurrent hands never mix.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
