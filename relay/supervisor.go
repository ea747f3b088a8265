package relay

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/tidings-go/tidings/internal/pgarray"
)

// Backoff bounds after a failed claim, such as while the database restarts.
const (
	claimBackoffMin = 100 * time.Millisecond
	claimBackoffMax = 5 * time.Second
)

// dueSlack is how far past a due time the claim loop wakes, so the claim
// finds the record due, and so its shortest wait: a wait of dueSlack means
// something is due now.
const dueSlack = time.Millisecond

// floorLag is how far before a claim's now() a lane's floor lies at most:
// the next claim walks each lane of its module from the oldest due time
// the last claim found there, or from floorLag before that claim, whichever
// is earlier (see lanesCTE). A record that becomes pending behind its
// lane's floor is found by the next claim that walks every lane from its
// start, which the relay makes at least once every SweepInterval: one
// staged by a transaction that ran longer than floorLag, or with a
// NotBefore further back. Every other way a record falls due (a retry, a
// lease that runs out, a re-emit in a transaction of its own) writes a
// due time no earlier than its own statement.
//
// Ten seconds outlasts the transactions of a request, and bounds what a
// claim walks in a drain that keeps pace with its writers to the rows
// settled in the last ten seconds (against those since the last vacuum,
// a minute or more).
const floorLag = 10 * time.Second

// heldBackoffMax bounds the wait between claims while due records stay
// locked by another transaction.
const heldBackoffMax = time.Second

// ErrNoSink is returned by Supervise when sink is nil.
var ErrNoSink = errors.New("relay: sink is nil")

// Supervise runs the relay of cfg.Module until ctx ends, handing every due
// record to sink, and returns nil once it has shut down. It returns an error
// at once, before starting anything, when cfg is invalid (see ErrConfig),
// when sink is a Preparer that refuses cfg, or when the outbox table cannot
// be read; after that, database failures are logged and retried, never
// returned: the caller does not restart it.
//
// The lifecycle, in order:
//   - wake: LISTEN (when cfg.Listener is set), a sweep every
//     cfg.SweepInterval, and a timer for the earliest retry or lease that
//     falls due;
//   - claim: up to cfg.BatchSize due records, never more than free hand
//     slots (cfg.Concurrency) nor more of a lane than its room
//     (cfg.LaneLimit) nor than the sink's free connections
//     (cfg.Connections), leased for cfg.Lease in the claim's commit;
//   - hand: a BatchSink gets the claimed batch whole; any other Sink gets
//     each record in its own goroutine, at most cfg.Connections at once, in
//     a context that carries the staging write's trace, baggage,
//     correlation id and (as causation) the record's id;
//   - settle: the sink's Result, batched, fenced by the hand it belongs to
//     (a BatchSink may write it in its own transaction instead);
//   - purge: settled records older than cfg.Retention, every
//     cfg.PurgeInterval;
//   - shutdown: when ctx ends, stop claiming (a claim on the wire is
//     awaited for cfg.GracePeriod and what it claimed given back), let
//     in-flight hands finish for cfg.GracePeriod, cancel what remains,
//     settle everything and return.
//
// Two budgets bound a record's life, and they cannot contradict each
// other: attempts, spent by the sink's answers (Retry counts one; the
// sink's own policy, such as the notification dispatcher's retry policy,
// decides when they are exhausted), and hands, spent by claims (a crash or
// a hang spends a hand without an answer; cfg.MaxHands bounds them, so a
// record that kills its process every time is dead). Every attempt is a
// hand, so a sink's attempt budget must stay below cfg.MaxHands (the
// dispatcher refuses to start otherwise). Unsure and Later answers spend
// neither; cfg.MaxUnsure bounds Unsure.
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
	db    *sql.DB
	cfg   Config
	sink  Sink
	batch BatchSink // sink, when it takes batches
	ob    *Outbox
	log   *slog.Logger
	tel   *telemetry

	wake    chan struct{} // cap 1: claim now
	freed   chan struct{} // cap 1: room came free where there was none
	settles chan settlement

	listening    atomic.Bool // the LISTEN session is up
	listenedOnce atomic.Bool // it has been, so the next Listening is a reconnect

	shared      map[string]bool // the lanes a LaneSharer shares
	sharedLanes []string        // the same, for the claim

	// Of the claim loop alone: the lanes' floors the last claim gave (by
	// lane, in microseconds since 1970 on the database's clock), and when
	// a claim last walked every lane from its start.
	floors map[string]int64
	walked time.Time

	mu       sync.Mutex
	inFlight int                // records claimed and not yet answered (or written by the sink)
	conns    int                // connections the sink holds for them
	lanes    map[string]laneUse // both, by lane
}

