package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

// drainConfig is one setting of the relay and the dispatcher: how the
// channel's claims commit, the relay's BatchSize and Concurrency. The
// commit is "each" or "shared" (notification.CommitEach, CommitShared,
// with a delivery that declares nothing), or "auto:dropped" or
// "auto:sends": notification.CommitAuto, the default, with a delivery
// that declares delivery.RepeatDropped (a provider that drops a repeated
// key) or delivery.RepeatSends (one with no protection).
type drainConfig struct {
	commit      string
	batch, conc int
	lane        int     // LaneLimit; 0 is the relay's default
	rules       ruleSet // the recipient rules on (see ruleRequest)
}

// ruleSet is what a drain turns on of the recipient rules.
type ruleSet int

const (
	rulesOff ruleSet = iota
	// rulesAll: every rule, each request with a subject that has
	// preferences and quiet hours, a declared category, an expiry, a
	// dedup key of its own and a secret.
	rulesAll
	// rulesPolicies: the recipient policies alone, as rulesAll without
	// the dedup key and the secret, which are a request's own writes.
	rulesPolicies
)

// commitKinds are the values of drainConfig.commit.
var commitKinds = []string{"each", "shared", "auto:dropped", "auto:sends"}

func (d drainConfig) String() string {
	return d.describe("commit %s, BatchSize %d, Concurrency %d", ", LaneLimit %d", [...]string{"", ", every rule", ", the policies"})
}

// short names d in a chart: commit/BatchSize/Concurrency[/LaneLimit],
// "+rules" with every rule, "+policies" with the policies alone.
func (d drainConfig) short() string {
	return d.describe("%s/%d/%d", "/%d", [...]string{"", " +rules", " +policies"})
}

// describe writes d with the formats of its parts, leaving out a
// LaneLimit it does not set; rules is what each ruleSet adds.
func (d drainConfig) describe(base, lane string, rules [3]string) string {
	s := fmt.Sprintf(base, d.commit, d.batch, d.conc)
	if d.lane > 0 {
		s += fmt.Sprintf(lane, d.lane)
	}
	return s + rules[d.rules]
}

func (d drainConfig) key() string {
	return fmt.Sprintf("%s/b%d/c%d/l%d/r%s", d.commit, d.batch, d.conc, d.lane, [...]string{"false", "true", "policies"}[d.rules])
}

// defaultDrain is the relay's and the dispatcher's defaults for a module
// that declares repeats.
func defaultDrain(repeats delivery.Repeat) drainConfig {
	return drainConfig{commit: "auto:" + repeats.String(), batch: relay.BatchSizeDefault, conc: relay.ConcurrencyDefault}
}

// mode is the notification.Commit of d.commit.
func (d drainConfig) mode() notification.Commit {
	switch d.commit {
	case "each":
		return notification.CommitEach
	case "shared":
		return notification.CommitShared
	}
	return notification.CommitAuto
}

// repeats is what the bench's delivery declares: the kind named after
// "auto:", or RepeatSends, what a delivery that declares nothing is.
func (d drainConfig) repeats() delivery.Repeat {
	if d.commit == "auto:dropped" {
		return delivery.RepeatDropped
	}
	return delivery.RepeatSends
}

// relayPool is the size of a relay's pool: the default Connections,
// which bound what the hands hold, and a few for the relay's own
// statements.
const relayPool = relay.ConnectionsDefault + 10

func (d drainConfig) relayConfig(s benchSchema, drv driver, l relay.Listener) relay.Config {
	return relay.Config{Module: module, Schema: s.name, Listener: l, Pipeline: drv.pipeline(), BatchSize: d.batch,
		Concurrency: d.conc, LaneLimit: d.lane}
}

func (d drainConfig) dispatcher(dl delivery.Delivery) (*notification.Dispatcher, error) {
	return notification.NewDispatcher(&notification.Config{
		Consumer:   consumer,
		Deliveries: map[string]delivery.Delivery{channel: declared{dl, d.repeats()}},
		Commit:     map[string]notification.Commit{channel: d.mode()},
		Categories: map[string]notification.Category{"welcome": {}, "marketing": {}},
	})
}

// drainResult is one drain, timed on the database clock from its first
// settle to its last.
type drainResult struct {
	n           int
	first, last time.Time
	wall        time.Duration // from the start of Supervise until nothing was pending
	cpu         cpuUse
	db          dbUse
	windows     []float64   // events/s per window, full windows only
	windowUse   []windowUse // per window from the start of Supervise (the settle windows start a few ms later)
}

