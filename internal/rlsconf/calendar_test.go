package rlsconf

import (
	"strings"
	"testing"
)

// A rule's further limits may reset on the calendar instead of a unit;
// each misuse is named by its field and line.
func TestSluiceCalendarLimits(t *testing.T) {
	ok := "domain: d\ndescriptors:\n  - key: k\n    sluice:\n      limits:\n        - {name: monthly, calendar: month, requests_per_unit: 1000}\n"
	f, err := Parse("f.yaml", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if s := f.Descriptors[0].Sluice.Limits[0]; s.Calendar != "month" || s.RequestsPerUnit != 1000 || s.Unit.Valid() {
		t.Fatalf("spec %+v", s)
	}
	out, err := MarshalWithExtras(f)
	if err != nil || !strings.Contains(string(out), "calendar: month") {
		t.Fatalf("marshal: %v\n%s", err, out)
	}
	for _, tc := range []struct{ limit, want string }{
		{"{calendar: month, unit: day, requests_per_unit: 1}", "f.yaml:6: descriptors[0].sluice.limits[0].unit: must be empty with calendar"},
		{"{calendar: fortnight, requests_per_unit: 1}", "f.yaml:6: descriptors[0].sluice.limits[0].calendar: must be one of day, week, month, year"},
		{"{calendar: day, algorithm: token_bucket, requests_per_unit: 1}", "f.yaml:6: descriptors[0].sluice.limits[0].algorithm: must be fixed_window with calendar"},
		{"{requests_per_unit: 1}", "f.yaml:6: descriptors[0].sluice.limits[0].unit: required"},
	} {
		text := "domain: d\ndescriptors:\n  - key: k\n    sluice:\n      limits:\n        - " + tc.limit + "\n"
		_, err := Parse("f.yaml", []byte(text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.limit, err, tc.want)
		}
	}
}
