package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// sections are the result tables, in print order.
var sections = []string{
	"Ceiling (pgbench, same run)",
	"Staging: commits/s, one request per transaction",
	"Steady rate: commit to delivery start",
	"Drain (in process)",
	"Sustained drain",
	"Backlog (relay in a child process)",
}

// run is the whole command, writing its report to out: it stops
// everything it started, on every path.
func run(ctx context.Context, args []string, out io.Writer) (err error) {
	cfg, err := parseConfig(args, os.Stderr)
	if err != nil {
		return err
	}
	stopProfile, err := startProfile(cfg.cpuprofile)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stopProfile()) }()
	srv, err := openServer(ctx, cfg.database)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, srv.stop()) }()

	admin, err := openPool(ctx, srv.dsn, 2)
	if err != nil {
		return err
	}
	defer admin.Close()
	version, settings, err := readSettings(ctx, admin)
	if err != nil {
		return err
	}
	postmaster := findPostmaster(ctx, admin)
	m := readMachine()
	started := time.Now()

	fmt.Fprintln(out, "# tidings-bench")
	fmt.Fprintln(out)
	fmt.Fprintf(out, "- command: `tidings-bench %s`\n", strings.Join(redact(args), " "))
	fmt.Fprintf(out, "- started: %s\n", started.Format(time.RFC3339))
	fmt.Fprintln(out)
	printHeader(out, m, srv, version, settings)
	printSettings(out, cfg)

	res := newResults()
	loads := map[string]string{}
	for _, sc := range scenarios {
		if !cfg.wants(sc) {
			continue
		}
		loads[sc] = loadAvg()
		t0 := time.Now()
		var err error
		switch sc {
		case "ceiling":
			err = runCeiling(ctx, cfg, srv, admin, postmaster, res)
		case "stage":
			err = runStage(ctx, cfg, srv, res)
		case "steady":
			err = runSteady(ctx, cfg, srv, res)
		case "drain":
			err = runDrain(ctx, cfg, srv, postmaster, res)
		case "sustain":
			err = runSustain(ctx, cfg, srv, postmaster, res)
		case "backlog":
			err = runBacklog(ctx, cfg, srv, postmaster, res)
		}
		if err != nil {
			// Print what was measured before failing.
			printResults(out, cfg, res, started, loads)
			return fmt.Errorf("%s: %w", sc, err)
		}
		progress("%s done in %s", sc, time.Since(t0).Round(time.Second))
	}
	printResults(out, cfg, res, started, loads)
	return nil
}

// startProfile writes a CPU profile of this process to path until stop;
// an empty path profiles nothing.
func startProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// redact hides the value of -database, which may carry a password.
func redact(args []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		switch {
		case a == "-database" || a == "--database":
			if i+1 < len(out) {
				out[i+1] = "URL"
			}
		case strings.HasPrefix(a, "-database=") || strings.HasPrefix(a, "--database="):
			out[i] = "-database=URL"
		}
	}
	return out
}

func printSettings(w io.Writer, cfg config) {
	fmt.Fprintln(w, "## Settings")
	fmt.Fprintln(w)
	for _, f := range cfg.flags {
		fmt.Fprintf(w, "- -%s=%s\n", f[0], f[1])
	}
	fmt.Fprintln(w, "- delivery: in memory, answers Delivered, counts each request with atomics")
	fmt.Fprintln(w, "- drains: staged in advance with StageBatch (no NOTIFY), then VACUUM (ANALYZE) and CHECKPOINT; the relay LISTENs; rates are first to last settle on the database clock (processed_at)")
	fmt.Fprintln(w)
}

func printResults(w io.Writer, cfg config, res *results, started time.Time, loads map[string]string) {
	fmt.Fprintln(w, "## Results")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- runs per figure: %d, sustain and backlog %d (median shown; every run listed)\n", cfg.runs, cfg.longRuns)
	fmt.Fprintf(w, "- total time: %s\n", time.Since(started).Round(time.Second))
	var ls []string
	for _, sc := range scenarios {
		if l, ok := loads[sc]; ok {
			ls = append(ls, sc+" "+l)
		}
	}
	fmt.Fprintf(w, "- load average (1, 5, 15 min) when each scenario began: %s; at the end: %s\n", strings.Join(ls, "; "), loadAvg())
	fmt.Fprintln(w)
	res.print(w, sections)
	printTargets(w, targets(cfg, res))
}

