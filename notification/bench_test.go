package notification_test

// Benchmarks run against pgtest.DurableURL: a server with fsync and
// synchronous_commit on, never the test cluster. BENCHMARKS.md has the
// commands; their first figures are in docs/bench/HISTORY.md.

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/recording"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/pqlisten"
	"github.com/tidings-go/tidings/relay/relaytest"
)

// drainRequests is how many requests the drain benchmark delivers: as many
// as relay's BenchmarkDrain relays, so the two compare.
const drainRequests = 10_000

var benchSchemas atomic.Int64

// benchDrain is one drain: a fresh schema on the durable server with its
// requests staged.
type benchDrain struct {
	db     *sql.DB
	schema string
	ids    []uuid.UUID
	drop   func() // drops the schema; the benchmark's end does too
}

// newBenchDrain creates a fresh migrated schema and commits n mail
// requests into it in transactions of 1,000.
func newBenchDrain(b *testing.B, db *sql.DB, n int) benchDrain {
	b.Helper()
	schema := fmt.Sprintf("b_notification_%d_%d", os.Getpid(), benchSchemas.Add(1))
	require.NoError(b, tidings.Migrate(b.Context(), db, schema))
	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: schema})
	require.NoError(b, err)
	var once sync.Once
	drop := func() {
		once.Do(func() {
			_, err := db.ExecContext(context.Background(), `DROP SCHEMA "`+schema+`" CASCADE`)
			require.NoError(b, err)
		})
	}
	b.Cleanup(drop)
	d := benchDrain{db: db, schema: schema, ids: make([]uuid.UUID, 0, n), drop: drop}
	const chunk = 1000
	for start := 0; start < n; start += chunk {
		msgs := make([]relay.Message, min(chunk, n-start))
		for i := range msgs {
			req := mailTo(fmt.Sprintf("user%d@example.com", start+i))
			msgs[i], err = req.Message(module)
			require.NoError(b, err)
		}
		ids, err := ob.StageBatch(b.Context(), db, msgs)
		require.NoError(b, err)
		d.ids = append(d.ids, ids...)
	}
	return d
}

// count runs a count(*) query on a table of the drain's schema.
func (d benchDrain) count(b *testing.B, from string, args ...any) int {
	b.Helper()
	var n int
	require.NoError(b, d.db.QueryRowContext(context.Background(),
		`SELECT count(*) FROM `+fmt.Sprintf(from, `"`+d.schema+`"`), args...).Scan(&n))
	return n
}

// waitDrained polls every few milliseconds until no request is pending,
// failing after a generous deadline. The condition is the predicate of the
// outbox_due index, so the poll is an index-only scan of the rows left
// rather than a scan of the whole table; verify checks that every request
// was processed.
func (d benchDrain) waitDrained(b *testing.B) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for d.count(b, `%s.outbox WHERE processed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL`) > 0 {
		if time.Now().After(deadline) {
			b.Fatalf("drain unfinished after 5 minutes: %d requests unprocessed, %d dead",
				d.count(b, `%s.outbox WHERE processed_at IS NULL`), d.count(b, `%s.outbox WHERE failed_at IS NOT NULL`))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// verify fails the benchmark unless every request was delivered exactly
// once and holds exactly one inbox claim.
func (d benchDrain) verify(b *testing.B, mail *recording.Delivery) {
	b.Helper()
	require.Equal(b, len(d.ids), mail.Len(), "deliveries")
	seen := make(map[uuid.UUID]int, len(d.ids))
	for _, p := range mail.Requests() {
		seen[p.ID]++
	}
	for _, id := range d.ids {
		if seen[id] != 1 {
			b.Fatalf("request %s delivered %d times, want once", id, seen[id])
		}
	}
	require.Equal(b, len(d.ids), d.count(b, `%s.inbox WHERE consumer = $1`, consumer), "inbox claims")
	require.Equal(b, len(d.ids), d.count(b, `%[1]s.inbox i JOIN %[1]s.outbox o ON o.id = i.event_id WHERE i.consumer = $1`, consumer),
		"inbox claims of staged requests")
	require.Equal(b, len(d.ids), d.count(b, `%s.outbox WHERE processed_at IS NOT NULL`), "processed requests")
}

// BenchmarkDispatcherDrain delivers 10,000 requests staged in advance
// through the full dispatcher path: a relay with the default BatchSize and
// Concurrency and a LISTEN session, and for each request a transaction with
// its inbox claim around a recording delivery that answers Delivered. Each
// op is one drain on a fresh schema, timed from the start of Supervise
// until the last request is settled. Run it with -benchtime=1x.
func BenchmarkDispatcherDrain(b *testing.B) {
	// The relay's Connections hold the claims' transactions; it needs a
	// few more for its claims, settles and the poll.
	db := pgtest.DurablePool(b, relay.ConnectionsDefault+10)
	dsn := pgtest.DurableURL(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.StopTimer()
	for range b.N {
		d := newBenchDrain(b, db, drainRequests)
		mail := recording.New()
		disp, err := notification.NewDispatcher(&notification.Config{
			Consumer:   consumer,
			Deliveries: map[string]delivery.Delivery{"mail": mail},
		})
		require.NoError(b, err)
		cfg := relay.Config{Module: module, Schema: d.schema, Listener: pqlisten.New(dsn)}

		b.StartTimer()
		stop := relaytest.Supervise(b, db, cfg, disp)
		d.waitDrained(b)
		b.StopTimer()

		stop()
		d.verify(b, mail)
		d.drop()
	}
	b.ReportMetric(float64(drainRequests*b.N)/b.Elapsed().Seconds(), "requests/s")
}
