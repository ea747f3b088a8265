package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
)

// chartFile is one chart of the report: the file it is written to, next
// to the report, and the SVG.
type chartFile struct {
	name, title string
	svg         []byte
}

// charts draws what the run measured: latency against offered rate,
// the drain rate per setting, the sustained drain per window and CPU per
// event per setting. A chart whose figures were not measured is left out.
func charts(cfg config, res *results) []chartFile {
	var out []chartFile
	add := func(name, title string, svg []byte, ok bool) {
		if ok {
			out = append(out, chartFile{name: name, title: title, svg: svg})
		}
	}
	lat := latencyChart(cfg, res)
	add("latency.svg", lat.title, lat.svg(), len(lat.series) > 0)
	dr := drainChart(cfg, res)
	add("drain.svg", dr.title, dr.svg(), len(dr.categories) > 0)
	su := sustainChart(cfg, res)
	add("sustain.svg", su.title, su.svg(), len(su.series) > 0)
	cpu := cpuChart(cfg, res)
	add("cpu.svg", cpu.title, cpu.svg(), len(cpu.categories) > 0)
	return out
}

// latencyChart plots p50 (solid) and p99 (dashed) of commit to delivery
// start against the offered rate, a colour per wake-up path, the raw
// LISTEN/NOTIFY floor first, and the latency goals.
func latencyChart(cfg config, res *results) lineChart {
	ch := lineChart{
		title:  "Commit to delivery start against offered rate",
		xLabel: "offered rate (requests/s, one per transaction)",
		yLabel: "latency (ms, log scale)",
		logY:   true,
		refs: []ref{
			{latencyP50, fmt.Sprintf("goal at %d/s: p50", latencyRate)},
			{latencyP99, fmt.Sprintf("goal at %d/s: p99", latencyRate)},
			{burstP99, fmt.Sprintf("goal at %d/s: p99", burstRate)},
		},
	}
	type path struct{ name, key string }
	var paths []path
	paths = append(paths, path{"raw LISTEN/NOTIFY", "raw"})
	for _, w := range cfg.wakes {
		for _, g := range cfg.steadyCommits {
			name := w.String()
			if len(cfg.steadyCommits) > 1 {
				name += ", " + g
			}
			paths = append(paths, path{name, w.String() + "/" + g})
		}
	}
	for i, p := range paths {
		for _, q := range []string{"p50", "p99"} {
			s := series{name: p.name + " " + q, color: i, dashed: q == "p99"}
			for _, rate := range cfg.rates {
				if v, ok := res.get(fmt.Sprintf("steady/%d/%s/%s", rate, p.key, q)); ok {
					s.points = append(s.points, point{float64(rate), v})
				}
			}
			if len(s.points) > 0 {
				ch.series = append(ch.series, s)
			}
		}
	}
	return ch
}

// drainRuns are the drain settings measured, with their short names.
func drainRuns(cfg config, res *results) (names []string, keys []string) {
	for _, dc := range cfg.drainConfigs() {
		if _, ok := res.get(drainKey(dc)); ok {
			names = append(names, dc.short())
			keys = append(keys, drainKey(dc))
		}
	}
	return names, keys
}

// drainChart shows each setting's drain rate against the ceiling and
// the goals, fractions of it.
func drainChart(cfg config, res *results) barChart {
	ch := barChart{title: "Drain rate per setting (commit/BatchSize/Concurrency)", yLabel: "events/s, first to last settle"}
	names, keys := drainRuns(cfg, res)
	ch.categories = names
	ch.series = []series{perSetting(res, "drain (median)", 0, keys, "")}
	if c, ok := res.get(ceilDeliver50); ok {
		ch.refs = []ref{
			{c, "ceiling: pgbench, 50 per transaction"},
			{goalBest * c, fmt.Sprintf("%.2f of the ceiling", goalBest)},
			{goalDefault * c, fmt.Sprintf("%.2f of the ceiling", goalDefault)},
		}
	}
	return ch
}

// cpuChart shows the CPU time per event of the relay process and of
// PostgreSQL for each drain setting.
func cpuChart(cfg config, res *results) barChart {
	ch := barChart{title: "CPU time per event per drain setting", yLabel: "µs of CPU per event"}
	names, keys := drainRuns(cfg, res)
	ch.categories = names
	ch.series = []series{
		perSetting(res, "relay process", 0, keys, "/us-self"),
		perSetting(res, "PostgreSQL", 1, keys, "/us-server"),
	}
	return ch
}

// perSetting is the median of key+suffix for each key, NaN where absent.
func perSetting(res *results, name string, color int, keys []string, suffix string) series {
	s := series{name: name, color: color}
	for _, k := range keys {
		v, ok := res.get(k + suffix)
		if !ok {
			v = math.NaN()
		}
		s.values = append(s.values, v)
	}
	return s
}

// sustainChart plots the sustained drain's rate per window, a line per
// run, between the target's bounds around the first window (median).
func sustainChart(cfg config, res *results) lineChart {
	ch := lineChart{
		title:  "Sustained drain per " + cfg.window.String() + " window",
		xLabel: "end of the window (s from the first settle)",
		yLabel: "events/s",
	}
	for run := 0; run < cfg.longRuns; run++ {
		s := series{name: fmt.Sprintf("run %d", run+1), color: run}
		for i := 0; ; i++ {
			f, ok := res.byKey[fmt.Sprintf("sustain/window/%d", i)]
			if !ok || run >= len(f.values) {
				break
			}
			s.points = append(s.points, point{float64(i+1) * cfg.window.Seconds(), f.values[run]})
		}
		if len(s.points) > 0 {
			ch.series = append(ch.series, s)
		}
	}
	if first, ok := res.get("sustain/window/0"); ok {
		ch.refs = []ref{
			{first * (1 + sustainGoal/100), fmt.Sprintf("first window +%.0f %%", sustainGoal)},
			{first * (1 - sustainGoal/100), fmt.Sprintf("first window −%.0f %%", sustainGoal)},
		}
	}
	return ch
}

// writeCharts writes each chart into dir.
func writeCharts(dir string, cs []chartFile) error {
	for _, c := range cs {
		if err := os.WriteFile(filepath.Join(dir, c.name), c.svg, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// printCharts links the charts from the report, which lies next to them.
func printCharts(w io.Writer, cs []chartFile) {
	if len(cs) == 0 {
		return
	}
	fmt.Fprintln(w, "### Charts")
	fmt.Fprintln(w)
	for _, c := range cs {
		fmt.Fprintf(w, "![%s](%s)\n\n", c.title, c.name)
	}
}
