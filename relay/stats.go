package relay

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tidings-go/tidings/dbtx"
)

// LaneStats is what an outbox holds of one module and lane.
type LaneStats struct {
	Module string
	Lane   string

	// Due counts the pending records that are due now (those in flight
	// included: a claim pushes a record's due time past its lease).
	Due int64

	// Scheduled counts the pending records that come due later.
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
