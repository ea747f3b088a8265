package relay

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/internal/ident"
)

// Defaults of Config. A zero field of Config means its default.
const (
	BatchSizeDefault     = 500
	ConcurrencyDefault   = 500
	ConnectionsDefault   = 67
	HandTimeoutDefault   = 30 * time.Second
	LeaseDefault         = 2 * HandTimeoutDefault
	SweepIntervalDefault = 30 * time.Second
	MaxHandsDefault      = 25
	MaxUnsureDefault     = 5
	GracePeriodDefault   = 10 * time.Second
	RetentionDefault     = 7 * 24 * time.Hour
	PurgeIntervalDefault = 10 * time.Minute
)

// LimitMax is the largest BatchSize, Concurrency, Connections, MaxHands
// and MaxUnsure a Config may have: the first three size what the relay
// allocates, up front or per claim, and the last two are compared with
// the database's integer counts, so a larger one is a mistake
// (math.MaxInt meant as "no limit", say) that would crash the process or
// fail every claim.
const LimitMax = 1_000_000

// Config configures a relay supervisor. The zero value of each field means
// its default; Supervise copies the Config and never changes the caller's.
type Config struct {
	// Module is the relay's module: it hands the records staged with this
	// Message.Module. Required.
	Module string

	// Schema holds the outbox table. Default "tidings"
	// (tidings.SchemaDefault).
	Schema string

	// Listener is the LISTEN session that wakes the relay at the commit of
	// a staging write: pqlisten.New(dsn) through lib/pq,
	// pgxlisten.New(pool.Config().ConnConfig) through pgx (packages
	// relay/pqlisten and relay/pgxlisten). Supervise connects it once at
	// start and fails when it cannot; while the session is away later, the
	// relay sweeps every ListenDownSweep (1 s) until it is back. Nil, the
	// default, means the relay does not listen and finds new records on
	// the SweepInterval alone: set a short one then.
	Listener Listener

	// Pipeline sends several statements in one round trip on the pool's
	// driver, for the transactions of a sink (the notification dispatcher
	// sends its BEGIN with the inbox claim, and the settle of requests that
	// share a commit with the COMMIT: a round trip or two fewer per
	// transaction).
	// pgxtx.Pipeline for a pool of pgx's (package dbtx/pgxtx); lib/pq has
	// none. Nil, the default, sends each statement alone.
	Pipeline dbtx.Pipeline

	// BatchSize is the most records one claim takes; of one lane it
	// takes at most 1,000, whatever BatchSize. Default 500.
	BatchSize int

	// Concurrency is the most records handed at once; the relay claims only
	// as many as it can start, so no claimed record waits unstarted. A
	// record that a BatchSink settles in its own transaction
	// (Batch.SettleIn) leaves its slot there, while that transaction
	// commits. Default 500.
	Concurrency int

	// Connections is the most database connections the sink holds for
	// its work at once, as the relay counts them: one for each record in
	// flight, except that a LaneSharer holds one for all the records of
	// a shared lane in one batch (the notification dispatcher's
	// transaction for a channel whose requests share a commit). A claim
	// takes records of lanes that are not shared only as many as there
	// are free connections, and a shared lane's batch only while one is
	// free (a claim that finds several shared lanes due takes one for
	// each), so a sink that commits each record alone has at most
	// Connections records in flight, and a shared lane's due records go
	// in batches of up to half its LaneLimit however few connections are
	// free.
	// One lane holds at most three quarters of Connections (at least
	// one), so a lane whose provider hangs leaves the others a quarter.
	// A lane whose records each hold a connection, once full, is claimed
	// again when half its room is free, not record by record: a claim
	// costs the server about as much for two records as for twenty.
	// Default 67, so that one such lane has 50 records in flight. Give
	// the pool of the *sql.DB that many connections and
	// a few for the relay's own statements (SetMaxOpenConns), and keep
	// them idle (SetMaxIdleConns; database/sql keeps 2 by default):
	// otherwise it opens and closes a PostgreSQL session for almost
	// every transaction.
	Connections int

	// LaneLimit is the most records of one lane (Message.Lane; for
	// notifications, the channel) in flight at once. The claim takes no
	// more of a lane than its room, and none of a lane at its limit, so a
	// slow lane's rows wait untouched in the table while the other lanes
	// keep the rest of Concurrency. A claim takes at most half of a
	// shared lane's LaneLimit (rounded up; see LaneSharer), so two of its
	// batches are in flight: the sink reads and claims one while it
	// delivers and commits the other. Default three quarters of
	// Concurrency; at most Concurrency.
	LaneLimit int

	// HandTimeout ends the context of a hand. Default 30 s.
	HandTimeout time.Duration

	// Lease is how long a claim keeps a record from other relays: if this
	// relay dies, another hands the record when its lease runs out. Must be
	// longer than HandTimeout. Default twice HandTimeout.
	Lease time.Duration

	// SweepInterval is how often the relay looks for due records without a
	// wake-up: the safety net for a lost notification. Between sweeps a
	// claim reads each lane it knows from the oldest record the last claim
	// found there, or from ten seconds before that claim, whichever is
	// earlier; a sweep reads every lane from its start. So a record staged
	// by a transaction open for longer than ten seconds, or with a
	// NotBefore further back, is found by the next sweep. Default 30 s.
	SweepInterval time.Duration

	// MaxHands bounds how often a record is handed: a record claimed for the
	// (MaxHands+1)th time is dead instead, because it keeps crashing or
	// hanging the process. It must exceed the sink's own retry budget.
	// Default 25.
	MaxHands int

	// MaxUnsure bounds how often a record may be answered Unsure: the
	// sink could not tell whether its effect took place, because its own
	// transaction failed (the database went away, a commit lost its
	// answer). Such answers count neither an attempt nor a hand, so a
	// record is not dead because of a short outage; but a sink whose
	// transaction can never commit (a server that ends idle transactions
	// before the sink is done, say) is a fault that a person must see, so
	// the MaxUnsure-th such answer makes the record dead with a reason
	// that says so. Default 5.
	MaxUnsure int

	// GracePeriod is how long Supervise lets in-flight hands finish after
	// its context ends, before it cancels them, and how long it waits for
	// the answer of a claim in flight then (while it runs, a claim may
	// take up to Lease minus HandTimeout, if that is longer). Default
	// 10 s.
	GracePeriod time.Duration

	// Retention is how long the Module's processed and cancelled records
	// are kept; other modules' go after their own supervisors' Retention.
	// Default 7 days. Dead records are kept until re-emitted.
	Retention time.Duration

	// PurgeInterval is how often the supervisor purges its Module's
	// records older than Retention (and asks a sink that is a Purger to do
	// the same). Default 10 minutes.
	PurgeInterval time.Duration

	// Logger receives the relay's logs. Nil discards them.
	Logger *slog.Logger

	// TracerProvider creates the consumer span of each hand. Nil means the
	// global provider.
	TracerProvider trace.TracerProvider

	// MeterProvider creates the relay's metrics (MetricHanded, ...) and
	// the gauges of its module's outbox (MetricDue, ...), which it
	// observes from one Outbox.Stats statement per collection while
	// Supervise runs. Nil means the global provider.
	MeterProvider metric.MeterProvider
}

