package relay

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Backoff bounds after a failed claim, such as while the database restarts.
const (
	claimBackoffMin = 100 * time.Millisecond
	claimBackoffMax = 5 * time.Second
)

// ErrNoSink is returned by Supervise when sink is nil.
var ErrNoSink = errors.New("relay: sink is nil")

// Supervise runs the relay of cfg.Module until ctx ends, handing every due
// record to sink, and returns nil once it has shut down. It returns an error
// at once, before starting anything, when cfg is invalid (see ErrConfig) or
// the outbox table cannot be read; after that, database failures are logged
// and retried, never returned: the caller does not restart it.
//
// The lifecycle, in order:
//   - wake: LISTEN (when cfg.ListenDSN is set), a sweep every
//     cfg.SweepInterval, and a timer for the earliest retry or lease that
//     falls due;
//   - claim: up to cfg.BatchSize due records, never more than free hand
//     slots, leased for cfg.Lease in the claim's commit;
//   - hand: each to sink in its own goroutine, at most cfg.Concurrency at
//     once, in a context that carries the staging write's trace, baggage,
//     correlation id and (as causation) the record's id;
//   - settle: the sink's Result, batched, fenced by the hand it belongs to;
//   - purge: settled records older than cfg.Retention, every
//     cfg.PurgeInterval;
//   - shutdown: when ctx ends, stop claiming, let in-flight hands finish
//     for cfg.GracePeriod, cancel what remains, settle everything and
//     return.
func Supervise(ctx context.Context, db *sql.DB, cfg *Config, sink Sink) error {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return err
	}
	if sink == nil {
		return ErrNoSink
	}
	if p, ok := sink.(Preparer); ok {
		if err := p.Prepare(ctx, db, c); err != nil {
			return err
		}
	}
	s, err := newSupervisor(db, c, sink)
	if err != nil {
		return err
	}
	return s.run(ctx)
}

type supervisor struct {
	db   *sql.DB
	cfg  Config
	sink Sink
	ob   *Outbox
	log  *slog.Logger
	tel  telemetry

	wake    chan struct{} // cap 1: claim now
	slots   chan struct{} // one token per running hand
	freed   chan struct{} // cap 1: a hand slot came free
	settles chan settlement

	listening atomic.Bool // the LISTEN session is up
}

func newSupervisor(db *sql.DB, cfg Config, sink Sink) (*supervisor, error) {
	ob, err := NewOutbox(&OutboxConfig{Schema: cfg.Schema, TracerProvider: cfg.TracerProvider})
	if err != nil {
		return nil, err
	}
	tel, err := newTelemetry(cfg)
	if err != nil {
		return nil, err
	}
	return &supervisor{
		db:      db,
		cfg:     cfg,
		sink:    sink,
		ob:      ob,
		log:     cfg.Logger.With("component", "relay", "module", cfg.Module),
		tel:     tel,
		wake:    make(chan struct{}, 1),
		slots:   make(chan struct{}, cfg.Concurrency),
		freed:   make(chan struct{}, 1),
		settles: make(chan settlement, cfg.Concurrency),
	}, nil
}

func (s *supervisor) run(ctx context.Context) error {
	// Fail fast, with one round trip, on a missing table or a bad pool.
	var idleTxTimeout int64
	if err := s.db.QueryRowContext(ctx, s.ob.q.ping).Scan(&idleTxTimeout); err != nil {
		return s.ob.tableError("read the outbox", err)
	}
	if s.cfg.ListenDSN != "" {
		if err := s.checkListen(ctx); err != nil {
			return err
		}
	}
	if limit := time.Duration(idleTxTimeout) * time.Millisecond; limit > 0 && limit <= s.cfg.HandTimeout {
		s.log.WarnContext(ctx, "idle_in_transaction_session_timeout is not above HandTimeout: a sink that holds a transaction while it works (the notification dispatcher does) will have it cut, and its answers become retries",
			"idle_in_transaction_session_timeout", limit, "hand_timeout", s.cfg.HandTimeout)
	}
	s.log.InfoContext(ctx, "relay started", "schema", s.cfg.Schema, "listen", s.cfg.ListenDSN != "",
		"batch_size", s.cfg.BatchSize, "concurrency", s.cfg.Concurrency, "lease", s.cfg.Lease)

	// Hands run in a context that outlives ctx by the grace period.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()

	var background, hands sync.WaitGroup
	background.Go(func() { s.settleLoop(context.WithoutCancel(ctx)) })
	if s.cfg.ListenDSN != "" {
		background.Go(func() { s.listen(ctx) })
	}
	background.Go(func() { s.purgeLoop(ctx) })

	// Hands run on Concurrency goroutines that live as long as the relay,
	// not on one per record: a fresh goroutine grows its stack through the
	// sink's calls on every record, which took a tenth of the relay's CPU
	// in a drain.
	queue := make(chan Record, s.cfg.Concurrency)
	for range s.cfg.Concurrency {
		hands.Go(func() {
			for rec := range queue {
				s.hand(work, rec)
				<-s.slots
				s.poke(s.freed)
			}
		})
	}
	s.claimLoop(ctx, queue)
	close(queue)

	s.drain(ctx, &hands, stopWork)
	close(s.settles)
	background.Wait()
	s.log.InfoContext(ctx, "relay stopped")
	return nil
}

