package relay_test

// Benchmarks run against pgtest.DurableURL: a server with fsync and
// synchronous_commit on, never the test cluster. BENCHMARKS.md has the
// commands; their first figures are in docs/bench/HISTORY.md.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/pqlisten"
	"github.com/tidings-go/tidings/relay/relaytest"
)

// drainRecords is how many records a drain benchmark relays.
const drainRecords = 10_000

// benchPayload is the payload of a staged benchmark record.
var benchPayload = json.RawMessage(`{"order":42,"total":"19.90"}`)

var benchSchemas atomic.Int64

// benchBundle is a pool on the durable server.
type benchBundle struct {
	db  *sql.DB
	dsn string
}

// benchSetup opens a pool of conns connections on the durable server
// (pgtest.DurablePool).
func benchSetup(b *testing.B, conns int) benchBundle {
	b.Helper()
	return benchBundle{db: pgtest.DurablePool(b, conns), dsn: pgtest.DurableURL(b)}
}

// schema creates a fresh migrated schema and returns it with its outbox and
// a drop function; the benchmark also drops it when it ends.
func (bb benchBundle) schema(b *testing.B) (string, *relay.Outbox, func()) {
	b.Helper()
	schema := fmt.Sprintf("b_relay_%d_%d", os.Getpid(), benchSchemas.Add(1))
	require.NoError(b, tidings.Migrate(b.Context(), bb.db, schema))
	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: schema})
	require.NoError(b, err)
	var once sync.Once
	drop := func() {
		once.Do(func() {
			_, err := bb.db.ExecContext(context.Background(), `DROP SCHEMA "`+schema+`" CASCADE`)
			require.NoError(b, err)
		})
	}
	b.Cleanup(drop)
	return schema, ob, drop
}

// stageChunked commits n records for module in transactions of 1,000.
func (bb benchBundle) stageChunked(b *testing.B, ob *relay.Outbox, n int) {
	b.Helper()
	const chunk = 1000
	for start := 0; start < n; start += chunk {
		msgs := make([]relay.Message, min(chunk, n-start))
		for i := range msgs {
			msgs[i] = relay.Message{Module: module, Kind: "order.placed", Payload: payload(start + i)}
		}
		_, err := ob.StageBatch(b.Context(), bb.db, msgs)
		require.NoError(b, err)
	}
}

// count returns the number of outbox rows of schema matching where.
func (bb benchBundle) count(b *testing.B, schema, where string) int {
	b.Helper()
	var n int
	require.NoError(b, bb.db.QueryRowContext(context.Background(),
		`SELECT count(*) FROM "`+schema+`".outbox WHERE `+where).Scan(&n))
	return n
}

// pendingRows matches the rows not yet settled. It is the predicate of the
// outbox_due index, so the poll is an index-only scan of the rows left: a
// count on processed_at alone scans the whole table, dead row versions
// included, every few milliseconds, and takes CPU from the drain it times.
// A drain must still end with every record processed; the caller checks.
const pendingRows = "processed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL"

