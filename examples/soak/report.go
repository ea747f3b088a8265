package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/tidings-go/tidings/internal/ledger"
)

// reporter is the state of the 10-s lines between two of them.
type reporter struct {
	next      int                    // index of the first receipt not yet looked at
	seen      map[uuid.UUID]struct{} // ids received so far
	processed int                    // at the last line
	at        time.Time              // of the last line
	latencies []time.Duration        // staging to first receipt, of every event
	crashes   int                    // relay processes that exited by themselves
}

// reportLoop prints a line every reportEvery until ctx ends, and restarts
// the relay process if it exited by itself (a crash: the run fails).
func (s *soak) reportLoop(ctx context.Context, start time.Time) {
	fmt.Fprintln(s.out, "  time   staged delivered  deliv/s  dups  queue dead_tup  p50_ms  p99_ms rss_MiB faults")
	tick := time.NewTicker(reportEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		s.checkChild(start)
		s.report(ctx, start, time.Now())
	}
}

// checkChild restarts a relay process that exited without being killed.
func (s *soak) checkChild(start time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.child.Done():
	default:
		return
	}
	s.rep.crashes++
	fmt.Fprintf(s.out, "%s the relay process %d exited by itself (%v); starting another\n", since(start), s.child.PID(), s.child.Err())
	if c, err := s.spawn(); err == nil {
		s.child = c
	} else {
		fmt.Fprintln(s.out, "cannot start the relay process:", err)
	}
}

// report prints one line. Its queries run to the end even when ctx ends
// meanwhile, within a timeout of their own.
func (s *soak) report(ctx context.Context, start, now time.Time) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportEvery/2)
	defer cancel()
	var staged, processed, pending int
	var deadTup int64
	q := pq.QuoteIdentifier(schema)
	err := s.db.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE processed_at IS NOT NULL),
			(SELECT count(*) FROM `+q+`.outbox WHERE module = $1 AND processed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL)
		FROM `+q+`.outbox WHERE module = $1`, module).Scan(&staged, &processed, &pending)
	if err == nil {
		deadTup, err = ledger.DeadTuples(ctx, s.db, schema)
	}
	if err != nil {
		fmt.Fprintf(s.out, "%s (database unavailable: %v)\n", since(start), err)
		return
	}

	r := &s.rep
	var window []time.Duration
	for _, rc := range s.provider.ReceiptsFrom(r.next) {
		r.next++
		if _, ok := r.seen[rc.ID]; ok {
			continue
		}
		r.seen[rc.ID] = struct{}{}
		window = append(window, rc.At.Sub(rc.StagedAt))
	}
	r.latencies = append(r.latencies, window...)
	receipts, distinct := s.provider.Counts()
	rate := 0.0
	if !r.at.IsZero() {
		rate = float64(processed-r.processed) / now.Sub(r.at).Seconds()
	} else {
		rate = float64(processed) / now.Sub(start).Seconds()
	}
	r.processed, r.at = processed, now

	s.mu.Lock()
	mem := rss(s.child.PID())
	var faults []string
	for _, k := range allFaults {
		if n := s.counts[k]; n > 0 {
			faults = append(faults, fmt.Sprintf("%s:%d", k, n))
		}
	}
	s.mu.Unlock()
	fmt.Fprintf(s.out, "%6s %8d %9d %8.1f %5d %6d %8d %7.1f %7.1f %7.1f %s\n",
		since(start), staged, processed, rate, receipts-distinct, pending, deadTup,
		ms(ledger.Percentile(window, 50)), ms(ledger.Percentile(window, 99)), float64(mem)/1024,
		strings.Join(faults, ","))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// settle prints the ledger and the run's totals, and reports whether the
// run passed.
func (s *soak) settle(ctx context.Context, start time.Time, drained bool) (bool, error) {
	s.mu.Lock()
	known := make([]uuid.UUID, len(s.known))
	for i, id := range s.known {
		known[i] = uuid.MustParse(id)
	}
	failed, counts, crashes := s.failed, s.counts, s.rep.crashes
	s.mu.Unlock()
	// One relay process at a time: a fault interrupts at most its hands.
	rep, err := ledger.Check(ctx, s.db, ledger.Config{Schema: schema, Module: module, Consumer: consumer, Known: known,
		InFlight: concurrency, Timeout: deliveryTimeout}, s.provider.Receipts(), s.faults.List())
	if err != nil {
		return false, err
	}
	all := slices.Clone(s.rep.latencies)
	elapsed := time.Since(start)
	fmt.Fprintln(s.out, "== ledger")
	fmt.Fprintln(s.out, rep)
	fmt.Fprintln(s.out, "== totals")
	fmt.Fprintf(s.out, "run %s: %d events staged (%d staging batches failed while the server was away), %.1f delivered/s overall\n",
		elapsed.Round(time.Second), rep.Staged, failed, float64(rep.Processed)/elapsed.Seconds())
	fmt.Fprintf(s.out, "staging to first receipt: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
		ms(ledger.Percentile(all, 50)), ms(ledger.Percentile(all, 99)), ms(ledger.Percentile(all, 100)))
	var fs []string
	for _, k := range allFaults {
		fs = append(fs, fmt.Sprintf("%s %d", k, counts[k]))
	}
	fmt.Fprintf(s.out, "faults: %s (%d fault windows logged); relay crashes: %d\n", strings.Join(fs, ", "), rep.Faults, crashes)
	ok := drained && rep.OK() && crashes == 0
	if ok {
		fmt.Fprintln(s.out, "PASS: nothing lost, nothing doubled outside a fault's window")
	} else {
		fmt.Fprintln(s.out, "FAIL")
	}
	return ok, nil
}
