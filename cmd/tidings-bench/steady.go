package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"

	"github.com/tidings-go/tidings/relay"
)

// steadyResult is one steady run: latencies in ms from the commit's return
// to the start of the delivery, for the requests after the warm-up.
type steadyResult struct {
	lat      []float64 // sorted
	toHand   []float64 // commit to the relay's hand, sorted; nil if not timed
	toStart  []float64 // hand to delivery start, sorted; nil if not timed
	negative int       // deliveries that started before Commit returned
	commit   []float64 // the writers' BEGIN-to-COMMIT-return, ms, sorted
	achieved float64   // requests committed per second
	behind   time.Duration
	cpu      cpuUse // while the writers staged
	// windows are the steadyWindow-wide spans of commit time, by their
	// p99 of lat, lowest first: whether the tail is every second's or a
	// few seconds'.
	windows []steadyWindowResult
}

// steadyWindow is the width of the spans of a steady run whose tails the
// report sets side by side.
const steadyWindow = time.Second

// steadyWindowResult is one steadyWindow of a steady run: the p99 of the
// latencies of the requests committed in it, and the writers' p50 of
// BEGIN to COMMIT there, which says whether the database stalled their
// commits too.
type steadyWindowResult struct {
	p99, commitP50 float64
}

func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// stager stages n requests, one per transaction, on a fixed schedule
// (request i is due at start + i/rate), from several goroutines so a slow
// commit does not delay the next: an open loop. afterStage, when set,
// runs inside each transaction after the request is staged.
type stager struct {
	db         *sql.DB
	ob         *relay.Outbox
	n, rate    int
	writers    int
	base       time.Time
	afterStage func(ctx context.Context, tx *sql.Tx, i int) error
	// afterCommit, when set, runs once each commit returned.
	afterCommit func()
	postmaster  int // the server's, when its CPU can be read (findPostmaster)
}

// staged is what a stager's run did.
type staged struct {
	committed []int64         // per request, when its Commit returned, ns since base
	took      []time.Duration // per request, BEGIN to COMMIT
	behind    time.Duration   // the most a request was staged after it was due
	cpu       cpuUse          // meanwhile
}

// run stages the requests on their schedule.
func (st stager) run(ctx context.Context) (staged, error) {
	committed := make([]int64, st.n)
	took := make([]time.Duration, st.n)
	var behind time.Duration
	meter := startCPU(st.postmaster)
	tickets := make(chan int, st.n)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range st.writers {
		wg.Go(func() {
			for i := range tickets {
				t0 := time.Now()
				if err := st.one(ctx, i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				committed[i] = int64(time.Since(st.base))
				took[i] = time.Since(t0)
				if st.afterCommit != nil {
					st.afterCommit()
				}
			}
		})
	}
	interval := time.Second / time.Duration(st.rate)
	start := time.Now()
	for i := range st.n {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		} else {
			behind = max(behind, -d)
		}
		if ctx.Err() != nil {
			break
		}
		tickets <- i
	}
	close(tickets)
	wg.Wait()
	return staged{committed, took, behind, meter.stop()}, errors.Join(append(errs, ctx.Err())...)
}