// laneUse is what one lane has in flight.
type laneUse struct{ records, conns int }

func newSupervisor(db *sql.DB, cfg Config, sink Sink) (*supervisor, error) {
	ob, err := NewOutbox(&OutboxConfig{Schema: cfg.Schema, TracerProvider: cfg.TracerProvider})
	if err != nil {
		return nil, err
	}
	tel, err := newTelemetry(cfg)
	if err != nil {
		return nil, err
	}
	s := &supervisor{
		db:      db,
		cfg:     cfg,
		sink:    sink,
		ob:      ob,
		log:     cfg.Logger.With("component", "relay", "module", cfg.Module),
		tel:     tel,
		wake:    make(chan struct{}, 1),
		freed:   make(chan struct{}, 1),
		settles: make(chan settlement, cfg.Concurrency),
		lanes:   map[string]laneUse{},
		shared:  map[string]bool{},
	}
	s.batch, _ = sink.(BatchSink)
	if ls, ok := sink.(LaneSharer); ok {
		for _, lane := range ls.SharedLanes() {
			s.shared[lane] = true
		}
		s.sharedLanes = slices.Collect(maps.Keys(s.shared))
	}
	return s, nil
}

func (s *supervisor) run(ctx context.Context) error {
	// Fail fast, with one round trip, on a missing table or a bad pool.
	var idleTxTimeout int64
	if err := s.db.QueryRowContext(ctx, s.ob.q.ping).Scan(&idleTxTimeout); err != nil {
		return s.ob.tableError("read the outbox", err)
	}
	if s.cfg.Listener != nil {
		if err := s.checkListen(ctx); err != nil {
			return err
		}
	}
	if limit := time.Duration(idleTxTimeout) * time.Millisecond; limit > 0 && limit <= s.cfg.HandTimeout {
		s.log.WarnContext(ctx, "idle_in_transaction_session_timeout is not above HandTimeout: a sink that holds a transaction while it works (the notification dispatcher does) will have it cut, and its answers become retries",
			"idle_in_transaction_session_timeout", limit, "hand_timeout", s.cfg.HandTimeout)
	}
	gauges, err := s.tel.observe(func(ctx context.Context) (Stats, error) { return s.ob.Stats(ctx, s.db, s.cfg.Module) })
	if err != nil {
		return err
	}
	defer func() { _ = gauges.Unregister() }()
	s.log.InfoContext(ctx, "relay started", "schema", s.cfg.Schema, "listen", s.cfg.Listener != nil,
		"batch_size", s.cfg.BatchSize, "concurrency", s.cfg.Concurrency, "connections", s.cfg.Connections, "lane_limit", s.cfg.LaneLimit,
		"lease", s.cfg.Lease, "batches", s.batch != nil)

	// Hands run in a context that outlives ctx by the grace period.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()

	var background, hands sync.WaitGroup
	background.Go(func() { s.settleLoop(context.WithoutCancel(ctx)) })
	if s.cfg.Listener != nil {
		background.Go(func() { s.listen(ctx) })
	}
	background.Go(func() { s.purgeLoop(ctx) })

	var handOut func(recs []Record)
	stopHanding := func() {}
	if s.batch != nil {
		handOut = func(recs []Record) { hands.Go(func() { s.handBatch(work, recs) }) }
	} else {
		// Records run on goroutines that live as long as the relay, not
		// on one per record: a fresh goroutine grows its stack through
		// the sink's calls on every record, which took a tenth of the
		// relay's CPU in a drain. A record sink holds a connection for
		// each record, so no more than Connections run at once.
		workers := min(s.cfg.Concurrency, s.cfg.Connections)
		queue := make(chan Record, workers)
		for range workers {
			hands.Go(func() {
				for rec := range queue {
					s.hand(work, rec)
				}
			})
		}
		stopHanding = func() { close(queue) }
		handOut = func(recs []Record) {
			for _, rec := range recs {
				queue <- rec
			}
		}
	}
	s.claimLoop(ctx, handOut)
	stopHanding()

	s.drain(ctx, &hands, stopWork)
	close(s.settles)
	background.Wait()
	s.log.InfoContext(ctx, "relay stopped")
	return nil
}

