package relay

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/tidings-go/tidings/dbtx"
)

// LaneStats is what an outbox holds of one module and lane.
type LaneStats struct {
	Module string
	Lane   string

	// Due counts the pending records that are due now and that no relay
	// holds: waiting for a claim.
	Due int64

	// Scheduled counts the pending records that come due later: scheduled,
	// waiting for a retry, or in flight (a claim pushes a record's due
	// time past its lease).
	Scheduled int64

	// OldestDue is how long the longest-waiting due record has been due;
	// zero when none is.
	OldestDue time.Duration

	// Dead counts the dead records.
	Dead int64
}

// DeadCount counts the dead records of one module, lane and reason code.
type DeadCount struct {
	Module string
	Lane   string
	Code   string
	Count  int64
}

// Stats is a picture of an outbox, taken in one statement.
type Stats struct {
	// At is the database's clock when the picture was taken.
	At time.Time

	// Lanes has a row per module and lane with pending or dead records,
	// by module and lane.
	Lanes []LaneStats

	// Dead counts the dead records by module, lane and code, by module,
	// lane and code.
	Dead []DeadCount
}

// Stats counts the pending and dead records of module ("" for every
// module) by lane, and the dead ones by reason code too. It reads the
// pending and the dead records through their partial indexes, never the
// processed ones, so its cost follows the backlog and the dead records,
// not the history the outbox keeps.
func (o *Outbox) Stats(ctx context.Context, q dbtx.Queryer, module string) (Stats, error) {
	rows, err := q.QueryContext(ctx, o.q.stats, module)
	if err != nil {
		return Stats{}, o.tableError("stats", err)
	}
	defer rows.Close()
	var st Stats
	lanes := map[[2]string]int{}
	lane := func(module, name string) *LaneStats {
		k := [2]string{module, name}
		i, ok := lanes[k]
		if !ok {
			i = len(st.Lanes)
			lanes[k] = i
			st.Lanes = append(st.Lanes, LaneStats{Module: module, Lane: name})
		}
		return &st.Lanes[i]
	}
	for rows.Next() {
		var (
			kind, mod, ln, code string
			a, b                int64
			oldest              float64
		)
		if err := rows.Scan(&st.At, &kind, &mod, &ln, &code, &a, &b, &oldest); err != nil {
			return Stats{}, fmt.Errorf("relay: stats: %w", err)
		}
		switch kind {
		case "pending":
			l := lane(mod, ln)
			l.Due, l.Scheduled = a, b
			l.OldestDue = time.Duration(oldest * float64(time.Second))
		case "dead":
			lane(mod, ln).Dead += a
			st.Dead = append(st.Dead, DeadCount{Module: mod, Lane: ln, Code: code, Count: a})
		}
	}
	if err := rows.Err(); err != nil {
		return Stats{}, fmt.Errorf("relay: stats: %w", err)
	}
	slices.SortFunc(st.Lanes, func(a, b LaneStats) int {
		return cmp.Or(cmp.Compare(a.Module, b.Module), cmp.Compare(a.Lane, b.Lane))
	})
	return st, nil
}

// ThroughputMinutesMax is the most minutes Throughput counts.
const ThroughputMinutesMax = 60

// Minute counts the records settled in one minute.
type Minute struct {
	// Start is when the minute began, by the database's clock; it ends a
	// minute later.
	Start time.Time
	// Processed counts the records processed in the minute.
	Processed int64
	// Dead counts the records that died in the minute and are dead still:
	// a record re-emitted since is no longer counted.
	Dead int64
}

// Throughput counts the records of module ("" for every module) processed
// and dead in each of the last minutes (1 to ThroughputMinutesMax), the
// oldest minute first; the last one ends now, by the database's clock. It
// reads only the records settled in those minutes, through the indexes of
// settled and of dead records, so its cost follows the rate, not the
// history the outbox keeps.
func (o *Outbox) Throughput(ctx context.Context, q dbtx.Queryer, module string, minutes int) ([]Minute, error) {
	if minutes < 1 || minutes > ThroughputMinutesMax {
		return nil, fmt.Errorf("relay: throughput: minutes %d: want 1 to %d", minutes, ThroughputMinutesMax)
	}
	return collect(ctx, q, "throughput", o.q.throughput, []any{module, minutes}, func(rows *sql.Rows, m *Minute) error {
		return rows.Scan(&m.Start, &m.Processed, &m.Dead)
	})
}
