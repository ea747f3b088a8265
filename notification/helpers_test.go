package notification_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/recording"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/relaytest"
	"github.com/tidings-go/tidings/retrypolicy"
)

const (
	module   = "hr"
	consumer = "hr_notify"
)

type testBundle struct {
	db     *sql.DB
	native *drivertest.DB // db, and on pgx its pgxpool: staging in the driver's own transactions
	schema string
	ob     *relay.Outbox
	client *notification.Client
	mail   *recording.Delivery
	sms    *recording.Delivery
}

func setup(t *testing.T) testBundle {
	t.Helper()
	schema := pgtest.Schema(t, tidings.Migrate)
	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: schema})
	require.NoError(t, err)
	native := &drivertest.DB{DB: pgtest.DB(t)}
	if d := drivertest.For(t); d != drivertest.PQ {
		native = d.Open(t, pgtest.URL(t), 40)
	}
	db := native.DB
	client, err := notification.NewClient(db, &notification.ClientConfig{Schema: schema, Consumer: consumer})
	require.NoError(t, err)
	return testBundle{db: db, native: native, schema: schema, ob: ob, client: client, mail: recording.New(), sms: recording.New()}
}

// config is a dispatcher Config with the bundle's deliveries and a policy
// fast enough for tests: no jitter, 50 ms doubling.
func (b testBundle) config() notification.Config {
	return notification.Config{
		Consumer:   consumer,
		Deliveries: map[string]delivery.Delivery{"mail": b.mail, "sms": b.sms},
		Policy:     retrypolicy.Policy{BaseDelay: 50 * time.Millisecond, RandFunc: func() float64 { return 0 }},
	}
}

// meteredConfig is config with categories and a meter provider whose
// metrics the returned reader collects.
func (b testBundle) meteredConfig(categories map[string]notification.Category) (notification.Config, *sdkmetric.ManualReader) {
	reader := sdkmetric.NewManualReader()
	cfg := b.config()
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	cfg.Categories = categories
	return cfg, reader
}

// loseSettleAndReemit makes the settled request id look as if its settle
// had been lost and it had died of something else (as a crash after the
// claim's commit and then MaxHands would have it), and re-emits it as an
// operator would.
func (b testBundle) loseSettleAndReemit(t *testing.T, ids ...uuid.UUID) {
	t.Helper()
	for _, id := range ids {
		_, err := b.db.ExecContext(t.Context(), `UPDATE "`+b.schema+`".outbox SET processed_at = NULL, failed_at = now(), failure_reason = 'lost'
			WHERE id = $1`, id)
		require.NoError(t, err)
	}
	// In one statement: the relay claims them together, as one batch.
	n, err := b.ob.Reemit(t.Context(), b.db, &relay.DeadFilter{IDs: ids})
	require.NoError(t, err)
	require.EqualValues(t, len(ids), n)
}

func (b testBundle) dispatcher(t *testing.T, cfg notification.Config) *notification.Dispatcher {
	t.Helper()
	d, err := notification.NewDispatcher(&cfg)
	require.NoError(t, err)
	return d
}

// prepared is a dispatcher prepared as the bundle's relay would, for tests
// that hand it records themselves.
func (b testBundle) prepared(t *testing.T, cfg notification.Config) *notification.Dispatcher {
	t.Helper()
	d := b.dispatcher(t, cfg)
	rc := b.relayConfig(t)
	rc.MaxHands = relay.MaxHandsDefault
	require.NoError(t, d.Prepare(t.Context(), b.db, rc))
	return d
}

func (b testBundle) relayConfig(t *testing.T) relay.Config {
	return relay.Config{
		Module:        module,
		Schema:        b.schema,
		Listener:      drivertest.For(t).Listener(t, pgtest.URL(t)),
		Pipeline:      drivertest.For(t).Pipeline(),
		HandTimeout:   5 * time.Second,
		Lease:         10 * time.Second,
		SweepInterval: time.Hour,
		GracePeriod:   5 * time.Second,
	}
}

