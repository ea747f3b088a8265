package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// figure is one measured quantity, with a value per run.
type figure struct {
	key     string // unique; also how ratios name their ceiling
	section string // the table it goes into
	label   string // what was measured, with its settings
	unit    string
	values  []float64
	ceiling string // key of the figure this one is a ratio to; "" for none
	note    string
}

// median of the runs' values.
func (f *figure) median() float64 { return median(f.values) }

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// results collects figures in the order they were first reported.
type results struct {
	order []*figure
	byKey map[string]*figure
}

func newResults() *results { return &results{byKey: map[string]*figure{}} }

// add records one run's value of the figure key, creating it on first use.
func (r *results) add(key, section, label, unit string, v float64, ceiling string) {
	f, ok := r.byKey[key]
	if !ok {
		f = &figure{key: key, section: section, label: label, unit: unit, ceiling: ceiling}
		r.byKey[key] = f
		r.order = append(r.order, f)
	}
	f.values = append(f.values, v)
	progress("  %s: %s %s", label, format(v), unit)
}

// get returns the median of key and whether it was measured.
func (r *results) get(key string) (float64, bool) {
	f, ok := r.byKey[key]
	if !ok || len(f.values) == 0 {
		return 0, false
	}
	return f.median(), true
}

// roundRatios are the ratios of key's runs to ceiling's, run by run,
// when both were measured in each run (the drain measures its ceilings
// at the start of each of its rounds); else nil.
func (r *results) roundRatios(key, ceiling string) []float64 {
	f, c := r.byKey[key], r.byKey[ceiling]
	if f == nil || c == nil || len(f.values) < 2 || len(f.values) != len(c.values) {
		return nil
	}
	rs := make([]float64, len(f.values))
	for i, v := range f.values {
		rs[i] = v / c.values[i]
	}
	return rs
}

func format(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case math.Abs(v) >= 1000:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.1f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func formatRuns(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = format(x)
	}
	return strings.Join(s, ", ")
}

// ratios lists fractions to two places.
func ratios(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, ", ")
}

// print writes one Markdown table per section.
func (r *results) print(w io.Writer, sections []string) {
	for _, sec := range sections {
		var rows []*figure
		for _, f := range r.order {
			if f.section == sec {
				rows = append(rows, f)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(w, "### %s\n\n", sec)
		fmt.Fprintln(w, "| figure | unit | median | runs | ratio to | ratio |")
		fmt.Fprintln(w, "| --- | --- | ---: | --- | --- | ---: |")
		for _, f := range rows {
			ratioTo, ratio := "", ""
			if c, ok := r.byKey[f.ceiling]; ok && c.median() != 0 {
				ratioTo = c.label
				ratio = fmt.Sprintf("%.2f", f.median()/c.median())
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", f.label, f.unit, format(f.median()), formatRuns(f.values), ratioTo, ratio)
		}
		fmt.Fprintln(w)
	}
}
