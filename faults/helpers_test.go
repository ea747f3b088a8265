package faults_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/internal/ledger"
	"github.com/tidings-go/tidings/internal/pgtemp"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/relaytest"
	"github.com/tidings-go/tidings/retrypolicy"
)

const (
	module   = "faults"
	consumer = "faults_notify"
	channel  = "provider"

	// Application names of the sessions: the relay's pool, its LISTEN
	// session, and the test's own pool, which no fault touches.
	appRelay  = "faults_relay"
	appListen = "faults_listen"
	appTest   = "faults_test"

	// Provider latency, as the issue asks.
	latencyMin = 5 * time.Millisecond
	latencyMax = 50 * time.Millisecond
	// The deliveries' timeout, far above the provider's latency: a send
	// the provider gets only after it (a machine stalled for seconds) is
	// one the delivery answered Retry for, and its repeat is explained.
	deliveryTimeout = 2 * time.Second

	// pollInterval is how often a wait looks.
	pollInterval = 50 * time.Millisecond
)

// logger is the relay's and the dispatcher's logger: stderr when
// TIDINGS_FAULTS_LOG is set, else nothing.
func logger() *slog.Logger {
	if os.Getenv("TIDINGS_FAULTS_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// relayConfig is the relay of every test: short leases and timeouts, so a
// crashed hand comes back within seconds (the deliveries' timeout,
// deliveryTimeout, is far above the provider's latency).
func relayConfig(schema string, d drivertest.Driver, listener relay.Listener) relay.Config {
	return relay.Config{
		Module:        module,
		Schema:        schema,
		Listener:      listener,
		Pipeline:      d.Pipeline(),
		BatchSize:     50,
		Concurrency:   20,
		HandTimeout:   3 * time.Second,
		Lease:         4 * time.Second,
		SweepInterval: time.Second,
		GracePeriod:   2 * time.Second,
		// The policy's 200 ms-1 s stands for production's 15 s-1 h: five
		// failed claim transactions in a row (MaxUnsure's default) take
		// minutes of storm there and a couple of seconds here, so the bound
		// is scaled with the time.
		MaxUnsure: 50,
		Logger:    logger(),
	}
}

// dispatcherConfig is the dispatcher of every test: one channel whose
// delivery posts to the provider, and retries 200 ms apart.
func dispatcherConfig(client *ledger.Client) notification.Config {
	return notification.Config{
		Consumer:        consumer,
		Deliveries:      map[string]delivery.Delivery{channel: providerDelivery(client)},
		Policy:          retrypolicy.Policy{BaseDelay: 200 * time.Millisecond, MaxDelay: time.Second},
		DeliveryTimeout: deliveryTimeout,
		Logger:          logger(),
	}
}

// providerDelivery posts each request to the provider with its id as the
// idempotency key: Delivered on 2xx, Retry otherwise.
func providerDelivery(client *ledger.Client) delivery.Func {
	return func(ctx context.Context, p delivery.Pending) delivery.Outcome {
		if err := client.Send(ctx, p.ID, p.StagedAt); err != nil {
			return delivery.Retry(err)
		}
		return delivery.Delivered()
	}
}

// stamped is the dispatcher handing each batch with the time its hand
// began, which the delivery passes on to the provider: the start of the
// window in which a fault can doom the claim's transaction and make the
// provider see a request again.
type stamped struct{ *notification.Dispatcher }

func (s stamped) HandleBatch(ctx context.Context, b *relay.Batch) {
	s.Dispatcher.HandleBatch(ledger.WithHandStart(ctx, time.Now().Round(0)), b)
}

// withParams returns the connection string raw with the query parameters
// set.
func withParams(t *testing.T, raw string, params map[string]string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

type testBundle struct {
	cluster  *pgtemp.Cluster // the test's own server; nil on the shared one
	url      string          // base connection string, as pgtest's application role, empty search_path
	db       *sql.DB         // the test's own pool, as the application: staging and looking
	admin    *sql.DB         // the server's owner: migrations, and faults only it may inject
	schema   string
	ob       *relay.Outbox
	provider *ledger.Provider
	client   *ledger.Client // the in-process relay's
	faults   *ledger.Faults
	known    *idLog // ids whose staging the test saw commit
}

// idLog collects ids from many goroutines.
type idLog struct {
	mu  sync.Mutex
	ids []uuid.UUID
}

func (l *idLog) add(ids []uuid.UUID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ids = append(l.ids, ids...)
}

func (l *idLog) list() []uuid.UUID {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]uuid.UUID(nil), l.ids...)
}

// setupShared gives the test a schema of its own on the shared cluster.
func setupShared(t *testing.T) testBundle {
	t.Helper()
	schema := pgtest.Schema(t, tidings.Migrate)
	return newBundle(t, nil, pgtest.URL(t), pgtest.AdminDB(t), schema)
}

// setupCluster starts a durable cluster for the test alone, as a
// production server runs, because the test stops it or cuts its sessions.
// Its owner migrates it and grants pgtest's application role DML on the
// tables, and the test and the relay connect as that role.
func setupCluster(t *testing.T) testBundle {
	t.Helper()
	app, cluster := pgtest.Cluster(t, &pgtemp.Options{Durable: true, Settings: map[string]string{"track_commit_timestamp": "on"}},
		tidings.Migrate, tidings.SchemaDefault)
	noPath := map[string]string{"options": "-c search_path="}
	admin, err := sql.Open("postgres", withParams(t, cluster.URL(), noPath))
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	return newBundle(t, cluster, withParams(t, app, noPath), admin, tidings.SchemaDefault)
}

func newBundle(t *testing.T, cluster *pgtemp.Cluster, base string, admin *sql.DB, schema string) testBundle {
	t.Helper()
	b := testBundle{cluster: cluster, url: base, admin: admin, schema: schema, faults: &ledger.Faults{}, known: &idLog{}}
	var err error
	b.ob, err = relay.NewOutbox(&relay.OutboxConfig{Schema: schema})
	require.NoError(t, err)
	b.db, err = sql.Open("postgres", b.dsn(t, appTest))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.db.Close() })
	b.provider, err = ledger.StartProvider(latencyMin, latencyMax)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.provider.Close()) })
	b.client = ledger.NewClient(b.provider.URL())
	t.Cleanup(b.client.Close)
	return b
}

