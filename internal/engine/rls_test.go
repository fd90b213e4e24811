package engine

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/rlsconf"
	"github.com/sluicehq/sluice/internal/rlspolicy"
	"github.com/sluicehq/sluice/internal/tenants"
)

const rlsYAML = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /login
    rate_limit: {unit: hour, requests_per_unit: 2, name: login}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 100}
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
  - key: user_plan
    value: premium
    rate_limit: {unit: minute, requests_per_unit: 5, replaces: [{name: login}]}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: file
    value: "a*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// rlsEngine is an engine whose tenants ten_a and ten_b both hold the
// domain of rlsYAML, decided at fixed instants.
func rlsEngine(t *testing.T) *Engine {
	t.Helper()
	return rlsEngineWith(t, rlsYAML)
}

// rlsEngineWith is rlsEngine with a domain of its own.
func rlsEngineWith(t testing.TB, yaml string) *Engine {
	t.Helper()
	f, err := rlsconf.Parse("edge.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := rlspolicy.Policies(f)
	if err != nil {
		t.Fatal(err)
	}
	snap := tenants.Snapshot{Version: 1, Tenants: []tenants.Tenant{{ID: "ten_a", Name: "a"}, {ID: "ten_b", Name: "b"}},
		Blocks: []tenants.Block{{ID: "blk_1", TenantID: "ten_a", Identity: tenants.Identity{Kind: "ip", ID: "192.0.2.66"}, Reason: "abuse", CreatedAt: t0}}}
	for _, tenant := range []string{"ten_a", "ten_b"} {
		for i, p := range ps {
			p.Normalize()
			if err := p.Validate(); err != nil {
				t.Fatalf("%s: %v", p.Name, err)
			}
			p.ID, p.TenantID, p.CreatedAt = tenant+"_pol_"+strconv.Itoa(i), tenant, t0
			snap.Policies = append(snap.Policies, p)
		}
	}
	return newTestEngine(t, snap)
}

func desc(kv ...string) RLSDescriptor {
	d := RLSDescriptor{Hits: 1}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, RLSEntry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func TestShouldRateLimit(t *testing.T) {
	// An instant 10 s into a minute, an hour and a day: windows are
	// aligned at multiples of the unit since the unix epoch.
	at := time.Unix(1_800_000_000-1_800_000_000%86400+10, 0)
	type step struct {
		name    string
		tenant  string
		domain  string
		ds      []RLSDescriptor
		over    bool
		codes   []bool   // per descriptor: over its limit
		remain  []uint32 // per descriptor
		limited []bool   // per descriptor: a limit applied
	}
	steps := []step{
		{name: "first of 3", ds: []RLSDescriptor{desc("remote_address", "198.51.100.1")}, codes: []bool{false}, remain: []uint32{2}, limited: []bool{true}},
		{name: "second", ds: []RLSDescriptor{desc("remote_address", "198.51.100.1")}, remain: []uint32{1}},
		{name: "third", ds: []RLSDescriptor{desc("remote_address", "198.51.100.1")}, remain: []uint32{0}},
		{name: "fourth is over", ds: []RLSDescriptor{desc("remote_address", "198.51.100.1")}, over: true, codes: []bool{true}, remain: []uint32{0}},
		{name: "another address counts apart", ds: []RLSDescriptor{desc("remote_address", "198.51.100.2")}, remain: []uint32{2}},
		{name: "another tenant counts apart", tenant: "ten_b", ds: []RLSDescriptor{desc("remote_address", "198.51.100.1")}, remain: []uint32{2}},
		{name: "unknown domain: OK, no limit", domain: "nope", ds: []RLSDescriptor{desc("remote_address", "198.51.100.1")}, limited: []bool{false}},
		{name: "no rule: OK, no limit", ds: []RLSDescriptor{desc("nothing", "here")}, limited: []bool{false}},
		{name: "exact value wins over the bare key", ds: []RLSDescriptor{desc("path", "/login")}, remain: []uint32{1}},
		{name: "bare key for other values", ds: []RLSDescriptor{desc("path", "/other")}, remain: []uint32{99}},
		{name: "deeper: same depth only", ds: []RLSDescriptor{desc("path", "/other", "user", "u1")}, remain: []uint32{0}},
		{name: "deeper again: over (1 per second)", ds: []RLSDescriptor{desc("path", "/other", "user", "u1")}, over: true, codes: []bool{true}},
		{name: "deeper than the tree: no limit", ds: []RLSDescriptor{desc("remote_address", "198.51.100.9", "x", "y")}, limited: []bool{false}},
		{name: "unlimited", ds: []RLSDescriptor{desc("path", "/health")}, remain: []uint32{math.MaxUint32}, limited: []bool{false}},
		{name: "replaces removes the named limit", ds: []RLSDescriptor{desc("path", "/login"), desc("user_plan", "premium")},
			remain: []uint32{0, 4}, limited: []bool{false, true}},
		{name: "shadow mode answers OK over the limit", ds: []RLSDescriptor{desc("shadow", "s"), desc("shadow", "s")}, codes: []bool{false, false}},
		{name: "quota mode: over only when every quota is", ds: []RLSDescriptor{desc("quota", "q"), desc("quota", "q")}, codes: []bool{false, true}, over: false},
		{name: "quota mode: all quota descriptors over", ds: []RLSDescriptor{desc("quota", "q")}, codes: []bool{true}, over: true},
		{name: "share_threshold: values matching a* share one counter", ds: []RLSDescriptor{desc("file", "a1"), desc("file", "a2"), desc("file", "a3")}, codes: []bool{false, false, true}, over: true},
		{name: "a blocked address is over", ds: []RLSDescriptor{desc("remote_address", "192.0.2.66")}, over: true, codes: []bool{true}},
	}
	e := rlsEngine(t)
	for _, s := range steps {
		tenant, domain := s.tenant, s.domain
		if tenant == "" {
			tenant = "ten_a"
		}
		if domain == "" {
			domain = "edge"
		}
		a, err := e.ShouldRateLimit(context.Background(), tenant, &RLSRequest{Domain: domain, Descriptors: s.ds}, at)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if a.OverLimit != s.over {
			t.Errorf("%s: over limit %v, want %v (%+v)", s.name, a.OverLimit, s.over, a.Statuses)
		}
		for i, st := range a.Statuses {
			if s.codes != nil && st.OverLimit != s.codes[i] {
				t.Errorf("%s: descriptor %d over %v, want %v", s.name, i, st.OverLimit, s.codes[i])
			}
			if s.remain != nil && st.Remaining != s.remain[i] {
				t.Errorf("%s: descriptor %d remaining %d, want %d", s.name, i, st.Remaining, s.remain[i])
			}
			if s.limited != nil && (st.Limit != nil) != s.limited[i] {
				t.Errorf("%s: descriptor %d limit %+v, want a limit: %v", s.name, i, st.Limit, s.limited[i])
			}
		}
	}
}

// The answer names the rule's limit as the reference does, and counts to
// the end of the unit's window.
func TestShouldRateLimitReset(t *testing.T) {
	e := rlsEngine(t)
	at := time.Unix(1_800_000_000-1_800_000_000%60+45, 0) // 45 s into a minute
	a, err := e.ShouldRateLimit(context.Background(), "ten_a", &RLSRequest{Domain: "edge", Descriptors: []RLSDescriptor{desc("remote_address", "203.0.113.5")}}, at)
	if err != nil {
		t.Fatal(err)
	}
	st := a.Statuses[0]
	if st.Limit == nil || st.Limit.RequestsPerUnit != 3 || st.Limit.Unit != "MINUTE" || st.ResetAfter != 15*time.Second {
		t.Fatalf("status %+v limit %+v, want 3 per MINUTE resetting in 15s", st, st.Limit)
	}
}

// hits_addend: 0 takes nothing, n takes n (counted past the limit, as in
// the reference), and a refund gives back, never beyond the limit; a descriptor's own limit (Envoy's override) counts
// with that limit.
func TestShouldRateLimitHits(t *testing.T) {
	e := rlsEngine(t)
	at := time.Unix(1_800_000_000-1_800_000_000%3600+5, 0)
	call := func(d RLSDescriptor) RLSStatus {
		t.Helper()
		a, err := e.ShouldRateLimit(context.Background(), "ten_a", &RLSRequest{Domain: "edge", Descriptors: []RLSDescriptor{d}}, at)
		if err != nil {
			t.Fatal(err)
		}
		return a.Statuses[0]
	}
	d := desc("path", "/x")
	d.Hits = 0
	if st := call(d); st.Remaining != 100 || st.OverLimit {
		t.Fatalf("hits 0: %+v, want 100 remaining", st)
	}
	d.Hits = 60
	if st := call(d); st.Remaining != 40 {
		t.Fatalf("hits 60: %+v, want 40 remaining", st)
	}
	if st := call(d); !st.OverLimit || st.Remaining != 0 {
		t.Fatalf("hits 60 more: %+v, want over", st)
	}
	// The denied 60 counted, as in the reference: 120 of 100 used, and a
	// look is over.
	d.Hits = 0
	if st := call(d); !st.OverLimit || st.Remaining != 0 {
		t.Fatalf("look past the limit: %+v, want over", st)
	}
	d.Hits, d.Refund = 30, true
	if st := call(d); st.OverLimit || st.Remaining != 10 {
		t.Fatalf("refund 30: %+v, want 10 remaining", st)
	}
	d.Hits = 500
	if st := call(d); st.Remaining != 100 {
		t.Fatalf("refund past full: %+v, want 100 remaining", st)
	}
	// Usage: 60 taken, the denied 60 counted, the refunds 30 and then the
	// 90 left, not the 500 asked.
	var units int64
	for _, r := range e.counters.drain() {
		units += r.Units
	}
	if units != 0 {
		t.Fatalf("usage after the refunds: %d units, want 120 - 30 - 90", units)
	}
	d.Hits, d.Refund = 10, true // nothing left to give back
	call(d)
	d.Hits, d.Refund = 25, false
	call(d)
	d.Hits, d.Refund = 10, true
	call(d)
	units = 0
	for _, r := range e.counters.drain() {
		units += r.Units
	}
	if units != 15 {
		t.Fatalf("usage: %d units, want 0 - 0 + 25 - 10", units)
	}
	o := desc("path", "/x")
	o.Override = &RLSOverride{RequestsPerUnit: 2, Unit: "HOUR"}
	call(o)
	if st := call(o); st.Remaining != 0 || st.Limit == nil || st.Limit.RequestsPerUnit != 2 {
		t.Fatalf("override, second call: %+v %+v, want 2 per HOUR with 0 left", st, st.Limit)
	}
	if st := call(o); !st.OverLimit {
		t.Fatalf("override, third call: %+v, want over", st)
	}
}

// BenchmarkShouldRateLimit decides one descriptor per call, the shape of
// BenchmarkEngineCheck: the rule for remote_address, high enough never to
// deny.
func BenchmarkShouldRateLimit(b *testing.B) {
	f, err := rlsconf.Parse("bench.yaml", []byte("domain: bench\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n"))
	if err != nil {
		b.Fatal(err)
	}
	ps, err := rlspolicy.Policies(f)
	if err != nil {
		b.Fatal(err)
	}
	snap := tenants.Snapshot{Version: 1, Tenants: []tenants.Tenant{{ID: "ten_a", Name: "a"}}}
	for i, p := range ps {
		p.Normalize()
		p.ID, p.TenantID, p.CreatedAt = "pol_"+strconv.Itoa(i), "ten_a", t0
		snap.Policies = append(snap.Policies, p)
	}
	e := newTestEngine(b, snap)
	for _, n := range []int{1, 10_000} {
		reqs := make([]RLSRequest, n)
		for i := range reqs {
			reqs[i] = RLSRequest{Domain: "bench", Descriptors: []RLSDescriptor{desc("remote_address", fmt.Sprintf("10.0.%d.%d", i>>8, i&255))}}
		}
		b.Run(fmt.Sprintf("identities=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := e.ShouldRateLimit(context.Background(), "ten_a", &reqs[i%n], t0); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// Descriptors with their own limits, decided at once from many goroutines:
// the domain's compiled override limits stay bounded and race-free.
func TestShouldRateLimitOverridesConcurrently(t *testing.T) {
	e := rlsEngine(t)
	at := time.Unix(1_800_000_000, 0)
	done := make(chan struct{})
	for g := 0; g < 8; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 100; i++ {
				d := desc("remote_address", "198.51.100.7")
				d.Override = &RLSOverride{RequestsPerUnit: uint32(g*100 + i + 1), Unit: "HOUR"}
				if _, err := e.ShouldRateLimit(context.Background(), "ten_a", &RLSRequest{Domain: "edge", Descriptors: []RLSDescriptor{d}}, at); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for g := 0; g < 8; g++ {
		<-done
	}
	dom := e.view.Load().tenant("ten_a").rls["edge"]
	n := 0
	dom.overrides.Range(func(any, any) bool { n++; return true })
	if n > maxOverrideLimits+8 {
		t.Fatalf("%d override limits kept, bound %d", n, maxOverrideLimits)
	}
}
