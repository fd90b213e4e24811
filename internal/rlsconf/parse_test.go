package rlsconf

import (
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func mustParse(t testing.TB, text string) *File {
	t.Helper()
	f, err := Parse("rl.yaml", []byte(text))
	if err != nil {
		t.Fatalf("parse:\n%v", err)
	}
	return f
}

// problemsOf parses text, which must be refused, and answers its problems
// as strings.
func problemsOf(t testing.TB, text string) []string {
	t.Helper()
	_, err := Parse("rl.yaml", []byte(text))
	if err == nil {
		t.Fatalf("parse accepted:\n%s", text)
	}
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("error is %T, not Problems: %v", err, err)
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// Each file of the reference's test/config the reference refuses, written
// anew, with the problem Sluice reports: its line, field and message.
func TestParseRefusesWhatTheReferenceRefuses(t *testing.T) {
	cases := []struct {
		name, text string
		want       []string
	}{
		{"invalid unit (bad_limit_unit)", `domain: shop
descriptors:
  - key: client
    value: partner
    rate_limit:
      unit: fortnight
      requests_per_unit: 5
`, []string{"rl.yaml:6: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight' (one of second, minute, hour, day, week, month, year)"}},
		{"missing unit", `domain: shop
descriptors:
  - key: client
    rate_limit: {requests_per_unit: 5}
`, []string{"rl.yaml:4: descriptors[0].rate_limit.unit: invalid rate limit unit '' (one of second, minute, hour, day, week, month, year)"}},
		{"unit unknown is not a unit", `domain: shop
descriptors:
  - {key: client, rate_limit: {unit: unknown, requests_per_unit: 5}}
`, []string{"rl.yaml:3: descriptors[0].rate_limit.unit: invalid rate limit unit 'unknown' (one of second, minute, hour, day, week, month, year)"}},
		{"YAML syntax (bad_yaml)", "'''\n", []string{"rl.yaml:2: error loading config file: found unexpected end of stream"}},
		{"no domain (empty_domain)", "descriptors:\n", []string{"rl.yaml:1: domain: config file cannot have empty domain"}},
		{"empty domain", "domain: ''\ndescriptors: []\n", []string{"rl.yaml:1: domain: config file cannot have empty domain"}},
		{"empty file", "", []string{"rl.yaml:1: domain: config file cannot have empty domain"}},
		{"empty key (empty_key)", `domain: shop
descriptors:
  - value: partner
`, []string{"rl.yaml:3: descriptors[0].key: descriptor has empty key"}},
		{"duplicate key (duplicate_key)", `domain: shop
descriptors:
  - key: client
    value: partner

  - key: client
    value: partner
`, []string{"rl.yaml:6: descriptors[1]: duplicate descriptor composite key 'shop.client_partner' (also descriptors[0])"}},
		{"key_value collides with a key", `domain: shop
descriptors:
  - key: tenant
    descriptors:
      - {key: a, value: b}
      - {key: a_b}
`, []string{"rl.yaml:6: descriptors[0].descriptors[1]: duplicate descriptor composite key 'shop.tenant.a_b' (also descriptors[0].descriptors[0])"}},
		{"replaces its own name (replaces_self)", `domain: shop
descriptors:
  - key: tenant
    descriptors:
      - key: route
        rate_limit:
          name: mine
          replaces:
            - name: mine
          unit: second
          requests_per_unit: 5
`, []string{`rl.yaml:9: descriptors[0].descriptors[0].rate_limit.replaces[0].name: replaces should not contain name of same descriptor ("mine")`}},
		{"replaces nothing (replaces_empty)", `domain: shop
descriptors:
  - key: tenant
    descriptors:
      - key: route
        rate_limit:
          name: mine
          replaces:
            - name:
          unit: second
          requests_per_unit: 5
`, []string{"rl.yaml:9: descriptors[0].descriptors[0].rate_limit.replaces[0].name: should not have an empty replaces entry"}},
		{"misspelled descriptor key (misspelled_key)", `domain: shop
descriptors:
  - key: client
    value: partner
    ratelimit:
      unit: day
      requests_per_unit: 5
`, []string{"rl.yaml:5: descriptors[0].ratelimit: config error, unknown key 'ratelimit' (did you mean rate_limit?)"}},
		{"misspelled rate limit key (misspelled_key2)", `domain: shop
descriptors:
  - key: client
    value: partner
    rate_limit:
      unit: day
      requestsperunit: 5
`, []string{"rl.yaml:7: descriptors[0].rate_limit.requestsperunit: config error, unknown key 'requestsperunit' (did you mean requests_per_unit?)"}},
		{"non-string key (non_string_key)", `0.5: shop
domain: shop
descriptors:
  - {key: client, rate_limit: {unit: day, requests_per_unit: 5}}
`, []string{"rl.yaml:1: 0.5: config error, key is not of type string: 0.5 reads as a float in YAML 1.1 (quote it if it is a name)"}},
		{"list of scalars (non_map_list)", `domain: shop
descriptors:
  - x
  - {key: client}
`, []string{`rl.yaml:3: descriptors[0]: config error, yaml file contains list of type other than map: "x"`}},
		{"unit with unlimited (unlimited_with_unit)", `domain: shop
descriptors:
  - key: health
    rate_limit:
      unlimited: true
      unit: day
      requests_per_unit: 25
`, []string{"rl.yaml:6: descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited"}},
		{"share_threshold without a wildcard", `domain: shop
descriptors:
  - key: files
    value: files/
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
`, []string{"rl.yaml:5: descriptors[0].share_threshold: share_threshold can only be used with wildcard values (containing '*'), but found key 'files_files/'"}},
		{"the file is a list", "- domain: shop\n", []string{"rl.yaml:1: the file must be a mapping of domain and descriptors, not a list"}},
		{"the file is text", "shop\n", []string{`rl.yaml:1: the file must be a mapping of domain and descriptors, not "shop"`}},
		{"unknown key at the top", "domain: shop\nversion: 2\n", []string{"rl.yaml:2: version: config error, unknown key 'version'"}},
		{"unknown key inside a misplaced mapping", `domain: shop
descriptors:
  - key: client
    rate_limit: {unit: day, requests_per_unit: 5, descriptors: [{limit: 1}]}
`, []string{"rl.yaml:4: descriptors[0].rate_limit.descriptors[0].limit: config error, unknown key 'limit'"}},
		{"sluice outside a descriptor", "domain: shop\nsluice: {}\n", []string{"rl.yaml:2: sluice: config error, unknown key 'sluice' (sluice: belongs to a descriptor)"}},
		{"unknown anchor", "domain: *x\n", []string{"rl.yaml:1: error loading config file: unknown anchor 'x' referenced"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := problemsOf(t, c.text); !reflect.DeepEqual(got, c.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

// The reference stops at its first problem; Parse reports them all, in the
// order of the file, each once.
func TestParseReportsEveryProblem(t *testing.T) {
	got := problemsOf(t, `domain: ""
descriptors:
  - key: client
    rate_limit: {unit: week, requests_per_unit: abc, unlimted: true}
  - key: client
  - value: orphan
    rate_limit: {unit: fortnight, requests_per_unit: -1}
    shadow_mode: maybe
  - key: files
    value: "1.5"
    share_threshold: true
    descriptors:
      - key: route
        value: 1.5
        rate_limit: {name: a, replaces: [{name: a}, {name: ""}], unlimited: true}
      - [route]
  - key: ok
    metadata: {any: [1, {x: 2.5}]}
`)
	want := []string{
		"rl.yaml:1: domain: config file cannot have empty domain",
		"rl.yaml:4: descriptors[0].rate_limit.unlimted: config error, unknown key 'unlimted'",
		`rl.yaml:4: descriptors[0].rate_limit.requests_per_unit: must be a whole number from 0 to 4294967295, not "abc"`,
		"rl.yaml:5: descriptors[1]: duplicate descriptor composite key '.client' (also descriptors[0])",
		"rl.yaml:6: descriptors[2].key: descriptor has empty key",
		"rl.yaml:7: descriptors[2].rate_limit.requests_per_unit: must be a whole number from 0 to 4294967295, not -1 (an integer)",
		"rl.yaml:7: descriptors[2].rate_limit.unit: invalid rate limit unit 'fortnight' (one of second, minute, hour, day, week, month, year)",
		`rl.yaml:8: descriptors[2].shadow_mode: must be true or false, not "maybe"`,
		"rl.yaml:11: descriptors[3].share_threshold: share_threshold can only be used with wildcard values (containing '*'), but found key 'files_1.5'",
		"rl.yaml:14: descriptors[3].descriptors[0].value: 1.5 reads as a float, which the reference refuses outside metadata (quote it if it is text)",
		`rl.yaml:15: descriptors[3].descriptors[0].rate_limit.replaces[0].name: replaces should not contain name of same descriptor ("a")`,
		"rl.yaml:15: descriptors[3].descriptors[0].rate_limit.replaces[1].name: should not have an empty replaces entry",
		"rl.yaml:16: descriptors[3].descriptors[1]: config error, yaml file contains list of type other than map: a list",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// What yaml.v2 (YAML 1.1) reads differently from yaml.v3 (YAML 1.2), and
// what the reference accepts of it.
func TestParseReadsScalarsAsYAML11(t *testing.T) {
	f := mustParse(t, `domain: 2026-01-02
descriptors:
  - key: flag
    value: yes
    shadow_mode: on
    quota_mode: Off
    detailed_metric: y
    value_to_metric: N
    rate_limit: {unit: Second, requests_per_unit: 010}
  - key: 12
    value: 0x1F
    share_threshold: ~
    rate_limit: {unit: MINUTE, requests_per_unit: 1_000}
  - key: big
    rate_limit: {unit: hour, requests_per_unit: 0x10, name: !!binary bGltaXQ=}
  - key: sign
    value: "1.5"
    rate_limit: {unit: day, requests_per_unit: +4294967295}
  - key: tagged
    value: !custom text
    rate_limit: {unit: week, requests_per_unit: !!int "7", unlimited: NO}
  - key: <<
    value: 1:30
    rate_limit: {unit: month, requests_per_unit: null}
`)
	if f.Domain != "2026-01-02" {
		t.Errorf("domain %q: a timestamp stays text", f.Domain)
	}
	d := f.Descriptors
	if d[0].Value != "yes" || !d[0].ShadowMode || d[0].QuotaMode || !d[0].DetailedMetric || d[0].ValueToMetric {
		t.Errorf("YAML 1.1 booleans: %+v", d[0])
	}
	if rl := d[0].RateLimit; rl.Unit != Second || rl.RequestsPerUnit != 8 {
		t.Errorf("010 is octal 8 and units ignore case: %+v", rl)
	}
	if d[1].Key != "12" || d[1].Value != "0x1F" || d[1].ShareThreshold || d[1].RateLimit.RequestsPerUnit != 1000 {
		t.Errorf("text fields keep the text; 1_000 is 1000: %+v %+v", d[1], d[1].RateLimit)
	}
	if rl := d[2].RateLimit; rl.RequestsPerUnit != 16 || rl.Name != "limit" {
		t.Errorf("0x10 is 16 and !!binary is decoded: %+v", rl)
	}
	if rl := d[3].RateLimit; d[3].Value != "1.5" || rl.RequestsPerUnit != math.MaxUint32 {
		t.Errorf("quoted float and +max: %+v %+v", d[3], rl)
	}
	if rl := d[4].RateLimit; d[4].Value != "text" || rl.RequestsPerUnit != 7 || rl.Unlimited || rl.Unit != Week {
		t.Errorf("tags: %+v %+v", d[4], rl)
	}
	if rl := d[5].RateLimit; d[5].Key != "<<" || d[5].Value != "1:30" || rl.Unit != Month || rl.RequestsPerUnit != 0 {
		t.Errorf("a << value is text, 1:30 is not base 60, null is 0: %+v %+v", d[5], rl)
	}

	refused := []struct{ text, want string }{
		{"domain: shop\ny: 1\n", "rl.yaml:2: y: config error, key is not of type string: y reads as a boolean in YAML 1.1 (quote it if it is a name)"},
		{"domain: shop\n~: 1\n", "rl.yaml:2: ~: config error, key is not of type string: ~ reads as null in YAML 1.1 (quote it if it is a name)"},
		{"domain: shop\n12: x\n", "rl.yaml:2: 12: config error, key is not of type string: 12 reads as an integer in YAML 1.1 (quote it if it is a name)"},
		{"domain: 1e3\n", "rl.yaml:1: domain: 1e3 reads as a float, which the reference refuses outside metadata (quote it if it is text)"},
		{"domain: .inf\n", "rl.yaml:1: domain: .inf reads as a float, which the reference refuses outside metadata (quote it if it is text)"},
		{"domain: 18446744073709551615\n", "rl.yaml:1: domain: 18446744073709551615 is beyond a 64-bit integer, which the reference refuses"},
		{"domain: !!int abc\n", "rl.yaml:1: domain: cannot decode !!str `abc` as a !!int"},
		{"domain: !!binary '*'\n", "rl.yaml:1: domain: !!binary value contains invalid base64 data"},
		{"domain: [shop]\n", `rl.yaml:1: domain[0]: config error, yaml file contains list of type other than map: "shop"`},
		{"domain: {name: shop}\n", "rl.yaml:1: domain: must be text, not a mapping"},
		{"domain: shop\ndescriptors: {key: a}\n", "rl.yaml:2: descriptors: must be a list of descriptors, not a mapping"},
		{"domain: shop\ndescriptors: [{key: a, rate_limit: 5}]\n", "rl.yaml:2: descriptors[0].rate_limit: must be a mapping with unit and requests_per_unit, not 5 (an integer)"},
		{"domain: shop\ndescriptors: [{key: a, rate_limit: {unit: day, requests_per_unit: 4294967296}}]\n", "rl.yaml:2: descriptors[0].rate_limit.requests_per_unit: must be a whole number from 0 to 4294967295, not 4294967296 (an integer)"},
		{"domain: shop\ndescriptors: [{key: a, rate_limit: {unit: day, requests_per_unit: 5.0}}]\n", "rl.yaml:2: descriptors[0].rate_limit.requests_per_unit: 5.0 reads as a float, which the reference refuses outside metadata (quote it if it is text)"},
		{"domain: shop\ndescriptors: [{key: a, rate_limit: {unit: day, requests_per_unit: '5'}}]\n", `rl.yaml:2: descriptors[0].rate_limit.requests_per_unit: must be a whole number from 0 to 4294967295, not "5"`},
		{"domain: shop\ndescriptors: [{key: a, shadow_mode: 1}]\n", "rl.yaml:2: descriptors[0].shadow_mode: must be true or false, not 1 (an integer)"},
		{"domain: shop\ndescriptors: [{key: a, shadow_mode: 'true'}]\n", `rl.yaml:2: descriptors[0].shadow_mode: must be true or false, not "true"`},
		{"domain: shop\ndescriptors: [{key: a, rate_limit: {unit: day, requests_per_unit: 1, replaces: {name: b}}}]\n", "rl.yaml:2: descriptors[0].rate_limit.replaces: must be a list of {name: ...}, not a mapping"},
		{"domain: shop\ndescriptors: [{key: a, rate_limit: {unit: day, requests_per_unit: 1, replaces: [b]}}]\n", `rl.yaml:2: descriptors[0].rate_limit.replaces[0]: config error, yaml file contains list of type other than map: "b"`},
		{"domain: shop\ndescriptors: [{key: a, metadata: [1]}]\n", "rl.yaml:2: descriptors[0].metadata: must be a mapping, not a list"},
		{"domain: shop\ndescriptors: [~]\n", "rl.yaml:2: descriptors[0]: config error, yaml file contains list of type other than map: null"},
	}
	for _, c := range refused {
		got := problemsOf(t, c.text)
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("%q:\ngot  %q\nwant %q", c.text, got, c.want)
		}
	}
}

// An unlimited rate limit ignores a unit that names no unit, as the
// reference does, and keeps requests_per_unit.
func TestParseUnlimitedIgnoresAnInvalidUnit(t *testing.T) {
	f := mustParse(t, `domain: shop
descriptors:
  - {key: a, rate_limit: {unlimited: true, unit: whenever, requests_per_unit: 3}}
  - {key: b, rate_limit: {unlimited: yes, unit: unknown}}
`)
	for _, d := range f.Descriptors {
		if rl := d.RateLimit; !rl.Unlimited || rl.Unit != UnitUnknown {
			t.Errorf("%s: %+v", d.Key, rl)
		}
	}
	if f.Descriptors[0].RateLimit.RequestsPerUnit != 3 {
		t.Error("requests_per_unit dropped")
	}
}

// A key given twice, merges and misplaced keys, as yaml.v2 decodes them
// into the reference's structs.
func TestParseDuplicatesAndMergesAsYAMLv2(t *testing.T) {
	f := mustParse(t, `domain: first
domain: shop
descriptors:
  - &defaults
    key: base
    shadow_mode: true
    rate_limit: &perMinute {unit: minute, requests_per_unit: 60}
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1, bogus: ignored}
    rate_limit: {requests_per_unit: 2}
    metadata: {x: 1, y: 2}
    metadata: {y: 3}
  - <<: *defaults
    key: b
  - <<: *defaults
    key: c
    rate_limit: {requests_per_unit: 7}
  - shadow_mode: false
    <<: [{key: d, shadow_mode: true, rate_limit: *perMinute}, {key: ignored, quota_mode: true}]
  - key: e
    unit: day
    requests_per_unit: 1
    rate_limit: {unit: hour, requests_per_unit: 1, shadow_mode: true, key: x}
`)
	// Only the last value of a key is checked for unknown keys, as the
	// reference checks the map yaml.v2 decodes.
	mustParse(t, "domain: shop\nkey: [{bogus: 1}]\nkey: x\n")
	d := f.Descriptors[1:]
	if f.Domain != "shop" {
		t.Errorf("domain %q: the last wins", f.Domain)
	}
	// The second rate_limit is decoded into the first: the unit stays.
	if rl := d[0].RateLimit; rl.Unit != Second || rl.RequestsPerUnit != 2 {
		t.Errorf("rate_limit given twice: %+v", rl)
	}
	if !reflect.DeepEqual(d[0].Metadata, map[string]any{"x": 1.0, "y": 3.0}) {
		t.Errorf("metadata given twice: %v", d[0].Metadata)
	}
	if d[1].Key != "b" || !d[1].ShadowMode || d[1].RateLimit.RequestsPerUnit != 60 {
		t.Errorf("merge: %+v %+v", d[1], d[1].RateLimit)
	}
	// The merged rate_limit is decoded into, not replaced: its unit stays.
	if !d[2].ShadowMode || d[2].RateLimit.Unit != Minute || d[2].RateLimit.RequestsPerUnit != 7 {
		t.Errorf("merge then key: %+v %+v", d[2], d[2].RateLimit)
	}
	// A merge written after a key wins over it (v2); in a list of merges
	// the first wins.
	if d[3].Key != "d" || !d[3].QuotaMode || !d[3].ShadowMode {
		t.Errorf("merge list: %+v", d[3])
	}
	if d[4].ShadowMode || d[4].RateLimit.Unit != Hour {
		t.Errorf("known keys out of place are ignored: %+v %+v", d[4], d[4].RateLimit)
	}
	// d[1] and d[2] share the anchored rate limit in YAML, not in the File.
	if d[1].RateLimit == d[2].RateLimit {
		t.Error("two descriptors share one RateLimit")
	}

	for _, c := range []struct{ text, want string }{
		{"domain: shop\n<<: shop\n", `rl.yaml:2: <<: a merge (<<) must name a mapping or a list of mappings, not "shop"`},
		{"domain: shop\n<<: [{key: a}, b]\n", `rl.yaml:2: <<: a merge (<<) must name a mapping or a list of mappings, not "b"`},
	} {
		if got := problemsOf(t, c.text); len(got) != 1 || got[0] != c.want {
			t.Errorf("%q:\ngot  %q\nwant %q", c.text, got, c.want)
		}
	}
}

func TestParseMetadata(t *testing.T) {
	f := mustParse(t, `domain: shop
descriptors:
  - key: a
    metadata:
      name: service_1
      1.50: top keys keep their text
      count: 3
      nested:
        true: t
        1.50: f
        ~: nil key
        0x10: i
        list: [1, "2", no, null, {k: 2001-02-03}]
  - key: b
    metadata: {}
`)
	want := map[string]any{
		"name":  "service_1",
		"1.50":  "top keys keep their text",
		"count": 3.0,
		"nested": map[string]any{
			"true":  "t",
			"1.5":   "f",
			"<nil>": "nil key",
			"16":    "i",
			"list":  []any{1.0, "2", false, nil, map[string]any{"k": "2001-02-03"}},
		},
	}
	if got := f.Descriptors[0].Metadata; !reflect.DeepEqual(got, want) {
		t.Errorf("metadata:\n%#v\nwant\n%#v", got, want)
	}
	if f.Descriptors[1].Metadata != nil {
		t.Error("empty metadata is not nil")
	}
	for _, c := range []struct{ text, want string }{
		{"domain: shop\ndescriptors: [{key: a, metadata: {k: !!binary /w==}}]\n", `rl.yaml:2: descriptors[0].metadata.k: error parsing metadata: invalid UTF-8 in string: "\xff"`},
		{"domain: shop\ndescriptors: [{key: a, metadata: {k: {1: a, '1': b}}}]\n", `rl.yaml:2: descriptors[0].metadata.k.1: two keys of this mapping both read as "1"`},
		{"domain: shop\ndescriptors: [{key: a, metadata: {k: {[1]: a}}}]\n", "rl.yaml:2: descriptors[0].metadata.k: invalid map key: a list"},
	} {
		if got := problemsOf(t, c.text); len(got) != 1 || got[0] != c.want {
			t.Errorf("%q:\ngot  %q\nwant %q", c.text, got, c.want)
		}
	}
}

func TestParseExtras(t *testing.T) {
	f := mustParse(t, `domain: shop
descriptors:
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 10, name: per_second}
    sluice:
      algorithm: Token_Bucket
      burst: 40
      consistency: local
      limits:
        - {name: daily, requests_per_unit: 10000, unit: DAY}
        - {name: hourly, requests_per_unit: 1000, unit: hour, algorithm: sliding_window}
  - key: only_extras
    sluice:
      limits: [{requests_per_unit: 5, unit: minute, algorithm: sliding_log}]
`)
	want := &Extras{
		Algorithm: TokenBucket, Burst: 40, Consistency: ConsistencyLocal,
		Limits: []Spec{
			{Name: "daily", RequestsPerUnit: 10000, Unit: Day},
			{Name: "hourly", RequestsPerUnit: 1000, Unit: Hour, Algorithm: SlidingWindow},
		},
	}
	if got := f.Descriptors[0].Sluice; !reflect.DeepEqual(got, want) {
		t.Errorf("extras %+v, want %+v", got, want)
	}
	if d := f.Descriptors[1]; d.RateLimit != nil || len(d.Sluice.Limits) != 1 {
		t.Errorf("limits without rate_limit: %+v", d)
	}

	got := problemsOf(t, `domain: shop
descriptors:
  - key: a
    sluice: {algorithm: leaky, burst: 3, consistency: eventual, mode: x}
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: b
    sluice: {algorithm: sliding_log}
  - key: c
    sluice:
      algorithm: token_bucket
      algorithm: token_bucket
  - key: d
    rate_limit: {unlimited: true}
    sluice: {burst: 2}
  - key: e
    rate_limit: {unit: second, requests_per_unit: 2000, name: x}
    sluice:
      algorithm: sliding_log
      limits:
        - {requests_per_unit: 0, unit: fortnight, burst: 1.5}
        - {name: x, unit: day, requests_per_unit: 1, burst: 3}
  - key: f
    sluice: [token_bucket]
`)
	want2 := []string{
		"rl.yaml:4: descriptors[0].sluice.mode: unknown field (known: algorithm, burst, limits, consistency, denied)",
		`rl.yaml:4: descriptors[0].sluice.consistency: must be exact or local, not "eventual"`,
		`rl.yaml:4: descriptors[0].sluice.algorithm: must be one of fixed_window, sliding_window, token_bucket, sliding_log, not "leaky"`,
		"rl.yaml:4: descriptors[0].sluice.burst: only token_bucket takes a burst",
		"rl.yaml:7: descriptors[1].sluice: a descriptor with sluice: needs a rate_limit unless it gives sluice.limits",
		"rl.yaml:9: descriptors[2].sluice: a descriptor with sluice: needs a rate_limit unless it gives sluice.limits",
		"rl.yaml:11: descriptors[2].sluice.algorithm: given twice (also on line 10)",
		"rl.yaml:14: descriptors[3].sluice: an unlimited rate_limit takes no algorithm, burst or limits",
		"rl.yaml:16: descriptors[4].rate_limit.requests_per_unit: must be at most 1000 for sliding_log",
		"rl.yaml:20: descriptors[4].sluice.limits[0].unit: invalid unit 'fortnight' (one of second, minute, hour, day, week, month, year)",
		"rl.yaml:20: descriptors[4].sluice.limits[0].burst: must be a whole number from 0 to 4294967295, not 1.5 (a float)",
		"rl.yaml:20: descriptors[4].sluice.limits[0].name: required when a rule holds several limits",
		"rl.yaml:20: descriptors[4].sluice.limits[0].requests_per_unit: must be at least 1",
		`rl.yaml:21: descriptors[4].sluice.limits[1].name: "x" is used twice (also descriptors[4].rate_limit.name)`,
		"rl.yaml:21: descriptors[4].sluice.limits[1].burst: only token_bucket takes a burst",
		"rl.yaml:23: descriptors[5].sluice: must be a mapping of algorithm, burst, limits, consistency, denied, not a list",
	}
	if !reflect.DeepEqual(got, want2) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want2, "\n"))
	}
}

// Hostile input is refused with a problem, at a cost linear in its size.
func TestParseBoundsHostileInput(t *testing.T) {
	deepDescriptors := "domain: shop\ndescriptors:\n"
	for i := range MaxDepth + 1 {
		pad := strings.Repeat("  ", 2*i)
		deepDescriptors += pad + "  - key: k\n" + pad + "    descriptors:\n"
	}
	var many strings.Builder
	many.WriteString("domain: shop\ndescriptors:\n")
	for i := range MaxDescriptors + 1 {
		many.WriteString("  - {key: k" + strconv.Itoa(i) + "}\n")
	}
	bomb := "domain: shop\na: &a [x, x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for i := range 12 {
		name := "l" + strconv.Itoa(i)
		bomb += name + ": &" + name + " [" + strings.Repeat("*"+prev+", ", 9) + "*" + prev + "]\n"
		prev = name
	}
	cases := []struct {
		name, text string
		want       string
	}{
		{"too big", "domain: shop\n#" + strings.Repeat("x", MaxFileSize), "rl.yaml:1: the file is 1048590 bytes; the most Sluice reads is 1048576 (1 MiB)"},
		{"descriptors too deep", deepDescriptors, "descriptors nest deeper than 64 levels"},
		{"YAML too deep", "domain: shop\nmetadata: " + strings.Repeat("[", 300) + strings.Repeat("]", 300) + "\n", "rl.yaml:1: the file nests lists and mappings deeper than 200 levels"},
		{"metadata too deep", "domain: shop\ndescriptors: [{key: a, metadata: {a: " + strings.Repeat("[", 70) + strings.Repeat("]", 70) + "}}]\n", "metadata nests deeper than 64 levels"},
		{"too many descriptors", many.String(), "rl.yaml:10003: descriptors[10000]: the file has more than 10000 descriptors"},
		{"alias bomb", bomb, "rl.yaml:1: aliases expand the file's"},
		{"a full key too long", "domain: shop\ndescriptors: [{key: " + strings.Repeat("k", MaxFullKey) + "}]\n",
			"rl.yaml:2: descriptors[0]: the full key shop." + strings.Repeat("k", 59) + "… is 4101 bytes; the most is 4096"},
		{"too many limits in a rule", "domain: shop\ndescriptors: [{key: a, sluice: {limits: [" + strings.Repeat("{unit: day, requests_per_unit: 1},", 17) + "]}}]\n",
			"rl.yaml:2: descriptors[0].sluice.limits: holds 17 limits; a rule holds at most 16"},
		{"alias containing itself", "domain: shop\ndescriptors: &d [{key: a, descriptors: *d}]\n", "rl.yaml:2: the alias *d names a node that contains itself (the reference refuses it)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := problemsOf(t, c.text)
			if len(got) != 1 || !strings.Contains(got[0], c.want) {
				t.Errorf("got %q, want one containing %q", got, c.want)
			}
		})
	}
	// Past 200 problems, one more says how many are left out.
	var dups strings.Builder
	dups.WriteString("domain: shop\ndescriptors:\n")
	for range 300 {
		dups.WriteString("  - {key: a}\n")
	}
	if got := problemsOf(t, dups.String()); len(got) != 201 || got[200] != "rl.yaml:204: and 99 more problems" {
		t.Errorf("%d problems, the last %q", len(got), got[len(got)-1])
	}
	// A value wide and deep costs its size, not its width times its depth:
	// paths are spelled out only for the problems kept.
	wide := "domain: shop\ndescriptors: [{key: a, metadata: {m: " + strings.Repeat("{"+strings.Repeat("m", 100)+": ", 60) +
		"[" + strings.Repeat("[1]: x, ", 20000) + "]" + strings.Repeat("}", 60) + "}}]\n"
	if got := problemsOf(t, wide); len(got) != 201 || !strings.HasSuffix(got[200], ": and 19800 more problems") || !strings.Contains(got[0], "mmm…") {
		t.Errorf("%d problems, the first %q, the last %q", len(got), got[0], got[len(got)-1])
	}
	// Aliases that repeat a little are fine.
	mustParse(t, `domain: shop
descriptors:
  - {key: a, rate_limit: &m {unit: minute, requests_per_unit: 60}}
  - {key: b, rate_limit: *m}
  - {key: c, rate_limit: *m}
`)
}

// sluice.denied is counted (the reference's way) or uncounted.
func TestParseDenied(t *testing.T) {
	f, err := Parse("d.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0}\n    sluice: {denied: Uncounted}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := f.Descriptors[0]; d.Sluice == nil || d.Sluice.Denied != DeniedUncounted || d.RateLimit.RequestsPerUnit != 0 {
		t.Fatalf("parsed %+v", d)
	}
	_, err = Parse("d.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    sluice: {denied: sometimes}\n"))
	if err == nil || !strings.Contains(err.Error(), `sluice.denied: must be counted or uncounted, not "sometimes"`) {
		t.Fatalf("denied: sometimes: %v", err)
	}
}