// waitDrained polls every few milliseconds until no record of schema is
// pending, failing after a generous deadline.
func (bb benchBundle) waitDrained(b *testing.B, schema string) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for bb.count(b, schema, pendingRows) > 0 {
		if time.Now().After(deadline) {
			b.Fatalf("drain unfinished after 5 minutes: %d records unprocessed, %d dead",
				bb.count(b, schema, "processed_at IS NULL"), bb.count(b, schema, "failed_at IS NOT NULL"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkStage stages one record per transaction (BEGIN, Stage, COMMIT)
// from concurrent writers. An op is one committed transaction.
func BenchmarkStage(b *testing.B) {
	for _, writers := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			bb := benchSetup(b, writers)
			_, ob, _ := bb.schema(b)
			msg := relay.Message{Module: module, Kind: "order.placed", Payload: benchPayload}
			ctx := b.Context()
			var next atomic.Int64
			errs := make(chan error, writers)
			var wg sync.WaitGroup
			b.ReportAllocs()
			b.ResetTimer()
			for range writers {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if err := stageOne(ctx, bb.db, ob, msg); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			close(errs)
			for err := range errs {
				require.NoError(b, err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

func stageOne(ctx context.Context, db *sql.DB, ob *relay.Outbox, msg relay.Message) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := ob.Stage(ctx, tx, msg); err != nil {
		return err
	}
	return tx.Commit()
}

// BenchmarkStageBatch stages size records per transaction from one writer.
// An op is one committed transaction of size records.
func BenchmarkStageBatch(b *testing.B) {
	for _, size := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			bb := benchSetup(b, 1)
			_, ob, _ := bb.schema(b)
			msgs := make([]relay.Message, size)
			for i := range msgs {
				msgs[i] = relay.Message{Module: module, Kind: "order.placed", Payload: benchPayload}
			}
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				tx, err := bb.db.BeginTx(ctx, nil)
				require.NoError(b, err)
				_, err = ob.StageBatch(ctx, tx, msgs)
				require.NoError(b, err)
				require.NoError(b, tx.Commit())
			}
			b.ReportMetric(float64(size*b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkDrain relays 10,000 records staged in advance through a no-op
// sink, with the default BatchSize and Concurrency and a LISTEN session.
// Each op is one drain on a fresh schema, timed from the start of
// Supervise until the last record is settled. Run it with -benchtime=1x.
func BenchmarkDrain(b *testing.B) {
	bb := benchSetup(b, relay.ConnectionsDefault+10)
	sink := relay.SinkFunc(func(context.Context, relay.Record) relay.Result { return relay.Done() })
	b.ReportAllocs()
	b.ResetTimer()
	b.StopTimer()
	for range b.N {
		schema, ob, drop := bb.schema(b)
		bb.stageChunked(b, ob, drainRecords)
		cfg := relay.Config{Module: module, Schema: schema, Listener: pqlisten.New(bb.dsn)}

		b.StartTimer()
		stop := relaytest.Supervise(b, bb.db, cfg, sink)
		bb.waitDrained(b, schema)
		b.StopTimer()

		stop()
		require.Equal(b, drainRecords, bb.count(b, schema, "processed_at IS NOT NULL"))
		drop()
	}
	b.ReportMetric(float64(drainRecords*b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkStats reads what the gauges and the operator's stats read, on
// an outbox of a backlog of n pending records (half due, half scheduled,
// in four lanes), n/100 dead ones under three codes, and a processed
// history of n records settled over the last day: Outbox.Stats (one op is
// one statement, as one collection of the gauges runs) and
// Outbox.Throughput of the last five minutes. The rows are inserted with
// one statement each and vacuumed before the timer starts.
func BenchmarkStats(b *testing.B) {
	bb := benchSetup(b, 2)
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("backlog=%d", n), func(b *testing.B) {
			schema, ob, _ := bb.schema(b)
			t := `"` + schema + `".outbox`
			for _, fill := range []string{
				`INSERT INTO ` + t + ` (id, module, kind, payload, lane, created_at, available_at)
				SELECT gen_random_uuid(), 'orders', 'order.placed', '{}', (ARRAY['mail', 'push', 'sms', 'inapp'])[1 + i % 4],
					now() - interval '1 hour', now() + make_interval(secs => CASE WHEN i % 2 = 0 THEN -1 ELSE 1 END * (i % 3600))
				FROM generate_series(1, $1) i`,
				`INSERT INTO ` + t + ` (id, module, kind, payload, lane, created_at, failed_at, failure_reason, code)
				SELECT gen_random_uuid(), 'orders', 'order.placed', '{}', 'sms', now() - interval '1 day',
					now() - make_interval(secs => i % 86400), 'failed', (ARRAY['provider.unavailable', 'recipient.invalid', 'template.unknown'])[1 + i % 3]
				FROM generate_series(1, $1 / 100) i`,
				`INSERT INTO ` + t + ` (id, module, kind, payload, lane, created_at, processed_at)
				SELECT gen_random_uuid(), 'orders', 'order.placed', '{}', 'mail', now() - interval '1 day',
					now() - make_interval(secs => i % 86400)
				FROM generate_series(1, $1) i`,
			} {
				_, err := bb.db.ExecContext(b.Context(), fill, n)
				require.NoError(b, err)
			}
			_, err := bb.db.ExecContext(b.Context(), `VACUUM ANALYZE `+t)
			require.NoError(b, err)

			b.Run("Stats", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					st, err := ob.Stats(b.Context(), bb.db, "orders")
					require.NoError(b, err)
					require.Len(b, st.Lanes, 4)
				}
			})
			b.Run("Throughput", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					_, err := ob.Throughput(b.Context(), bb.db, "orders", 5)
					require.NoError(b, err)
				}
			})
		})
	}
}

// BenchmarkStartSpan is a hand's span under a sampler that records
// nothing, as a service without tracing runs every hand.
func BenchmarkStartSpan(b *testing.B) {
	rec := relay.Record{ID: uuid.Must(uuid.NewV7()), Module: "notifications", CorrelationID: "c-1", Hand: 1}
	tracer := noop.NewTracerProvider().Tracer("bench")
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		_, span := rec.StartSpan(ctx, tracer, "deliver mail", attribute.String("tidings.channel", "mail"))
		span.End()
	}
}