// claimLoop claims due records and queues them for the hands, one slot
// each, until ctx ends.
func (s *supervisor) claimLoop(ctx context.Context, queue chan<- Record) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	var backoff time.Duration
	for ctx.Err() == nil {
		free := cap(s.slots) - len(s.slots)
		if free == 0 {
			select {
			case <-s.freed:
			case <-ctx.Done():
			}
			continue
		}
		limit := min(free, s.cfg.BatchSize)
		// The claim does not end with ctx: a claim the server committed
		// after a cancelled caller stopped listening would leave its
		// records leased for a whole lease by a relay that is gone. Its
		// answer is awaited for the grace period, and released below.
		claimCtx, cancelClaim := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.GracePeriod)
		recs, err := s.claim(claimCtx, limit)
		cancelClaim()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			backoff = min(max(2*backoff, claimBackoffMin), claimBackoffMax)
			s.log.WarnContext(ctx, "claim failed; retrying", "err", err, "backoff", backoff)
			timer.Reset(backoff)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
			continue
		}
		backoff = 0
		if ctx.Err() != nil {
			// Claimed as shutdown began: give the leases back unstarted.
			for _, rec := range recs {
				s.settles <- settlement{id: rec.ID, hand: rec.Hand, res: Result{outcome: outcomeRelease}}
			}
			return
		}
		for _, rec := range recs {
			s.slots <- struct{}{}
			queue <- rec
		}
		if len(recs) == limit {
			continue // more may be due
		}
		timer.Reset(s.nextWait(ctx))
		select {
		case <-s.wake:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		case <-ctx.Done():
		}
	}
}

