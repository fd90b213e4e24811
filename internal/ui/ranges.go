package ui

import (
	"net/url"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/ui/views"
)

// timeRange is a preset window ending now, with the step its chart uses
// unless another is chosen.
type timeRange struct {
	value, label, short, phrase string
	length, step                time.Duration
}

var (
	overviewRanges = []timeRange{
		{"1h", "Hour", "Hour", "in the last hour", time.Hour, time.Minute},
		{"24h", "Day", "Day", "in the last day", 24 * time.Hour, 15 * time.Minute},
		{"7d", "Week", "Week", "in the last week", 7 * 24 * time.Hour, 2 * time.Hour},
	}
	analyticsRanges = []timeRange{
		{"1h", "Last hour", "Hour", "in the last hour", time.Hour, time.Minute},
		{"6h", "Last 6 hours", "6 hours", "in the last 6 hours", 6 * time.Hour, 5 * time.Minute},
		{"24h", "Last day", "Day", "in the last day", 24 * time.Hour, 15 * time.Minute},
		{"7d", "Last week", "Week", "in the last week", 7 * 24 * time.Hour, 2 * time.Hour},
		{"30d", "Last 30 days", "30 days", "in the last 30 days", 30 * 24 * time.Hour, 12 * time.Hour},
	}
	steps = []struct {
		value string
		d     time.Duration
	}{
		{"1m", time.Minute}, {"5m", 5 * time.Minute}, {"15m", 15 * time.Minute},
		{"1h", time.Hour}, {"6h", 6 * time.Hour}, {"1d", 24 * time.Hour},
	}
)

// maxChartPoints keeps charts readable (and pages small): a finer step
// over a long range is refused with a sentence.
const maxChartPoints = 1500

// pickRange returns the preset named v, or the first.
func pickRange(rs []timeRange, v string) timeRange {
	for _, r := range rs {
		if r.value == v {
			return r
		}
	}
	return rs[0]
}

// pickStep returns the step named v, or def when v is empty or "auto".
func pickStep(v string, def time.Duration) (time.Duration, bool) {
	if v == "" || v == "auto" {
		return def, true
	}
	for _, s := range steps {
		if s.value == v {
			return s.d, true
		}
	}
	return def, false
}

// window is the range ending with the current step, aligned to steps so
// every bar covers a whole step.
func window(length, step time.Duration, now time.Time) (from, to time.Time) {
	to = now.UTC().Truncate(step).Add(step)
	return to.Add(-length), to
}

// stepParam is a step as the worker reads it: whole minutes.
func stepParam(d time.Duration) string {
	return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
}

// rangeTabs are links to the same page with another range.
func rangeTabs(rs []timeRange, current timeRange, base string, keep url.Values) []views.Choice {
	out := make([]views.Choice, 0, len(rs))
	for _, r := range rs {
		q := url.Values{}
		for k, v := range keep {
			q[k] = v
		}
		q.Set("range", r.value)
		out = append(out, views.Choice{Value: r.value, Label: r.short, URL: base + "?" + q.Encode(), Current: r.value == current.value})
	}
	return out
}

func rangeChoices(rs []timeRange, current timeRange) []views.Choice {
	out := make([]views.Choice, 0, len(rs))
	for _, r := range rs {
		out = append(out, views.Choice{Value: r.value, Label: r.label, Current: r.value == current.value})
	}
	return out
}

func stepChoices(current string) []views.Choice {
	out := []views.Choice{{Value: "auto", Label: "Automatic", Current: current == "" || current == "auto"}}
	for _, s := range steps {
		out = append(out, views.Choice{Value: s.value, Label: s.value, Current: s.value == current})
	}
	return out
}