// claimLoop claims due records and hands them out, until ctx ends.
func (s *supervisor) claimLoop(ctx context.Context, handOut func([]Record)) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	var backoff, held time.Duration
	for ctx.Err() == nil {
		r := s.room()
		if r.free == 0 {
			select {
			case <-s.freed:
			case <-ctx.Done():
			}
			continue
		}
		limit := min(r.free, s.cfg.BatchSize)
		// The claim does not end with ctx: a claim the server committed
		// after a cancelled caller stopped listening would leave its
		// records leased for a whole lease by a relay that is gone (and
		// their hands counted). While the relay runs its answer is awaited
		// for as long as still leaves each record a whole HandTimeout of
		// its lease, and never less than the grace period; once ctx ends,
		// for the grace period at most; what it claimed then is released
		// below.
		claimCtx, cancelClaim := context.WithTimeout(context.WithoutCancel(ctx),
			max(s.cfg.Lease-s.cfg.HandTimeout, s.cfg.GracePeriod))
		stopGrace := context.AfterFunc(ctx, func() { time.AfterFunc(s.cfg.GracePeriod, cancelClaim) })
		recs, next, err := s.claim(claimCtx, limit, r)
		stopGrace()
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
				s.settles <- settlementOf(rec, Result{outcome: outcomeRelease})
			}
			return
		}
		if len(recs) > 0 {
			s.take(recs)
			handOut(recs)
		}
		if len(recs) == limit {
			continue // more may be due
		}
		after := s.room()
		if after.free == 0 {
			continue // no slot or connection is free: wait for one
		}
		// The claim's answer of the next due time leaves out the lanes it
		// gave all their room: it holds if each of them is full now.
		if !allFull(r.spent(recs, limit), after.full) {
			continue // records finished while the claim ran: a lane it filled has room again, and may have rows due
		}
		wait := s.nextWait(ctx, after.full, next)
		if len(recs) == 0 && wait <= dueSlack {
			// Due records, none claimed: another transaction holds them
			// (the claim skips locked rows), such as a Cancel in a
			// transaction still open. Each time again, wait longer,
			// instead of asking every millisecond until it ends.
			held = min(max(2*held, dueSlack), heldBackoffMax)
			wait = held
		} else {
			held = 0
		}
		timer.Reset(wait)
		select {
		case <-s.wake:
		case <-s.freed:
		case <-timer.C:
		case <-ctx.Done():
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// rooms is what the next claim may take: free is the records it may
// take (none when no connection is free), each lane takes at most its
// room: the one listed in lanes and rooms (the lanes with records in
// flight, and the shared lanes), or else other; and the lanes that are
// not shared, whose records each take a connection, take conns in all.
// full are the lanes with no room.
type rooms struct {
	free  int
	lanes []string
	rooms []int64
	other int
	conns int
	full  []string
}

// room reports what the next claim may take. A lane's room is what its
// records in flight leave of LaneLimit and, for a lane that takes a
// connection per record, what its connections and the free connections
// leave, none while that is less than claimMin; a shared lane takes its
// room, up to half its LaneLimit, while one connection is free for its
// batch, within its share.
func (s *supervisor) room() rooms {
	s.mu.Lock()
	defer s.mu.Unlock()
	freeConns, laneConns := s.cfg.Connections-s.conns, s.cfg.laneConnections()
	if freeConns <= 0 {
		return rooms{}
	}
	r := rooms{free: s.cfg.Concurrency - s.inFlight, other: min(s.cfg.LaneLimit, laneConns, freeConns), conns: freeConns}
	add := func(lane string) {
		u := s.lanes[lane]
		var room int
		switch {
		case !s.shared[lane]:
			if room = s.laneRoom(u); room < s.claimMin(u) {
				room = 0
			}
		case u.conns < laneConns:
			room = min(s.cfg.LaneLimit-u.records, s.cfg.sharedBatch())
		}
		room = max(room, 0)
		r.lanes, r.rooms = append(r.lanes, lane), append(r.rooms, int64(room))
		if room == 0 {
			r.full = append(r.full, lane)
		}
	}
	for lane := range s.lanes {
		add(lane)
	}
	for lane := range s.shared {
		if _, listed := s.lanes[lane]; !listed {
			add(lane)
		}
	}
	return r
}

// spent lists the lanes a claim of up to limit records, given r, gave all
// the room they had.
func (r rooms) spent(recs []Record, limit int) []string {
	got := map[string]int{}
	for _, rec := range recs {
		got[rec.Lane]++
	}
	var lanes []string
	for lane, n := range got {
		room := r.other
		if i := slices.Index(r.lanes, lane); i >= 0 {
			room = int(r.rooms[i])
		}
		if n >= min(limit, room) {
			lanes = append(lanes, lane)
		}
	}
	return lanes
}

// claimMin is the least room a claim takes of a lane with records in
// flight whose records each hold a connection, u being its use: half of
// what the lane may hold beside the connections the other lanes hold now.
// A full lane is claimed again in batches of that many, where a claim per
// freed record would cost the server a statement, its commit and a
// settle for every few records. Half of a fixed LaneLimit was wrong
// beside a channel whose hanging deliveries held most connections: the
// lane never had that much room, and waited for their timeouts. Under
// s.mu.
func (s *supervisor) claimMin(u laneUse) int {
	hold := min(s.cfg.LaneLimit, s.cfg.laneConnections(), s.cfg.Connections-(s.conns-u.conns))
	return max(hold/2, 1)
}

// laneRoom is what the records in flight of a lane that takes a
// connection per record leave it, u being its use, under s.mu.
func (s *supervisor) laneRoom(u laneUse) int {
	return min(s.cfg.LaneLimit-u.records, s.cfg.laneConnections()-u.conns, s.cfg.Connections-s.conns)
}

// take counts the records of a claim (one batch) as in flight, with the
// connections they take: one per record, and one per shared lane.
func (s *supervisor) take(recs []Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight += len(recs)
	batched := map[string]bool{} // the shared lanes of the batch
	for _, rec := range recs {
		u := s.lanes[rec.Lane]
		u.records++
		if !s.shared[rec.Lane] || !batched[rec.Lane] {
			batched[rec.Lane] = true
			u.conns++
			s.conns++
		}
		s.lanes[rec.Lane] = u
	}
}

// release counts recs out of flight, with their connections, and the
// connection of each lane of ended, a shared lane whose last record of a
// batch is among recs. It wakes the claim loop when that gives room
// where there was none: a slot or a connection, a shared lane's room, or
// claimMin of a lane that takes a connection per record. A batch's
// records are released together: released one by one, the first would
// wake the claim loop into a claim of one record, and the lane's next
// batch would come in pieces.
func (s *supervisor) release(recs []Record, ended []string) {
	if len(recs) == 0 {
		return
	}
	s.mu.Lock()
	laneConns := s.cfg.laneConnections()
	wasFull := s.inFlight == s.cfg.Concurrency || s.conns >= s.cfg.Connections
	var short []string // lanes that take a connection per record with less room than a claim takes
	for lane, u := range s.lanes {
		if !s.shared[lane] && s.laneRoom(u) < s.claimMin(u) {
			short = append(short, lane)
		}
	}
	s.inFlight -= len(recs)
	drop := func(lane string, records, conns int) {
		u := s.lanes[lane]
		wasFull = wasFull || s.shared[lane] && (u.records == s.cfg.LaneLimit || u.conns >= laneConns)
		u.records -= records
		u.conns -= conns
		s.conns -= conns
		if u.records == 0 {
			delete(s.lanes, lane)
			return
		}
		s.lanes[lane] = u
	}
	for _, rec := range recs {
		conns := 1
		if s.shared[rec.Lane] {
			conns = 0
		}
		drop(rec.Lane, 1, conns)
	}
	for _, lane := range ended {
		drop(lane, 0, 1)
	}
	for _, lane := range short {
		u := s.lanes[lane]
		wasFull = wasFull || s.laneRoom(u) >= s.claimMin(u)
	}
	s.mu.Unlock()
	if wasFull {
		s.poke(s.freed)
	}
}

// allFull reports whether every one of lanes is in full.
func allFull(lanes, full []string) bool {
	for _, lane := range lanes {
		if !slices.Contains(full, lane) {
			return false
		}
	}
	return true
}

// due is when the module's next record falls due in a lane with room, in
// seconds from now (NULL: none is pending), if known.
type due struct {
	known bool
	secs  sql.NullFloat64
}

// claim leases up to limit due records, no more of a lane than its room,
// and tells when the next one falls due if it can. Records handed too
// often come back dead from the claim itself and are only reported.
func (s *supervisor) claim(ctx context.Context, limit int, r rooms) ([]Record, due, error) {
	var next due
	start := time.Now()
	sweep := start.Sub(s.walked) >= s.cfg.SweepInterval
	known, from := s.floorArgs(sweep)
	rows, err := s.db.QueryContext(ctx, s.ob.q.claim, s.cfg.Module, limit, s.cfg.Lease.Seconds(), s.cfg.MaxHands,
		r.other, pgarray.Of(r.lanes), pgarray.Of(r.rooms), r.conns, pgarray.Of(s.sharedLanes), known, from)
	if err != nil {
		return nil, next, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	now := time.Now()
	var out []Record
	var floors sql.RawBytes
	dead, floored := false, false
	for rows.Next() {
		var (
			r        = Record{Module: s.cfg.Module, claimedAt: now}
			headers  []byte
			poisoned bool
			staged   float64
		)
		if err := rows.Scan(&r.ID, &r.Lane, &r.Kind, &r.Payload, &headers, &r.CorrelationID, &r.CausationID,
			&r.CreatedAt, &r.Attempts, &r.Hand, &r.Unsure, &r.LastError, &poisoned, &staged, &r.Secret,
			&next.known, &next.secs, &r.claim, &floors); err != nil {
			return nil, due{}, fmt.Errorf("claim: scan: %w", err)
		}
		if !floored {
			s.setFloors(ctx, floors) // the same in every row
			floored = true
		}
		if err := json.Unmarshal(headers, &r.Headers); err != nil {
			s.log.WarnContext(ctx, "ignoring undecodable headers", "outbox_id", r.ID, "err", err)
		}
		if poisoned {
			dead = true
			s.tel.settled(ctx, r.Lane, outcomeDead)
			s.log.ErrorContext(ctx, "record dead after too many hands", "outbox_id", r.ID, "hands", r.Hand,
				"max_hands", s.cfg.MaxHands, "last_error", r.LastError)
			continue
		}
		r.staged = time.Duration(staged * float64(time.Second))
		s.tel.handed(ctx, r.Lane, r.Waited())
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, due{}, fmt.Errorf("claim: %w", err)
	}
	if sweep {
		s.walked = start
	}
	// A record dead at the claim took no slot: its lane has room the
	// claim's answer did not count.
	next.known = next.known && !dead
	return out, next, nil
}

// floorArgs are the claim's arguments of the lanes' floors: none for a
// claim that walks every lane from its start (sweep).
func (s *supervisor) floorArgs(sweep bool) (lanes, floors any) {
	if sweep || len(s.floors) == 0 {
		return nil, nil
	}
	ls, fs := make([]string, 0, len(s.floors)), make([]int64, 0, len(s.floors))
	for lane, floor := range s.floors {
		ls, fs = append(ls, lane), append(fs, floor)
	}
	return pgarray.Of(ls), pgarray.Of(fs)
}

// setFloors keeps the floors a claim gave, a JSON object of lane to
// floor; floors it cannot read leave none, and the next claim walks every
// lane from its start.
func (s *supervisor) setFloors(ctx context.Context, floors []byte) {
	var f map[string]int64
	if floors != nil {
		if err := json.Unmarshal(floors, &f); err != nil {
			s.log.WarnContext(ctx, "ignoring the lanes' floors", "err", err)
			f = nil
		}
	}
	s.floors = f
}

// nextWait is how long the loop may sleep: until the module's next record
// falls due in a lane with room (asked of the database when the claim
// could not tell), and no longer than the sweep interval (ListenDownSweep
// while the LISTEN session is away).
func (s *supervisor) nextWait(ctx context.Context, full []string, next due) time.Duration {
	sweep := s.cfg.SweepInterval
	if s.cfg.Listener != nil && !s.listening.Load() {
		sweep = min(sweep, ListenDownSweep)
	}
	secs := next.secs
	if !next.known {
		known, from := s.floorArgs(false)
		if err := s.db.QueryRowContext(ctx, s.ob.q.nextDue, s.cfg.Module, pgarray.Of(full), known, from).Scan(&secs); err != nil {
			return sweep
		}
	}
	if !secs.Valid {
		return sweep
	}
	// A little past the due time, so the claim finds it due.
	d := time.Duration(secs.Float64*float64(time.Second)) + dueSlack
	return min(max(d, dueSlack), sweep)
}

// hand gives one record to a record sink and answers for it.
func (s *supervisor) hand(work context.Context, rec Record) {
	ctx, span := rec.StartSpan(rec.Context(work), s.tel.tracer, "process "+rec.Module)
	defer span.End()
	ctx, cancel := context.WithTimeoutCause(ctx, s.cfg.HandTimeout,
		fmt.Errorf("%w: HandTimeout of %s passed", ErrHandTimeout, s.cfg.HandTimeout))
	defer cancel()

	start := time.Now()
	res := s.final(rec, s.call(ctx, rec))
	if res.outcome != outcomeDone {
		span.SetStatus(codes.Error, res.text)
	}
	s.answered(rec, res, time.Since(start), true)
	s.release([]Record{rec}, nil)
}

// call runs the record sink, turning a panic into a retry after the lease
// that counts an attempt, with the panic as its reason.
func (s *supervisor) call(ctx context.Context, rec Record) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			s.log.ErrorContext(ctx, "sink panicked", "outbox_id", rec.ID, "panic", p, "stack", string(debug.Stack()))
			res = Retry(s.cfg.Lease, fmt.Errorf("sink panicked: %v", p)).WithCode(CodePanic)
		}
	}()
	return s.sink.Handle(ctx, rec)
}

