package limitsfile

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/tenants"
)

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func parse(t *testing.T, text string) *File {
	t.Helper()
	f, err := Parse("limits.yaml", []byte(text), now)
	if err != nil {
		t.Fatalf("parse:\n%v", err)
	}
	return f
}

// Marshal writes what Parse reads back as the same configuration, and a
// marshaled file marshals again to the same bytes.
func TestMarshalRoundTrip(t *testing.T) {
	raw, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := parse(t, string(raw)+`keys:
  - {id: ckey_b, tier: pro}
  - id: ckey_a
    name: "mobile: app"
    overrides:
      search: [{name: burst, algorithm: token_bucket, limit: 5, period: 1s}, {name: day, algorithm: fixed_window, limit: 50, period: 1d}, {name: month, algorithm: fixed_window, limit: 1000, calendar: month}]
blocks:
  - {identity: {kind: ip, id: "2001:DB8::1"}, reason: scraping, expires_at: 2027-01-01T00:00:00Z}
  - {identity: {kind: key, id: ckey_b}}
`)
	out, err := Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	g := parse(t, string(out))
	again, err := Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(out) {
		t.Fatalf("marshal is not stable:\n%s\n---\n%s", out, again)
	}
	f.Normalize()
	f.lines, g.lines = nil, nil
	if !reflect.DeepEqual(f, g) {
		t.Fatalf("read back differs:\n%#v\n%#v", f, g)
	}
	for _, want := range []string{"method: '*'", `name: 'mobile: app'`, "id: '2001:db8::1'", "expires_at: \"2027-01-01T00:00:00Z\""} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestParseProblems(t *testing.T) {
	cases := []struct {
		name, text string
		want       []string
	}{
		{"wrong types", `version: 1
policies:
  - name: 7
    path: /x
    shadow: maybe
    query: {page: 1}
    tiers:
      pro: {algorithm: token_bucket, limit: 1.5, period: 60, burst: lots}
`, []string{
			`limits.yaml:3: policies[0].name: must be a string (quote it: "7")`,
			"limits.yaml:5: policies[0].shadow: must be true or false",
			`limits.yaml:6: policies[0].query.page: must be a string (quote it: "1")`,
			"limits.yaml:8: policies[0].tiers.pro.limit: must be an integer",
			`limits.yaml:8: policies[0].tiers.pro.period: must be a duration such as "60s", "1m" or "1d"`,
			"limits.yaml:8: policies[0].tiers.pro.burst: must be an integer",
		}},
		{"server rules", `version: 1
policies:
  - name: a b
    method: FETCH
    path: /x/../y
    consistency: eventual
    unlisted_tiers: maybe
    tiers:
      Pro: {algorithm: token_bucket, limit: 1, period: 1s}
      free:
        - {algorithm: sliding_log, limit: 5000, period: 1s}
        - {algorithm: fixed_window, limit: 1, period: 400d, burst: 3}
`, []string{
			"limits.yaml:3: policies[0].name: must be 1 to 64 characters",
			"limits.yaml:4: policies[0].method: must be * or one of",
			"limits.yaml:5: policies[0].path: must not hold . or .. segments",
			"limits.yaml:6: policies[0].consistency: must be exact or local",
			"limits.yaml:7: policies[0].unlisted_tiers: must be allow or deny",
			`limits.yaml:8: policies[0].tiers: tier name "Pro" must be`,
			"limits.yaml:11: policies[0].tiers.free[0].name: required when a tier holds several limits",
			"limits.yaml:11: policies[0].tiers.free[0].limit: must be at most 1000 for sliding_log",
			"limits.yaml:12: policies[0].tiers.free[1].name: required when a tier holds several limits",
			"limits.yaml:12: policies[0].tiers.free[1].period: must be at most 366d",
			"limits.yaml:12: policies[0].tiers.free[1].burst: only token_bucket takes a burst",
		}},
		{"unknown and duplicate fields", `version: 1
policies:
  - name: a
    name: b
    path: /x
    tiers:
      pro: {algorithm: token_bucket, limit: 1, period: 1s, window: 1s}
limits: []
`, []string{
			"limits.yaml:4: policies[0].name: given twice (also on line 3)",
			"limits.yaml:7: policies[0].tiers.pro.window: unknown field (known: name, algorithm, limit, period, burst, calendar, per)",
			"limits.yaml:8: limits: unknown field (known: version, policies, keys, blocks)",
		}},
		{"blocks", `version: 1
blocks:
  - {identity: {kind: ip, id: 10.0.0.300}}
  - {identity: {kind: ip, id: "::ffff:10.0.0.1"}, expires_at: 2020-01-01T00:00:00Z}
  - {identity: {kind: ip, id: 10.0.0.1}, expires_at: tomorrow}
  - {identity: {kind: ip, id: 10.0.0.1}}
`, []string{
			"limits.yaml:3: blocks[0].identity.id: must be an IPv4 or IPv6 address",
			"limits.yaml:4: blocks[1].expires_at: must be in the future",
			"limits.yaml:5: blocks[2].expires_at: must be an RFC 3339 time",
			"limits.yaml:6: blocks[3].identity: ip 10.0.0.1 is blocked twice (also blocks[2])",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("limits.yaml", []byte(c.text), now)
			ps, ok := IsProblems(err)
			if !ok {
				t.Fatalf("err = %v, want problems", err)
			}
			got := ps.Error()
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("missing %q in:\n%s", w, got)
				}
			}
			if len(ps) != len(c.want) {
				t.Errorf("%d problems, want %d:\n%s", len(ps), len(c.want), got)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	have := []tenants.Policy{{
		ID: "pol_1", Name: "api", Method: "*", Path: "/api/*", Consistency: "exact", UnlistedTiers: "allow",
		Tiers: map[string]tenants.Limits{
			"anonymous": {{Algorithm: "token_bucket", Limit: 10, Period: "1m"}},
			"pro": {
				{Name: "burst", Algorithm: "token_bucket", Limit: 100, Period: "1s"},
				{Name: "day", Algorithm: "fixed_window", Limit: 1000, Period: "1d"},
			},
		},
	}, {ID: "pol_2", Name: "old", Method: "*", Path: "/old", Consistency: "exact", UnlistedTiers: "allow",
		Tiers: map[string]tenants.Limits{"default": {{Algorithm: "fixed_window", Limit: 1, Period: "1h"}}}}}
	keys := []tenants.ConsumerKey{
		{ID: "ckey_1", Name: "one", Tier: "pro", Overrides: map[string]tenants.Limits{"gone": {{Algorithm: "token_bucket", Limit: 1, Period: "1s"}}}},
		{ID: "ckey_2", Name: "two", Tier: "pro", Overrides: map[string]tenants.Limits{"api": {{Algorithm: "token_bucket", Limit: 1, Period: "1s"}}}},
	}
	// Periods compare by duration and a tier's limits by name, so a
	// respelled period and a reordered list are no change; an inert
	// override (of a policy that is gone) is not the file's business.
	same := parse(t, `version: 1
policies:
  - name: api
    path: /api/*
    tiers:
      anonymous: {algorithm: token_bucket, limit: 10, period: 60s}
      pro:
        - {name: day, algorithm: fixed_window, limit: 1000, period: 24h}
        - {name: burst, algorithm: token_bucket, limit: 100, period: 1000ms}
keys:
  - {id: ckey_1}
`)
	plan, err := Diff(same, State{Policies: have, Keys: keys}, false, now)
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Empty() {
		t.Fatalf("plan not empty: %+v", plan.Changes)
	}
	if c, u, d, n := plan.Counts(); c+u+d != 0 || n != 2 {
		t.Fatalf("counts %d %d %d %d, want two not in file (old, ckey_2)", c, u, d, n)
	}

	changed := parse(t, `version: 1
policies:
  - name: api
    method: GET
    path: /api/*
    tiers:
      anonymous: {algorithm: token_bucket, limit: 10, period: 60s, burst: 5}
      pro:
        - {name: burst, algorithm: token_bucket, limit: 100, period: 1s}
  - name: new
    path: /new
    tiers: {default: {algorithm: fixed_window, limit: 1, period: 1h}}
`)
	plan, err = Diff(changed, State{Policies: have, Keys: keys}, true, now)
	if err != nil {
		t.Fatal(err)
	}
	var api, old Change
	for _, c := range plan.Changes {
		switch c.Name {
		case "api":
			api = c
		case "old":
			old = c
		}
	}
	want := []FieldChange{
		{"method", "*", "GET"},
		{"tiers.anonymous.burst", "", "5"},
		{"tiers.pro[day].algorithm", "fixed_window", ""},
		{"tiers.pro[day].limit", "1000", ""},
		{"tiers.pro[day].period", "1d", ""},
	}
	if api.Action != Update || api.ID != "pol_1" || !reflect.DeepEqual(api.Fields, want) {
		t.Errorf("api change = %+v, want fields %+v", api, want)
	}
	if old.Action != Delete || old.ID != "pol_2" {
		t.Errorf("old = %+v, want a delete (prune)", old)
	}
	c, u, d, n := plan.Counts()
	if c != 1 || u != 1 || d != 1 || n != 0 {
		t.Errorf("counts %d %d %d %d", c, u, d, n)
	}
}

// The file names one block per identity. Of several active blocks on one
// identity, one that matches is kept and the others are deleted; when none
// matches, the newest is replaced and the others deleted. Expired blocks
// are not the file's business.
func TestDiffBlocks(t *testing.T) {
	ip := func(a string) tenants.Identity { return tenants.Identity{Kind: "ip", ID: a} }
	past := now.Add(-time.Hour)
	state := State{Blocks: []tenants.Block{
		{ID: "blk_a1", Identity: ip("198.51.100.1"), Reason: "old reason"},
		{ID: "blk_a2", Identity: ip("198.51.100.1"), Reason: "scraping"},
		{ID: "blk_a3", Identity: ip("198.51.100.1"), Reason: "gone", ExpiresAt: &past},
		{ID: "blk_b1", Identity: ip("198.51.100.2"), Reason: "newest"},
		{ID: "blk_b2", Identity: ip("198.51.100.2"), Reason: "older"},
		{ID: "blk_c1", Identity: ip("198.51.100.3"), Reason: "kept"},
	}}
	f := parse(t, `version: 1
policies: []
blocks:
  - identity: {kind: ip, id: 198.51.100.1}
    reason: scraping
  - identity: {kind: ip, id: 198.51.100.2}
    reason: credential stuffing
  - identity: {kind: ip, id: 198.51.100.3}
    reason: kept
`)
	plan, err := Diff(f, state, false, now)
	if err != nil {
		t.Fatal(err)
	}
	type act struct {
		action Action
		id     string
	}
	var got []act
	for _, c := range plan.Changes {
		if c.Kind == "block" {
			got = append(got, act{c.Action, c.ID})
		}
	}
	// Replaces come before deletes, so an identity is never left unblocked.
	want := []act{{Replace, "blk_b1"}, {Delete, "blk_a1"}, {Delete, "blk_b2"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("block changes = %v, want %v\n%+v", got, want, plan.Changes)
	}
	for _, c := range plan.Changes {
		if c.Action == Replace && (c.Block.Reason != "credential stuffing" || c.Block.Identity != ip("198.51.100.2")) {
			t.Errorf("the replace makes %+v", c.Block)
		}
	}
}

// The full example of docs/LIMITS.md is a valid file.
func TestDocExampleParses(t *testing.T) {
	doc, err := os.ReadFile("../../docs/LIMITS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/LIMITS.md has no yaml example")
	}
	f := parse(t, example)
	if len(f.Policies) != 2 || len(f.Keys) != 1 || len(f.Blocks) != 2 || !f.HasKeys || !f.HasBlocks {
		t.Fatalf("the example reads as %d policies, %d keys, %d blocks", len(f.Policies), len(f.Keys), len(f.Blocks))
	}
}

// Whatever the input, Parse answers a file or problems, never panics, and
// a file it accepts marshals to a file it reads back the same.
func FuzzParse(f *testing.F) {
	raw, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(raw))
	f.Add("version: 1\npolicies: []\nkeys: []\nblocks: []\n")
	f.Add("version: 1\npolicies:\n  - &p {name: a, path: /a, tiers: {pro: {algorithm: token_bucket, limit: 1, period: 1s}}}\n  - *p\n")
	f.Add("version: 1\nblocks:\n  - {identity: {kind: ip, id: \"::1\"}, expires_at: 2099-01-01T00:00:00Z}\n")
	f.Fuzz(func(t *testing.T, text string) {
		file, err := Parse("f.yaml", []byte(text), now)
		if err != nil {
			if _, ok := IsProblems(err); !ok {
				t.Fatalf("error %T is not Problems: %v", err, err)
			}
			return
		}
		out, err := Marshal(file)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse("f.yaml", out, now)
		if err != nil {
			t.Fatalf("marshaled file does not parse:\n%s\n%v", out, err)
		}
		again, err := Marshal(back)
		if err != nil || string(again) != string(out) {
			t.Fatalf("marshal not stable:\n%s\n---\n%s", out, again)
		}
	})
}

// lotsOfLaughs is a short file whose aliases name aliases: policies lists k
// copies of a policy whose k tiers each list k copies of one limit, k³
// limits once expanded.
func lotsOfLaughs(k int) string {
	var b strings.Builder
	b.WriteString("version: 1\npolicies:\n  - &p\n    name: a\n    path: /x\n    tiers:\n")
	for i := range k {
		if i == 0 {
			b.WriteString("      t0: &ls\n")
			for j := range k {
				if j == 0 {
					b.WriteString("        - &l {algorithm: token_bucket, limit: 1, period: 1s}\n")
				} else {
					b.WriteString("        - *l\n")
				}
			}
			continue
		}
		fmt.Fprintf(&b, "      t%d: *ls\n", i)
	}
	for range k - 1 {
		b.WriteString("  - *p\n")
	}
	return b.String()
}

// A file whose aliases would expand past maxAliasNodes is refused at the
// alias that crosses the bound, before anything is decoded.
func TestParseRefusesAliasExpansion(t *testing.T) {
	text := lotsOfLaughs(60) // 216 000 limits: 1.5M nodes, in 180 lines
	_, err := Parse("limits.yaml", []byte(text), now)
	ps, ok := IsProblems(err)
	if !ok || len(ps) != 1 {
		t.Fatalf("err = %v, want one problem", err)
	}
	if got := ps[0].String(); !strings.HasPrefix(got, "limits.yaml:") || !strings.Contains(got, "aliases repeat more than 100000 nodes") {
		t.Fatalf("problem %q", got)
	}
	// The alias that crosses the bound is one of the copies of the policy.
	if lines := strings.Split(text, "\n"); ps[0].Line < 1 || ps[0].Line > len(lines) || lines[ps[0].Line-1] != "  - *p" {
		t.Fatalf("line %d, want one of the lines \"  - *p\"", ps[0].Line)
	}

	// An alias to a node that holds it would expand forever.
	_, err = Parse("limits.yaml", []byte("version: 1\npolicies: &p\n  - *p\n"), now)
	if ps, ok := IsProblems(err); !ok || len(ps) != 1 || !strings.Contains(ps[0].Message, "contains itself") {
		t.Fatalf("err = %v, want one problem: the alias contains itself", err)
	}

	// Aliases within the bound are read as the nodes they name.
	f := parse(t, `version: 1
policies:
  - name: a
    path: /a
    tiers:
      default: &std {algorithm: token_bucket, limit: 5, period: 1s}
  - name: b
    path: /b
    tiers:
      default: *std
`)
	if len(f.Policies) != 2 || !reflect.DeepEqual(f.Policies[0].Tiers, f.Policies[1].Tiers) {
		t.Fatalf("policies %+v", f.Policies)
	}
}

// A key's customer: set by the file when it names one (attach or move),
// left alone when it does not, exported and read back as no change, and
// refused when it is not a customer id.
func TestKeyCustomer(t *testing.T) {
	policies := `version: 1
policies:
  - {name: api, path: /api/*, tiers: {pro: {algorithm: fixed_window, limit: 10, period: 1m}}}
`
	have := State{Keys: []tenants.ConsumerKey{
		{ID: "ckey_1", Name: "one", Tier: "pro", CustomerID: "cus_a"},
		{ID: "ckey_2", Name: "two", Tier: "pro"},
	}}
	f := parse(t, policies+`keys:
  - {id: ckey_1}
  - {id: ckey_2, customer: cus_b}
`)
	plan, err := Diff(f, have, false, now)
	if err != nil {
		t.Fatal(err)
	}
	var keyChanges []Change
	for _, c := range plan.Changes {
		if c.Kind == "key" && c.Action == Update {
			keyChanges = append(keyChanges, c)
		}
	}
	if len(keyChanges) != 1 || keyChanges[0].ID != "ckey_2" || keyChanges[0].Patch.CustomerID == nil || *keyChanges[0].Patch.CustomerID != "cus_b" {
		t.Fatalf("key changes: %+v", keyChanges)
	}
	have.Policies = []tenants.Policy{{ID: "pol_1", Name: "api", Method: "*", Path: "/api/*", Consistency: "exact", UnlistedTiers: "allow",
		Tiers: map[string]tenants.Limits{"pro": {{Algorithm: "fixed_window", Limit: 10, Period: "1m"}}}}}
	raw, err := Marshal(FromState(have, true, false, now))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "customer: cus_a") {
		t.Fatalf("export:\n%s", raw)
	}
	if plan, err := Diff(parse(t, string(raw)), have, false, now); err != nil || !plan.Empty() {
		t.Fatalf("the export applied back: %v %+v", err, plan.Changes)
	}
	_, err = Parse("limits.yaml", []byte(policies+"keys:\n  - {id: ckey_1, customer: org_42}\n"), now)
	if err == nil || !strings.Contains(err.Error(), "keys[0].customer: must be a customer id") {
		t.Fatalf("a customer that is not an id: %v", err)
	}
}
