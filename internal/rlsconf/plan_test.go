package rlsconf

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The reference's constructLimitsToCheck: replaces removes the named
// limits of the request's other descriptors, and an unlimited match is
// answered without a check (the reference's TestUnlimited).
func TestPlan(t *testing.T) {
	c := compileText(t, `domain: shop
descriptors:
  - {key: category, value: read, rate_limit: {name: read_category, unit: minute, requests_per_unit: 100}}
  - key: endpoint
    value: search
    rate_limit: {name: search, unit: minute, requests_per_unit: 1000, replaces: [{name: read_category}]}
  - {key: endpoint, value: bulk, rate_limit: {unlimited: true, replaces: [{name: read_category}, {name: search}]}}
  - {key: user, rate_limit: {unit: second, requests_per_unit: 5}}
  - {key: health, rate_limit: {unlimited: true}}
  - {key: quota, quota_mode: true, rate_limit: {name: search, unit: day, requests_per_unit: 7}}
`)
	type want struct {
		rpu       []uint32 // 0 for no limit to check
		unlimited []bool
	}
	cases := []struct {
		name string
		ds   []RequestDescriptor
		want want
	}{
		{"no replaces", []RequestDescriptor{req("category", "read"), req("user", "u")},
			want{[]uint32{100, 5}, []bool{false, false}}},
		{"a descriptor replaces another's limit", []RequestDescriptor{req("category", "read"), req("endpoint", "search"), req("user", "u")},
			want{[]uint32{0, 1000, 5}, []bool{false, false, false}}},
		{"in either order", []RequestDescriptor{req("endpoint", "search"), req("category", "read")},
			want{[]uint32{1000, 0}, []bool{false, false}}},
		{"an unlimited match still replaces", []RequestDescriptor{req("category", "read"), req("endpoint", "search"), req("endpoint", "bulk")},
			want{[]uint32{0, 0, 0}, []bool{false, false, true}}},
		{"every limit of the name is replaced", []RequestDescriptor{req("quota", "q"), req("endpoint", "bulk")},
			want{[]uint32{0, 0}, []bool{false, true}}},
		{"unlimited and no match", []RequestDescriptor{req("health", "x"), req("nothing", "x"), req("user", "u")},
			want{[]uint32{0, 0, 5}, []bool{true, false, false}}},
		{"an override has no name to replace", []RequestDescriptor{{Entries: []Entry{{"category", "read"}}, Limit: &Override{RequestsPerUnit: 3, Unit: Hour}}, req("endpoint", "search")},
			want{[]uint32{3, 1000}, []bool{false, false}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			limits, unlimited := Plan(c, "shop", tc.ds)
			rpu := make([]uint32, len(limits))
			for i, l := range limits {
				if l != nil {
					rpu[i] = l.RequestsPerUnit
				}
			}
			if !reflect.DeepEqual(want{rpu, unlimited}, tc.want) {
				t.Errorf("got %v %v, want %v %v", rpu, unlimited, tc.want.rpu, tc.want.unlimited)
			}
		})
	}
}