func (st stager) one(ctx context.Context, i int) error {
	msg, err := request(i).Message(module)
	if err != nil {
		return err
	}
	tx, err := st.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := st.ob.Stage(ctx, tx, msg); err != nil {
		return err
	}
	if st.afterStage != nil {
		if err := st.afterStage(ctx, tx, i); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// summarize turns the stager's and the delivery's times into a result.
func summarize(s staged, starts, hands func(i int) int64, warm int) steadyResult {
	committed, took := s.committed, s.took
	r := steadyResult{behind: s.behind, cpu: s.cpu}
	for i := warm; i < len(committed); i++ {
		d := float64(starts(i)-committed[i]) / 1e6
		if d < 0 {
			r.negative++
		}
		r.lat = append(r.lat, d)
		r.commit = append(r.commit, float64(took[i])/1e6)
		if hands != nil {
			r.toHand = append(r.toHand, float64(hands(i)-committed[i])/1e6)
			r.toStart = append(r.toStart, float64(starts(i)-hands(i))/1e6)
		}
	}
	r.windows = windowsOf(committed[warm:], took[warm:], r.lat) // r.lat in commit order, before its sort
	slices.Sort(r.lat)
	slices.Sort(r.toHand)
	slices.Sort(r.toStart)
	slices.Sort(r.commit)
	lo, hi := slices.Min(committed), slices.Max(committed)
	r.achieved = float64(len(committed)-1) / (float64(hi-lo) / 1e9)
	return r
}

// windowsOf splits requests by the steadyWindow their commit returned in
// (committed, ns since any base; took and lat, ms, by the same index) and
// returns each window's figures, by p99, lowest first.
func windowsOf(committed []int64, took []time.Duration, lat []float64) []steadyWindowResult {
	if len(committed) == 0 {
		return nil
	}
	first := slices.Min(committed)
	type span struct{ lat, commit []float64 }
	spans := map[int64]*span{}
	for i, c := range committed {
		k := (c - first) / int64(steadyWindow)
		if spans[k] == nil {
			spans[k] = &span{}
		}
		spans[k].lat = append(spans[k].lat, lat[i])
		spans[k].commit = append(spans[k].commit, float64(took[i])/1e6)
	}
	ws := make([]steadyWindowResult, 0, len(spans))
	for _, sp := range spans {
		slices.Sort(sp.lat)
		slices.Sort(sp.commit)
		ws = append(ws, steadyWindowResult{p99: pct(sp.lat, 99), commitP50: pct(sp.commit, 50)})
	}
	slices.SortFunc(ws, func(a, b steadyWindowResult) int { return cmp.Compare(a.p99, b.p99) })
	return ws
}

// steadyOnce runs the relay with wake-up path w and stages at rate.
func steadyOnce(ctx context.Context, cfg config, srv server, postmaster, rate int, w wake, commit string) (steadyResult, error) {
	dc := drainConfig{commit: commit, batch: relay.BatchSizeDefault, conc: relay.ConcurrencyDefault}
	db, s, done, err := steadyTables(ctx, cfg, srv, cfg.steadyWriters+relayPool+1, "steady")
	if err != nil {
		return steadyResult{}, err
	}
	defer done()

	n := int(float64(rate) * (cfg.warmup + cfg.duration).Seconds())
	base := time.Now()
	dl := newCounter(n, nil, true, base)
	disp, err := dc.dispatcher(dl)
	if err != nil {
		return steadyResult{}, err
	}
	rc := dc.relayConfig(s, srv.driver, nil)
	if w.listen {
		if rc.Listener, err = srv.driver.listener(srv.dsn); err != nil {
			return steadyResult{}, err
		}
	}
	rc.SweepInterval = w.sweep
	ob := s.ob
	if !w.notify() {
		ob = ob.WithoutWakeUp()
	}
	st := stager{db: db, ob: ob, n: n, rate: rate, writers: cfg.steadyWriters, base: base, postmaster: postmaster}
	if w.after {
		wk := s.ob.NewWaker(db)
		defer closeWaker(wk)
		st.afterCommit = func() { wk.Wake(module) }
	}
	ts := &timedSink{next: disp, base: base, hands: make([]atomic.Int64, n)}
	rl := supervise(db, rc, ts)
	time.Sleep(500 * time.Millisecond) // LISTEN in place, first sweep done

	sd, err := st.run(ctx)
	if err != nil {
		_ = rl.stop()
		return steadyResult{}, fmt.Errorf("stage: %w", err)
	}
	select {
	case <-dl.done:
	case <-rl.exited:
		return steadyResult{}, fmt.Errorf("the relay stopped early: %w", rl.stop())
	case <-time.After(time.Minute):
		_ = rl.stop()
		return steadyResult{}, fmt.Errorf("only %d of %d delivered a minute after the last commit", dl.total.Load(), n)
	}
	if err := waitSettled(ctx, db, s, time.Minute, 10*time.Millisecond); err != nil {
		_ = rl.stop()
		return steadyResult{}, err
	}
	if err := rl.stop(); err != nil {
		return steadyResult{}, err
	}
	if err := errors.Join(dl.verify(), verifyDrain(ctx, db, s, n)); err != nil {
		return steadyResult{}, err
	}
	warm := int(float64(rate) * cfg.warmup.Seconds())
	return summarize(sd, func(i int) int64 { return dl.starts[i].Load() },
		func(i int) int64 { return ts.hands[i].Load() }, warm), nil
}

// steadyTables opens a pool of conns for a steady run and a schema of
// the scenario's name whose tables hold the run's -history; done drops
// the schema and closes the pool.
func steadyTables(ctx context.Context, cfg config, srv server, conns int, scenario string) (*sql.DB, benchSchema, func(), error) {
	db, err := openPool(ctx, srv.driver, srv.dsn, conns)
	if err != nil {
		return nil, benchSchema{}, nil, err
	}
	s, err := newSchema(ctx, db, scenario)
	if err != nil {
		_ = db.Close()
		return nil, benchSchema{}, nil, err
	}
	done := func() {
		s.drop(db)
		_ = db.Close()
	}
	if err := fillHistory(ctx, db, s, cfg.history); err != nil {
		done()
		return nil, benchSchema{}, nil, err
	}
	return db, s, done, nil
}

// rawOnce is the floor of the LISTEN path: the same stager, each
// transaction also sending a NOTIFY that carries its index, and a bare
// LISTEN session timing its arrival; no relay, no claim, no delivery.
func rawOnce(ctx context.Context, cfg config, srv server, postmaster, rate int) (steadyResult, error) {
	db, s, done, err := steadyTables(ctx, cfg, srv, cfg.steadyWriters+2, "raw")
	if err != nil {
		return steadyResult{}, err
	}
	defer done()

	n := int(float64(rate) * (cfg.warmup + cfg.duration).Seconds())
	base := time.Now()
	arrived := make([]int64, n)
	ch := s.name + ".raw"
	l := pq.NewListener(srv.dsn, 10*time.Millisecond, time.Second, nil)
	defer l.Close()
	if err := l.Listen(ch); err != nil {
		return steadyResult{}, fmt.Errorf("listen: %w", err)
	}
	got := make(chan int, 1)
	go func() {
		count := 0
		for note := range l.NotificationChannel() {
			if note == nil {
				continue
			}
			now := int64(time.Since(base))
			if i, err := strconv.Atoi(note.Extra); err == nil && i >= 0 && i < n && arrived[i] == 0 {
				arrived[i] = now
				count++
			}
			if count == n {
				break
			}
		}
		got <- count
	}()
	notify := func(ctx context.Context, tx *sql.Tx, i int) error {
		_, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, ch, strconv.Itoa(i))
		return err
	}
	sd, err := stager{db: db, ob: s.ob.WithoutWakeUp(), n: n, rate: rate,
		writers: cfg.steadyWriters, base: base, afterStage: notify, postmaster: postmaster}.run(ctx)
	if err != nil {
		return steadyResult{}, fmt.Errorf("stage: %w", err)
	}
	select {
	case c := <-got:
		if c != n {
			return steadyResult{}, fmt.Errorf("%d of %d notifications arrived", c, n)
		}
	case <-time.After(30 * time.Second):
		return steadyResult{}, errors.New("notifications missing 30 s after the last commit")
	}
	warm := int(float64(rate) * cfg.warmup.Seconds())
	return summarize(sd, func(i int) int64 { return arrived[i] }, nil, warm), nil
}

// runSteady measures commit-to-delivery-start latency at each rate for
// each wake-up path and commit mode, and the raw LISTEN/NOTIFY floor,
// -runs times, alternating the variants within a run.
func runSteady(ctx context.Context, cfg config, srv server, postmaster int, res *results) error {
	const section = "Steady rate: commit to delivery start"
	for run := 1; run <= cfg.runs; run++ {
		for _, rate := range cfg.rates {
			progress("steady, run %d of %d: raw LISTEN/NOTIFY floor, %d/s for %s", run, cfg.runs, rate, cfg.warmup+cfg.duration)
			r, err := rawOnce(ctx, cfg, srv, postmaster, rate)
			if err != nil {
				return fmt.Errorf("steady (raw LISTEN/NOTIFY, %d/s): %w", rate, err)
			}
			addSteady(res, section, steadyRawKey(rate), fmt.Sprintf("raw LISTEN/NOTIFY (floor), %d/s", rate), r)
			for _, w := range cfg.wakes {
				for _, g := range cfg.steadyCommits {
					progress("steady, run %d of %d: %s, commit %s, %d/s for %s", run, cfg.runs, w, g, rate, cfg.warmup+cfg.duration)
					r, err := steadyOnce(ctx, cfg, srv, postmaster, rate, w, g)
					if err != nil {
						return fmt.Errorf("steady (%s, commit %s, %d/s): %w", w, g, rate, err)
					}
					addSteady(res, section, steadyKey(rate, w, g),
						fmt.Sprintf("relay %s, commit %s, %d/s", describeWake(w), g, rate), r)
				}
			}
		}
	}
	return nil
}

// steadyKey names the figures of one steady variant; "/p50", "/p99" and
// so on follow it.
func steadyKey(rate int, w wake, commit string) string {
	return fmt.Sprintf("steady/%d/%s/%s", rate, w, commit)
}

func steadyRawKey(rate int) string { return fmt.Sprintf("steady/%d/raw", rate) }

func describeWake(w wake) string {
	switch {
	case w.after:
		return "LISTEN, NOTIFY after commit (relay.Waker)"
	case w.listen && w.sweep == 0:
		return "LISTEN (sweep 30 s)"
	case w.listen:
		return fmt.Sprintf("LISTEN + poll %s", w.sweep)
	}
	return fmt.Sprintf("poll %s, no NOTIFY", w.sweep)
}

// addSteady records a steady run. Latencies get no ratio: their floor,
// the raw LISTEN/NOTIFY row, is about zero (a notification arrives as the
// writer's Commit returns), so the table shows it next to them instead.
func addSteady(res *results, section, key, label string, r steadyResult) {
	ratioTo := func(string) string { return "" }
	for _, p := range []struct {
		name string
		v    float64
	}{{"p50", 50}, {"p90", 90}, {"p99", 99}} {
		res.add(key+"/"+p.name, section, label+": "+p.name, "ms", pct(r.lat, p.v), ratioTo(p.name))
	}
	res.add(key+"/max", section, label+": max", "ms", r.lat[len(r.lat)-1], ratioTo("max"))
	if r.toHand != nil {
		res.add(key+"/hand-p50", section, label+": commit to the relay's hand, p50", "ms", pct(r.toHand, 50), "")
		res.add(key+"/hand-p99", section, label+": commit to the relay's hand, p99", "ms", pct(r.toHand, 99), "")
		res.add(key+"/claim-p50", section, label+": hand to delivery start (BEGIN, inbox claim), p50", "ms", pct(r.toStart, 50), "")
		res.add(key+"/claim-p99", section, label+": hand to delivery start (BEGIN, inbox claim), p99", "ms", pct(r.toStart, 99), "")
	}
	res.add(key+"/commit-p50", section, label+": writer BEGIN to COMMIT, p50", "ms", pct(r.commit, 50), "")
	res.add(key+"/commit-p99", section, label+": writer BEGIN to COMMIT, p99", "ms", pct(r.commit, 99), "")
	if n := len(r.windows); n > 0 {
		worst := r.windows[n-1]
		res.add(key+"/window-p99-p50", section, label+": p99 of each "+steadyWindow.String()+" window, median", "ms", r.windows[(n-1)/2].p99, "")
		res.add(key+"/window-p99-max", section, label+": p99 of each "+steadyWindow.String()+" window, worst", "ms", worst.p99, "")
		res.add(key+"/window-commit-p50", section, label+": writer BEGIN to COMMIT, p50, in the worst window", "ms", worst.commitP50, "")
	}
	res.add(key+"/achieved", section, label+": achieved staging rate", "events/s", r.achieved, "")
	addProcesses(res, key, section, label, "this process", " while the writers staged", r.cpu)
	res.add(key+"/cpu-idle", section, label+": CPU the machine left idle while the writers staged", "cores", r.cpu.idle, "")
	addSteal(res, key, section, label, " while the writers staged", r.cpu.steal)
	if r.negative > 0 {
		progress("  %d deliveries started before their Commit returned (counted as negative latencies)", r.negative)
	}
	if r.behind > 10*time.Millisecond {
		progress("  the stager fell up to %s behind its schedule", r.behind.Round(time.Millisecond))
	}
}
