package engine

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/tenants"
)

// boundSnapshot is two tenants with one policy each: 10 an hour per
// caller (a token bucket that barely refills within a test).
func boundSnapshot() tenants.Snapshot {
	return tenants.Snapshot{Version: 1,
		Tenants: []tenants.Tenant{{ID: "ten_a", Name: "a"}, {ID: "ten_b", Name: "b"}},
		Policies: []tenants.Policy{
			{ID: "pol_a", TenantID: "ten_a", Name: "api", Method: "*", Path: "/api/*", Consistency: "exact", CreatedAt: t0,
				Tiers: map[string]tenants.Limits{"anonymous": limit("fixed_window", 10, "1h")}},
			{ID: "pol_b", TenantID: "ten_b", Name: "api", Method: "*", Path: "/api/*", Consistency: "exact", CreatedAt: t0,
				Tiers: map[string]tenants.Limits{"anonymous": limit("fixed_window", 10, "1h")}},
		}}
}

// boundedEngine is newTestEngine with a bound of n buckets a tenant.
func boundedEngine(t testing.TB, snap tenants.Snapshot, n int) *Engine {
	t.Helper()
	e := newTestEngine(t, snap)
	e.bound.max = n
	return e
}

// ipsIn returns n IPv6 addresses, from seed on, whose bucket keys under
// tenant's policy fall in partition p.
func ipsIn(tenant, policy string, p, n, seed int) []string {
	var out []string
	for i := seed; len(out) < n; i++ {
		ip := fmt.Sprintf("2001:db8:%x:%x::1", i>>16, i&0xffff)
		id, _ := NormalizeIP(ip) // an IPv6 caller is its /64
		if bus.Partition([]byte(BucketKey(tenant, policy, KindIP, id))) == p {
			out = append(out, ip)
		}
	}
	return out
}