// The reference's shouldRateLimitWorker: OVER_LIMIT iff a descriptor not
// in quota mode is over, or all those in quota mode (at least one) are.
// Each row is one of the reference's service tests.
func TestOverall(t *testing.T) {
	const ok, over = CodeOK, CodeOverLimit
	cases := []struct {
		name  string
		codes []Code
		quota []bool
		want  Code
	}{
		{"all within", []Code{ok, ok}, nil, ok},
		{"one over", []Code{ok, over}, nil, over},
		{"global quota mode, all over", []Code{over, over}, []bool{true, true}, over},
		{"per descriptor: the rate one over", []Code{over, ok}, []bool{false, true}, over},
		{"per descriptor: the quota one over", []Code{ok, over}, []bool{false, true}, over},
		{"per descriptor: none over", []Code{ok, ok}, []bool{false, true}, ok},
		{"quota only, all over", []Code{over, over}, []bool{true, true}, over},
		{"quota only, some over", []Code{over, ok}, []bool{true, true}, ok},
		{"no descriptor", nil, nil, ok},
		{"missing quota flags are false", []Code{over}, []bool{}, over},
		{"an unlimited one is OK and not in quota", []Code{over, ok}, []bool{true, false}, over},
		{"unknown is not over", []Code{CodeUnknown}, []bool{true}, ok},
	}
	for _, tc := range cases {
		if got := Overall(tc.codes, tc.quota); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if CodeOverLimit.String() != "OVER_LIMIT" || Code(9).String() != "Code(9)" {
		t.Error("Code names")
	}
}

// The reference's UnitToDivider, cache key window and CalculateReset.
func TestUnitWindows(t *testing.T) {
	at := time.Date(2026, 3, 18, 13, 47, 29, 500_000_000, time.UTC) // a Wednesday
	cases := []struct {
		u       Unit
		seconds int64
		start   time.Time
		reset   time.Duration
	}{
		{Second, 1, time.Date(2026, 3, 18, 13, 47, 29, 0, time.UTC), time.Second},
		{Minute, 60, time.Date(2026, 3, 18, 13, 47, 0, 0, time.UTC), 31 * time.Second},
		{Hour, 3600, time.Date(2026, 3, 18, 13, 0, 0, 0, time.UTC), 12*time.Minute + 31*time.Second},
		{Day, 86400, time.Date(2026, 3, 18, 0, 0, 0, 0, time.UTC), 10*time.Hour + 12*time.Minute + 31*time.Second},
		// Weeks start on a Thursday: the unix epoch was one.
		{Week, 7 * 86400, time.Date(2026, 3, 12, 0, 0, 0, 0, time.UTC), 10*time.Hour + 12*time.Minute + 31*time.Second},
		// A month is 30 days from the epoch, a year 365: not the calendar's.
		{Month, 30 * 86400, time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC), time.Unix(20550*86400, 0).Sub(at.Truncate(time.Second))},
		{Year, 365 * 86400, time.Unix(56*365*86400, 0).UTC(), time.Unix(57*365*86400, 0).Sub(at.Truncate(time.Second))},
	}
	for _, tc := range cases {
		if got := tc.u.Seconds(); got != tc.seconds {
			t.Errorf("%v: %d seconds, want %d", tc.u, got, tc.seconds)
		}
		if got := tc.u.WindowStart(at); !got.Equal(tc.start) {
			t.Errorf("%v: window starts %v, want %v", tc.u, got.UTC(), tc.start)
		}
		if got := tc.u.ResetAfter(at); got != tc.reset {
			t.Errorf("%v: reset after %v, want %v", tc.u, got, tc.reset)
		}
		// The reference: sec - now%sec, and (now/divider)*divider.
		now := at.Unix()
		if got := tc.u.ResetAfter(at); got != time.Duration(tc.seconds-now%tc.seconds)*time.Second {
			t.Errorf("%v: reset %v is not the reference's", tc.u, got)
		}
		if got := tc.u.WindowStart(at).Unix(); got != now/tc.seconds*tc.seconds {
			t.Errorf("%v: start %d is not the reference's", tc.u, got)
		}
		if end := tc.u.WindowStart(at).Add(time.Duration(tc.seconds) * time.Second); tc.u.ResetAfter(end) != time.Duration(tc.seconds)*time.Second || !tc.u.WindowStart(end).Equal(end) {
			t.Errorf("%v: a window's end does not start the next", tc.u)
		}
	}
	before := time.Unix(-90, 0)
	if got := Minute.WindowStart(before).Unix(); got != -120 {
		t.Errorf("before 1970: %d, want -120 (floored)", got)
	}
	if Unit(0).Seconds() != 0 || UnitUnknown.ResetAfter(at) != 0 || !UnitUnknown.WindowStart(at).Equal(at) {
		t.Error("an invalid unit")
	}
}

func TestUnitNames(t *testing.T) {
	for name, want := range map[string]Unit{"second": Second, "MINUTE": Minute, "Hour": Hour, "day": Day, "week": Week, "month": Month, "YEAR": Year} {
		if u, ok := ParseUnit(name); !ok || u != want {
			t.Errorf("%q: %v %v", name, u, ok)
		}
	}
	for _, name := range []string{"", "unknown", "UNKNOWN", "seconds", "fortnight"} {
		if u, ok := ParseUnit(name); ok || u != UnitUnknown {
			t.Errorf("%q parsed as %v", name, u)
		}
	}
	// strings.ToUpper, as the reference: the long s upper-cases to S.
	if u, ok := ParseUnit("ſecond"); !ok || u != Second {
		t.Error("ToUpper semantics")
	}
	if Week.String() != "WEEK" || Unit(math.MaxInt32).String() != "Unit(2147483647)" || Year != 6 || Week != 7 {
		t.Error("unit names and numbers are the proto enum's")
	}
}

// One request's wildcard matching is bounded: against a thousand sibling
// wildcards, a thousand descriptors stop being compared with them once the
// request has compared MatchBudget bytes, instead of 10^6 tests.
func TestPlanMatchBudget(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for i := range 999 {
		fmt.Fprintf(&b, "  - key: k\n    value: \"nomatch%d*\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n", i)
	}
	b.WriteString("  - key: k\n    value: \"v*\"\n    rate_limit: {unit: second, requests_per_unit: 7}\n")
	f, err := Parse("d.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Compile(f)
	if err != nil {
		t.Fatal(err)
	}
	ds := make([]RequestDescriptor, 1000)
	for i := range ds {
		ds[i] = RequestDescriptor{Entries: []Entry{{Key: "k", Value: fmt.Sprintf("v%04d", i)}}}
	}
	limits, _ := Plan(cfg, "d", ds)
	if limits[0] == nil || limits[0].RequestsPerUnit != 7 {
		t.Fatalf("first descriptor: %+v, want the last wildcard's limit", limits[0])
	}
	if limits[len(ds)-1] != nil {
		t.Fatalf("last descriptor matched %+v: the request's matching was not bounded", limits[len(ds)-1])
	}
	// Each descriptor alone still matches as the reference does.
	if l := cfg.Lookup("d", ds[len(ds)-1]); l == nil || l.RequestsPerUnit != 7 {
		t.Fatalf("Lookup alone: %+v", l)
	}
}