func (r drainResult) rate() float64 {
	return float64(r.n) / r.last.Sub(r.first).Seconds()
}

// drainOnce stages n requests in a fresh schema, drains them with the
// relay and the dispatcher in this process, and checks that each was
// delivered once. A positive window also returns the rate per window.
func drainOnce(ctx context.Context, cfg config, srv server, postmaster int, n int, dc drainConfig, window time.Duration) (drainResult, error) {
	r := drainResult{n: n}
	// A pool of its own for the schema and the statistics: the drain's
	// pool is closed before its row updates are read.
	own, err := openPool(ctx, srv.driver, srv.dsn, 1)
	if err != nil {
		return r, err
	}
	defer own.Close()
	db, err := openPool(ctx, srv.driver, srv.dsn, relayPool)
	if err != nil {
		return r, err
	}
	defer db.Close()
	s, err := newSchema(ctx, own, "drain")
	if err != nil {
		return r, err
	}
	defer s.drop(own)

	progress("  staging %d requests", n)
	ids, err := stageBacklog(ctx, db, s, n, cfg.stageChunk, dc.rules)
	if err != nil {
		return r, err
	}
	if dc.rules != rulesOff {
		if err := stageRules(ctx, db, s); err != nil {
			return r, err
		}
	}
	if err := prepareDrain(ctx, db, s); err != nil {
		return r, err
	}
	dl := newCounter(n, ids, false, time.Now())
	disp, err := dc.dispatcher(dl)
	if err != nil {
		return r, err
	}

	progress("  draining %d requests: %s", n, dc)
	dbm, err := startDB(ctx, db)
	if err != nil {
		return r, err
	}
	meter := startCPU(postmaster)
	start := time.Now()
	l, err := srv.driver.listener(srv.dsn)
	if err != nil {
		return r, err
	}
	rl := supervise(db, dc.relayConfig(s, srv.driver, l), disp)
	stopSampling := func() error { return nil }
	if window > 0 {
		stopSampling = sampleWindows(ctx, own, s, postmaster, window, &r.windowUse)
		defer stopSampling()
	}
	// Generous: a tenth of the slowest rate anyone would run this at.
	deadline := time.Duration(float64(n)/100*float64(time.Second)) + time.Minute
	select {
	case <-dl.done:
	case <-rl.exited:
		return r, fmt.Errorf("the relay stopped early: %w", rl.stop())
	case <-time.After(deadline):
		_ = rl.stop()
		return r, fmt.Errorf("drain unfinished after %s: %d of %d delivered", deadline, dl.total.Load(), n)
	case <-ctx.Done():
		_ = rl.stop()
		return r, ctx.Err()
	}
	if err := waitSettled(ctx, db, s, time.Minute, 2*time.Millisecond); err != nil {
		_ = rl.stop()
		return r, err
	}
	r.wall = time.Since(start)
	r.cpu = meter.stop()
	if err := stopSampling(); err != nil {
		_ = rl.stop()
		return r, fmt.Errorf("sample the windows: %w", err)
	}
	if r.db, err = dbm.stop(ctx); err != nil {
		_ = rl.stop()
		return r, err
	}
	if err := rl.stop(); err != nil {
		return r, err
	}

	if err := errors.Join(dl.verify(), verifyDrain(ctx, db, s, n)); err != nil {
		return r, err
	}
	if r.first, r.last, err = settleSpan(ctx, db, s); err != nil {
		return r, err
	}
	if window > 0 {
		if r.windows, err = windows(ctx, db, s, r.first, r.last, window); err != nil {
			return r, err
		}
	}
	_ = db.Close()
	r.db.rowUpdates, err = outboxUpdates(ctx, own, s)
	return r, err
}

// windowUse is what one window of a drain cost: the CPU, and what the
// server did.
type windowUse struct {
	cpu         cpuUse
	walBytes    int64
	checkpoints int64 // begun
	vacuums     int64 // autovacuum's passes (vacuum or analyze) over the schema's tables, finished
}

// serverSample is the server's counts of what windowUse counts.
type serverSample struct{ wal, checkpoints, vacuums int64 }