// dsn is the base connection string with application_name app.
func (b testBundle) dsn(t *testing.T, app string) string {
	t.Helper()
	return withParams(t, b.url, map[string]string{"application_name": app})
}

// runRelay supervises an in-process relay with the dispatcher, on a pool
// of its own named appRelay, of the driver the test runs on, and returns a function that stops it (also
// called when the test ends).
func (b testBundle) runRelay(t *testing.T, cfg relay.Config) (stop func()) {
	t.Helper()
	// A connection per hand, kept open (see child).
	db := drivertest.For(t).Open(t, b.dsn(t, appRelay), cfg.Concurrency+8).DB
	dcfg := dispatcherConfig(b.client)
	d, err := notification.NewDispatcher(&dcfg)
	require.NoError(t, err)

	return relaytest.Supervise(t, db, cfg, stamped{d})
}

// stage commits n notification requests in one statement and returns
// their ids.
func (b testBundle) stage(ctx context.Context, n int) ([]uuid.UUID, error) {
	msgs := make([]relay.Message, n)
	for i := range msgs {
		msg, err := notification.Request{Channel: channel, Recipient: fmt.Sprintf("user%d@example.invalid", i),
			Template: "fault"}.Message(module)
		if err != nil {
			return nil, err
		}
		msgs[i] = msg
	}
	ids, err := b.ob.StageBatch(ctx, b.db, msgs)
	if err != nil {
		return nil, err
	}
	b.known.add(ids)
	return ids, nil
}

// mustStage stages n requests in batches of at most 500.
func (b testBundle) mustStage(t *testing.T, n int) {
	t.Helper()
	for n > 0 {
		k := min(n, 500)
		_, err := b.stage(t.Context(), k)
		require.NoError(t, err)
		n -= k
	}
}

// stageRetrying stages n requests, retrying while the server is away, as
// an application retries its write. An error on commit may hide a commit
// that happened: such rows are staged without the test knowing their ids,
// and the ledger, which counts the outbox, still accounts for them.
func (b testBundle) stageRetrying(t *testing.T, n int, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for n > 0 {
		k := min(n, 100)
		_, err := b.stage(ctx, k)
		if err == nil {
			n -= k
			continue
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("could not stage within %s: %v", within, err)
		}
	}
}

// load stages batch requests every interval until stopped, and counts what
// it staged. Failed batches are retried on the next tick.
type load struct {
	stop   func() // stops the load and waits for it
	staged func() int
}

func (b testBundle) startLoad(t *testing.T, interval time.Duration, batch int) load {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var (
		mu     sync.Mutex
		staged int
		errs   int
		wg     sync.WaitGroup
	)
	wg.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
			_, err := b.stage(ctx, batch)
			mu.Lock()
			if err == nil {
				staged += batch
			} else if ctx.Err() == nil {
				errs++
			}
			mu.Unlock()
		}
	})
	var once sync.Once
	l := load{
		stop: func() {
			once.Do(func() {
				cancel()
				wg.Wait()
				mu.Lock()
				defer mu.Unlock()
				t.Logf("load: staged %d, %d failed batches", staged, errs)
			})
		},
		staged: func() int {
			mu.Lock()
			defer mu.Unlock()
			return staged
		},
	}
	t.Cleanup(l.stop)
	return l
}

