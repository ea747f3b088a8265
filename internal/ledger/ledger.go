// Package ledger is the bookkeeping of the fault suite (package faults)
// and the soak command (examples/soak): a local provider that records every
// request it receives, a log of the faults injected, and the check that
// settles the accounts at the end of a run.
//
// The ledger holds when:
//
//   - every staged event (every outbox row of the module, and every id the
//     caller saw committed) is processed: none pending, none dead;
//   - each has exactly one inbox claim for the consumer, and no claim names
//     an event that was never staged;
//   - the provider received each at least once, always with the event's id
//     as its Idempotency-Key;
//   - no receipt comes after the commit of its event's inbox claim: once
//     the claim committed, no hand may call the provider again, whatever
//     fault struck (the commit's time is the server's commit timestamp, so
//     the server runs with track_commit_timestamp on);
//   - every repeated receipt before that commit is explained by a fault:
//     one whose window overlaps the span from the start of the send that
//     produced the previous receipt to the repeated receipt; and no fault
//     explains more repeats than there were deliveries in flight
//     (Config.InFlight). Or else by a timeout: the previous send reached
//     the provider only after the deliveries' timeout (Config.Timeout)
//     had passed, so its delivery answered Retry while the request was
//     on its way, which the Idempotency-Key is there for. A duplicate
//     without either is a message sent twice for no reason the design
//     allows.
//
// Times of receipts, hands and faults are this machine's wall clock, read
// by the processes involved; the server that commits runs on the same
// machine and clock.
package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/internal/ident"
)

// Fault is one injected fault: what, and the window in which it happened
// (from just before it was injected until the injector saw it done).
type Fault struct {
	Kind   string
	Before time.Time
	After  time.Time
}

// Faults is a log of injected faults. The zero value is empty and ready;
// it is safe for concurrent use.
type Faults struct {
	mu   sync.Mutex
	list []Fault
}

// Inject runs fn, the injection of a fault of kind, and logs the fault
// with the window around fn, whatever fn returns.
func (f *Faults) Inject(kind string, fn func() error) error {
	before := time.Now().Round(0)
	err := fn()
	after := time.Now().Round(0)
	f.mu.Lock()
	f.list = append(f.list, Fault{Kind: kind, Before: before, After: after})
	f.mu.Unlock()
	return err
}

// List returns a copy of the faults logged so far.
func (f *Faults) List() []Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Fault(nil), f.list...)
}

// Config names what Check looks at.
type Config struct {
	Schema   string      // holds the outbox and inbox tables
	Module   string      // the relay's module: its outbox rows are the staged events
	Consumer string      // the dispatcher's inbox consumer
	Known    []uuid.UUID // ids the caller saw committed; each must be staged
	// InFlight bounds the repeats one fault can explain: the most
	// deliveries in flight at once, over every relay of the run. Zero
	// means no bound.
	InFlight int
	// Timeout is the deliveries' timeout: a repeat whose previous send
	// reached the provider only once it had passed is explained. Zero
	// explains none that way. (A repeat after a hand whose delivery the
	// dispatcher timed out, its timeline's retry with the code
	// delivery.timeout, is explained too: the answer came too late, as it
	// does when the relay's machine stalls.)
	Timeout time.Duration
}

// Report is the result of Check.
type Report struct {
	Staged    int // outbox rows of the module
	Processed int
	Dead      int
	Pending   int

	Claimed       int // staged events with exactly one claim
	Unclaimed     int // staged events without a claim
	OrphanClaims  int // claims of the consumer naming no staged event
	KnownMissing  int // committed ids the outbox does not hold
	Receipts      int // requests the provider received
	Received      int // distinct ids among them
	NeverReceived int // processed events the provider never received
	Unknown       int // received ids that were never staged
	WrongKey      int // receipts whose key is not their id

	Duplicated  int // ids received more than once
	Extra       int // receipts beyond the first of their id
	Explained   int // extra receipts inside the window of a fault
	Late        int // extra receipts after a send the provider got past the timeout, or whose delivery timed out
	AfterCommit int // receipts after their event's claim committed: always a bug
	Unexplained []Duplicate
	Faults      int

	Problems []string // what broke the ledger; empty when it holds
}

// Duplicate is a repeated receipt no fault explains, or a receipt after
// its event's claim committed.
type Duplicate struct {
	ID             uuid.UUID
	PrevSendStart  time.Time
	PrevReceivedAt time.Time
	ReceivedAt     time.Time
	Why            string // what rule it breaks
}