// handBatch gives a claimed batch to the batch sink, and answers for
// whatever it left without an answer.
func (s *supervisor) handBatch(work context.Context, recs []Record) {
	ctx, cancel := context.WithTimeoutCause(work, s.cfg.HandTimeout,
		fmt.Errorf("%w: HandTimeout of %s passed", ErrHandTimeout, s.cfg.HandTimeout))
	defer cancel()
	b := newBatch(s, recs)
	code, why := CodeNoAnswer, "the sink returned without an answer for the record"
	func() {
		defer func() {
			if p := recover(); p != nil {
				s.log.ErrorContext(ctx, "sink panicked", "records", len(recs), "panic", p, "stack", string(debug.Stack()))
				code, why = CodePanic, fmt.Sprintf("sink panicked: %v", p)
			}
		}()
		s.batch.HandleBatch(ctx, b)
	}()
	b.finish(code, why)
}

// final is res as the relay settles it for rec: a zero Result is a retry
// after the lease, and the MaxUnsure-th Unsure is dead.
func (s *supervisor) final(rec Record, res Result) Result {
	switch {
	case res.outcome == outcomeInvalid:
		return Retry(s.cfg.Lease, errors.New("sink returned the zero Result")).WithCode(CodeNoAnswer)
	case res.outcome == outcomeUnsure && rec.Unsure+1 >= s.cfg.MaxUnsure:
		return Dead(fmt.Errorf("the sink could not commit its work %d times (MaxUnsure); last: %s", rec.Unsure+1, res.text)).
			WithCode(CodeMaxUnsure)
	}
	return res
}