// ErrConfig marks an invalid Config; the error names the field.
var ErrConfig = errors.New("relay: invalid config")

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Schema == "" {
		c.Schema = ident.SchemaDefault
	}
	def(&c.BatchSize, BatchSizeDefault)
	def(&c.Concurrency, ConcurrencyDefault)
	def(&c.Connections, ConnectionsDefault)
	def(&c.LaneLimit, max(c.Concurrency*3/4, 1))
	def(&c.MaxHands, MaxHandsDefault)
	def(&c.MaxUnsure, MaxUnsureDefault)
	defDur(&c.HandTimeout, HandTimeoutDefault)
	defDur(&c.Lease, 2*c.HandTimeout)
	defDur(&c.SweepInterval, SweepIntervalDefault)
	defDur(&c.GracePeriod, GracePeriodDefault)
	defDur(&c.Retention, RetentionDefault)
	defDur(&c.PurgeInterval, PurgeIntervalDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// laneConnections is the most connections one lane holds: three quarters
// of Connections, at least one.
func (c Config) laneConnections() int { return max(c.Connections*3/4, 1) }

// sharedBatch is the most records of a shared lane one claim takes: half
// its LaneLimit, rounded up, so that two of its batches are in flight at
// once and the sink reads and claims one while it delivers and commits
// the other, where a batch of the whole LaneLimit would leave the lane
// idle while each commits.
func (c Config) sharedBatch() int { return (c.LaneLimit + 1) / 2 }

func (c Config) validate() error {
	if err := ident.Check("Module", c.Module); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := ident.CheckSchema("Schema", c.Schema); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"BatchSize", c.BatchSize}, {"Concurrency", c.Concurrency}, {"Connections", c.Connections}, {"MaxHands", c.MaxHands},
		{"MaxUnsure", c.MaxUnsure}} {
		if f.v > LimitMax {
			return fmt.Errorf("%w: %s (%d) is more than LimitMax (%d)", ErrConfig, f.name, f.v, LimitMax)
		}
	}
	if c.HandTimeout > math.MaxInt64/2 {
		return fmt.Errorf("%w: HandTimeout (%s) is too long: the Lease of twice it is more than a time.Duration holds", ErrConfig, c.HandTimeout)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"BatchSize", int64(c.BatchSize)},
		{"Concurrency", int64(c.Concurrency)},
		{"Connections", int64(c.Connections)},
		{"LaneLimit", int64(c.LaneLimit)},
		{"MaxHands", int64(c.MaxHands)},
		{"MaxUnsure", int64(c.MaxUnsure)},
		{"HandTimeout", int64(c.HandTimeout)},
		{"Lease", int64(c.Lease)},
		{"SweepInterval", int64(c.SweepInterval)},
		{"GracePeriod", int64(c.GracePeriod)},
		{"Retention", int64(c.Retention)},
		{"PurgeInterval", int64(c.PurgeInterval)},
	} {
		if f.v < 0 {
			return fmt.Errorf("%w: %s is negative", ErrConfig, f.name)
		}
	}
	if c.LaneLimit > c.Concurrency {
		return fmt.Errorf("%w: LaneLimit (%d) must not exceed Concurrency (%d)", ErrConfig, c.LaneLimit, c.Concurrency)
	}
	if c.Lease <= c.HandTimeout {
		return fmt.Errorf("%w: Lease (%s) must be longer than HandTimeout (%s), or a record is handed again while its first hand still runs",
			ErrConfig, c.Lease, c.HandTimeout)
	}
	return nil
}
