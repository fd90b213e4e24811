package views

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The allowed/denied chart is an inline SVG of stacked bars drawn in a
// 1000 by 200 box that CSS stretches to the container's width. The
// stretching would distort text, so the axis labels are HTML around the
// SVG, placed by percentages computed here.

const (
	chartW = 1000.0
	chartH = 200.0
)

// Chart is a laid-out allowed/denied bar chart.
type Chart struct {
	Label   string // what the chart shows, for its accessible name
	Step    string
	Bars    []Bar
	YTicks  []YTick
	XLabels []XLabel
	Totals  Totals
	Points  []ChartPoint // for the data table
	Peak    int64
}

// Empty reports whether the chart has no decisions to show.
func (c Chart) Empty() bool { return c.Totals.Allowed+c.Totals.Denied == 0 }

// Bar is one step: the allowed part at the bottom, the denied parts on
// top of it, one per reason.
type Bar struct {
	X, W            string
	Segments        []Segment
	Allowed, Denied int64
	Title           string
}

// Segment is one outcome's part of a bar.
type Segment struct {
	Class string // bar-allowed, bar-rate-limited, bar-concurrency-limited, bar-invalid-key, bar-blocked, bar-no-reason
	Y, H  string
}

// outcomes lists the series a chart stacks, bottom to top, with their
// legend names: allowed, then the denials by reason (reason), then the
// "no-reason" series, denials counted without a reason. An optional series
// is in the legend only when the range has some (most tenants have no
// concurrency limit).
var outcomes = []struct {
	class, name      string
	reason, optional bool
}{
	{"allowed", "Allowed", false, false},
	{"rate-limited", "Rate limited", true, false},
	{"concurrency-limited", "Concurrency limited", true, true},
	{"invalid-key", "Invalid key", true, false},
	{"blocked", "Blocked", true, false},
	{"no-reason", "Denied, reason not recorded", false, true},
}

// seriesValues are the counts of outcomes' series, in its order.
func seriesValues(allowed, rateLimited, concurrencyLimited, invalidKey, blocked, unexplained int64) [6]int64 {
	return [6]int64{allowed, rateLimited, concurrencyLimited, invalidKey, blocked, unexplained}
}

func pointValues(p ChartPoint) [6]int64 {
	return seriesValues(p.Allowed, p.RateLimited, p.ConcurrencyLimited, p.InvalidKey, p.Blocked, p.Unexplained())
}

// LegendItem is one series in a chart's legend.
type LegendItem struct {
	Class, Name string
	Count       int64
}

// Legend lists the chart's series: allowed, rate limited, invalid key and
// blocked always; concurrency limited and denials without a reason only
// when there are some.
func (c Chart) Legend() []LegendItem {
	t := c.Totals
	v := seriesValues(t.Allowed, t.RateLimited, t.ConcurrencyLimited, t.InvalidKey, t.Blocked, t.Unexplained())
	out := make([]LegendItem, 0, len(outcomes))
	for i, o := range outcomes {
		if o.optional && v[i] == 0 {
			continue
		}
		out = append(out, LegendItem{Class: o.class, Name: o.name, Count: v[i]})
	}
	return out
}

// ShowsConcurrency reports whether the chart's range has denials by a
// concurrency limit: its data table then has a column for them.
func (c Chart) ShowsConcurrency() bool { return c.Totals.ConcurrencyLimited > 0 }

// YTick is a horizontal grid line with its value. The HTML labels are
// spaced evenly from the bottom, as the lines are.
type YTick struct {
	Y     string // in the SVG's box
	Label string
}

// XLabel is a time label under the chart; the labels are taken at evenly
// spaced steps and CSS spreads them from edge to edge.
type XLabel struct {
	Text string
}

// NewChart lays out points taken every step.
func NewChart(label string, points []ChartPoint, step time.Duration) Chart {
	c := Chart{Label: label, Step: formatStep(step), Points: points}
	for _, p := range points {
		c.Totals.Allowed += p.Allowed
		c.Totals.Denied += p.Denied
		c.Totals.RateLimited += p.RateLimited
		c.Totals.InvalidKey += p.InvalidKey
		c.Totals.Blocked += p.Blocked
		c.Totals.ConcurrencyLimited += p.ConcurrencyLimited
		c.Peak = max(c.Peak, p.Allowed+p.Denied)
	}
	top := niceCeil(c.Peak)
	for i := 0; i <= 4; i++ {
		v := top * int64(i) / 4
		y := chartH - chartH*float64(i)/4
		c.YTicks = append(c.YTicks, YTick{Y: num(y), Label: FormatCount(v)})
	}
	n := len(points)
	if n == 0 {
		return c
	}
	w := chartW / float64(n)
	gap := min(w*0.2, 3)
	for i, p := range points {
		b := Bar{
			X: num(float64(i)*w + gap/2), W: num(w - gap),
			Allowed: p.Allowed, Denied: p.Denied,
			Title: fmt.Sprintf("%s: %s allowed, %s denied", formatPointTime(p.Start, step), FormatCount(p.Allowed), FormatCount(p.Denied)),
		}
		y := chartH
		for k, v := range pointValues(p) {
			if v == 0 {
				continue
			}
			// A part with any decision gets at least a sliver, so a single
			// denial among thousands of allowed checks stays visible.
			h := max(chartH*float64(v)/float64(top), 1.5)
			y -= h
			b.Segments = append(b.Segments, Segment{Class: "bar-" + outcomes[k].class, Y: num(y), H: num(h)})
		}
		if p.Denied > 0 && p.Denied != p.Unexplained() {
			var parts []string
			for k, v := range pointValues(p) {
				if outcomes[k].reason && v > 0 {
					parts = append(parts, FormatCount(v)+" "+strings.ToLower(outcomes[k].name))
				}
			}
			b.Title += " (" + strings.Join(parts, ", ") + ")"
		}
		c.Bars = append(c.Bars, b)
	}
	// Five labels across (first, three inside, last), fewer for short series.
	labels := min(5, n)
	for k := 0; k < labels; k++ {
		i := 0
		if labels > 1 {
			i = k * (n - 1) / (labels - 1)
		}
		c.XLabels = append(c.XLabels, XLabel{Text: formatPointTime(points[i].Start, step)})
	}
	return c
}

// niceCeil returns the chart's top: four times a round quarter (1, 2, 3
// or 5 times a power of ten), so every grid line is a whole, short number.
func niceCeil(v int64) int64 {
	q := max((v+3)/4, 1)
	for p := int64(1); p <= 1e15; p *= 10 {
		for _, m := range []int64{1, 2, 3, 5} {
			if m*p >= q {
				return 4 * m * p
			}
		}
	}
	return 4 * q
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) }

func formatPointTime(t time.Time, step time.Duration) string {
	t = t.UTC()
	switch {
	case step >= 24*time.Hour:
		return t.Format("Jan 2")
	case step >= time.Hour:
		return t.Format("Jan 2 15:04")
	default:
		return t.Format("15:04")
	}
}

func formatStep(d time.Duration) string {
	switch {
	case d <= 0:
		return ""
	case d%(24*time.Hour) == 0:
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	case d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	default:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	}
}