// OK reports whether the ledger holds.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// String is the report in a few lines, problems last.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "staged %d: processed %d, dead %d, pending %d\n", r.Staged, r.Processed, r.Dead, r.Pending)
	fmt.Fprintf(&b, "inbox: %d with exactly one claim, %d without, %d orphan claims; committed ids missing from the outbox: %d\n",
		r.Claimed, r.Unclaimed, r.OrphanClaims, r.KnownMissing)
	fmt.Fprintf(&b, "provider: %d receipts of %d ids; never received %d, unknown %d, wrong key %d\n",
		r.Receipts, r.Received, r.NeverReceived, r.Unknown, r.WrongKey)
	fmt.Fprintf(&b, "duplicates: %d ids, %d extra receipts, %d inside a fault window, %d after a send received past the timeout, %d after their claim committed, %d unexplained (%d faults injected)",
		r.Duplicated, r.Extra, r.Explained, r.Late, r.AfterCommit, len(r.Unexplained), r.Faults)
	if len(r.Problems) == 0 {
		b.WriteString("\nledger holds")
	}
	for _, p := range r.Problems {
		b.WriteString("\nPROBLEM: " + p)
	}
	return b.String()
}

// Check settles the accounts: it reads the outbox and inbox of cfg.Schema
// and compares them with what the provider received and the faults
// injected. It returns an error only when it cannot read the database;
// a broken ledger is a Report with Problems.
func Check(ctx context.Context, db *sql.DB, cfg Config, receipts []Receipt, faults []Fault) (*Report, error) {
	if err := ident.Check("schema", cfg.Schema); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	s := ident.Quote(cfg.Schema)
	var tracked string
	if err := db.QueryRowContext(ctx, `SELECT current_setting('track_commit_timestamp')`).Scan(&tracked); err != nil {
		return nil, fmt.Errorf("ledger: read track_commit_timestamp: %w", err)
	}
	if tracked != "on" {
		return nil, errors.New("ledger: the server does not track commit timestamps: start it with track_commit_timestamp=on")
	}
	committed := map[uuid.UUID]time.Time{}
	crows, err := db.QueryContext(ctx, `SELECT event_id, pg_xact_commit_timestamp(xmin) FROM `+s+`.inbox WHERE consumer = $1`, cfg.Consumer)
	if err != nil {
		return nil, fmt.Errorf("ledger: read claim commits: %w", err)
	}
	for crows.Next() {
		var id uuid.UUID
		var at sql.NullTime
		if err := crows.Scan(&id, &at); err != nil {
			_ = crows.Close()
			return nil, fmt.Errorf("ledger: read claim commits: %w", err)
		}
		if at.Valid {
			committed[id] = at.Time
		}
	}
	if err := crows.Err(); err != nil {
		return nil, fmt.Errorf("ledger: read claim commits: %w", err)
	}
	timedOut, err := timeouts(ctx, db, s, cfg.Module)
	if err != nil {
		return nil, err
	}

	rows, err := db.QueryContext(ctx, `SELECT o.id, o.processed_at IS NOT NULL, o.failed_at IS NOT NULL,
			o.processed_at IS NULL AND o.failed_at IS NULL AND o.cancelled_at IS NULL,
			(SELECT count(*) FROM `+s+`.inbox i WHERE i.consumer = $2 AND i.event_id = o.id)
		FROM `+s+`.outbox o WHERE o.module = $1`, cfg.Module, cfg.Consumer)
	if err != nil {
		return nil, fmt.Errorf("ledger: read outbox: %w", err)
	}
	defer rows.Close()
	r := &Report{Faults: len(faults)}
	staged := map[uuid.UUID]bool{} // id: processed
	for rows.Next() {
		var (
			id                     uuid.UUID
			processed, dead, pendg bool
			claims                 int
		)
		if err := rows.Scan(&id, &processed, &dead, &pendg, &claims); err != nil {
			return nil, fmt.Errorf("ledger: read outbox: %w", err)
		}
		r.Staged++
		staged[id] = processed
		switch {
		case processed:
			r.Processed++
		case dead:
			r.Dead++
		case pendg:
			r.Pending++
		}
		switch claims {
		case 0:
			r.Unclaimed++
		case 1:
			r.Claimed++
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger: read outbox: %w", err)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+s+`.inbox i
		WHERE i.consumer = $1 AND NOT EXISTS (SELECT 1 FROM `+s+`.outbox o WHERE o.id = i.event_id)`,
		cfg.Consumer).Scan(&r.OrphanClaims); err != nil {
		return nil, fmt.Errorf("ledger: read inbox: %w", err)
	}
	for _, id := range cfg.Known {
		if _, ok := staged[id]; !ok {
			r.KnownMissing++
		}
	}

	r.Receipts = len(receipts)
	byID := map[uuid.UUID][]Receipt{}
	for _, rc := range receipts {
		byID[rc.ID] = append(byID[rc.ID], rc)
		if rc.Key != rc.ID.String() {
			r.WrongKey++
		}
		if _, ok := staged[rc.ID]; !ok && len(byID[rc.ID]) == 1 {
			r.Unknown++
		}
	}
	r.Received = len(byID)
	for id, processed := range staged {
		if processed && len(byID[id]) == 0 {
			r.NeverReceived++
		}
	}
	r.Duplicated, r.Extra, r.Explained, r.Late, r.AfterCommit, r.Unexplained = Explain(receipts, faults, committed, timedOut, cfg.InFlight, cfg.Timeout)

	problem := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }
	if r.Staged == 0 {
		problem("nothing was staged")
	}
	if r.Processed != r.Staged {
		problem("%d of %d staged events are not processed (%d dead, %d pending)", r.Staged-r.Processed, r.Staged, r.Dead, r.Pending)
	}
	if r.Claimed != r.Staged {
		problem("%d of %d staged events do not have exactly one inbox claim (%d have none)", r.Staged-r.Claimed, r.Staged, r.Unclaimed)
	}
	if r.OrphanClaims > 0 {
		problem("%d inbox claims name no staged event", r.OrphanClaims)
	}
	if r.KnownMissing > 0 {
		problem("%d committed ids are missing from the outbox", r.KnownMissing)
	}
	if r.NeverReceived > 0 {
		problem("%d processed events never reached the provider", r.NeverReceived)
	}
	if r.Unknown > 0 {
		problem("the provider received %d ids that were never staged", r.Unknown)
	}
	if r.WrongKey > 0 {
		problem("%d receipts carried an idempotency key other than their id", r.WrongKey)
	}
	if n := len(r.Unexplained); n > 0 {
		d := r.Unexplained[0]
		problem("%d receipts no fault explains (%d after their claim committed); the first: %s received at %s and again at %s (previous send began %s): %s",
			n, r.AfterCommit, d.ID, d.PrevReceivedAt.Format(time.RFC3339Nano), d.ReceivedAt.Format(time.RFC3339Nano),
			d.PrevSendStart.Format(time.RFC3339Nano), d.Why)
	}
	return r, nil
}

// Explain sorts the repeated receipts: duplicated counts the ids received
// more than once, extra the receipts beyond the first of each id.
//
// A receipt after committed[id], the commit of its event's inbox claim,
// is a send the claim should have prevented: it is counted in afterCommit
// and is unexplained, whatever fault struck. A repeated receipt before
// that commit is explained when a fault's window overlaps the span from
// the start of the previous receipt's send (its receipt time if the send
// start is unknown) to the repeated receipt: the fault hit while the
// previous delivery was in flight, before its commit could land. A fault
// explains at most inFlight repeats (no bound when inFlight is 0): no
// more deliveries were in flight for it to interrupt. A repeat no fault
// explains is late when the previous send reached the provider only
// timeout or more after it started (none is, when timeout is 0), or when
// the id has a hand whose delivery timed out (timedOut[id], each
// explaining one repeat): its answer came too late to count.
func Explain(receipts []Receipt, faults []Fault, committed map[uuid.UUID]time.Time, timedOut map[uuid.UUID]int,
	inFlight int, timeout time.Duration) (duplicated, extra, explained, late, afterCommit int, unexplained []Duplicate) {
	byID := map[uuid.UUID][]Receipt{}
	for _, rc := range receipts {
		byID[rc.ID] = append(byID[rc.ID], rc)
	}
	// Repeats in the order they happened, so each fault's capacity goes to
	// the earliest it can explain.
	type repeat struct {
		prev, rc Receipt
	}
	var repeats []repeat
	for id, rs := range byID {
		slices.SortFunc(rs, func(a, b Receipt) int { return a.At.Compare(b.At) })
		if len(rs) > 1 {
			duplicated++
			extra += len(rs) - 1
		}
		commit, ok := committed[id]
		for k, rc := range rs {
			var prev Receipt
			if k > 0 {
				prev = rs[k-1]
			}
			if ok && rc.At.After(commit) {
				afterCommit++
				unexplained = append(unexplained, Duplicate{ID: id, PrevSendStart: prev.SendStart, PrevReceivedAt: prev.At,
					ReceivedAt: rc.At, Why: "received after its claim committed at " + commit.Format(time.RFC3339Nano)})
				continue
			}
			if k > 0 {
				repeats = append(repeats, repeat{prev: prev, rc: rc})
			}
		}
	}
	slices.SortFunc(repeats, func(a, b repeat) int { return a.rc.At.Compare(b.rc.At) })
	used := make([]int, len(faults))
	for _, r := range repeats {
		from := r.prev.SendStart
		if from.IsZero() || from.After(r.prev.At) {
			from = r.prev.At
		}
		to := r.rc.At
		overlaps, found := false, false
		for i, f := range faults {
			if f.After.Before(from) || f.Before.After(to) {
				continue
			}
			overlaps = true
			if inFlight == 0 || used[i] < inFlight {
				used[i]++
				found = true
				break
			}
		}
		if found {
			explained++
			continue
		}
		if timeout > 0 && !r.prev.SendStart.IsZero() && r.prev.At.Sub(r.prev.SendStart) >= timeout {
			late++
			continue
		}
		if timedOut[r.rc.ID] > 0 {
			timedOut[r.rc.ID]--
			late++
			continue
		}
		why := "no fault's window overlaps its previous delivery, which reached the provider within the timeout"
		if overlaps {
			why = fmt.Sprintf("every fault overlapping it already explains %d repeats, as many as deliveries were in flight", inFlight)
		}
		unexplained = append(unexplained, Duplicate{ID: r.rc.ID, PrevSendStart: r.prev.SendStart, PrevReceivedAt: r.prev.At,
			ReceivedAt: r.rc.At, Why: why})
	}
	slices.SortFunc(unexplained, func(a, b Duplicate) int { return a.ReceivedAt.Compare(b.ReceivedAt) })
	return duplicated, extra, explained, late, afterCommit, unexplained
}

// timeouts counts, per record of module, the hands whose delivery the
// dispatcher timed out: its timeline's retries with the code
// delivery.timeout.
func timeouts(ctx context.Context, db *sql.DB, schema, module string) (map[uuid.UUID]int, error) {
	rows, err := db.QueryContext(ctx, `SELECT t.record_id, count(*) FROM `+schema+`.timeline t
		JOIN `+schema+`.outbox o ON o.id = t.record_id
		WHERE o.module = $1 AND t.event = 'retry' AND t.code = 'delivery.timeout'
		GROUP BY t.record_id`, module)
	if err != nil {
		return nil, fmt.Errorf("ledger: read timeouts: %w", err)
	}
	defer rows.Close()
	n := map[uuid.UUID]int{}
	for rows.Next() {
		var id uuid.UUID
		var k int
		if err := rows.Scan(&id, &k); err != nil {
			return nil, fmt.Errorf("ledger: read timeouts: %w", err)
		}
		n[id] = k
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger: read timeouts: %w", err)
	}
	return n, nil
}

// Counts are the states of a module's outbox rows.
type Counts struct {
	Staged, Processed, Dead, Pending int
}

// Count reads the states of module's outbox rows in schema.
func Count(ctx context.Context, db *sql.DB, schema, module string) (Counts, error) {
	if err := ident.Check("schema", schema); err != nil {
		return Counts{}, fmt.Errorf("ledger: %w", err)
	}
	var c Counts
	err := db.QueryRowContext(ctx, `SELECT count(*),
			count(*) FILTER (WHERE processed_at IS NOT NULL),
			count(*) FILTER (WHERE failed_at IS NOT NULL),
			count(*) FILTER (WHERE processed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL)
		FROM `+ident.Quote(schema)+`.outbox WHERE module = $1`, module).Scan(&c.Staged, &c.Processed, &c.Dead, &c.Pending)
	if err != nil {
		return Counts{}, fmt.Errorf("ledger: count: %w", err)
	}
	return c, nil
}

// DeadTuples reads the outbox table's dead tuples in schema, as the
// statistics collector last reported them.
func DeadTuples(ctx context.Context, db *sql.DB, schema string) (int64, error) {
	var n sql.NullInt64
	err := db.QueryRowContext(ctx, `SELECT n_dead_tup FROM pg_stat_user_tables
		WHERE schemaname = $1 AND relname = 'outbox'`, schema).Scan(&n)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("ledger: dead tuples: %w", err)
	}
	return n.Int64, nil
}

// Percentile returns the p-th percentile (0 < p <= 100) of ds by the
// nearest-rank method, or zero for none. It sorts ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	rank := int(math.Ceil(float64(len(ds))*p/100)) - 1
	return ds[min(max(rank, 0), len(ds)-1)]
}
