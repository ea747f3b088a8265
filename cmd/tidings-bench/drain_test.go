package main

import (
	"slices"
	"testing"
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
