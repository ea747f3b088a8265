package relay_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/internal/logbuf"
	"github.com/tidings-go/tidings/internal/pgtemp"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/relaytest"
)

const module = "orders"

type testBundle struct {
	db     *sql.DB
	native *drivertest.DB // db, and on pgx its pgxpool: staging in the driver's own transactions
	schema string
	ob     *relay.Outbox
	listen string // the relay's LISTEN DSN; empty means the test server's
}

// setup gives the test a schema of its own, and pools of the driver it
// runs on (drivertest.For): the shared one on lib/pq.
func setup(t *testing.T) testBundle {
	t.Helper()
	schema := pgtest.Schema(t, tidings.Migrate)
	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: schema})
	require.NoError(t, err)
	native := &drivertest.DB{DB: pgtest.DB(t)}
	if d := drivertest.For(t); d != drivertest.PQ {
		native = d.Open(t, pgtest.URL(t), 20)
	}
	return testBundle{db: native.DB, native: native, schema: schema, ob: ob}
}

// config is a Config for tests: the test's schema, a LISTEN session, and
// timings short enough for tests.
func (b testBundle) config(t *testing.T) relay.Config {
	listen := b.listen
	if listen == "" {
		listen = pgtest.URL(t)
	}
	return relay.Config{
		Module:        module,
		Schema:        b.schema,
		Listener:      drivertest.For(t).Listener(t, listen),
		HandTimeout:   2 * time.Second,
		Lease:         5 * time.Second,
		SweepInterval: time.Hour, // tests of the sweep shorten it
		GracePeriod:   5 * time.Second,
	}
}

// ownCluster starts a throwaway cluster of the test's own, stopped when the
// test ends, migrates the default schema into it, and returns the bundle
// of that schema: for tests that crash the server or set its clock off.
// The cluster's owner migrates it and grants pgtest's application role DML
// on the tables; the pool and the LISTEN session connect as that role.
func ownCluster(t *testing.T, opts *pgtemp.Options) (testBundle, *pgtemp.Cluster) {
	t.Helper()
	app, cluster := pgtest.Cluster(t, opts, tidings.Migrate, tidings.SchemaDefault)
	db := drivertest.For(t).Open(t, app, 20)
	ob, err := relay.NewOutbox(nil)
	require.NoError(t, err)
	return testBundle{db: db.DB, native: db, schema: tidings.SchemaDefault, ob: ob, listen: app}, cluster
}

func payload(i int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)) }

// stage commits n records for module and returns their ids.
func (b testBundle) stage(t *testing.T, n int) []uuid.UUID {
	t.Helper()
	msgs := make([]relay.Message, n)
	for i := range msgs {
		msgs[i] = relay.Message{Module: module, Kind: "order.placed", Payload: payload(i)}
	}
	var ids []uuid.UUID
	require.NoError(t, b.native.InTx(t.Context(), func(tx dbtx.Execer) (err error) {
		ids, err = b.ob.StageBatch(t.Context(), tx, msgs)
		return err
	}))
	return ids
}

// count returns the number of outbox rows matching a condition.
func (b testBundle) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRowContext(context.Background(),
		`SELECT count(*) FROM "`+b.schema+`".outbox WHERE `+where).Scan(&n))
	return n
}

// eventually waits, with a deadline, until the number of rows matching
// where is want.
func (b testBundle) eventually(t *testing.T, where string, want int, within time.Duration) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, want, b.count(t, where), "rows where %s", where)
	}, within, 10*time.Millisecond)
}

// logged sends the relay's logs, debug ones too, to the returned buffer,
// as text.
func logged(cfg *relay.Config) *logbuf.Buffer {
	logs := &logbuf.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return logs
}

// supervise runs a relay until the test ends; stop ends it early.
func supervise(t *testing.T, db *sql.DB, cfg relay.Config, sink relay.Sink) (stop func()) {
	t.Helper()
	return relaytest.Supervise(t, db, cfg, sink)
}

// recorder is a sink that records every hand and answers with answer (Done
// when nil).
type recorder struct {
	mu     sync.Mutex
	hands  map[uuid.UUID]int
	recs   []relay.Record
	answer func(ctx context.Context, rec relay.Record) relay.Result
}

func newRecorder(answer func(ctx context.Context, rec relay.Record) relay.Result) *recorder {
	return &recorder{hands: map[uuid.UUID]int{}, answer: answer}
}

func (r *recorder) Handle(ctx context.Context, rec relay.Record) relay.Result {
	r.mu.Lock()
	r.hands[rec.ID]++
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
	if r.answer == nil {
		return relay.Done()
	}
	return r.answer(ctx, rec)
}

func (r *recorder) handsOf(id uuid.UUID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hands[id]
}

func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.recs)
}

func (r *recorder) records() []relay.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]relay.Record(nil), r.recs...)
}

// waitHands waits until the recorder saw at least n hands.
func (r *recorder) waitHands(t *testing.T, n int, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return r.total() >= n }, within, 5*time.Millisecond,
		"want %d hands, have %d", n, r.total())
}
