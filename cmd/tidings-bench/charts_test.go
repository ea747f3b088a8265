package main

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The charts come from the results of a run: every measured drain
// setting is a bar, each wake-up path a line, each run of the sustained
// drain a line; what was not measured draws no chart.
func TestChartsFromResults(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig([]string{"-drain", "auto:dropped/50/50,shared/500/500", "-rate", "1000,5000", "-wake", "listen,after",
		"-window", "20s"}, io.Discard)
	require.NoError(t, err)
	res := newResults()
	res.add(ceilDeliver50, "s", "ceiling", "events/s", 48000, "")
	for i, dc := range cfg.drainConfigs() {
		res.add(drainKey(dc), "s", dc.String(), "events/s", float64(20000+i*5000), ceilDeliver50)
		res.add(drainKey(dc)+"/us-self", "s", "relay", "µs", 30, "")
		res.add(drainKey(dc)+"/us-server", "s", "pg", "µs", 50, "")
	}
	for _, rate := range cfg.rates {
		res.add(steadyKey(rate, cfg.wakes[0], "auto:dropped")+"/p50", "s", "p50", "ms", 1, "")
		res.add(steadyKey(rate, cfg.wakes[0], "auto:dropped")+"/p99", "s", "p99", "ms", 4, "")
	}
	res.add("sustain/window/0", "s", "w0", "events/s", 20000, "")
	res.add("sustain/window/1", "s", "w1", "events/s", 19000, "")

	cs := charts(cfg, res)
	names := map[string][]string{}
	for _, c := range cs {
		names[c.name] = texts(parseSVG(t, c.svg))
	}
	require.Contains(t, names["drain.svg"], "auto:dropped/50/50")
	require.Contains(t, names["drain.svg"], "shared/500/500")
	require.Contains(t, names["drain.svg"], "ceiling: pgbench, 50 per transaction")
	require.Contains(t, names["cpu.svg"], "PostgreSQL")
	require.Contains(t, names["latency.svg"], "listen p99")
	require.NotContains(t, names["latency.svg"], "after p99", "a path not measured has no line")
	require.Contains(t, names["sustain.svg"], "run 1")

	var report bytes.Buffer
	printCharts(&report, cs)
	for _, c := range cs {
		require.Contains(t, report.String(), "("+c.name+")")
	}

	delete(res.byKey, "sustain/window/0")
	for _, c := range charts(cfg, res) {
		require.NotEqual(t, "sustain.svg", c.name)
	}
	require.Equal(t, 20*time.Second, cfg.window)
}
