package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/tidings-go/tidings/delivery"
)

// resultsFile is the name of the medians a run with -out keeps next to
// its report, for a later run's -baseline.
const resultsFile = "results.json"

// savedFigure is one figure as resultsFile keeps it.
type savedFigure struct {
	Label  string    `json:"label"`
	Unit   string    `json:"unit"`
	Median float64   `json:"median"`
	Runs   []float64 `json:"runs"`
}

// save writes every figure's median and runs to path as JSON, keyed as
// the results are.
func (r *results) save(path string) error {
	out := make(map[string]savedFigure, len(r.order))
	for _, f := range r.order {
		out[f.key] = savedFigure{Label: f.label, Unit: f.unit, Median: f.median(), Runs: f.values}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// baseline is what the default drain of a module with no protection
// (auto:sends) achieved before, as a fraction of its own run's ceiling:
// absolute rates differ between runs more than their ratios do.
type baseline struct {
	ratio  float64 // 0: none given
	source string  // where it came from, for the report
}

// parseBaseline reads -baseline: a fraction of the ceiling, such as
// 0.10, or the resultsFile of an earlier run, whose own ratio it takes.
func parseBaseline(s string) (baseline, error) {
	if s == "" {
		return baseline{}, nil
	}
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		if v <= 0 || v > 1 {
			return baseline{}, fmt.Errorf("%v: want a fraction of the ceiling in (0, 1]", v)
		}
		return baseline{ratio: v, source: "-baseline " + s}, nil
	}
	b, err := os.ReadFile(s)
	if err != nil {
		return baseline{}, err
	}
	var saved map[string]savedFigure
	if err := json.Unmarshal(b, &saved); err != nil {
		return baseline{}, fmt.Errorf("%s: %w", s, err)
	}
	key := drainKey(defaultDrain(delivery.RepeatSends))
	drain, ceiling := saved[key], saved[ceilDeliver50]
	if drain.Median <= 0 || ceiling.Median <= 0 {
		return baseline{}, errors.New(s + ": the earlier run measured no " + key + " or no " + ceilDeliver50)
	}
	return baseline{ratio: drain.Median / ceiling.Median, source: "an earlier run, " + s}, nil
}
