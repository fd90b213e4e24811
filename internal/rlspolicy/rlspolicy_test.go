package rlspolicy

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/rlsconf"
	"github.com/sluicehq/sluice/internal/tenants"
)

const reference = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: /login
    shadow_mode: true
    metadata: {team: auth, weight: 2}
    rate_limit: {unit: hour, requests_per_unit: 2, name: login}
  - key: path
    descriptors:
      - key: user
        quota_mode: true
        detailed_metric: true
        rate_limit: {unit: month, requests_per_unit: 1000}
      - key: free
        value: "img-*"
        share_threshold: true
        value_to_metric: true
        rate_limit: {unit: week, requests_per_unit: 3}
  - key: plan
    value: premium
    rate_limit: {unit: second, requests_per_unit: 100, replaces: [{name: login}]}
  - key: health
    rate_limit: {unlimited: true}
`

const withExtras = `domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 600}
    sluice:
      algorithm: token_bucket
      burst: 900
      consistency: local
      denied: uncounted
      limits:
        - {name: daily, unit: day, requests_per_unit: 50000, algorithm: sliding_window}
  - key: tenant
    sluice:
      limits:
        - {name: hourly, unit: hour, requests_per_unit: 10}
        - {name: monthly, calendar: month, requests_per_unit: 100000}
`

func roundTrip(t *testing.T, text string, marshal func(*rlsconf.File) ([]byte, error)) {
	t.Helper()
	f, err := rlsconf.Parse("f.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := Policies(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		p.Normalize()
		if err := p.Validate(); err != nil {
			t.Fatalf("policy %s: %v", p.Name, err)
		}
	}
	// The store keeps no order: rebuild from the policies shuffled.
	rand.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	back, err := FromPolicies(f.Domain, ps)
	if err != nil {
		t.Fatal(err)
	}
	sortTree(f.Descriptors)
	sortTree(back.Descriptors)
	a, _ := marshal(f)
	b, err := marshal(back)
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Fatalf("policies and back:\n%s\nwant\n%s", b, a)
	}
}

// sortTree orders siblings by key and value: the policies' order is not
// the file's.
func sortTree(ds []*rlsconf.Descriptor) {
	for i := range ds {
		for j := i + 1; j < len(ds); j++ {
			if ds[j].Key+"\x00"+ds[j].Value < ds[i].Key+"\x00"+ds[i].Value {
				ds[i], ds[j] = ds[j], ds[i]
			}
		}
		sortTree(ds[i].Descriptors)
	}
}

// A reference file becomes valid policies, one per node, and the policies
// make the same file again.
func TestReferenceFileRoundTrip(t *testing.T) { roundTrip(t, reference, rlsconf.Marshal) }

// Sluice's own fields survive the trip too.
func TestExtrasRoundTrip(t *testing.T) { roundTrip(t, withExtras, rlsconf.MarshalWithExtras) }

// A rule's limits become the tier default: the reference's fixed window
// of requests per unit, or Sluice's algorithms and further limits.
func TestPolicyLimits(t *testing.T) {
	f, err := rlsconf.Parse("f.yaml", []byte(reference+strings.TrimPrefix(withExtras, "domain: api\ndescriptors:\n")))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := Policies(f)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]tenants.Policy{}
	for _, p := range ps {
		by[p.Name] = p
	}
	want := map[string]tenants.Limits{
		"edge.remote_address": {{Algorithm: "fixed_window", Limit: 5, Period: "60s"}},
		"edge.path.user":      {{Algorithm: "fixed_window", Limit: 1000, Period: "2592000s"}},
		"edge.api_key": {{Name: "limit0", Algorithm: "token_bucket", Limit: 600, Period: "60s", Burst: 900},
			{Name: "daily", Algorithm: "sliding_window", Limit: 50000, Period: "86400s"}},
		"edge.tenant": {{Name: "hourly", Algorithm: "fixed_window", Limit: 10, Period: "3600s"},
			{Name: "monthly", Algorithm: "fixed_window", Limit: 100000, Calendar: "month"}},
	}
	for name, ls := range want {
		if got := by[name].Tiers[tenants.TierDefault]; !reflect.DeepEqual(got, ls) {
			t.Errorf("%s: %+v, want %+v", name, got, ls)
		}
	}
	if p := by["edge.path"]; p.Descriptor.Limited || len(p.Tiers) != 0 {
		t.Errorf("a node without a rate limit: %+v", p)
	}
	if p := by["edge.health"]; !p.Descriptor.Unlimited || len(p.Tiers) != 0 {
		t.Errorf("an unlimited node: %+v", p)
	}
	if p := by["edge.path_/login"]; !p.Shadow || p.Descriptor.RuleName != "login" || p.Descriptor.Metadata != `{"team":"auth","weight":2}` {
		t.Errorf("shadow, name and metadata: %+v %+v", p, p.Descriptor)
	}
	if p := by["edge.api_key"]; p.Consistency != tenants.ConsistencyLocal || !p.Descriptor.Extras {
		t.Errorf("extras: %+v %+v", p, p.Descriptor)
	}
}

// A node whose parent is missing, as a half-applied change leaves for a
// moment, hangs under a parent without a limit instead of failing the
// domain.
func TestOrphanNode(t *testing.T) {
	f, err := rlsconf.Parse("f.yaml", []byte(reference))
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := Policies(f)
	var kept []tenants.Policy
	for _, p := range ps {
		if p.Name != "edge.path" {
			kept = append(kept, p)
		}
	}
	back, err := FromPolicies("edge", kept)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rlsconf.Compile(back); err != nil {
		t.Fatalf("compile: %v", err)
	}
	b, _ := rlsconf.Marshal(back)
	if !strings.Contains(string(b), "key: user") {
		t.Fatalf("the orphan is gone:\n%s", b)
	}
}

// Wildcard siblings are tried in the file's order, so that order is
// stored: policies read back in any order make the file's order again, and
// a file that only reorders its wildcards changes the domain.
func TestWildcardOrder(t *testing.T) {
	const first = `domain: api