// targets checks the goals against the medians measured.
func targets(cfg config, res *results) []target {
	var ts []target
	if c50, ok := res.get(ceilDeliver50); ok {
		for _, dc := range cfg.drainConfigs() {
			if v, ok := res.get(drainKey(dc)); ok {
				ts = append(ts, target{
					name:     "drain, " + dc.String() + ", vs 50-per-tx pgbench",
					measured: fmt.Sprintf("%s events/s = %.0f %% of %s", format(v), 100*v/c50, format(c50)),
					goal:     ">= 70 %",
					verdict:  atLeast(100*v/c50, 70, "points"),
				})
			}
		}
	}
	for _, w := range cfg.wakes {
		for _, g := range cfg.steadyCommits {
			key := fmt.Sprintf("steady/%s/%s", w, g)
			p50, ok1 := res.get(key + "/p50")
			p99, ok2 := res.get(key + "/p99")
			if ok1 && ok2 {
				ts = append(ts, target{
					name:     fmt.Sprintf("steady %d/s, %s, commit %s: p50", cfg.rate, describeWake(w), g),
					measured: format(p50) + " ms", goal: "<= 2 ms", verdict: atMost(p50, 2, "ms"),
				}, target{
					name:     fmt.Sprintf("steady %d/s, %s, commit %s: p99", cfg.rate, describeWake(w), g),
					measured: format(p99) + " ms", goal: "<= 20 ms", verdict: atMost(p99, 20, "ms"),
				})
			}
		}
	}
	if v, ok := res.get("sustain/worst"); ok {
		ts = append(ts, target{
			name:     fmt.Sprintf("sustained: every %s window of the first %s within 10 %% of the first", cfg.window, cfg.sustain),
			measured: fmt.Sprintf("largest departure %.1f %%", v), goal: "<= 10 %", verdict: atMost(v, 10, "points"),
		})
	}
	if len(cfg.writers) > 0 {
		w := slices.Max(cfg.writers)
		quiet, ok := res.get(stageKey(w, "none"))
		for _, mode := range []string{"notify", "after"} {
			loud, ok2 := res.get(stageKey(w, mode))
			if ok && ok2 {
				cost := 100 * (1 - loud/quiet)
				ts = append(ts, target{
					name:     fmt.Sprintf("staging: cost of the wake-up (%s) at %d writers", stageModeLabel(mode), w),
					measured: fmt.Sprintf("%s commits/s with, %s without: %.1f %% fewer", format(loud), format(quiet), cost),
					goal:     "<= 10 %", verdict: atMost(cost, 10, "points"),
				})
			}
		}
	}
	if len(cfg.backlogs) >= 2 {
		lo, hi := slices.Min(cfg.backlogs), slices.Max(cfg.backlogs)
		small, ok1 := res.get(fmt.Sprintf("backlog/%d/rate", lo))
		big, ok2 := res.get(fmt.Sprintf("backlog/%d/rate", hi))
		if ok1 && ok2 {
			ratio := 100 * big / small
			ts = append(ts, target{
				name:     fmt.Sprintf("backlog: drain rate with %d pending vs %d", hi, lo),
				measured: fmt.Sprintf("%s vs %s events/s = %.0f %%", format(big), format(small), ratio),
				goal:     ">= 90 %", verdict: atLeast(ratio, 90, "points"),
			})
		}
	}
	hwm := math.Inf(-1)
	for _, size := range cfg.backlogs {
		if f, ok := res.byKey[fmt.Sprintf("backlog/%d/hwm", size)]; ok {
			hwm = max(hwm, slices.Max(f.values))
		}
	}
	if !math.IsInf(hwm, -1) {
		ts = append(ts, target{
			name:     "relay peak RSS, any backlog (largest of all runs)",
			measured: fmt.Sprintf("%.1f MiB", hwm), goal: "<= 64 MiB", verdict: atMost(hwm, 64, "MiB"),
		})
	}
	return ts
}