// claim leases up to limit due records. Records handed too often come back
// dead from the claim itself and are only reported.
func (s *supervisor) claim(ctx context.Context, limit int) ([]Record, error) {
	rows, err := s.db.QueryContext(ctx, s.ob.q.claim, s.cfg.Module, limit, s.cfg.Lease.Seconds(), s.cfg.MaxHands)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	now := time.Now()
	var out []Record
	for rows.Next() {
		var (
			r        = Record{Module: s.cfg.Module, claimedAt: now}
			headers  []byte
			poisoned bool
			staged   float64
		)
		if err := rows.Scan(&r.ID, &r.Kind, &r.Payload, &headers, &r.CorrelationID, &r.CausationID,
			&r.CreatedAt, &r.Attempts, &r.Hand, &r.Unsure, &r.LastError, &poisoned, &staged); err != nil {
			return nil, fmt.Errorf("claim: scan: %w", err)
		}
		if err := json.Unmarshal(headers, &r.Headers); err != nil {
			s.log.WarnContext(ctx, "ignoring undecodable headers", "outbox_id", r.ID, "err", err)
		}
		if poisoned {
			s.tel.settled(ctx, outcomeDead)
			s.log.ErrorContext(ctx, "record dead after too many hands", "outbox_id", r.ID, "hands", r.Hand,
				"max_hands", s.cfg.MaxHands, "last_error", r.LastError)
			continue
		}
		r.staged = time.Duration(staged * float64(time.Second))
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return out, nil
}

// nextWait is how long the loop may sleep: until the module's next record
// falls due, and no longer than the sweep interval (ListenDownSweep while
// the LISTEN session is away).
func (s *supervisor) nextWait(ctx context.Context) time.Duration {
	sweep := s.cfg.SweepInterval
	if s.cfg.ListenDSN != "" && !s.listening.Load() {
		sweep = min(sweep, ListenDownSweep)
	}
	var secs sql.NullFloat64
	if err := s.db.QueryRowContext(ctx, s.ob.q.nextDue, s.cfg.Module).Scan(&secs); err != nil || !secs.Valid {
		return sweep
	}
	// A little past the due time, so the claim finds it due.
	d := time.Duration(secs.Float64*float64(time.Second)) + time.Millisecond
	return min(max(d, time.Millisecond), sweep)
}

// hand gives one record to the sink and queues its settlement.
func (s *supervisor) hand(work context.Context, rec Record) {
	ctx, span := s.startSpan(work, rec)
	defer span.End()
	ctx, cancel := context.WithTimeoutCause(ctx, s.cfg.HandTimeout,
		fmt.Errorf("%w: HandTimeout of %s passed", ErrHandTimeout, s.cfg.HandTimeout))
	defer cancel()

	s.tel.handed(ctx, rec.Waited())
	start := time.Now()
	res := s.call(ctx, rec)
	if res.outcome == outcomeUnsure && rec.Unsure+1 >= s.cfg.MaxUnsure {
		res = Dead(fmt.Errorf("the sink could not commit its work %d times (MaxUnsure); last: %s", rec.Unsure+1, res.text))
	}
	s.tel.finished(ctx, res.outcome, time.Since(start))

	switch res.outcome {
	case outcomeDone:
		s.log.DebugContext(ctx, "record done", "outbox_id", rec.ID, "hand", rec.Hand)
	case outcomeRetry, outcomeUnsure:
		span.SetStatus(codes.Error, res.text)
		s.log.WarnContext(ctx, "record will be retried", "outbox_id", rec.ID, "attempt", rec.Attempts+1,
			"delay", res.delay, "err", res.text)
	case outcomeDead:
		span.SetStatus(codes.Error, res.text)
		s.log.ErrorContext(ctx, "record dead", "outbox_id", rec.ID, "attempt", rec.Attempts+1, "err", res.text)
	}
	s.settles <- settlement{id: rec.ID, hand: rec.Hand, res: res}
}

// call runs the sink, turning a panic or a missing answer into a retry
// after the lease, as if the hand had crashed, but with a reason.
func (s *supervisor) call(ctx context.Context, rec Record) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			s.log.ErrorContext(ctx, "sink panicked", "outbox_id", rec.ID, "panic", p, "stack", string(debug.Stack()))
			res = Retry(s.cfg.Lease, fmt.Errorf("sink panicked: %v", p))
		}
	}()
	res = s.sink.Handle(ctx, rec)
	if res.outcome == outcomeInvalid {
		res = Retry(s.cfg.Lease, errors.New("sink returned the zero Result"))
	}
	return res
}

// startSpan restores what the staging write's context carried and starts
// the hand's consumer span inside its trace, linked to the staging span.
func (s *supervisor) startSpan(work context.Context, rec Record) (context.Context, trace.Span) {
	ctx := propagator.Extract(work, propagation.MapCarrier(rec.Headers))
	ctx = WithCorrelationID(ctx, rec.CorrelationID)
	ctx = WithCausationID(ctx, rec.ID.String())
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "tidings"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", rec.Module),
			attribute.String("messaging.message.id", rec.ID.String()),
			attribute.String("messaging.message.conversation_id", rec.CorrelationID),
			attribute.Int("tidings.hand", rec.Hand),
		),
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	return s.tel.tracer.Start(ctx, "process "+rec.Module, opts...)
}

// drain waits for in-flight hands for the grace period, then cancels them
// and waits for them to return.
func (s *supervisor) drain(ctx context.Context, hands *sync.WaitGroup, stopWork context.CancelFunc) {
	done := make(chan struct{})
	go func() {
		hands.Wait()
		close(done)
	}()
	grace := time.NewTimer(s.cfg.GracePeriod)
	defer grace.Stop()
	select {
	case <-done:
		return
	case <-grace.C:
	}
	s.log.WarnContext(ctx, "grace period over; cancelling in-flight hands", "in_flight", len(s.slots))
	stopWork()
	<-done
}

func (s *supervisor) poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// settlement is one record's answer, on its way to the database.
type settlement struct {
	id   uuid.UUID
	hand int
	res  Result
}
