package relay

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/internal/pgarray"
	"github.com/tidings-go/tidings/internal/validate"
)

// State is where a record is in its life.
type State string

// The states of a record. Pending is the only one that changes by itself.
const (
	StatePending   State = "pending"   // not yet settled: waiting, leased, or retrying
	StateProcessed State = "processed" // the sink answered Done
	StateDead      State = "dead"      // the sink answered Dead, or it was handed too often
	StateCancelled State = "cancelled" // cancelled before it was processed
)

// ErrNotFound means no record has the id (or it was purged).
var ErrNotFound = errors.New("relay: no such record")

// Status is what is known of one record: its state and the figures an
// operator asks for first, and its whole timeline.
type Status struct {
	ID     uuid.UUID
	Module string
	Lane   string
	Kind   string
	State  State
	// Attempts counts answers other than done; zero with State pending means
	// not tried yet.
	Attempts int
	// Hands counts claims, including hands that crashed or timed out, but
	// not those answered Unsure.
	Hands int
	// Unsure counts the answers Unsure: the sink could not tell whether
	// its effect took place (see Config.MaxUnsure).
	Unsure int
	// LastError is the reason of the last retry, or "".
	LastError string
	// Code is the stable machine code of the last error, of the reason a
	// dead record died, or of a processed record's result.
	Code string
	// NextAttempt is when a pending record is due (or its lease ends).
	NextAttempt time.Time
	// Result is what the sink reported with Done, such as a provider's
	// reference.
	Result string
	// SettledAt is when the record was processed, died or was cancelled;
	// zero while pending.
	SettledAt time.Time
	// Reason says why a dead record died.
	Reason    string
	CreatedAt time.Time
	// CorrelationID and CausationID are the staging write's.
	CorrelationID string
	CausationID   string
	// TraceID is the W3C trace id of the staging write, or "" when it ran
	// in no trace.
	TraceID string
	// Timeline is the record's history, oldest first: its staging, then
	// every change of its state (see Entry).
	Timeline []Entry
}

// Entry is one change in a record's timeline, written in the transaction
// that made the change. The first (staged) and a last done are read from
// the record's row, which that transaction wrote: a record delivered at
// its first hand has no entry of its own in the timeline table. It
// encodes as JSON with lower-case names, as the status statement reads it
// and tidings status --json prints it.
type Entry struct {
	At    time.Time `json:"at"`
	Event string    `json:"event"`          // staged, done, retry, dead, unsure, release, lost, cancelled, reemitted, or a sink's (Outbox.Note)
	Hand  int       `json:"hand"`           // the hand it belongs to; 0 for staged, cancelled and reemitted
	Code  string    `json:"code,omitempty"` // stable machine code of Reason
	// Reason is why (a retry's or a death's reason, an earlier death's for
	// reemitted), or for done the sink's result, such as a provider's
	// reference.
	Reason string `json:"reason,omitempty"`
	// Detail holds what else the change knew: took_ms (the hand, from its
	// claim to its answer), due (a record that stays pending), was (the
	// state a re-emit found) and its figures; for staged, trace_id.
	Detail map[string]any `json:"detail,omitempty"`
}

// Settled reports whether the record reached a state it keeps.
func (s Status) Settled() bool { return s.State != StatePending }

// timeline decodes the entries the status statement aggregated, oldest
// first.
func timeline(aggregated []byte) ([]Entry, error) {
	var entries []Entry
	if err := json.Unmarshal(aggregated, &entries); err != nil {
		return nil, fmt.Errorf("relay: status: the timeline: %w", err)
	}
	return entries, nil
}