// run supervises a relay with sink until the test ends.
func (b testBundle) run(t *testing.T, sink relay.Sink) {
	t.Helper()
	b.runWith(t, b.relayConfig(t), sink)
}

// runWith supervises a relay of cfg with sink until the test ends.
func (b testBundle) runWith(t *testing.T, cfg relay.Config, sink relay.Sink) {
	t.Helper()
	supervise(t, b.db, cfg, sink)
}

// supervise runs a relay on db until the test ends.
func supervise(t *testing.T, db *sql.DB, cfg relay.Config, sink relay.Sink) {
	t.Helper()
	relaytest.Supervise(t, db, cfg, sink)
}

// stage commits reqs in one transaction and returns their ids.
func (b testBundle) stage(t *testing.T, reqs ...notification.Request) []uuid.UUID {
	t.Helper()
	msgs := make([]relay.Message, len(reqs))
	for i, req := range reqs {
		msg, err := req.Message(module)
		require.NoError(t, err)
		msgs[i] = msg
	}
	var ids []uuid.UUID
	require.NoError(t, b.native.InTx(t.Context(), func(tx dbtx.Execer) (err error) {
		ids, err = b.ob.StageBatch(t.Context(), tx, msgs)
		return err
	}))
	return ids
}

func (b testBundle) status(t *testing.T, id uuid.UUID) relay.Status {
	t.Helper()
	st, err := b.ob.Status(t.Context(), b.db, id)
	require.NoError(t, err)
	return st
}

// waitSettled waits, with a deadline, until id is settled, and returns its
// status.
func (b testBundle) waitSettled(t *testing.T, id uuid.UUID) relay.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	for {
		st := b.status(t, id)
		if st.Settled() {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s not settled: %+v", id, st)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (b testBundle) claims(t *testing.T, id uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRowContext(t.Context(),
		`SELECT count(*) FROM "`+b.schema+`".inbox WHERE consumer = $1 AND event_id = $2`, consumer, id).Scan(&n))
	return n
}

// blocked is a delivery that signals when it is called (the first 100
// calls) and answers what the test sends it, or Retry when its context
// ends.
type blocked struct {
	mu      sync.Mutex
	calls   int
	running int
	started chan delivery.Pending
	answer  chan delivery.Outcome
}

func newBlocked() *blocked {
	return &blocked{started: make(chan delivery.Pending, 100), answer: make(chan delivery.Outcome, 100)}
}

func (d *blocked) Deliver(ctx context.Context, p delivery.Pending) delivery.Outcome {
	d.mu.Lock()
	d.calls++
	d.running++
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.running--
		d.mu.Unlock()
	}()
	select {
	case d.started <- p:
	default:
	}
	select {
	case out := <-d.answer:
		return out
	case <-ctx.Done():
		return delivery.Retry(ctx.Err())
	}
}

func (d *blocked) callCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls
}

// inFlight is how many calls have not returned.
func (d *blocked) inFlight() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.running
}

func mailTo(who string) notification.Request {
	return notification.Request{Channel: "mail", Recipient: who, Template: "welcome", Data: map[string]any{"name": "Ada"}}
}

// waitBlockedOnClaim waits until a session of the test's database waits on
// a lock: the second claim of a request behind an open first one.
func (b testBundle) waitBlockedOnClaim(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.db.QueryRowContext(t.Context(),
			`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%"`+b.schema+`".inbox%'`).Scan(&n))
		return n > 0
	}, 10*time.Second, 5*time.Millisecond)
}

// sumCounter sums the data points of the int64 counter name whose
// attributes k1 and k2 are v1 and v2.
func sumCounter(rm metricdata.ResourceMetrics, name string, k1 attribute.Key, v1 string, k2 attribute.Key, v2 string) int64 {
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				a, _ := dp.Attributes.Value(k1)
				b, _ := dp.Attributes.Value(k2)
				if a.AsString() == v1 && b.AsString() == v2 {
					n += dp.Value
				}
			}
		}
	}
	return n
}