// answered records rec's final result: it counts and logs it, and queues
// it to be settled unless the sink's transaction already did. The caller
// frees rec's slot.
func (s *supervisor) answered(rec Record, res Result, took time.Duration, settle bool) {
	ctx := context.Background()
	s.tel.finished(ctx, rec.Lane, res.outcome, took)
	switch res.outcome {
	case outcomeDone:
		s.log.DebugContext(ctx, "record done", "outbox_id", rec.ID, "hand", rec.Hand)
	case outcomeRetry, outcomeUnsure:
		s.log.WarnContext(ctx, "record will be retried", "outbox_id", rec.ID, "attempt", rec.Attempts+1,
			"delay", res.delay, "err", res.text)
	case outcomeDead:
		s.log.ErrorContext(ctx, "record dead", "outbox_id", rec.ID, "attempt", rec.Attempts+1, "err", res.text)
	}
	if settle {
		s.settles <- settlementOf(rec, res)
	} else if res.outcome == outcomeRetry || res.outcome == outcomeRelease || res.outcome == outcomeUnsure {
		// Written in the sink's transaction: the claim loop learns the new
		// due time now (the settle loop wakes it for what it writes).
		s.poke(s.wake)
	}
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
	s.mu.Lock()
	inFlight := s.inFlight
	s.mu.Unlock()
	s.log.WarnContext(ctx, "grace period over; cancelling in-flight hands", "in_flight", inFlight)
	stopWork()
	<-done
}

func (s *supervisor) poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// purgeLoop purges on every cfg.PurgeInterval until ctx ends.
func (s *supervisor) purgeLoop(ctx context.Context) {
	tick := time.NewTicker(s.cfg.PurgeInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		n, err := s.ob.purge(ctx, s.db, s.cfg.Module, s.cfg.Retention)
		if err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "purge failed", "err", err)
		}
		if n > 0 {
			s.log.InfoContext(ctx, "purged settled records", "records", n)
		}
		if p, ok := s.sink.(Purger); ok {
			n, err := p.Purge(ctx)
			if err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "sink purge failed", "err", err)
			}
			if n > 0 {
				s.log.InfoContext(ctx, "sink purged", "rows", n)
			}
		}
	}
}