// counts reads the states of the module's rows.
func (b testBundle) counts(ctx context.Context) (ledger.Counts, error) {
	return ledger.Count(ctx, b.db, b.schema, module)
}

// waitProcessed waits until no row is pending, and fails the test on a
// dead row or when within runs out. Reads that fail (the server may be
// restarting) are retried. Both counts use the outbox's partial indexes,
// so polling stays cheap however many rows are processed.
func (b testBundle) waitProcessed(t *testing.T, within time.Duration) {
	t.Helper()
	var pending, dead int
	var err error
	waitFor(t, within, func() bool {
		err = b.db.QueryRowContext(t.Context(), `SELECT
				(SELECT count(*) FROM "`+b.schema+`".outbox WHERE module = $1
					AND processed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL),
				(SELECT count(*) FROM "`+b.schema+`".outbox WHERE failed_at IS NOT NULL)`, module).Scan(&pending, &dead)
		if err != nil {
			return false
		}
		require.Zero(t, dead, "dead rows")
		return pending == 0
	}, func() string { return fmt.Sprintf("no row pending: %d pending (last error: %v)", pending, err) })
}

// waitFor polls cond every pollInterval until it holds, and fails the test
// when within runs out, saying what it waited for.
func waitFor(t *testing.T, within time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("waited %s for %s", within, what())
		case <-t.Context().Done():
			t.Fatalf("test ended while waiting for %s", what())
		}
	}
}

// sessions counts the server's sessions named app.
func (b testBundle) sessions(t *testing.T, app string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRowContext(t.Context(),
		`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n))
	return n
}

// checkLedger settles the accounts and fails the test unless they hold.
func (b testBundle) checkLedger(t *testing.T) *ledger.Report {
	t.Helper()
	// At most the child relay and an in-process one hand at once.
	inFlight := childConcurrency + relayConfig("", drivertest.PQ, nil).Concurrency
	r, err := ledger.Check(t.Context(), b.db, ledger.Config{Schema: b.schema, Module: module, Consumer: consumer,
		Known: b.known.list(), InFlight: inFlight, Timeout: deliveryTimeout}, b.provider.Receipts(), b.faults.List())
	require.NoError(t, err)
	t.Logf("ledger:\n%s", r)
	require.True(t, r.OK(), "the ledger does not hold:\n%s", r)
	return r
}

// watchedListener is a relay.Listener that keeps what its listener tells
// the relay: whether LISTEN is in effect, and how many of the module's
// notifications it passed on. A relay recovers from a lost session by
// sweeping every relay.ListenDownSweep, so draining proves nothing about
// the session; these do.
type watchedListener struct {
	relay.Listener
	mu        sync.Mutex
	listening bool // a Listening with no Lost after it
	notified  int  // the module's notifications passed on
}

// watch wraps l.
func watch(l relay.Listener) *watchedListener { return &watchedListener{Listener: l} }

// Listen listens through the wrapped listener, keeping what it tells h.
func (w *watchedListener) Listen(ctx context.Context, name string, h relay.ListenHandler) {
	w.Listener.Listen(ctx, name, watchedHandler{w: w, h: h})
}

// state returns whether LISTEN is in effect and the notifications so far.
func (w *watchedListener) state() (listening bool, notified int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.listening, w.notified
}

type watchedHandler struct {
	w *watchedListener
	h relay.ListenHandler
}

func (x watchedHandler) Listening() {
	x.w.mu.Lock()
	x.w.listening = true
	x.w.mu.Unlock()
	x.h.Listening()
}

func (x watchedHandler) Notified(payload string) {
	if payload == module {
		x.w.mu.Lock()
		x.w.notified++
		x.w.mu.Unlock()
	}
	x.h.Notified(payload)
}

func (x watchedHandler) Lost(err error) {
	x.w.mu.Lock()
	x.w.listening = false
	x.w.mu.Unlock()
	x.h.Lost(err)
}

// probeListen checks that the relay's LISTEN session is back and passes
// notifications on: it waits until LISTEN is in effect, stages a probe,
// and requires its notification to reach the relay and the probe to be
// processed.
func (b testBundle) probeListen(t *testing.T, w *watchedListener) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool { listening, _ := w.state(); return listening },
		func() string { return "LISTEN to take effect again" })
	_, before := w.state()
	start := time.Now()
	_, err := b.stage(t.Context(), 10)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, func() bool { _, n := w.state(); return n > before },
		func() string { return "the probe's notification to reach the relay" })
	b.waitProcessed(t, 10*time.Second)
	t.Logf("a probe was notified and processed in %s", time.Since(start).Round(time.Millisecond))
}
