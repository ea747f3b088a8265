package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// run is the whole command, writing its report to out (and with -out
// into a directory, with its charts): it stops everything it started, on
// every path.
func run(ctx context.Context, args []string, out io.Writer) (err error) {
	cfg, err := parseConfig(args, os.Stderr)
	if err != nil {
		return err
	}
	if cfg.out != "" {
		if err := os.MkdirAll(cfg.out, 0o755); err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(cfg.out, "report.md"))
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, f.Close()) }()
		out = io.MultiWriter(out, f)
	}
	stopProfile, err := startProfile(cfg.cpuprofile)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stopProfile()) }()
	srv, err := openServer(ctx, cfg.database, cfg.driver)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, srv.stop()) }()

	admin, err := openPool(ctx, srv.driver, srv.dsn, 2)
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
			err = runSteady(ctx, cfg, srv, postmaster, res)
		case "drain":
			err = runDrain(ctx, cfg, srv, admin, postmaster, res)
		case "sustain":
			err = runSustain(ctx, cfg, srv, postmaster, res)
		case "backlog":
			err = runBacklog(ctx, cfg, srv, postmaster, res)
		}
		if err != nil {
			// Report what was measured before failing.
			err = fmt.Errorf("%s: %w", sc, err)
			return errors.Join(err, report(out, cfg, res, started, loads, err))
		}
		progress("%s done in %s", sc, time.Since(t0).Round(time.Second))
	}
	return report(out, cfg, res, started, loads, nil)
}

// report prints the results and the targets and, with -out, writes the
// charts the report links and the medians for a later -baseline. After a
// failure (failed) it prints what was measured, says the run failed, and
// judges no target and saves no medians: a partial run is no baseline.
func report(w io.Writer, cfg config, res *results, started time.Time, loads map[string]string, failed error) error {
	printResults(w, cfg, res, started, loads, failed)
	if cfg.out == "" {
		return nil
	}
	cs := charts(cfg, res)
	printCharts(w, cs)
	if failed != nil {
		return writeCharts(cfg.out, cs)
	}
	return errors.Join(writeCharts(cfg.out, cs), res.save(filepath.Join(cfg.out, resultsFile)))
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
	fmt.Fprintln(w, "- delivery: in memory, answers Delivered, counts each request with atomics; it declares what its provider does with a repeated key as the commit setting names (auto:dropped: delivery.RepeatDropped; otherwise RepeatSends, the kind of a module that declares nothing)")
	fmt.Fprintln(w, "- steady: the outbox and the inbox start with -history settled requests and their inbox claims, vacuumed and analyzed, as a running service's tables hold its retention's requests")
	fmt.Fprintln(w, "- drains: staged in advance with StageBatch (no NOTIFY), then VACUUM (ANALYZE) and CHECKPOINT; the relay LISTENs; rates are first to last settle on the database clock (processed_at)")
	fmt.Fprintln(w)
}

func printResults(w io.Writer, cfg config, res *results, started time.Time, loads map[string]string, failed error) {
	fmt.Fprintln(w, "## Results")
	fmt.Fprintln(w)
	if failed != nil {
		fmt.Fprintf(w, "**This run failed** (%v): below is what it measured before; no target is judged.\n\n", failed)
	}
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
	if failed == nil {
		printTargets(w, targets(cfg, res))
	}
	if cfg.out == "" {
		fmt.Fprintln(w, "Charts: run with -out DIR to write them next to the report.")
		fmt.Fprintln(w)
	}
}
