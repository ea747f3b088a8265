package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
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

// Status is what is known of one record.
type Status struct {
	ID     uuid.UUID
	Module string
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
}

// Settled reports whether the record reached a state it keeps.
func (s Status) Settled() bool { return s.State != StatePending }

// Queryer is what reading a status needs: *sql.DB, *sql.Tx, *sql.Conn.
type Queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Status returns what is known of the record id, or ErrNotFound.
func (o *Outbox) Status(ctx context.Context, q Queryer, id uuid.UUID) (Status, error) {
	st := Status{ID: id}
	var processed, failed, cancelled sql.NullTime
	var reason sql.NullString
	err := q.QueryRowContext(ctx, o.q.status, id).Scan(&st.Module, &st.Kind, &st.CreatedAt, &st.NextAttempt,
		&st.Attempts, &st.Hands, &st.Unsure, &st.LastError, &st.Result, &processed, &failed, &reason, &cancelled)
	if errors.Is(err, sql.ErrNoRows) {
		return st, ErrNotFound
	}
	if err != nil {
		return st, fmt.Errorf("relay: status: %w", err)
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
func (o *Outbox) Cancel(ctx context.Context, tx Execer, id uuid.UUID) (bool, error) {
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