descriptors:
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 15}
  - key: path
    value: /health
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /api/v1/*/items
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	const reordered = `domain: api
descriptors:
  - key: path
    value: /api/v1/*/items
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: /health
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 15}
`
	f1, err := rlsconf.Parse("a.yaml", []byte(first))
	if err != nil {
		t.Fatal(err)
	}
	f2, err := rlsconf.Parse("b.yaml", []byte(reordered))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := Policies(f1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ps {
		ps[i].Normalize()
	}
	plan, err := Diff(f2, ps)
	if err != nil {
		t.Fatal(err)
	}
	if _, change, _, _ := plan.Counts(); change != 2 {
		t.Fatalf("reordering two wildcards changed %d nodes, want 2", change)
	}
	want, err := Policies(f2)
	if err != nil {
		t.Fatal(err)
	}
	// Created in the first file's order, changed to the second's.
	slices.Reverse(want)
	back, err := FromPolicies("api", want)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rlsconf.Compile(back)
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Lookup("api", rlsconf.RequestDescriptor{Entries: []rlsconf.Entry{{Key: "path", Value: "/api/v1//items"}}})
	if l == nil || l.RequestsPerUnit != 5 {
		t.Fatalf("after the reorder, /api/v1//items matched %+v, want /api/v1/*/items (5 a minute), the file's first", l)
	}
	cfg1, err := rlsconf.Compile(f1)
	if err != nil {
		t.Fatal(err)
	}
	if l := cfg1.Lookup("api", rlsconf.RequestDescriptor{Entries: []rlsconf.Entry{{Key: "path", Value: "/api/v1//items"}}}); l == nil || l.RequestsPerUnit != 15 {
		t.Fatalf("first file: %+v", l)
	}
}
