package relay

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/internal/pgarray"
	"github.com/tidings-go/tidings/internal/purge"
)

// PurgeBatchDefault is how many records one purge statement deletes.
const PurgeBatchDefault = 1000

// ListDeadLimitDefault is how many dead records ListDead returns when the
// filter names no limit.
const ListDeadLimitDefault = 100

// DeadFilter selects dead records. A zero field selects everything on it.
type DeadFilter struct {
	Module string      // only this module's records
	Kind   string      // only records of this kind
	Lane   string      // only records of this lane (a notification's channel)
	Code   string      // only records dead of this cause (DeadRecord.Code)
	Since  time.Time   // only records that died at or after this time
	Until  time.Time   // only records that died before this time
	IDs    []uuid.UUID // only these records; nil means any, an empty list none
	// After, for ListDead, starts the page after this record: the last one
	// of the previous page. Nil starts at the first.
	After *DeadRecord
	Limit int // ListDead only: at most this many; default ListDeadLimitDefault
}

// DeadRecord is a dead record, as an operator inspects it.
type DeadRecord struct {
	ID            uuid.UUID
	Module        string
	Lane          string
	Kind          string
	Payload       json.RawMessage // as staged: it may hold personal data
	CorrelationID string
	CausationID   string
	CreatedAt     time.Time
	FailedAt      time.Time
	Reason        string // why it is dead, as the sink or the relay said
	Code          string // the stable machine code of Reason
	Attempts      int
	Hands         int
}

func (f *DeadFilter) args() []any {
	if f == nil {
		f = &DeadFilter{}
	}
	var ids any
	if f.IDs != nil {
		ids = pgarray.Of(uuidStrings(f.IDs))
	}
	return []any{f.Module, f.Kind, f.Lane, f.Code, nullTime(f.Since), nullTime(f.Until), ids}
}

// uuidStrings is ids as text, for a uuid[] parameter.
func uuidStrings(ids []uuid.UUID) []string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return s
}

func nullTime(t time.Time) sql.NullTime { return sql.NullTime{Time: t, Valid: !t.IsZero()} }

// ListDead returns a page of the dead records f selects, oldest death
// first; pass the last of a page as f.After for the next.
func (o *Outbox) ListDead(ctx context.Context, db *sql.DB, f *DeadFilter) ([]DeadRecord, error) {
	limit := ListDeadLimitDefault
	var afterAt sql.NullTime
	var afterID any
	if f != nil {
		if f.Limit > 0 {
			limit = f.Limit
		}
		if f.After != nil {
			afterAt, afterID = nullTime(f.After.FailedAt), f.After.ID
		}
	}
	return collect(ctx, db, "list dead", o.q.listDead, append(f.args(), afterAt, afterID, limit), func(rows *sql.Rows, d *DeadRecord) error {
		return rows.Scan(&d.ID, &d.Module, &d.Lane, &d.Kind, &d.Payload, &d.CorrelationID, &d.CausationID,
			&d.CreatedAt, &d.FailedAt, &d.Reason, &d.Code, &d.Attempts, &d.Hands)
	})
}

// Reemit hands the dead records f selects back to their relays, once the
// cause is fixed: each keeps its id (so a provider still deduplicates it),
// gets a fresh budget of attempts and hands (a sink sees its next hand as
// attempt 1 again), is due at once, and wakes its module's relay at
// commit; its timeline keeps its earlier life and notes the re-emit. It
// returns how many records it re-emitted. f.After and f.Limit do not
// apply. A nil filter re-emits every dead record.
func (o *Outbox) Reemit(ctx context.Context, db *sql.DB, f *DeadFilter) (int64, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("relay: re-emit: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, o.q.reemit, f.args()...)
	if err != nil {
		return 0, fmt.Errorf("relay: re-emit: %w", err)
	}
	counts := map[string]int64{}
	for rows.Next() {
		var module string
		var n int64
		if err := rows.Scan(&module, &n); err != nil {
			_ = rows.Close()
			return 0, fmt.Errorf("relay: re-emit: %w", err)
		}
		counts[module] = n
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("relay: re-emit: %w", err)
	}
	var total int64
	for _, n := range counts {
		total += n
	}
	if _, err := tx.ExecContext(ctx, o.q.notify, o.q.channel, pgarray.Of(slices.Collect(maps.Keys(counts)))); err != nil {
		return 0, fmt.Errorf("relay: re-emit: wake: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("relay: re-emit: commit: %w", err)
	}
	return total, nil
}

// Purge deletes processed and cancelled records of every module settled
// more than olderThan ago, PurgeBatchDefault at a time so no statement
// holds many locks, and returns how many it deleted. Pending and dead
// records are never purged. olderThan must be positive. A supervisor
// purges only its own module's records, after its Config.Retention.
func (o *Outbox) Purge(ctx context.Context, db *sql.DB, olderThan time.Duration) (int64, error) {
	return o.purge(ctx, db, "", olderThan)
}

// purge is Purge of module's records, or of every module's when module
// is "".
func (o *Outbox) purge(ctx context.Context, db *sql.DB, module string, olderThan time.Duration) (int64, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("relay: purge age %s is not positive", olderThan)
	}
	n, err := purge.Batches(ctx, db, o.q.purge, olderThan, PurgeBatchDefault, module)
	if err != nil {
		return n, fmt.Errorf("relay: purge: %w", err)
	}
	return n, nil
}

// GroupBy names what CountDead groups dead records by.
type GroupBy string

// What CountDead groups dead records by.
const (
	ByCode   GroupBy = "code"   // the code of the reason they died of (DeadRecord.Code)
	ByLane   GroupBy = "lane"   // their lane (a notification's channel)
	ByModule GroupBy = "module" // their module
)

// DeadGroup counts the dead records of one group.
type DeadGroup struct {
	Key   string    // the group's code, lane or module
	Count int64     // how many records of the group are dead
	First time.Time // the earliest death in the group
	Last  time.Time // the latest death in the group
}

// CountDead counts the dead records f selects per group of by, the
// largest group first (then by key): what a "dead by cause" overview or a
// decision to re-emit a group needs. f.After and f.Limit do not apply. It
// reads only the dead records, through their partial indexes, never the
// processed history.
func (o *Outbox) CountDead(ctx context.Context, q dbtx.Queryer, f *DeadFilter, by GroupBy) ([]DeadGroup, error) {
	query, ok := o.q.countDead[by]
	if !ok {
		return nil, fmt.Errorf("relay: count dead: group by %q: want %q, %q or %q", by, ByCode, ByLane, ByModule)
	}
	return collect(ctx, q, "count dead", query, f.args(), func(rows *sql.Rows, g *DeadGroup) error {
		return rows.Scan(&g.Key, &g.Count, &g.First, &g.Last)
	})
}

// collect runs query with args on q and scans each row it returns into a
// T with scan; op names the call in errors.
func collect[T any](ctx context.Context, q dbtx.Queryer, op, query string, args []any, scan func(*sql.Rows, *T) error) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("relay: %s: %w", op, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, fmt.Errorf("relay: %s: %w", op, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("relay: %s: %w", op, err)
	}
	return out, nil
}