// Status returns what is known of the record id, with its timeline, or
// ErrNotFound.
func (o *Outbox) Status(ctx context.Context, q dbtx.Queryer, id uuid.UUID) (Status, error) {
	st := Status{ID: id}
	var processed, failed, cancelled sql.NullTime
	var reason sql.NullString
	var headers, entries []byte
	var answeredHand, tookMS int
	err := q.QueryRowContext(ctx, o.q.status, id).Scan(&st.Module, &st.Lane, &st.Kind, &st.CreatedAt, &st.NextAttempt,
		&st.Attempts, &st.Hands, &st.Unsure, &st.LastError, &st.Code, &st.Result, &processed, &failed, &reason, &cancelled,
		&st.CorrelationID, &st.CausationID, &headers, &answeredHand, &tookMS, &entries)
	if errors.Is(err, sql.ErrNoRows) {
		return st, ErrNotFound
	}
	if err != nil {
		return st, fmt.Errorf("relay: status: %w", err)
	}
	var carrier propagation.MapCarrier
	if json.Unmarshal(headers, &carrier) == nil {
		if sc := trace.SpanContextFromContext(propagator.Extract(ctx, carrier)); sc.HasTraceID() {
			st.TraceID = sc.TraceID().String()
		}
	}
	staged := Entry{At: st.CreatedAt, Event: "staged", Detail: map[string]any{}}
	if st.TraceID != "" {
		staged.Detail["trace_id"] = st.TraceID
	}
	if st.Timeline, err = timeline(entries); err != nil {
		return st, err
	}
	st.Timeline = append([]Entry{staged}, st.Timeline...)
	if processed.Valid && !slices.ContainsFunc(st.Timeline, func(e Entry) bool { return e.Event == "done" && e.Hand == answeredHand }) {
		// In time order: entries noted after it (Note) follow it.
		at, _ := slices.BinarySearchFunc(st.Timeline, processed.Time, func(e Entry, t time.Time) int { return e.At.Compare(t) })
		st.Timeline = slices.Insert(st.Timeline, at, Entry{At: processed.Time, Event: "done", Hand: answeredHand, Code: st.Code,
			Reason: st.Result, Detail: map[string]any{"took_ms": float64(tookMS)}})
	}
	switch {
	case processed.Valid:
		st.State, st.SettledAt = StateProcessed, processed.Time
	case failed.Valid:
		st.State, st.SettledAt, st.Reason = StateDead, failed.Time, reason.String
	case cancelled.Valid:
		st.State, st.SettledAt = StateCancelled, cancelled.Time
	default:
		st.State = StatePending
	}
	if st.Settled() {
		st.NextAttempt = time.Time{}
	}
	return st, nil
}

// Cancel settles the record id as cancelled inside tx if it is still
// pending, and reports whether it did. A record already settled is left as
// it is (see Status for what it became). Cancel does not stop a hand that
// is running: a sink that must not act on a cancelled record takes a lock
// both sides share, as the notification dispatcher does with its inbox
// claim.
func (o *Outbox) Cancel(ctx context.Context, tx dbtx.Execer, id uuid.UUID) (bool, error) {
	res, err := tx.ExecContext(ctx, o.q.cancel, id)
	if err != nil {
		return false, fmt.Errorf("relay: cancel: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("relay: cancel: %w", err)
	}
	return n == 1, nil
}

// Finish settles those of the records ids that are still pending as
// processed, inside tx, with code and detail (for the timeline entry of
// each, which it appends: the same rules as Result.WithDetail), and
// returns the ids it settled. It is for a sink that decides the fate of
// records it was not handed, such as requests to an address that just
// bounced. Like Cancel, it does not stop a hand that is running: the
// hand's own settle then finds the record settled and changes nothing, so
// a sink that must not act on a finished record takes a lock both sides
// share first (the notification dispatcher's inbox claim).
func (o *Outbox) Finish(ctx context.Context, tx dbtx.Queryer, ids []uuid.UUID, code string, detail map[string]any) ([]uuid.UUID, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := tx.QueryContext(ctx, o.q.finish, pgarray.Of(uuidStrings(ids)), code, detailJSON(detail))
	if err != nil {
		return nil, fmt.Errorf("relay: finish: %w", err)
	}
	defer rows.Close()
	var done []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("relay: finish: %w", err)
		}
		done = append(done, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("relay: finish: %w", err)
	}
	return done, nil
}