// sampleServer reads the server's counts now.
func sampleServer(ctx context.Context, db *sql.DB, s benchSchema) (serverSample, error) {
	var c serverSample
	err := db.QueryRowContext(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
			(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter),
			(SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0) FROM pg_stat_all_tables WHERE schemaname = $1)`,
		s.name).Scan(&c.wal, &c.checkpoints, &c.vacuums)
	return c, err
}

// serverSampling is how often sampleWindows reads the server's processes,
// so that the CPU of an autovacuum worker counts as autovacuum's even when
// it exits within a window; each read takes about 1.4 ms of this
// process's CPU with 120 processes on the machine.
const serverSampling = 500 * time.Millisecond

// sampleWindows records what each window cost into out until stopped;
// stop waits for the sampler, so out is complete once it returns, and
// returns the first error the sampler met.
func sampleWindows(ctx context.Context, db *sql.DB, s benchSchema, postmaster int, window time.Duration, out *[]windowUse) (stop func() error) {
	done := make(chan struct{})
	exited := make(chan struct{})
	var err error
	go func() {
		defer close(exited)
		tick, win := time.NewTicker(serverSampling), time.NewTicker(window)
		defer tick.Stop()
		defer win.Stop()
		m := startCPU(postmaster)
		var from serverSample
		if from, err = sampleServer(ctx, db, s); err != nil {
			return
		}
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				m.server.sample()
			case <-win.C:
				u := windowUse{cpu: m.stop()}
				var to serverSample
				if to, err = sampleServer(ctx, db, s); err != nil {
					return
				}
				u.walBytes, u.checkpoints, u.vacuums = to.wal-from.wal, to.checkpoints-from.checkpoints, to.vacuums-from.vacuums
				*out, from = append(*out, u), to
			}
		}
	}()
	var once sync.Once
	return func() error {
		once.Do(func() {
			close(done)
			<-exited
		})
		return err
	}
}

// windows returns the settle rate of each full window from the first
// settle.
func windows(ctx context.Context, db *sql.DB, s benchSchema, first, last time.Time, w time.Duration) ([]float64, error) {
	full := int(last.Sub(first) / w)
	rows, err := db.QueryContext(ctx, `SELECT floor(extract(epoch FROM processed_at - $1::timestamptz) / $2)::int AS w, count(*)
		FROM `+s.q+`.outbox WHERE processed_at IS NOT NULL GROUP BY 1 ORDER BY 1`, first, w.Seconds())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]float64, full)
	for rows.Next() {
		var i, n int
		if err := rows.Scan(&i, &n); err != nil {
			return nil, err
		}
		if i < full {
			out[i] = float64(n) / w.Seconds()
		}
	}
	return out, rows.Err()
}

// drainConfigs are the settings the drain tries: every combination of the
// flags, each followed by itself with every rule on when -rules asks, and
// with the policies alone when -policies does.
func (c config) drainConfigs() []drainConfig {
	out := c.drains
	if out == nil {
		for _, g := range c.commits {
			for _, b := range c.batches {
				for _, cc := range c.concurrency {
					out = append(out, drainConfig{commit: g, batch: b, conc: cc})
				}
			}
		}
	}
	var all []drainConfig
	for _, d := range out {
		all = append(all, d)
		for _, rs := range c.ruleSets() {
			d.rules = rs
			all = append(all, d)
		}
	}
	return all
}

// rotateRules turns each group of n drains (a setting, then the same with
// each set of rules) by k places, so that across runs every set of rules
// has each place in its group: a drain that runs first or last in its
// group (after another's bulk load, say) then favours no set.
func rotateRules(dcs []drainConfig, n, k int) []drainConfig {
	out := make([]drainConfig, 0, len(dcs))
	for g := 0; g+n <= len(dcs); g += n {
		group := dcs[g : g+n]
		for i := range group {
			out = append(out, group[(i+k)%n])
		}
	}
	return out
}

// ruleSets are the sets of rules each drain setting runs again with.
func (c config) ruleSets() []ruleSet {
	var sets []ruleSet
	if c.rules {
		sets = append(sets, rulesAll)
	}
	if c.policies {
		sets = append(sets, rulesPolicies)
	}
	return sets
}

func drainKey(dc drainConfig) string { return "drain/" + dc.key() }

// runDrain drains -events requests with each setting, -runs times,
// alternating the settings within a run. With the ceiling, each run
// begins with a round of the delivery ceilings (see runCeiling), through
// db.
func runDrain(ctx context.Context, cfg config, srv server, db *sql.DB, postmaster int, res *results) error {
	var pb pgbench
	if cfg.wants("ceiling") {
		var done func()
		var err error
		if pb, done, err = newPgbench(cfg); err != nil {
			return err
		}
		defer done()
	}
	for run := 1; run <= cfg.runs; run++ {
		if cfg.wants("ceiling") {
			if err := deliveryCeilings(ctx, cfg, srv, db, postmaster, res, pb, run); err != nil {
				return err
			}
		}
		for _, dc := range rotateRules(cfg.drainConfigs(), len(cfg.ruleSets())+1, run-1) {
			progress("drain, run %d of %d: %s", run, cfg.runs, dc)
			r, err := drainOnce(ctx, cfg, srv, postmaster, cfg.events, dc, 0)
			if err != nil {
				return fmt.Errorf("drain (%s): %w", dc, err)
			}
			label := fmt.Sprintf("drain %d, %s", cfg.events, dc)
			res.add(drainKey(dc), "Drain (in process)", label+": first to last settle", "events/s", r.rate(), ceilDeliver50)
			res.add(drainKey(dc)+"/wall", "Drain (in process)", label+": start of Supervise to empty", "events/s",
				float64(r.n)/r.wall.Seconds(), ceilDeliver50)
			addUse(res, drainKey(dc), "Drain (in process)", label, r.cpu, r.db, r.n, float64(r.n)/r.wall.Seconds())
		}
	}
	return nil
}

// addUse records where the CPU went during a drain of n events, and what
// the server wrote for each.
func addUse(res *results, key, section, label string, u cpuUse, d dbUse, n int, rate float64) {
	addCPU(res, key, section, label, u)
	addPerEvent(res, key, section, label, u, rate)
	addDB(res, key, section, label, d, n)
}

// addPerEvent records CPU time per event: the measure least disturbed by
// other work on the machine.
func addPerEvent(res *results, key, section, label string, u cpuUse, rate float64) {
	if u.self > 0 {
		res.add(key+"/us-self", section, label+": relay process CPU per event", "µs", u.self*1e6/rate, "")
	}
	if u.serverKnown {
		res.add(key+"/us-server", section, label+": PostgreSQL CPU per event", "µs", u.server*1e6/rate, "")
	}
}

func addCPU(res *results, key, section, label string, u cpuUse) {
	addProcesses(res, key, section, label, "the relay process", "", u)
	addMachine(res, key, section, label, "", u)
}

// addProcesses records the CPU of this process, which self names, and of
// PostgreSQL when it was read, each label followed by when.
func addProcesses(res *results, key, section, label, self, when string, u cpuUse) {
	res.add(key+"/cpu-self", section, label+": CPU of "+self+when, "cores", u.self, "")
	if u.serverKnown {
		res.add(key+"/cpu-server", section, label+": CPU of PostgreSQL"+when, "cores", u.server, "")
	}
}

// addMachine records the whole machine's CPU, its label followed by what
// (what else it takes in, if anything), and the steal, which a machine of
// its own would have given the work instead.
func addMachine(res *results, key, section, label, what string, u cpuUse) {
	res.add(key+"/cpu-machine", section, label+": CPU of the whole machine"+what, "cores", u.machine, "")
	addSteal(res, key, section, label, "", u.steal)
}

// addSteal records the time, in cores, a hypervisor gave other machines
// while this one had work to run, its label followed by when.
func addSteal(res *results, key, section, label, when string, steal float64) {
	res.add(key+"/cpu-steal", section, label+": CPU the hypervisor gave other machines (steal)"+when, "cores", steal, "")
}

func addDB(res *results, key, section, label string, d dbUse, n int) {
	res.add(key+"/writetx", section, label+": write transactions (commits) per event", "tx/event", float64(d.writeTx)/float64(n), "")
	res.add(key+"/wal", section, label+": WAL per event", "bytes/event", float64(d.walBytes)/float64(n), "")
	if d.rowUpdates >= 0 {
		res.add(key+"/updates", section, label+": outbox row updates per event", "updates/event", float64(d.rowUpdates)/float64(n), "")
	}
}

// addWindow records what a window of the sustained drain, at rate events
// a second, cost beyond its rate: the relay's CPU per event and the
// server's by kind of process, the CPU of other work and the steal, the
// WAL, and the checkpoints and autovacuum passes in it.
func addWindow(res *results, key, section, label string, w windowUse, rate float64, window time.Duration) {
	u := w.cpu
	if rate > 0 { // a window that settled nothing has no cost per event
		perEvent := func(cores float64) float64 { return cores * 1e6 / rate }
		res.add(key+"/us-self", section, label+": relay process CPU per event", "µs", perEvent(u.self), "")
		if u.serverKnown {
			res.add(key+"/us-sessions", section, label+": PostgreSQL CPU per event, client sessions", "µs", perEvent(u.server-u.autovacuum-u.background), "")
			res.add(key+"/us-autovacuum", section, label+": PostgreSQL CPU per event, autovacuum", "µs", perEvent(u.autovacuum), "")
			res.add(key+"/us-background", section, label+": PostgreSQL CPU per event, the checkpointer, writers and postmaster", "µs", perEvent(u.background), "")
		}
		res.add(key+"/wal", section, label+": WAL per event", "bytes/event", float64(w.walBytes)/(rate*window.Seconds()), "")
	}
	if u.serverKnown {
		res.add(key+"/other", section, label+": CPU of other work on the machine", "cores", max(u.machine-u.steal-u.self-u.server, 0), "")
	}
	addSteal(res, key, section, label, "", u.steal)
	res.add(key+"/checkpoints", section, label+": checkpoints begun", "checkpoints", float64(w.checkpoints), "")
	res.add(key+"/vacuums", section, label+": autovacuum passes over the schema's tables finished", "passes", float64(w.vacuums), "")
}

// farthest is the window among the first n whose rate departed most from
// the first window's, and its departure (its rate over the first's, less
// one); 0 and 0 without a second window.
func farthest(windows []float64, n int) (at int, departure float64) {
	for i := 1; i < min(n, len(windows)); i++ {
		if d := windows[i]/windows[0] - 1; math.Abs(d) > math.Abs(departure) {
			at, departure = i, d
		}
	}
	return at, departure
}

// bestDrain is the setting without the rules with the highest median
// drain rate, or the first setting when the drain did not run.
func bestDrain(cfg config, res *results) drainConfig {
	best, bestRate := cfg.drainConfigs()[0], math.Inf(-1)
	for _, dc := range cfg.drainConfigs() {
		if v, ok := res.get(drainKey(dc)); ok && dc.rules == rulesOff && v > bestRate {
			best, bestRate = dc, v
		}
	}
	return best
}

// runSustain drains enough requests to last -sustain with the best
// setting and reports the rate per window.
func runSustain(ctx context.Context, cfg config, srv server, postmaster int, res *results) error {
	dc := bestDrain(cfg, res)
	n := cfg.sustainEvents
	if n == 0 {
		n = 1_000_000
		if v, ok := res.get(drainKey(dc)); ok {
			// A third more than the drain's rate needs, in case it slows.
			n = int(math.Ceil(v*cfg.sustain.Seconds()*4/3/10_000)) * 10_000
		}
	}
	const section = "Sustained drain"
	for run := 1; run <= cfg.longRuns; run++ {
		progress("sustain, run %d of %d: %d requests, %s", run, cfg.longRuns, n, dc)
		r, err := drainOnce(ctx, cfg, srv, postmaster, n, dc, cfg.window)
		if err != nil {
			return fmt.Errorf("sustain: %w", err)
		}
		label := fmt.Sprintf("sustain %d, %s", n, dc)
		res.add("sustain/rate", section, label+": first to last settle", "events/s", r.rate(), ceilDeliver50)
		res.add("sustain/duration", section, label+": first to last settle", "s", r.last.Sub(r.first).Seconds(), "")
		want := int(cfg.sustain / cfg.window)
		if len(r.windows) < want {
			progress("  WARNING: the drain lasted %s, less than -sustain %s, so the target is not judged: raise -sustain-events",
				r.last.Sub(r.first).Round(time.Second), cfg.sustain)
		}
		for i, v := range r.windows {
			span := fmt.Sprintf("window %d (%s to %s)", i+1, time.Duration(i)*cfg.window, time.Duration(i+1)*cfg.window)
			res.add(fmt.Sprintf("sustain/window/%d", i), section, label+": "+span, "events/s", v, "sustain/window/0")
			if i < len(r.windowUse) {
				addWindow(res, fmt.Sprintf("sustain/window/%d", i), section, label+": "+span, r.windowUse[i], v, cfg.window)
			}
		}
		// The target's measure: the worst window of the first -sustain
		// against the first window, once the drain lasted that long
		// (parseConfig makes it two windows at least).
		if len(r.windows) >= want {
			_, departure := farthest(r.windows, want)
			res.add("sustain/worst", section, fmt.Sprintf("%s: largest departure of a window from the first, over %s", label, cfg.sustain),
				"%", 100*math.Abs(departure), "")
		}
		addUse(res, "sustain", section, label, r.cpu, r.db, r.n, float64(r.n)/r.wall.Seconds())
	}
	return nil
}
