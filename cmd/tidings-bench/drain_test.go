package main

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Across as many runs as a group has drains, every set of rules runs once
// in each place of its group, and the groups keep their settings.
func TestRotateRulesGivesEverySetEveryPlace(t *testing.T) {
	cfg := config{rules: true, policies: true, drains: []drainConfig{{commit: "shared", batch: 500, conc: 1000}, {commit: "auto:sends", batch: 50, conc: 50}}}
	dcs := cfg.drainConfigs()
	n := len(cfg.ruleSets()) + 1
	places := map[drainConfig][]int{}
	for k := range n {
		got := rotateRules(dcs, n, k)
		if len(got) != len(dcs) {
			t.Fatalf("run %d: %d drains, want %d", k+1, len(got), len(dcs))
		}
		for i, dc := range got {
			if dc.commit != dcs[i/n*n].commit {
				t.Fatalf("run %d: drain %d is %s, outside its group of %s", k+1, i, dc, dcs[i/n*n])
			}
			places[dc] = append(places[dc], i%n)
		}
	}
	for dc, p := range places {
		slices.Sort(p)
		if want := []int{0, 1, 2}; !slices.Equal(p, want) {
			t.Errorf("%s ran in places %v of its group, want each once %v", dc, p, want)
		}
	}
}

// A window of the sustained drain that settled nothing (a stall, or a
// window of a miniature run) still saves: its costs per event are left
// out, not written as infinities JSON cannot hold.
func TestAWindowThatSettledNothingSaves(t *testing.T) {
	res := newResults()
	addWindow(res, "sustain/window/1", "s", "window 2", windowUse{cpu: cpuUse{self: 0.3, server: 0.8, serverKnown: true, steal: 0.1},
		walBytes: 4096}, 0, time.Second)
	require.NoError(t, res.save(filepath.Join(t.TempDir(), resultsFile)))
	_, perEvent := res.get("sustain/window/1/us-self")
	require.False(t, perEvent, "a cost per event of a window without events")
	steal, ok := res.get("sustain/window/1/cpu-steal")
	require.True(t, ok, "the window's steal")
	require.Equal(t, 0.1, steal)
}