// Note appends an entry to the timeline of each record of ids, inside tx:
// something that happened to the record after it was settled, such as a
// provider's report on a delivered message. event names it (a short word,
// printable, such as "feedback"); code and detail follow the rules of
// Result.WithCode and Result.WithDetail. An id of no record is skipped.
func (o *Outbox) Note(ctx context.Context, tx dbtx.Execer, ids []uuid.UUID, event, code string, detail map[string]any) error {
	if event == "" {
		return errors.New("relay: note: the event is empty")
	}
	if err := validate.Printable("event", event, KindMaxLen); err != nil {
		return fmt.Errorf("relay: note: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, o.q.note, pgarray.Of(uuidStrings(ids)), event, code, detailJSON(detail)); err != nil {
		return fmt.Errorf("relay: note: %w", err)
	}
	return nil
}

// FindByResult returns the records of kind and lane that were processed
// with result (what their sink answered DoneWith, such as a provider's
// reference for a message), oldest first, at most FindLimitDefault of
// them: how a sink finds the record a later event names by the reference
// its handling returned. Each Record has its ID, Module, Lane, Kind,
// Payload, CorrelationID, CausationID and CreatedAt. It reads through an
// index of the records that have a result; an empty result finds nothing.
func (o *Outbox) FindByResult(ctx context.Context, q dbtx.Queryer, kind, lane, result string) ([]Record, error) {
	if result == "" {
		return nil, nil
	}
	rows, err := q.QueryContext(ctx, o.q.byResult, result, kind, lane, FindLimitDefault)
	if err != nil {
		return nil, fmt.Errorf("relay: find by result: %w", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r := Record{Kind: kind, Lane: lane}
		if err := rows.Scan(&r.ID, &r.Module, &r.Payload, &r.CorrelationID, &r.CausationID, &r.CreatedAt); err != nil {
			return nil, fmt.Errorf("relay: find by result: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("relay: find by result: %w", err)
	}
	return out, nil
}

// FindLimitDefault is how many records FindByCorrelation returns when
// asked for no particular number, and FindLimitMax the most it returns.
const (
	FindLimitDefault = 100
	FindLimitMax     = 1000
)

// Summary is a record in brief, as a list of records shows it.
type Summary struct {
	ID        uuid.UUID
	Module    string
	Lane      string
	Kind      string
	State     State
	Attempts  int    // answers other than done, as in Status
	Code      string // as in Status
	CreatedAt time.Time
	SettledAt time.Time // zero while pending
}

// FindByCorrelation returns the records staged under the correlation id
// id, oldest first, at most limit of them (FindLimitDefault when limit is
// zero or less, and no more than FindLimitMax): the records of one
// staging write, with those their hands staged, and the record whose own
// id is id (a record staged without a correlation id takes its id as
// one). kind, unless "", keeps only records of that kind. It reads
// through indexes only, however many records the outbox keeps.
func (o *Outbox) FindByCorrelation(ctx context.Context, q dbtx.Queryer, id, kind string, limit int) ([]Summary, error) {
	switch {
	case id == "":
		return nil, errors.New("relay: find by correlation: the correlation id is empty")
	case limit > FindLimitMax:
		return nil, fmt.Errorf("relay: find by correlation: limit %d is above FindLimitMax (%d)", limit, FindLimitMax)
	case limit <= 0:
		limit = FindLimitDefault
	}
	var own *uuid.UUID
	if u, err := uuid.Parse(id); err == nil && u.String() == id {
		own = &u
	}
	rows, err := q.QueryContext(ctx, o.q.byCorrelation, id, own, kind, limit)
	if err != nil {
		return nil, fmt.Errorf("relay: find by correlation: %w", err)
	}
	defer rows.Close()
	var out []Summary
	for rows.Next() {
		var s Summary
		var settled sql.NullTime
		if err := rows.Scan(&s.ID, &s.Module, &s.Lane, &s.Kind, &s.CreatedAt, &s.Attempts, &s.Code, &s.State,
			&settled); err != nil {
			return nil, fmt.Errorf("relay: find by correlation: %w", err)
		}
		s.SettledAt = settled.Time
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("relay: find by correlation: %w", err)
	}
	return out, nil
}
