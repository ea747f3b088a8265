package main

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// verdicts runs targets on a run of the drain with args and the given
// medians, and returns each target's verdict by the start of its name.
func verdicts(t *testing.T, args []string, medians map[string]float64) map[string]target {
	t.Helper()
	cfg, err := parseConfig(append([]string{"-only", "ceiling,drain"}, args...), io.Discard)
	require.NoError(t, err)
	res := newResults()
	for k, v := range medians {
		res.add(k, "s", k, "u", v, "")
	}
	out := map[string]target{}
	for _, tg := range targets(cfg, res) {
		out[tg.name] = tg
	}
	return out
}

// find returns the target whose name starts with prefix.
func find(t *testing.T, ts map[string]target, prefix string) target {
	t.Helper()
	for name, tg := range ts {
		if strings.HasPrefix(name, prefix) {
			return tg
		}
	}
	require.Failf(t, "no target", "%q among %v", prefix, ts)
	return target{}
}

func TestTargets(t *testing.T) {
	t.Parallel()
	medians := map[string]float64{
		ceilDeliver50:                             48000,
		"drain/auto:dropped/b500/c500/l0/rfalse":  20000, // 0.42 of the ceiling
		"drain/auto:dropped/b500/c500/l0/rtrue":   18000, // 0.90 of the same without
		"drain/auto:sends/b500/c500/l0/rfalse":    4800,  // 0.10
		"drain/auto:sends/b500/c500/l0/rtrue":     3600,  // 0.75
		"drain/shared/b500/c1000/l0/rfalse":       36000, // 0.75, the best
		"drain/shared/b500/c1000/l0/rtrue":        40000, // faster with the rules: not a best setting
		"drain/auto:sends/b500/c500/l0/rpolicies": 4700,  // 0.98
		"drain/shared/b500/c1000/l0/rpolicies":    30000, // 0.83
	}
	args := []string{"-drain", "auto:dropped/500/500,auto:sends/500/500,shared/500/1000", "-rules", "-policies"}

	t.Run("NoBaseline", func(t *testing.T) {
		t.Parallel()
		ts := verdicts(t, args, medians)
		dropped := find(t, ts, "default drain, a module whose provider drops")
		require.Contains(t, dropped.measured, "20000 events/s = 0.42 of 48000")
		require.Equal(t, ">= 0.50 of the ceiling", dropped.goal)
		require.True(t, strings.HasPrefix(dropped.verdict, "missed by 0.0833 of the ceiling"), dropped.verdict)
		require.Equal(t, "no baseline (give -baseline)", find(t, ts, "default drain, a module with no protection").verdict)
		best := find(t, ts, "best drain setting")
		require.Contains(t, best.measured, "shared/500/1000: 36000")
		require.Equal(t, "met", best.verdict)
		require.Equal(t, "met", find(t, ts, "the recipient rules and the timeline, auto:dropped/500/500").verdict)
		require.True(t, strings.HasPrefix(find(t, ts, "the recipient rules and the timeline, auto:sends/500/500").verdict, "missed by 0.1"))
		policies := "the recipient policies alone (no dedup key, no secret), "
		require.Equal(t, "met", find(t, ts, policies+"auto:sends/500/500").verdict)
		require.True(t, strings.HasPrefix(find(t, ts, policies+"shared/500/1000").verdict, "missed by 0.01"))
		require.Equal(t, notMeasured, find(t, ts, "steady 1000/s").verdict, "steady did not run")
		require.Equal(t, notMeasured, find(t, ts, "relay peak RSS").verdict)
	})
	t.Run("Baseline", func(t *testing.T) {
		t.Parallel()
		met := verdicts(t, append(args, "-baseline", "0.1"), medians)
		require.Equal(t, "met", find(t, met, "default drain, a module with no protection").verdict)
		missed := verdicts(t, append(args, "-baseline", "0.12"), medians)
		require.True(t, strings.HasPrefix(find(t, missed, "default drain, a module with no protection").verdict, "missed by 0.02 of the ceiling"))
	})
	t.Run("OfferedRateNotReached", func(t *testing.T) {
		t.Parallel()
		listen := func(rate int) string { return steadyKey(rate, wake{name: "listen"}, "auto:dropped") }
		ts := verdicts(t, []string{"-only", "steady"}, map[string]float64{
			listen(1000) + "/p50": 2.5, listen(1000) + "/p99": 4, listen(1000) + "/achieved": 990, listen(1000) + "/cpu-idle": 0.12,
			listen(5000) + "/p99": 30, listen(5000) + "/achieved": 1300, listen(5000) + "/cpu-idle": 0.03,
		})
		p50 := find(t, ts, "steady 1000/s from 32 writers, LISTEN, commit auto:dropped: p50")
		require.Equal(t, "2.5 ms, 0.12 cores idle while the writers staged", p50.measured)
		require.True(t, strings.HasPrefix(p50.verdict, "missed by 1.5 ms"))
		require.Equal(t, "met", find(t, ts, "steady 1000/s from 32 writers, LISTEN, commit auto:dropped: p99").verdict)
		burst := find(t, ts, "steady 5000/s")
		require.Equal(t, "30.00 ms at 1300 requests/s committed, 0.03 cores idle while the writers staged", burst.measured)
		require.Equal(t, "not measured (the writers committed 1300 of the 5000 requests/s offered)", burst.verdict)
	})
	t.Run("SustainedWithItsFarthestWindowAndTheSteal", func(t *testing.T) {
		t.Parallel()
		// The fourth window ran faster than the first, on less CPU per
		// event; the seventh, slowest of all, is past the two minutes.
		m := map[string]float64{"sustain/worst": 15.0,
			"sustain/window/0/us-self": 20, "sustain/window/0/us-sessions": 60,
			"sustain/window/3/us-self": 17, "sustain/window/3/us-sessions": 51}
		for i, rate := range []float64{20000, 19500, 20400, 23000, 22000, 19800, 10000} {
			m[fmt.Sprintf("sustain/window/%d", i)] = rate
		}
		for i, s := range []float64{0.01, 0.05, 0.03, 0.12, 0.11, 0.08, 0.9} {
			m[fmt.Sprintf("sustain/window/%d/cpu-steal", i)] = s
		}
		sustained := find(t, verdicts(t, []string{"-only", "sustain"}, m), "sustained")
		require.Equal(t, "largest departure 15.0 %: window 4, faster, at 0.85 of the first's CPU per event (the windows' steal 0.01 to 0.12 cores)",
			sustained.measured)
		require.True(t, strings.HasPrefix(sustained.verdict, "missed by 5 points"), sustained.verdict)
	})
	// Every goal has its line: a setting whose version with the rules was
	// not measured says so, and so do both rule sets when neither ran.
	t.Run("RulesNotMeasuredAreListed", func(t *testing.T) {
		t.Parallel()
		ts := verdicts(t, args, medians)
		require.Equal(t, notMeasured, find(t, ts, "the recipient policies alone (no dedup key, no secret), auto:dropped/500/500").verdict)
		ts = verdicts(t, []string{"-drain", "auto:dropped/500/500"}, medians)
		require.Equal(t, notMeasured, find(t, ts, "the recipient rules and the timeline").verdict)
		require.Contains(t, find(t, ts, "the recipient rules and the timeline").measured, "-rules")
		require.Equal(t, notMeasured, find(t, ts, "the recipient policies alone").verdict)
		require.Contains(t, find(t, ts, "the recipient policies alone").measured, "-policies")
	})

	t.Run("NoCeiling", func(t *testing.T) {
		t.Parallel()
		without := map[string]float64{}
		for k, v := range medians {
			if k != ceilDeliver50 {
				without[k] = v
			}
		}
		ts := verdicts(t, args, without)
		require.Equal(t, notMeasured, find(t, ts, "best drain setting").verdict)
		require.Contains(t, find(t, ts, "best drain setting").measured, "run the ceiling")
	})
}
