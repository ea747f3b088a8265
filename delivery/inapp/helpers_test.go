package inapp_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/inapp"
	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/relaytest"
	"github.com/tidings-go/tidings/retrypolicy"
)

const (
	module   = "app"
	consumer = "app_notify"
	channel  = "inapp"
)

// migrateAll installs the library's tables and the in-app table: the two
// migrations an application runs.
func migrateAll(ctx context.Context, db *sql.DB, schema string) error {
	if err := tidings.Migrate(ctx, db, schema); err != nil {
		return err
	}
	return inapp.Migrate(ctx, db, schema)
}

type testBundle struct {
	db     *sql.DB
	native *drivertest.DB // db, and on pgx its pgxpool: staging in the driver's own transactions
	schema string
	ob     *relay.Outbox
	inapp  *inapp.Delivery
}

func setup(t *testing.T) testBundle {
	t.Helper()
	schema := pgtest.Schema(t, migrateAll)
	native := &drivertest.DB{DB: pgtest.DB(t)}
	if d := drivertest.For(t); d != drivertest.PQ {
		native = d.Open(t, pgtest.URL(t), 40)
	}
	db := native.DB
	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: schema})
	require.NoError(t, err)
	d, err := inapp.New(&inapp.Config{DB: db, Schema: schema})
	require.NoError(t, err)
	return testBundle{db: db, native: native, schema: schema, ob: ob, inapp: d}
}

// run supervises a relay whose dispatcher delivers channel "inapp" through
// dl, until the test ends, and returns a client of the test's schema. Its
// retry policy is fast enough for tests: no jitter, 50 ms doubling.
func (b testBundle) run(t *testing.T, dl delivery.Delivery) *notification.Client {
	t.Helper()
	d, err := notification.NewDispatcher(&notification.Config{
		Consumer:        consumer,
		Deliveries:      map[string]delivery.Delivery{channel: dl},
		Policy:          retrypolicy.Policy{BaseDelay: 50 * time.Millisecond, RandFunc: func() float64 { return 0 }},
		DeliveryTimeout: 4 * time.Second,
	})
	require.NoError(t, err)
	cfg := relay.Config{
		Module:        module,
		Schema:        b.schema,
		Listener:      drivertest.For(t).Listener(t, pgtest.URL(t)),
		Pipeline:      drivertest.For(t).Pipeline(),
		HandTimeout:   5 * time.Second,
		Lease:         10 * time.Second,
		SweepInterval: time.Hour,
		GracePeriod:   5 * time.Second,
	}
	relaytest.Supervise(t, b.db, cfg, d)
	c, err := notification.NewClient(b.db, &notification.ClientConfig{Schema: b.schema, Consumer: consumer})
	require.NoError(t, err)
	return c
}

// stage commits reqs in one transaction, with ctx's correlation id, and
// returns their ids.
func (b testBundle) stage(ctx context.Context, t *testing.T, reqs ...notification.Request) []uuid.UUID {
	t.Helper()
	msgs := make([]relay.Message, len(reqs))
	for i, req := range reqs {
		msg, err := req.Message(module)
		require.NoError(t, err)
		msgs[i] = msg
	}
	var ids []uuid.UUID
	require.NoError(t, b.native.InTx(ctx, func(tx dbtx.Execer) (err error) {
		ids, err = b.ob.StageBatch(ctx, tx, msgs)
		return err
	}))
	return ids
}

// wake stages a record the dispatcher ignores: its commit wakes the relay,
// which then claims every due record of the module.
func (b testBundle) wake(t *testing.T) uuid.UUID {
	t.Helper()
	id, err := b.ob.Stage(t.Context(), b.native.Execer(), relay.Message{Module: module, Kind: "test.wake", Payload: []byte(`{}`)})
	require.NoError(t, err)
	return id
}

// waitSettled waits, with a deadline, until id is settled, and returns its
// status.
func waitSettled(t *testing.T, d *notification.Client, id uuid.UUID) notification.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	st, err := d.Wait(ctx, id)
	require.NoError(t, err, "%s not settled: %+v", id, st)
	return st
}

// rows counts the in-app rows of id.
func (b testBundle) rows(t *testing.T, id uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRowContext(t.Context(),
		`SELECT count(*) FROM "`+b.schema+`".inapp_notifications WHERE id = $1`, id).Scan(&n))
	return n
}

// pending is a request for recipient as the dispatcher would hand it, with
// a fresh id.
func pending(recipient string, data map[string]any) delivery.Pending {
	return delivery.Pending{
		ID:            uuid.Must(uuid.NewV7()),
		Channel:       channel,
		Recipient:     recipient,
		Template:      "comment",
		Data:          data,
		CorrelationID: "corr-1",
		Attempt:       1,
		StagedAt:      time.Now(),
	}
}

// deliver writes a notification for recipient outside any dispatcher and
// returns its id.
func (b testBundle) deliver(t *testing.T, recipient string) uuid.UUID {
	t.Helper()
	p := pending(recipient, map[string]any{"n": "x"})
	out := b.inapp.Deliver(t.Context(), p)
	require.Equal(t, delivery.KindDelivered, out.Kind(), out.String())
	return p.ID
}

// seed writes one notification for recipient per time in ats, created at
// that time, and returns their ids in the order of ats.
func (b testBundle) seed(t *testing.T, recipient string, ats ...time.Time) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, len(ats))
	for i, at := range ats {
		ids[i] = b.deliver(t, recipient)
		_, err := b.db.ExecContext(t.Context(),
			`UPDATE "`+b.schema+`".inapp_notifications SET created_at = $2 WHERE id = $1`, ids[i], at)
		require.NoError(t, err)
	}
	return ids
}

// base is the creation time of seeded notifications.
var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func minutes(n int) time.Time { return base.Add(time.Duration(n) * time.Minute) }

func ids(list []inapp.Notification) []uuid.UUID {
	out := make([]uuid.UUID, len(list))
	for i, n := range list {
		out[i] = n.ID
	}
	return out
}
