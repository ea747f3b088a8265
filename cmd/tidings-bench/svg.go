package main

// The report's charts are small SVG files written by hand: a bar chart
// and a line chart, each with a title, axes with tick labels, optional
// reference lines (a ceiling, a goal) and a legend. Text stays text, so a
// reader can select and search it, and no font or library is needed.

import (
	"encoding/xml"
	"fmt"
	"math"
	"strconv"
	"strings"
)

const (
	chartWidth  = 760 // at least; a bar chart widens to fit its labels
	chartHeight = 420
	plotLeft    = 76  // the y tick labels and the axis title
	plotTop     = 48  // the title
	plotBottom  = 56  // the x tick labels and the axis title
	legendWidth = 200 // right of the plot
)

// palette is the Okabe-Ito set, told apart also by readers with a colour
// vision deficiency; series cycle through it.
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#999999"}

// series is one named set of values: points for a line chart, one value
// per category for a bar chart (NaN draws no bar).
type series struct {
	name   string
	color  int  // index into palette
	dashed bool // a line chart draws it dashed
	points []point
	values []float64
}

type point struct{ x, y float64 }

// ref is a labelled horizontal line across the plot, such as a ceiling.
type ref struct {
	value float64
	label string
}

// barChart draws the series side by side for each category.
type barChart struct {
	title, yLabel string
	categories    []string
	series        []series
	refs          []ref
}

// lineChart draws each series as a line through its points, with a
// marker on each, so a series of one point still shows.
type lineChart struct {
	title, xLabel, yLabel string
	series                []series
	refs                  []ref
	logY                  bool // a log scale on y, for latencies that span decades
}

// scale maps values from [lo, hi] to pixels [p0, p1], linearly or by
// their logarithm; step is the distance between linear ticks.
type scale struct {
	lo, hi, step float64
	log          bool
	p0, p1       float64
}

// newScale covers vs (and zero when fromZero) with round ends. A log
// scale ignores values that are not positive and covers whole decades.
func newScale(vs []float64, fromZero, log bool, p0, p1 float64) scale {
	s := scale{log: log, p0: p0, p1: p1, lo: math.Inf(1), hi: math.Inf(-1)}
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) || log && v <= 0 {
			continue
		}
		s.lo, s.hi = min(s.lo, v), max(s.hi, v)
	}
	if math.IsInf(s.lo, 1) { // nothing to show
		s.lo, s.hi = 1, 10
	}
	if log {
		s.lo = math.Pow(10, math.Floor(math.Log10(s.lo)))
		s.hi = math.Pow(10, math.Ceil(math.Log10(s.hi)))
		if s.hi <= s.lo {
			s.hi = s.lo * 10
		}
		return s
	}
	if fromZero {
		s.lo, s.hi = min(s.lo, 0), max(s.hi, 0)
	}
	if s.hi <= s.lo {
		s.hi = s.lo + 1
	}
	s.step = niceStep((s.hi - s.lo) / 5)
	s.lo = math.Floor(s.lo/s.step) * s.step
	s.hi = math.Ceil(s.hi/s.step) * s.step
	return s
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	e := math.Pow(10, math.Floor(math.Log10(x)))
	switch f := x / e; {
	case f <= 1:
		return e
	case f <= 2:
		return 2 * e
	case f <= 5:
		return 5 * e
	}
	return 10 * e
}

// tickLabel writes a tick's round value in full, without the float
// noise of adding steps: 0.3, 10, 50000.
func tickLabel(v float64) string {
	return strconv.FormatFloat(math.Round(v*1e9)/1e9, 'f', -1, 64)
}

// at is the pixel of v.
func (s scale) at(v float64) float64 {
	f := func(x float64) float64 { return x }
	if s.log {
		f = math.Log10
	}
	return s.p0 + (f(v)-f(s.lo))/(f(s.hi)-f(s.lo))*(s.p1-s.p0)
}

// ticks are the values that get a label: each step, or each decade.
func (s scale) ticks() []float64 {
	var ts []float64
	if s.log {
		for v := s.lo; v <= s.hi*1.0001; v *= 10 {
			ts = append(ts, v)
		}
		return ts
	}
	for i := 0; ; i++ {
		v := s.lo + float64(i)*s.step
		if v > s.hi+s.step/1000 {
			return ts
		}
		ts = append(ts, v)
	}
}

// canvas accumulates the SVG's elements.
type canvas struct {
	b          strings.Builder
	w, h       float64
	plotRight  float64
	plotBottom float64
}

func newCanvas(width float64, title string) *canvas {
	c := &canvas{w: width, h: chartHeight, plotRight: width - legendWidth, plotBottom: chartHeight - plotBottom}
	c.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n",
		c.w, c.h, c.w, c.h)
	c.f("<title>%s</title>\n", esc(title))
	c.f(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	c.text(c.w/2, 24, "middle", `font-size="15" font-weight="bold"`, title)
	return c
}

func (c *canvas) f(format string, args ...any) { fmt.Fprintf(&c.b, format, args...) }

// text writes s at (x, y); attrs are extra attributes, already escaped.
func (c *canvas) text(x, y float64, anchor, attrs, s string) {
	c.f(`<text x="%.1f" y="%.1f" text-anchor="%s" %s>%s</text>`+"\n", x, y, anchor, attrs, esc(s))
}

