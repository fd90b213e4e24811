package views

import (
	"fmt"
	"strconv"
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

// Bar is one step: the allowed part at the bottom, the denied part on top.
type Bar struct {
	X, W               string
	AllowedY, AllowedH string
	DeniedY, DeniedH   string
	Allowed, Denied    int64
	Title              string
}

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
		ah := chartH * float64(p.Allowed) / float64(top)
		dh := chartH * float64(p.Denied) / float64(top)
		// A step with any decision gets at least a sliver, so a single
		// denial among thousands of allowed checks stays visible.
		if p.Allowed > 0 {
			ah = max(ah, 1.5)
		}
		if p.Denied > 0 {
			dh = max(dh, 1.5)
		}
		c.Bars = append(c.Bars, Bar{
			X: num(float64(i)*w + gap/2), W: num(w - gap),
			AllowedY: num(chartH - ah), AllowedH: num(ah),
			DeniedY: num(chartH - ah - dh), DeniedH: num(dh),
			Allowed: p.Allowed, Denied: p.Denied,
			Title: fmt.Sprintf("%s: %s allowed, %s denied", formatPointTime(p.Start, step), FormatCount(p.Allowed), FormatCount(p.Denied)),
		})
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
