package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// element is one SVG element as the tests read it back.
type element struct {
	name  string
	attrs map[string]string
	text  string // its character data, for <text> and <title>
}

// parseSVG decodes b as XML, failing the test on malformed output, and
// returns its elements in document order.
func parseSVG(t *testing.T, b []byte) []element {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	var els []element
	var open []int // indexes of the elements not yet closed
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "not valid XML:\n%s", b)
		switch tok := tok.(type) {
		case xml.StartElement:
			e := element{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			els = append(els, e)
			open = append(open, len(els)-1)
		case xml.EndElement:
			open = open[:len(open)-1]
		case xml.CharData:
			if len(open) > 0 {
				els[open[len(open)-1]].text += string(tok)
			}
		}
	}
	require.NotEmpty(t, els)
	require.Equal(t, "svg", els[0].name)
	require.Equal(t, "http://www.w3.org/2000/svg", els[0].attrs["xmlns"])
	return els
}

// texts are the labels a reader sees.
func texts(els []element) []string {
	var out []string
	for _, e := range els {
		if e.name == "text" {
			out = append(out, e.text)
		}
	}
	return out
}

func attrFloat(t *testing.T, e element, name string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(e.attrs[name], 64)
	require.NoError(t, err, "%s of %v", name, e)
	return v
}

func TestBarChart(t *testing.T) {
	t.Parallel()
	ch := barChart{
		title:      "Drain <rate> & more",
		yLabel:     "events/s",
		categories: []string{"each/50/50", "shared/500/500", "auto:dropped/50/50"},
		series: []series{
			{name: "drain", values: []float64{4000, 25000, 12000}},
			{name: "other", color: 1, values: []float64{100, math.NaN(), 300}},
		},
		refs: []ref{{48000, "ceiling"}},
	}
	els := parseSVG(t, ch.svg())
	labels := texts(els)
	for _, want := range append([]string{"Drain <rate> & more", "events/s", "ceiling", "drain", "other"}, ch.categories...) {
		require.Contains(t, labels, want)
	}

	var bars []element
	for _, e := range els {
		if e.name == "rect" && e.attrs["class"] == "bar" {
			bars = append(bars, e)
		}
	}
	require.Len(t, bars, 5, "a bar for each value but the NaN")
	// The first series' bars, in category order: a larger value is a
	// taller bar standing on the same baseline.
	h := func(i int) float64 { return attrFloat(t, bars[i], "height") }
	bottom := func(i int) float64 { return attrFloat(t, bars[i], "y") + h(i) }
	require.Less(t, h(0), h(3)) // 4,000 < 12,000
	require.Less(t, h(3), h(2)) // 12,000 < 25,000
	require.InDelta(t, bottom(0), bottom(2), 0.2)
	require.InDelta(t, 25000.0/4000, h(2)/h(0), 0.05, "heights are proportional to the values")
	require.Less(t, attrFloat(t, bars[0], "x"), attrFloat(t, bars[2], "x"), "categories run left to right")

	// The ceiling's line lies above every bar (a smaller y).
	var refY float64
	for _, e := range els {
		if e.name == "line" && e.attrs["stroke-dasharray"] == "2 3" {
			refY = attrFloat(t, e, "y1")
		}
	}
	require.NotZero(t, refY)
	require.Less(t, refY, attrFloat(t, bars[2], "y"))
}

func TestLineChart(t *testing.T) {
	t.Parallel()
	ch := lineChart{
		title:  "Latency",
		xLabel: "offered rate",
		yLabel: "ms",
		logY:   true,
		series: []series{
			{name: "listen p50", points: []point{{1000, 0.8}, {5000, 3}, {10000, 40}}},
			{name: "listen p99", dashed: true, points: []point{{1000, 4}, {5000, 120}}},
		},
		refs: []ref{{5, "p99 goal"}},
	}
	els := parseSVG(t, ch.svg())
	labels := texts(els)
	for _, want := range []string{"Latency", "offered rate", "ms", "listen p50", "listen p99", "p99 goal", "0.1", "1", "10", "100", "1000"} {
		require.Contains(t, labels, want)
	}
	var lines []element
	for _, e := range els {
		if e.name == "polyline" {
			lines = append(lines, e)
		}
	}
	require.Len(t, lines, 2)
	require.Empty(t, lines[0].attrs["stroke-dasharray"])
	require.Equal(t, "6 4", lines[1].attrs["stroke-dasharray"])

	var xs, ys []float64
	for _, p := range strings.Fields(lines[0].attrs["points"]) {
		x, y, _ := strings.Cut(p, ",")
		fx, err1 := strconv.ParseFloat(x, 64)
		fy, err2 := strconv.ParseFloat(y, 64)
		require.NoError(t, err1)
		require.NoError(t, err2)
		xs, ys = append(xs, fx), append(ys, fy)
	}
	require.Len(t, xs, 3)
	require.Less(t, xs[0], xs[1], "a higher rate lies further right")
	require.Less(t, xs[1], xs[2])
	require.Greater(t, ys[0], ys[1], "a longer latency lies higher up")
	require.Greater(t, ys[1], ys[2])
	// On the log scale, equal ratios are equal distances: 0.8 to 3 is
	// log10(3.75) decades, 3 to 40 is log10(13.3).
	require.InDelta(t, math.Log10(3.75)/math.Log10(40.0/3), (ys[0]-ys[1])/(ys[1]-ys[2]), 0.02)
}

func TestScale(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		vs       []float64
		fromZero bool
		log      bool
		lo, hi   float64
	}{
		{"linear from zero", []float64{1200, 48000}, true, false, 0, 50000},
		{"linear", []float64{21, 29}, false, false, 20, 30},
		{"log", []float64{0.3, 120}, false, true, 0.1, 1000},
		{"log ignores zero", []float64{0, 2, 3}, false, true, 1, 10},
		{"nothing", nil, true, false, 0, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newScale(tc.vs, tc.fromZero, tc.log, 300, 50)
			require.InDelta(t, tc.lo, s.lo, 1e-9)
			require.InDelta(t, tc.hi, s.hi, 1e-9)
			require.InDelta(t, 300, s.at(s.lo), 1e-9)
			require.InDelta(t, 50, s.at(s.hi), 1e-9)
			ticks := s.ticks()
			require.GreaterOrEqual(t, len(ticks), 2)
			for i := 1; i < len(ticks); i++ {
				require.Greater(t, s.at(ticks[i-1]), s.at(ticks[i]), "ticks %v map monotonically", ticks)
			}
		})
	}
}