// yAxis draws the grid, the tick labels and the title of y.
func (c *canvas) yAxis(y scale, label string) {
	for _, t := range y.ticks() {
		py := y.at(t)
		c.f(`<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e0e0e0"/>`+"\n", plotLeft, py, c.plotRight, py)
		c.text(plotLeft-6, py+4, "end", "", tickLabel(t))
	}
	c.f(`<line x1="%d" y1="%d" x2="%d" y2="%.1f" stroke="black"/>`+"\n", plotLeft, plotTop, plotLeft, c.plotBottom)
	c.f(`<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", plotLeft, c.plotBottom, c.plotRight, c.plotBottom)
	mid := (plotTop + c.plotBottom) / 2
	c.text(18, mid, "middle", fmt.Sprintf(`transform="rotate(-90 18 %.1f)"`, mid), label)
}

// refLines draws each ref as a labelled dashed line.
func (c *canvas) refLines(y scale, refs []ref) {
	for _, r := range refs {
		py := y.at(r.value)
		c.f(`<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="2 3"/>`+"\n", plotLeft, py, c.plotRight, py)
		c.text(c.plotRight-4, py-4, "end", `font-size="11" fill="#333"`, r.label)
	}
}

// legend lists the series right of the plot.
func (c *canvas) legend(ss []series, line bool) {
	x := c.plotRight + 16
	for i, s := range ss {
		y := float64(plotTop + 8 + 20*i)
		col := palette[s.color%len(palette)]
		if line {
			c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", x, y, x+22, y, col, dash(s))
		} else {
			c.f(`<rect x="%.1f" y="%.1f" width="14" height="12" fill="%s"/>`+"\n", x, y-6, col)
		}
		c.text(x+28, y+4, "start", "", s.name)
	}
}

func (c *canvas) bytes() []byte {
	c.f("</svg>\n")
	return []byte(c.b.String())
}

func dash(s series) string {
	if s.dashed {
		return ` stroke-dasharray="6 4"`
	}
	return ""
}

// esc escapes s for XML text and attributes.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// svg draws the bar chart.
func (ch barChart) svg() []byte {
	longest := 0
	for _, cat := range ch.categories {
		longest = max(longest, len(cat))
	}
	group := max(60, 7*float64(longest)+16) // wide enough for its label
	width := max(chartWidth, plotLeft+legendWidth+group*float64(len(ch.categories)))
	c := newCanvas(width, ch.title)
	var vs []float64
	for _, s := range ch.series {
		vs = append(vs, s.values...)
	}
	for _, r := range ch.refs {
		vs = append(vs, r.value)
	}
	y := newScale(vs, true, false, c.plotBottom, plotTop)
	c.yAxis(y, ch.yLabel)
	group = (c.plotRight - plotLeft) / float64(max(len(ch.categories), 1))
	bar := min(group*0.8/float64(max(len(ch.series), 1)), 60)
	pad := (group - bar*float64(len(ch.series))) / 2 // centres the bars of a category
	for i, cat := range ch.categories {
		x0 := plotLeft + float64(i)*group
		c.text(x0+group/2, c.plotBottom+16, "middle", "", cat)
		for j, s := range ch.series {
			if i >= len(s.values) || math.IsNaN(s.values[i]) {
				continue
			}
			v := s.values[i]
			x, top := x0+pad+float64(j)*bar, y.at(v)
			c.f(`<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s</title></rect>`+"\n",
				x, top, bar, y.at(0)-top, palette[s.color%len(palette)], esc(fmt.Sprintf("%s, %s: %s", s.name, cat, format(v))))
			c.text(x+bar/2, top-3, "middle", `font-size="10"`, format(v))
		}
	}
	c.refLines(y, ch.refs)
	c.legend(ch.series, false)
	return c.bytes()
}

// svg draws the line chart.
func (ch lineChart) svg() []byte {
	c := newCanvas(chartWidth, ch.title)
	var xs, ys []float64
	for _, s := range ch.series {
		for _, p := range s.points {
			xs, ys = append(xs, p.x), append(ys, p.y)
		}
	}
	for _, r := range ch.refs {
		ys = append(ys, r.value)
	}
	x := newScale(xs, true, false, plotLeft, c.plotRight)
	y := newScale(ys, true, ch.logY, c.plotBottom, plotTop)
	c.yAxis(y, ch.yLabel)
	for _, t := range x.ticks() {
		c.text(x.at(t), c.plotBottom+16, "middle", "", tickLabel(t))
	}
	c.text((plotLeft+c.plotRight)/2, c.plotBottom+40, "middle", "", ch.xLabel)
	c.refLines(y, ch.refs)
	for _, s := range ch.series {
		col := palette[s.color%len(palette)]
		var pts []string
		for _, p := range s.points {
			if ch.logY && p.y <= 0 || math.IsNaN(p.y) {
				continue // no place on the scale
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x.at(p.x), y.at(p.y)))
		}
		c.f(`<polyline class="line" fill="none" stroke="%s" stroke-width="2"%s points="%s"><title>%s</title></polyline>`+"\n",
			col, dash(s), strings.Join(pts, " "), esc(s.name))
		for _, p := range pts {
			px, py, _ := strings.Cut(p, ",")
			c.f(`<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", px, py, col)
		}
	}
	c.legend(ch.series, true)
	return c.bytes()
}
