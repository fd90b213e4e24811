package engine

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/tenants"
)

// Sorting a tenant's policies takes O(n log n) comparisons whatever their
// order: 8192 policies created in reverse id order take well under the
// n²/2 (33 million) an insertion sort needs.
func TestSortPoliciesIsNLogN(t *testing.T) {
	const n = 8192
	es := make([]*policyEntry, n)
	for i := range es {
		es[i] = &policyEntry{p: tenants.Policy{ID: fmt.Sprintf("pol_%05d", n-i), CreatedAt: t0}}
	}
	compares := 0
	sortPolicies(es, func(a, b tenants.Policy) int { compares++; return comparePolicies(a, b) })
	for i := 1; i < n; i++ {
		if comparePolicies(es[i-1].p, es[i].p) >= 0 {
			t.Fatalf("not sorted at %d: %s, %s", i, es[i-1].p.ID, es[i].p.ID)
		}
	}
	if bound := 4 * n * int(math.Log2(n)); compares > bound {
		t.Fatalf("%d comparisons to sort %d policies, want at most %d", compares, n, bound)
	}
}

// platform is a snapshot with a small tenant (one policy, one key) and a
// big one with the given numbers of policies and consumer keys.
func platform(tb testing.TB, policies, keys int) (tenants.Snapshot, tenants.ConsumerKeyRecord) {
	tb.Helper()
	s := tenants.Snapshot{Version: 1, Tenants: []tenants.Tenant{{ID: "ten_small"}, {ID: "ten_big"}}}
	pol := func(tenant string, i int) tenants.Policy {
		return tenants.Policy{ID: fmt.Sprintf("pol_%s_%d", tenant, i), TenantID: tenant, Name: fmt.Sprint("p", i), Method: "GET",
			Path: fmt.Sprintf("/api/%d/:id", i), Consistency: "exact", CreatedAt: t0.Add(time.Duration(i) * time.Millisecond),
			Tiers: map[string]tenants.Limits{"default": limit("token_bucket", 100, "60s")}}
	}
	key := func(tenant string, i int) tenants.ConsumerKeyRecord {
		return tenants.ConsumerKeyRecord{ConsumerKey: tenants.ConsumerKey{ID: fmt.Sprintf("ckey_%s_%d", tenant, i), TenantID: tenant, Tier: "pro",
			Hash: tenants.HashKey(fmt.Sprintf("ck_%s_%d", tenant, i))}}
	}
	s.Policies = append(s.Policies, pol("ten_small", 0))
	small := key("ten_small", 0)
	s.ConsumerKeys = append(s.ConsumerKeys, small)
	for i := range policies {
		s.Policies = append(s.Policies, pol("ten_big", i))
	}
	for i := range keys {
		s.ConsumerKeys = append(s.ConsumerKeys, key("ten_big", i))
	}
	return s, small
}

// allocated is the bytes allocated per run of f, over runs.
func allocated(runs int, f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

// A change of one tenant costs what that tenant holds, not what the
// platform holds: revoking the small tenant's key, or changing its
// policy, allocates as much beside a big tenant of 1000 policies and
// 20 000 keys as beside one ten times smaller.
func TestChangeCostDoesNotGrowWithOtherTenants(t *testing.T) {
	revoked := t0.Add(time.Hour)
	cost := func(policies, keys int) (revoke, policy uint64) {
		snap, small := platform(t, policies, keys)
		v, err := viewFromSnapshot(snap)
		if err != nil {
			t.Fatal(err)
		}
		small.RevokedAt = &revoked
		rc := tenants.Change{Version: 2, Kind: tenants.ChangeConsumerKey, TenantID: "ten_small", ConsumerKey: &small}
		p := snap.Policies[0]
		p.Path = "/api/changed"
		pc := tenants.Change{Version: 2, Kind: tenants.ChangePolicy, TenantID: "ten_small", Policy: &p}
		apply := func(c tenants.Change) func() {
			return func() {
				if _, err := v.apply(c); err != nil {
					t.Fatal(err)
				}
			}
		}
		return allocated(50, apply(rc)), allocated(50, apply(pc))
	}
	r1, p1 := cost(100, 2_000)
	r10, p10 := cost(1_000, 20_000)
	t.Logf("bytes per change beside a big tenant of 100 policies and 2000 keys: revoke %d, policy %d; of 1000 and 20000: revoke %d, policy %d", r1, p1, r10, p10)
	for _, c := range []struct {
		what       string
		small, big uint64
	}{{"key revocation", r1, r10}, {"policy change", p1, p10}} {
		if c.big > c.small+c.small/4+1024 {
			t.Errorf("%s: %d bytes beside the big tenant, %d beside one ten times smaller: the cost grows with another tenant's size", c.what, c.big, c.small)
		}
	}
}
