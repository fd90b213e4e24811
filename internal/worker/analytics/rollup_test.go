package analytics

import (
	"flag"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
)

// fold keeps the K identities with the most denials exactly and moves the
// rest into "others" per policy and tier; totals per policy and tier are
// unchanged.
func TestFoldKeepsTopKAndTotals(t *testing.T) {
	c := cells{}
	for i := range 50 {
		id := fmt.Sprintf("192.0.2.%d", i)
		c.add(cellKey{"p1", "anonymous", "ip", id}, cellVal{allowed: 1, denied: int64(i), first: 10, last: 10})
		if i%2 == 0 {
			c.add(cellKey{"p2", "anonymous", "ip", id}, cellVal{allowed: 2, first: 11, last: 11})
		}
	}
	c.add(cellKey{"p1", "anonymous", bus.CounterOthers, ""}, cellVal{allowed: 7, denied: 70, first: 9, last: 12})
	before := totalsByPolicy(c)
	out, changed := fold(c, 3)
	if !changed {
		t.Fatal("fold of 50 identities to 3 reported no change")
	}
	if after := totalsByPolicy(out); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("totals per policy changed: %v before, %v after", before, after)
	}
	if n := out.identities(); n != 3 {
		t.Fatalf("%d identities kept, want 3", n)
	}
	// The most denials: 49, 48 (with its p2 cell, as 48 is even) and 47.
	for _, want := range []struct {
		id     string
		p1, p2 int64
	}{{"192.0.2.49", 49, -1}, {"192.0.2.48", 48, 0}, {"192.0.2.47", 47, -1}} {
		if v := out[cellKey{"p1", "anonymous", "ip", want.id}]; v == nil || v.denied != want.p1 || v.allowed != 1 {
			t.Fatalf("%s p1 = %+v, want %d denied exactly", want.id, v, want.p1)
		}
		v := out[cellKey{"p2", "anonymous", "ip", want.id}]
		if want.p2 < 0 && v != nil || want.p2 >= 0 && (v == nil || v.denied != want.p2) {
			t.Fatalf("%s p2 = %+v, want %d", want.id, v, want.p2)
		}
	}
	o := out[cellKey{"p1", "anonymous", bus.CounterOthers, ""}]
	if o == nil || o.first != 9 || o.last != 12 {
		t.Fatalf("others cell %+v: first/last must span every folded row", o)
	}
	// Folding what fits changes nothing.
	if _, changed := fold(out, 3); changed {
		t.Fatal("a second fold to the same K changed something")
	}
}

func totalsByPolicy(c cells) map[string][2]int64 {
	out := map[string][2]int64{}
	for k, v := range c {
		t := out[k.policy+"/"+k.tier]
		t[0] += v.allowed
		t[1] += v.denied
		out[k.policy+"/"+k.tier] = t
	}
	return out
}

// The retention flags take Go durations or whole days, fall back to their
// SLUICE_* twins, and reject settings that would roll rows up too early.
func TestRetentionFlags(t *testing.T) {
	parse := func(env map[string]string, args ...string) (Retention, error) {
		var r Retention
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		if err := r.RegisterFlags(fs, func(k string) string { return env[k] }); err != nil {
			return r, err
		}
		if err := fs.Parse(args); err != nil {
			return r, err
		}
		return r, r.Validate()
	}
	r, err := parse(nil)
	if err != nil || r.MinuteRows != 72*time.Hour || r.HourRows != 35*24*time.Hour || r.DayRows != 400*24*time.Hour || r.TopK != 100 {
		t.Fatalf("defaults: %+v, %v", r, err)
	}
	r, err = parse(map[string]string{"SLUICE_ANALYTICS_MINUTES": "2d", "SLUICE_ANALYTICS_TOP_K": "20", "SLUICE_ANALYTICS_DAYS": "90d"},
		"--analytics-minutes", "36h", "--analytics-hours", "30d")
	if err != nil || r.MinuteRows != 36*time.Hour || r.HourRows != 30*24*time.Hour || r.DayRows != 90*24*time.Hour || r.TopK != 20 {
		t.Fatalf("flags over env: %+v, %v", r, err)
	}
	for _, bad := range []struct {
		env  map[string]string
		args []string
	}{
		{nil, []string{"--analytics-minutes", "10m"}},
		{nil, []string{"--analytics-hours", "2d", "--analytics-minutes", "3d"}},
		{nil, []string{"--analytics-days", "10d"}},
		{nil, []string{"--analytics-minutes", "soon"}},
		{map[string]string{"SLUICE_ANALYTICS_TOP_K": "-3"}, nil},
		{map[string]string{"SLUICE_ANALYTICS_HOURS": "0d"}, nil},
	} {
		if _, err := parse(bad.env, bad.args...); err == nil {
			t.Errorf("%v %v accepted", bad.env, bad.args)
		}
	}
}