func checkIP(t *testing.T, e *Engine, tenant, ip string, peek bool, at time.Time) Answer {
	t.Helper()
	a, err := e.Check(context.Background(), tenant, &CheckRequest{IP: ip, Path: "/api/x", Peek: peek}, at)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A tenant at its bound: callers with a bucket keep theirs exactly, new
// callers share the overflow bucket of their partition (its limit admits
// exactly 10 of them together), a peek creates nothing, another tenant is
// unaffected, and once the tenant's buckets are full again and swept new
// callers get their own again.
func TestTenantAtItsBoundSharesTheOverflowBucket(t *testing.T) {
	const bound = 5
	e := boundedEngine(t, boundSnapshot(), bound)
	at := t0.Truncate(time.Hour).Add(time.Minute)
	const p = 7
	old := ipsIn("ten_a", "pol_a", p, bound, 0)
	for _, ip := range old {
		if a := checkIP(t, e, "ten_a", ip, false, at); !a.Allowed || a.Remaining != 9 {
			t.Fatalf("caller %s under the bound: %+v", ip, a)
		}
	}
	if got := e.cache.TenantLen("ten_a"); got != bound {
		t.Fatalf("%d buckets of ten_a, want %d", got, bound)
	}
	// A peek of a new caller creates nothing.
	if a := checkIP(t, e, "ten_a", "2001:db8:ffff:ffff::1", true, at); !a.Allowed {
		t.Fatalf("peek: %+v", a)
	}
	if got := e.cache.Len(); got != bound {
		t.Fatalf("a peek made a bucket: %d", got)
	}
	// 30 new callers in the same partition: 10 allowed among them all.
	allowed := 0
	for _, ip := range ipsIn("ten_a", "pol_a", p, 30, 1000) {
		if checkIP(t, e, "ten_a", ip, false, at).Allowed {
			allowed++
		}
	}
	if allowed != 10 {
		t.Fatalf("the overflow bucket admitted %d new callers, want 10", allowed)
	}
	if got := e.cache.TenantLen("ten_a"); got != bound+1 {
		t.Fatalf("%d buckets of ten_a, want the bound and one overflow bucket", got)
	}
	if got := testutil.ToFloat64(e.metrics.overflows); got != 31 {
		t.Fatalf("sluice_tenant_bucket_overflow_total %v, want 31 (the peek and the 30)", got)
	}
	if got := testutil.ToFloat64(e.metrics.atBound); got != 1 {
		t.Fatalf("sluice_tenants_at_bucket_bound %v, want 1", got)
	}
	// The overflow bucket is in the callers' partition.
	var keys []string
	e.cache.DrainDirty(func(key string, _ []quota.Limit, _ []quota.State, _ int64) { keys = append(keys, key) })
	overflows := 0
	for _, k := range keys {
		if strings.Contains(k, "/"+KindOverflow+":") {
			overflows++
			if !strings.HasPrefix(k, "ten_a/pol_a/overflow:anonymous.") || bus.Partition([]byte(k)) != p {
				t.Fatalf("overflow key %q, partition %d", k, bus.Partition([]byte(k)))
			}
		}
	}
	if overflows != 1 {
		t.Fatalf("%d overflow buckets: %q", overflows, keys)
	}
	// The old callers keep their own buckets: 9 more each, then denied.
	for _, ip := range old {
		for i := range 9 {
			if a := checkIP(t, e, "ten_a", ip, false, at); !a.Allowed || a.Remaining != int64(8-i) {
				t.Fatalf("old caller %s, check %d: %+v", ip, i+2, a)
			}
		}
		if checkIP(t, e, "ten_a", ip, false, at).Allowed {
			t.Fatalf("old caller %s: an 11th", ip)
		}
	}
	// Another tenant is unaffected: each new caller has its own bucket, up
	// to its own bound.
	for _, ip := range ipsIn("ten_b", "pol_b", p, bound, 1000) {
		if a := checkIP(t, e, "ten_b", ip, false, at); !a.Allowed || a.Remaining != 9 {
			t.Fatalf("ten_b caller %s: %+v", ip, a)
		}
	}
	if got := e.cache.TenantLen("ten_b"); got != bound {
		t.Fatalf("%d buckets of ten_b, want %d", got, bound)
	}
	// Next hour: every bucket is full again; swept, the count goes down
	// and a new caller has its own bucket again.
	e.cache.DrainDirty(func(string, []quota.Limit, []quota.State, int64) {})
	later := at.Add(time.Hour)
	e.cache.Sweep(later.UnixNano())
	if got := e.cache.TenantLen("ten_a"); got != 0 {
		t.Fatalf("%d buckets of ten_a after the sweep", got)
	}
	if got := testutil.ToFloat64(e.metrics.atBound); got != 0 {
		t.Fatalf("sluice_tenants_at_bucket_bound %v after the sweep", got)
	}
	ip := ipsIn("ten_a", "pol_a", p, 1, 5000)[0]
	checkIP(t, e, "ten_a", ip, false, later)
	if id, _ := NormalizeIP(ip); !e.cache.Has([]byte(BucketKey("ten_a", "pol_a", KindIP, id))) {
		t.Fatal("a new caller after the sweep has no bucket of its own")
	}
}

// Refunds, settles and other servers' consumption of a caller with no
// bucket create none past the bound: they go to the overflow bucket, or
// nowhere when there is nothing to give back.
func TestTenantBoundHoldsForRefundsAndSettles(t *testing.T) {
	e := boundedEngine(t, boundSnapshot(), 2)
	at := t0.Truncate(time.Hour).Add(time.Minute)
	for _, ip := range []string{"192.0.2.1", "192.0.2.2"} {
		checkIP(t, e, "ten_a", ip, false, at)
	}
	tl := e.view.Load().tenant("ten_a").byID["pol_a"].tiers[TierAnonymous]
	key := []byte(BucketKey("ten_a", "pol_a", KindIP, "192.0.2.3"))
	out := make([]quota.Outcome, 1)
	// A refund of a new caller: no bucket made, a full one answered (a
	// look at one unit: 9 left after it).
	d := decision{key: key, tenantID: "ten_a", tier: TierAnonymous, limits: tl.limits, now: at.UnixNano(), cost: -3, consume: true}
	if allowed, _ := e.decideCache(&d, out); !allowed || out[0].Remaining != 9 {
		t.Fatalf("refund: %v, %+v", allowed, out[0])
	}
	if got := e.cache.Len(); got != 2 {
		t.Fatalf("a refund made a bucket: %d", got)
	}
	// A settle's charge goes to the overflow bucket, once made.
	e.settleCache(key, "ten_a", nil, TierAnonymous, "", tl.limits, at.UnixNano(), 4, 0, out)
	of := e.bound.overflow(key, TierAnonymous, "")
	if got := e.cache.Len(); got != 3 || !e.cache.Has(of) || e.cache.Has(key) {
		t.Fatalf("after a settle's charge: %d buckets, overflow %v, caller %v", got, e.cache.Has(of), e.cache.Has(key))
	}
	// The refund of it comes back from there.
	d.cost = -4
	if allowed, _ := e.decideCache(&d, out); !allowed || out[0].Remaining != 9 {
		t.Fatalf("refund from the overflow bucket: %v, %+v", allowed, out[0])
	}
	// Other servers' consumption (gossip) goes there too.
	if k := e.gossip.bound.route([]byte(BucketKey("ten_a", "pol_a", KindIP, "192.0.2.9")), TierAnonymous, ""); bytes.Contains(k, []byte("192.0.2.9")) {
		t.Fatalf("a forced consumption past the bound goes to %q", k)
	}
	if k := e.gossip.bound.route([]byte(BucketKey("ten_a", "pol_a", KindIP, "192.0.2.1")), TierAnonymous, ""); !bytes.Contains(k, []byte("192.0.2.1")) {
		t.Fatalf("an existing caller's forced consumption goes to %q", k)
	}
}

// A million distinct callers of one tenant: the cache holds the bound and
// one overflow bucket per partition at most.
func TestTenantBoundHoldsAgainstAMillionCallers(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	const bound = 1000
	e := boundedEngine(t, boundSnapshot(), bound)
	tl := e.view.Load().tenant("ten_a").byID["pol_a"].tiers[TierAnonymous]
	now := t0.UnixNano()
	out := make([]quota.Outcome, 1)
	var key []byte
	for i := range n {
		key = bus.AppendBucketKey(key[:0], "ten_a", "pol_a", KindIP, fmt.Sprintf("2001:db8:%x:%x::1", i>>16, i&0xffff))
		d := decision{key: key, tenantID: "ten_a", tier: TierAnonymous, limits: tl.limits, now: now, cost: 1, consume: true}
		e.decideCache(&d, out)
		if i%100_000 == 0 && e.cache.Len() > bound+bus.Partitions {
			t.Fatalf("after %d callers the cache holds %d buckets", i, e.cache.Len())
		}
	}
	if got := e.cache.Len(); got > bound+bus.Partitions {
		t.Fatalf("the cache holds %d buckets for a bound of %d", got, bound)
	}
	if got := testutil.ToFloat64(e.metrics.overflows); got != float64(n-bound) {
		t.Fatalf("sluice_tenant_bucket_overflow_total %v, want %d", got, n-bound)
	}
}

// Envoy descriptors are bounded the same way: new descriptor values past
// the bound are counted on overflow buckets, old ones on their own.
func TestTenantBoundHoldsForDescriptors(t *testing.T) {
	e := rlsEngineWith(t, countYAML)
	e.bound.max = 3
	at := time.Unix(1_800_000_000-1_800_000_000%60+1, 0)
	for i := range 3 {
		if st := rlsCall(t, e, at, desc("strict", fmt.Sprint("old", i))); st.OverLimit || st.Remaining != 9 {
			t.Fatalf("old value %d: %+v", i, st)
		}
	}
	for i := range 500 {
		rlsCall(t, e, at, desc("strict", fmt.Sprint("new", i)))
	}
	if got := e.cache.TenantLen("ten_a"); got > 3+bus.Partitions {
		t.Fatalf("%d buckets of ten_a", got)
	}
	for i := range 3 {
		if st := rlsCall(t, e, at, desc("strict", fmt.Sprint("old", i))); st.OverLimit || st.Remaining != 8 {
			t.Fatalf("old value %d, second call: %+v", i, st)
		}
	}
	if testutil.ToFloat64(e.metrics.overflows) != 500 {
		t.Fatalf("sluice_tenant_bucket_overflow_total %v", testutil.ToFloat64(e.metrics.overflows))
	}
}

// An overflow key is found once per tenant, policy, tier and partition,
// lands in its partition, and names no caller.
func TestOverflowKeys(t *testing.T) {
	for p := range bus.Partitions {
		for _, keyID := range []string{"", "key_1"} {
			k := findOverflowKey(overflowID{tenant: "ten_a", policy: "pol_a", tier: "pro", keyID: keyID, part: p})
			if bus.Partition(k) != p {
				t.Fatalf("%q is in partition %d, not %d", k, bus.Partition(k), p)
			}
			tenant, policy, caller, ok := bus.SplitBucketKey(string(k))
			kind, _, ok2 := bus.SplitCaller(caller)
			if !ok || !ok2 || tenant != "ten_a" || policy != "pol_a" || kind != KindOverflow || kind == KindIP || kind == KindKey || kind == kindCounter {
				t.Fatalf("%q", k)
			}
		}
	}
	for _, tc := range []struct{ set, want int }{{0, DefaultTenantBuckets}, {7, 7}, {-1, -1}, {-5, -1}} {
		if b := newTenantBound(tc.set, quota.NewCache(), nil); b.max != tc.want {
			t.Errorf("TenantBuckets %d: bound %d, want %d", tc.set, b.max, tc.want)
		}
	}
}

// With no bound every caller has its own bucket.
func TestNoTenantBound(t *testing.T) {
	e := boundedEngine(t, boundSnapshot(), -1)
	at := t0.Truncate(time.Hour).Add(time.Minute)
	for i := range 300 {
		checkIP(t, e, "ten_a", fmt.Sprintf("2001:db8:%x::1", i), false, at)
	}
	if got := e.cache.TenantLen("ten_a"); got != 300 {
		t.Fatalf("%d buckets", got)
	}
}

// A tenant at its bound is warned about once a minute, naming it, the
// bound and the flag; another tenant has its own warning.
func TestTenantBoundWarnsOnceAMinute(t *testing.T) {
	var logged bytes.Buffer
	b := newTenantBound(1, quota.NewCache(), slog.New(slog.NewTextHandler(&logged, nil)))
	for range 3 {
		b.overflow([]byte("ten_a/pol_a/ip:192.0.2.1"), TierAnonymous, "")
	}
	b.overflow([]byte("ten_b/pol_b/ip:192.0.2.1"), TierAnonymous, "")
	lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "tenant=ten_a") ||
		!strings.Contains(lines[0], "bound=1") || !strings.Contains(lines[0], "--tenant-buckets") || !strings.Contains(lines[1], "tenant=ten_b") {
		t.Fatalf("logged:\n%s", logged.String())
	}
	b.warnMu.Lock()
	last, _ := b.warned.Get("ten_a", time.Time{})
	*last = last.Add(-overflowWarnEvery)
	b.warnMu.Unlock()
	b.overflow([]byte("ten_a/pol_a/ip:192.0.2.1"), TierAnonymous, "")
	if n := strings.Count(logged.String(), "tenant=ten_a"); n != 2 {
		t.Fatalf("%d warnings of ten_a after a minute", n)
	}
}

// Checks of tenants at their bound, in many partitions at once, each find
// their partition's one overflow key, never their own key, however the
// searches of two checks that miss the same entry interleave; and more
// overflow ids than the table remembers are found again.
func TestOverflowKeysConcurrent(t *testing.T) {
	b := newTenantBound(1, quota.NewCache(), slog.New(slog.DiscardHandler))
	var wg sync.WaitGroup
	var bad atomic.Int64
	for g := range 8 {
		wg.Go(func() {
			for i := range 3000 {
				key := []byte(fmt.Sprintf("ten_%d/pol_%d/ip:192.0.2.%d", (g+i)%5, i%300, i%250))
				of := b.overflow(key, TierAnonymous, "")
				if string(of) == string(key) || bus.Partition(of) != bus.Partition(key) {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d checks at the bound were not given their partition's overflow key", n)
	}
}
