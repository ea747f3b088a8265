package main

import (
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/tidings-go/tidings/delivery"
)

// The performance issue's goals for the drain, as fractions.
const (
	goalDefault = 0.50 // the default drain of a RepeatDropped module, of the ceiling
	goalBest    = 0.70 // the best setting, of the ceiling
	goalRules   = 0.85 // a drain with every rule, of the same without
)

// The other goals.
const (
	latencyRate  = 1000 // requests/s
	latencyP50   = 1.0  // ms
	latencyP99   = 5.0  // ms
	burstRate    = 5000 // requests/s
	burstWriters = 32
	burstP99     = 20.0 // ms
	sustainGoal  = 10.0 // % departure of a window from the first
	backlogGoal  = 90.0 // % of the smallest backlog's rate
	relayRSSGoal = 64.0 // MiB
	// offeredShare is the least share of a steady rate its writers must
	// commit for the latency measured to be the goal's: a machine whose
	// writers commit fewer measures the latency of its own saturation.
	offeredShare = 0.95
)

const (
	notMeasured  = "not measured"
	ofTheCeiling = "of the ceiling"
)

// missing is a target this run did not measure, saying what would.
func missing(name, goal, how string) target {
	return target{name: name, measured: notMeasured + " (" + how + ")", goal: goal, verdict: notMeasured}
}

// targets checks the performance issue's goals against the medians
// measured. A goal this run did not measure is listed with what would
// measure it, so the table always shows every goal.
func targets(cfg config, res *results) []target {
	var ts []target
	ts = append(ts, drainTargets(cfg, res)...)
	ts = append(ts, latencyTargets(cfg, res)...)
	ts = append(ts, rulesTargets(cfg, res)...)
	return append(ts, longTargets(cfg, res)...)
}

// drainTargets: the defaults of both kinds of module and the best
// setting, as fractions of the 50-per-transaction ceiling.
func drainTargets(cfg config, res *results) []target {
	c50, ok := res.get(ceilDeliver50)
	ofCeiling := func(key string, v float64) string {
		s := fmt.Sprintf("%s events/s = %.2f of %s", format(v), v/c50, format(c50))
		if rs := res.roundRatios(key, ceilDeliver50); rs != nil {
			s += "; round by round, of the ceiling measured before it: " + ratios(rs)
		}
		return s
	}
	var ts []target
	for _, repeats := range []delivery.Repeat{delivery.RepeatDropped, delivery.RepeatSends} {
		dc := defaultDrain(repeats)
		name := "default drain, a module whose provider drops a repeated key (" + dc.short() + ")"
		goal := fmt.Sprintf(">= %.2f %s", goalDefault, ofTheCeiling)
		if repeats == delivery.RepeatSends {
			name = "default drain, a module with no protection (" + dc.short() + ", so CommitEach)"
			goal = ">= the baseline, a fraction " + ofTheCeiling
			if cfg.baseline.ratio > 0 {
				goal = fmt.Sprintf(">= %.3f %s (baseline: %s)", cfg.baseline.ratio, ofTheCeiling, cfg.baseline.source)
			}
		}
		v, measured := res.get(drainKey(dc))
		switch {
		case !ok:
			ts = append(ts, missing(name, goal, "run the ceiling"))
		case !measured:
			ts = append(ts, missing(name, goal, "add "+dc.short()+" to -drain"))
		case repeats == delivery.RepeatDropped:
			ts = append(ts, target{name, ofCeiling(drainKey(dc), v), goal, atLeast(v/c50, goalDefault, ofTheCeiling)})
		case cfg.baseline.ratio == 0:
			ts = append(ts, target{name, ofCeiling(drainKey(dc), v), goal, "no baseline (give -baseline)"})
		default:
			ts = append(ts, target{name, ofCeiling(drainKey(dc), v), goal, atLeast(v/c50, cfg.baseline.ratio, ofTheCeiling)})
		}
	}
	name, goal := "best drain setting, every guarantee on", fmt.Sprintf(">= %.2f %s", goalBest, ofTheCeiling)
	best := bestDrain(cfg, res)
	bestRate, measured := res.get(drainKey(best))
	switch {
	case !ok:
		ts = append(ts, missing(name, goal, "run the ceiling"))
	case !measured:
		ts = append(ts, missing(name, goal, "run the drain"))
	default:
		ts = append(ts, target{name, best.short() + ": " + ofCeiling(drainKey(best), bestRate), goal, atLeast(bestRate/c50, goalBest, ofTheCeiling)})
	}
	return ts
}

