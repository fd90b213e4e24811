package rlsconf

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// stripLines clears what Marshal does not write: lines and the file name.
func stripLines(f *File) *File {
	var walk func(ds []*Descriptor)
	walk = func(ds []*Descriptor) {
		for _, d := range ds {
			d.Line = 0
			walk(d.Descriptors)
		}
	}
	walk(f.Descriptors)
	f.Name = ""
	return f
}

// roundTrip marshals f, reads it back and checks it is f, and that
// marshaling again writes the same bytes.
func roundTrip(t testing.TB, f *File, marshal func(*File) ([]byte, error)) []byte {
	t.Helper()
	out, err := marshal(f)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	g, err := Parse("again.yaml", out)
	if err != nil {
		t.Fatalf("read back:\n%v\n---\n%s", err, out)
	}
	again, err := marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(out) {
		t.Fatalf("marshal is not stable:\n%s\n---\n%s", out, again)
	}
	want := *f
	if !equalFiles(stripLines(clone(&want)), stripLines(g)) {
		t.Fatalf("read back differs:\n%s", out)
	}
	return out
}

// clone copies a File deeply enough for stripLines.
func clone(f *File) *File {
	g := *f
	var copyAll func(ds []*Descriptor) []*Descriptor
	copyAll = func(ds []*Descriptor) []*Descriptor {
		if ds == nil {
			return nil
		}
		out := make([]*Descriptor, len(ds))
		for i, d := range ds {
			c := *d
			c.Descriptors = copyAll(d.Descriptors)
			out[i] = &c
		}
		return out
	}
	g.Descriptors = copyAll(f.Descriptors)
	return &g
}

// equalFiles is reflect.DeepEqual, but with NaN equal to itself.
func equalFiles(a, b *File) bool {
	return reflect.DeepEqual(nanFree(a), nanFree(b))
}

func nanFree(f *File) *File {
	var fix func(x any) any
	fix = func(x any) any {
		switch x := x.(type) {
		case float64:
			if math.IsNaN(x) {
				return "NaN"
			}
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				out[i] = fix(e)
			}
			return out
		case map[string]any:
			out := map[string]any{}
			for k, e := range x {
				out[k] = fix(e)
			}
			return out
		}
		return x
	}
	g := clone(f)
	var walk func(ds []*Descriptor)
	walk = func(ds []*Descriptor) {
		for _, d := range ds {
			if d.Metadata != nil {
				d.Metadata = fix(d.Metadata).(map[string]any)
			}
			walk(d.Descriptors)
		}
	}
	walk(g.Descriptors)
	return g
}

func TestMarshalRoundTripsReferenceFiles(t *testing.T) {
	for _, text := range []string{basicConfig, shareConfig, `domain: shop
descriptors:
  - key: a
    value: yes
    shadow_mode: true
    quota_mode: true
    detailed_metric: true
    value_to_metric: true
    rate_limit: {name: n, unit: week, requests_per_unit: 0, replaces: [{name: m}, {name: o}]}
    metadata: {k: [1, 2.5, true, null, "x", {y: z}], 1.50: top}
  - {key: b, rate_limit: {unlimited: true, requests_per_unit: 9, name: free}}
  - key: c
    descriptors:
      - key: d
        descriptors: [{key: e, rate_limit: {unit: year, requests_per_unit: 4294967295}}]
`} {
		roundTrip(t, mustParse(t, text), Marshal)
	}
}

// Text the reference would read as something else is quoted.
func TestMarshalQuotesWhatYAML11WouldNotReadAsText(t *testing.T) {
	awkward := []string{
		"yes", "No", "on", "y", "n", "~", "null", "true", "010", "0x1F", "1_000", "+1", "-1", ".5", "1.5", "1e3",
		".inf", ".nan", "2001-01-01", "<<", "*x", "&a", "!tag", "- item", "a: b", "#c", " lead", "trail ",
		"multi\nline\n", "tab\there", "quote'\"", "{", "[", "@at", "`tick", "%p", "1:30", "ünïcödé", "\x01ctl",
		strings.Repeat("long words ", 20),
	}
	f := &File{Domain: "yes"}
	meta := map[string]any{}
	for i, s := range awkward {
		f.Descriptors = append(f.Descriptors, &Descriptor{
			Key: "k" + s, Value: s,
			RateLimit: &RateLimit{Unit: Second, RequestsPerUnit: uint32(i), Name: s + "n", Replaces: []string{s + "r"}},
		})
		meta[s] = s
	}
	f.Descriptors[0].Metadata = map[string]any{"": "", "nested": meta, "<<": 1.0, "n": math.NaN(), "i": math.Inf(-1), "big": 1e300, "neg": -0.5, "-0": math.Copysign(0, -1), "int": 12345678901.0}
	// Bytes that are not UTF-8 are written as !!binary.
	f.Descriptors = append(f.Descriptors, &Descriptor{Key: "bin\xff", Value: "\xfe"})
	out := roundTrip(t, f, Marshal)
	for _, want := range []string{`domain: "yes"`, `value: "010"`, `value: "~"`, `value: "1.5"`, `value: "2001-01-01"`, `"<<": 1`, "!!binary"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestMarshalExtras(t *testing.T) {
	f := mustParse(t, `domain: shop
descriptors:
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: api_key
        rate_limit: {unit: second, requests_per_unit: 10, name: per_second}
        sluice:
          algorithm: token_bucket
          burst: 40
          consistency: local
          limits: [{name: daily, requests_per_unit: 10000, unit: day, algorithm: sliding_window}]
  - {key: only, sluice: {limits: [{requests_per_unit: 5, unit: minute}]}}
`)
	_, err := Marshal(f)
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 2 {
		t.Fatalf("error %v", err)
	}
	if got := ps[0].String(); got != "rl.yaml:6: descriptors[0].descriptors[0]: descriptor shop.plain.api_key uses Sluice's own fields (sluice:), which the reference refuses; write the file with MarshalWithExtras" {
		t.Errorf("problem %q", got)
	}
	out := roundTrip(t, f, MarshalWithExtras)
	if !strings.Contains(string(out), "sluice:") {
		t.Errorf("no extras written:\n%s", out)
	}
}

func TestMarshalRefusesAnInvalidFile(t *testing.T) {
	f := &File{Domain: "shop", Descriptors: []*Descriptor{
		{Key: "a", RateLimit: &RateLimit{Unit: Unit(42)}},
		{Key: "b", RateLimit: &RateLimit{Unit: Day, Unlimited: true}},
		{Key: "c", Metadata: map[string]any{"n": 3}},
		{Key: "a"},
		nil,
	}}
	_, err := Marshal(f)
	want := []string{
		"descriptors[0].rate_limit.unit: invalid rate limit unit 'Unit(42)' (one of second, minute, hour, day, week, month, year)",
		"descriptors[1].rate_limit.unit: should not specify rate limit unit when unlimited",
		"descriptors[2].metadata.n: a metadata value must be nil, bool, string, float64, []any or map[string]any, not int",
		"descriptors[3]: duplicate descriptor composite key 'shop.a' (also descriptors[0])",
		"descriptors[4]: is nil",
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("got\n%v\nwant\n%s", err, strings.Join(want, "\n"))
	}
}