// latencyTargets: commit to delivery start with the default staging and
// wake-up (the relay LISTENs, staging NOTIFYs in its transaction) at
// 1,000 requests/s, and at 5,000/s from 32 writers for a module whose
// provider drops a repeated key. A rate the writers did not reach (less
// than offeredShare of it committed) is not measured: its latency is
// shown with the rate reached. Each says what CPU the machine left idle
// meanwhile: a machine with none queues every step of the path.
func latencyTargets(cfg config, res *results) []target {
	var ts []target
	check := func(rate int, commit, q string, goal float64) {
		name := fmt.Sprintf("steady %d/s from %d writers, LISTEN, commit %s: %s", rate, cfg.steadyWriters, commit, q)
		g := fmt.Sprintf("<= %g ms", goal)
		key := steadyKey(rate, wake{name: "listen"}, commit)
		v, ok := res.get(key + "/" + q)
		reached, _ := res.get(key + "/achieved")
		idle := ""
		if cores, ok := res.get(key + "/cpu-idle"); ok {
			idle = fmt.Sprintf(", %s cores idle while the writers staged", format(cores))
		}
		switch {
		case ok && reached < offeredShare*float64(rate):
			ts = append(ts, target{name, fmt.Sprintf("%s ms at %s requests/s committed%s", format(v), format(reached), idle), g,
				fmt.Sprintf("%s (the writers committed %s of the %d requests/s offered)", notMeasured, format(reached), rate)})
		case ok:
			ts = append(ts, target{name, format(v) + " ms" + idle, g, atMost(v, goal, "ms")})
		default:
			ts = append(ts, missing(name, g, fmt.Sprintf("run steady with -rate %d -wake listen -steady-commit %s", rate, commit)))
		}
	}
	commits := cfg.steadyCommits
	if !cfg.wants("steady") {
		commits = []string{"auto:dropped"}
	}
	for _, g := range commits {
		check(latencyRate, g, "p50", latencyP50)
		check(latencyRate, g, "p99", latencyP99)
	}
	if cfg.steadyWriters == burstWriters {
		check(burstRate, "auto:dropped", "p99", burstP99)
	} else {
		ts = append(ts, missing(fmt.Sprintf("steady %d/s from %d writers, LISTEN, commit auto:dropped: p99", burstRate, burstWriters),
			fmt.Sprintf("<= %g ms", burstP99), fmt.Sprintf("needs -steady-writers %d", burstWriters)))
	}
	return ts
}

// rulesTargets: each drain setting with every recipient rule on, and with
// the policies alone, against the same setting without, in the same run;
// each a line, measured or not.
func rulesTargets(cfg config, res *results) []target {
	names := map[ruleSet]string{rulesAll: "the recipient rules and the timeline",
		rulesPolicies: "the recipient policies alone (no dedup key, no secret)"}
	goal := fmt.Sprintf(">= %.2f of the same setting without (within %.0f %%)", goalRules, 100*(1-goalRules))
	if len(cfg.ruleSets()) == 0 {
		return []target{missing(names[rulesAll], goal, "run the drain with -rules"),
			missing(names[rulesPolicies], goal, "run the drain with -policies")}
	}
	var ts []target
	for _, dc := range cfg.drainConfigs() {
		if dc.rules != rulesOff {
			continue
		}
		off, ok := res.get(drainKey(dc))
		for _, rs := range cfg.ruleSets() {
			with := dc
			with.rules = rs
			name := names[rs] + ", " + dc.short()
			on, ok2 := res.get(drainKey(with))
			if !ok || !ok2 {
				ts = append(ts, missing(name, goal, "run the drain"))
				continue
			}
			ts = append(ts, target{
				name:     name,
				measured: fmt.Sprintf("%s events/s with, %s without = %.2f", format(on), format(off), on/off),
				goal:     goal,
				verdict:  atLeast(on/off, goalRules, "of the rate without"),
			})
		}
	}
	return ts
}

// farthestWindow names the window of the first n whose median rate
// departed most from the first window's, whether it ran faster or
// slower, and the CPU per event the relay and PostgreSQL's sessions spent
// in it against the first window: the same work done at another speed
// moves both (docs/bench/HISTORY.md). It is empty without the windows.
func farthestWindow(res *results, n int) string {
	var windows []float64
	for i := range n {
		v, ok := res.get(fmt.Sprintf("sustain/window/%d", i))
		if !ok {
			break
		}
		windows = append(windows, v)
	}
	at, far := farthest(windows, n)
	if at == 0 {
		return ""
	}
	dir := "slower"
	if far > 0 {
		dir = "faster"
	}
	s := fmt.Sprintf(": window %d, %s", at+1, dir)
	cpu := func(i int) (float64, bool) {
		relay, ok1 := res.get(fmt.Sprintf("sustain/window/%d/us-self", i))
		sessions, ok2 := res.get(fmt.Sprintf("sustain/window/%d/us-sessions", i))
		return relay + sessions, ok1 && ok2
	}
	if c, ok := cpu(at); ok {
		if c0, ok := cpu(0); ok && c0 > 0 {
			s += fmt.Sprintf(", at %.2f of the first's CPU per event", c/c0)
		}
	}
	return s
}

// longTargets: the sustained drain, a large backlog against a small one,
// and the relay's memory.
func longTargets(cfg config, res *results) []target {
	var ts []target
	name, goal := fmt.Sprintf("sustained: every %s window of the first %s within %.0f %% of the first", cfg.window, cfg.sustain, sustainGoal), fmt.Sprintf("<= %.0f %%", sustainGoal)
	if v, ok := res.get("sustain/worst"); ok {
		measured := fmt.Sprintf("largest departure %.1f %%", v) + farthestWindow(res, int(cfg.sustain/cfg.window))
		var steal []float64
		for i := range int(cfg.sustain / cfg.window) {
			if s, ok := res.get(fmt.Sprintf("sustain/window/%d/cpu-steal", i)); ok {
				steal = append(steal, s)
			}
		}
		if len(steal) > 0 {
			// A window's rate follows the steal (docs/bench/HISTORY.md).
			measured += fmt.Sprintf(" (the windows' steal %.2f to %.2f cores)", slices.Min(steal), slices.Max(steal))
		}
		ts = append(ts, target{name, measured, goal, atMost(v, sustainGoal, "points")})
	} else {
		ts = append(ts, missing(name, goal, "run sustain with a drain that lasts -sustain"))
	}
	lo, hi := slices.Min(cfg.backlogs), slices.Max(cfg.backlogs)
	name, goal = fmt.Sprintf("backlog: drain rate with %d pending vs %d", hi, lo), fmt.Sprintf(">= %.0f %%", backlogGoal)
	small, ok1 := res.get(fmt.Sprintf("backlog/%d/rate", lo))
	big, ok2 := res.get(fmt.Sprintf("backlog/%d/rate", hi))
	if ok1 && ok2 && lo < hi {
		ratio := 100 * big / small
		ts = append(ts, target{name, fmt.Sprintf("%s vs %s events/s = %.0f %%", format(big), format(small), ratio), goal, atLeast(ratio, backlogGoal, "points")})
	} else {
		ts = append(ts, missing(name, goal, "run backlog with two sizes"))
	}
	hwm := math.Inf(-1)
	for _, size := range cfg.backlogs {
		if f, ok := res.byKey[fmt.Sprintf("backlog/%d/hwm", size)]; ok {
			hwm = max(hwm, slices.Max(f.values))
		}
	}
	name, goal = "relay peak RSS, any backlog (largest of all runs)", fmt.Sprintf("<= %.0f MiB", relayRSSGoal)
	if math.IsInf(hwm, -1) {
		ts = append(ts, missing(name, goal, "run backlog"))
	} else {
		ts = append(ts, target{name, fmt.Sprintf("%.1f MiB", hwm), goal, atMost(hwm, relayRSSGoal, "MiB")})
	}
	return ts
}

// target is one goal of the issue, checked against the medians.
type target struct {
	name     string
	measured string
	goal     string
	verdict  string
}

func printTargets(w io.Writer, ts []target) {
	if len(ts) == 0 {
		return
	}
	fmt.Fprintln(w, "### Targets")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | measured (median) | goal | verdict |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	for _, t := range ts {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.name, t.measured, t.goal, t.verdict)
	}
	fmt.Fprintln(w)
}

// atLeast judges v against a floor, saying by how much it misses.
func atLeast(v, goal float64, unit string) string {
	if v >= goal {
		return "met"
	}
	return fmt.Sprintf("missed by %s %s (%.0f %% short)", format(goal-v), unit, 100*(goal-v)/goal)
}

// atMost judges v against a ceiling.
func atMost(v, goal float64, unit string) string {
	if v <= goal {
		return "met"
	}
	return fmt.Sprintf("missed by %s %s (%.1fx the goal)", format(v-goal), unit, v/goal)
}
