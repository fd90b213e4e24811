package engine

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/tenants"
)

// customerSnapshot is snapshot with a policy whose pro tier counts 3 an
// hour per key and dayLimit a day per customer, customers cus_1 and cus_2,
// keys of cus_1 (members of them), one of cus_2 and one of none. It
// answers each key's plain text, by id.
func customerSnapshot(t testing.TB, members int, perKey, dayLimit int64) (tenants.Snapshot, map[string]string) {
	snap, _ := snapshot(t)
	snap.Policies = append(snap.Policies, tenants.Policy{ID: "pol_cus", TenantID: "ten_a", Name: "metered", Method: "*", Path: "/cus/*",
		Consistency: "exact", CreatedAt: t0, Tiers: map[string]tenants.Limits{"pro": {
			{Name: "rate", Algorithm: "token_bucket", Limit: perKey, Period: "1h"},
			{Name: "day", Algorithm: "fixed_window", Limit: dayLimit, Period: "1d", Per: tenants.PerCustomer},
		}}})
	snap.Customers = []tenants.Customer{
		{ID: "cus_1", TenantID: "ten_a", ExternalID: "org_1", Tier: "pro"},
		{ID: "cus_2", TenantID: "ten_a", ExternalID: "org_2", Tier: "pro"},
	}
	plain := map[string]string{}
	add := func(id, cus string) {
		p, prefix, hash, _ := tenants.GenerateKey("ck_")
		plain[id] = p
		snap.ConsumerKeys = append(snap.ConsumerKeys, tenants.ConsumerKeyRecord{ConsumerKey: tenants.ConsumerKey{
			ID: id, TenantID: "ten_a", Tier: "pro", Prefix: prefix, Hash: hash, CustomerID: cus}})
	}
	for i := range members {
		add("ckey_m"+itoa(i), "cus_1")
	}
	add("ckey_other", "cus_2")
	add("ckey_alone", "")
	return snap, plain
}

// used is what bucket key has taken of its limits, by the engine's cache.
func usedIn(t testing.TB, e *Engine, key []byte, limits []quota.Limit) []float64 {
	used := make([]float64, len(limits))
	e.cache.Used(key, limits, t0.UnixNano(), used)
	return used
}

// A customer's keys share its bucket; a denial at the customer's level
// charges no key's bucket; a key without a customer counts per key alone;
// another customer's bucket is its own.
func TestCustomerLimitsShared(t *testing.T) {
	snap, plain := customerSnapshot(t, 2, 3, 5)
	e := newTestEngine(t, snap)
	check := func(id string) Answer {
		t.Helper()
		a, err := e.Check(t.Context(), "ten_a", &CheckRequest{APIKey: plain[id], Path: "/cus/x"}, t0)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for n, want := range []bool{true, true, true, false} {
		if a := check("ckey_m0"); a.Allowed != want {
			t.Fatalf("m0 check %d: %+v", n, a)
		}
	}
	a := check("ckey_m1")
	if !a.Allowed || len(a.Limits) != 2 || a.Limits[0].Name != "metered.rate" || a.Limits[1].Name != "metered.day" || a.Limits[1].Remaining != 1 {
		t.Fatalf("m1's first check: %+v", a)
	}
	if a := check("ckey_m1"); !a.Allowed || a.Remaining != 0 {
		t.Fatalf("m1's second check: %+v", a)
	}
	a = check("ckey_m1")
	if a.Allowed || a.Reason != ReasonRateLimited || a.Limits[1].Remaining != 0 || a.Limits[0].Remaining != 1 {
		t.Fatalf("m1's third check, past the customer's 5: %+v", a)
	}
	tl := e.view.Load().tenant("ten_a").byID["pol_cus"].tiers["pro"]
	m1 := bus.AppendPlacedBucketKey(nil, "ten_a", "pol_cus", KindKey, "cus_1", "ckey_m1")
	if u := usedIn(t, e, m1, tl.limits); u[0] != 2 {
		t.Fatalf("m1's own bucket took %v, want 2: a check its customer denied was charged", u)
	}
	if u := usedIn(t, e, bus.AppendCustomerBucketKey(nil, "ten_a", "pol_cus", "cus_1"), tl.cus); u[0] != 5 {
		t.Fatalf("cus_1's bucket took %v, want 5", u)
	}
	// The dashboard's look-up reads the same two buckets.
	st, err := e.PeekCaller("ten_a", Caller{Kind: KindKey, ID: "ckey_m1"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, cp := range st.Policies {
		if cp.Policy != "metered" {
			continue
		}
		found = true
		if cp.Allowed || len(cp.Limits) != 2 || cp.Limits[0].Remaining != 1 || cp.Limits[1].Remaining != 0 {
			t.Fatalf("m1 looked up: %+v", cp)
		}
	}
	if !found {
		t.Fatal("the look-up has no metered policy")
	}
	if a := check("ckey_other"); !a.Allowed || a.Limits[1].Remaining != 4 {
		t.Fatalf("cus_2's key: %+v", a)
	}
	for n, want := range []bool{true, true, true, false} {
		if a := check("ckey_alone"); a.Allowed != want || len(a.Limits) != 1 {
			t.Fatalf("a key of no customer, check %d: %+v", n, a)
		}
	}
}

// A key that moves to another customer starts a full bucket of its own in
// the new customer's partition and counts against the new customer; the
// old customer keeps what the key used.
func TestCustomerLimitsKeyMoves(t *testing.T) {
	snap, plain := customerSnapshot(t, 1, 3, 5)
	e := newTestEngine(t, snap)
	check := func() Answer {
		t.Helper()
		a, err := e.Check(t.Context(), "ten_a", &CheckRequest{APIKey: plain["ckey_m0"], Path: "/cus/x"}, t0)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for range 3 {
		if a := check(); !a.Allowed {
			t.Fatalf("before the move: %+v", a)
		}
	}
	var rec tenants.ConsumerKeyRecord
	for _, k := range snap.ConsumerKeys {
		if k.ID == "ckey_m0" {
			rec = k
		}
	}
	rec.CustomerID = "cus_2"
	v, err := e.view.Load().apply(tenants.Change{Version: 2, Kind: tenants.ChangeConsumerKey, TenantID: "ten_a", ConsumerKey: &rec})
	if err != nil {
		t.Fatal(err)
	}
	e.view.Store(v)
	a := check()
	if !a.Allowed || a.Customer == nil || a.Customer.ID != "cus_2" || a.Limits[0].Remaining != 2 || a.Limits[1].Remaining != 4 {
		t.Fatalf("after the move: %+v", a)
	}
	tl := v.tenant("ten_a").byID["pol_cus"].tiers["pro"]
	if u := usedIn(t, e, bus.AppendCustomerBucketKey(nil, "ten_a", "pol_cus", "cus_1"), tl.cus); u[0] != 3 {
		t.Fatalf("the old customer's bucket holds %v, want the 3 the key used", u)
	}
	if p, q := bus.Partition(bus.AppendPlacedBucketKey(nil, "ten_a", "pol_cus", KindKey, "cus_2", "ckey_m0")), bus.CustomerPartition("ten_a", "cus_2"); p != q {
		t.Fatalf("the moved key's bucket is in partition %d, its customer's is %d", p, q)
	}
}

// 300 concurrent checks through five keys of one customer whose limit is
// 50 admit exactly 50, and the keys' own buckets took exactly 50.
func TestCustomerLimitsConcurrentExact(t *testing.T) {
	snap, plain := customerSnapshot(t, 5, 1000, 50)
	e := newTestEngine(t, snap)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 300 {
		wg.Go(func() {
			a, err := e.Check(t.Context(), "ten_a", &CheckRequest{APIKey: plain["ckey_m"+itoa(g%5)], Path: "/cus/x"}, t0.Add(time.Duration(g)))
			if err != nil {
				t.Error(err)
				return
			}
			if a.Allowed {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 50 {
		t.Fatalf("admitted %d, want 50", admitted.Load())
	}
	tl := e.view.Load().tenant("ten_a").byID["pol_cus"].tiers["pro"]
	sum := 0.0
	for i := range 5 {
		u := usedIn(t, e, bus.AppendPlacedBucketKey(nil, "ten_a", "pol_cus", KindKey, "cus_1", "ckey_m"+itoa(i)), tl.limits)
		sum += u[0]
	}
	if sum < 49.9 || sum > 50.1 {
		t.Fatalf("the keys' buckets took %v, want 50", sum)
	}
}

// A reservation under a tier counted per customer is refused, and a wait
// is not waited.
func TestCustomerLimitsRefuseReserveAndWait(t *testing.T) {
	snap, plain := customerSnapshot(t, 1, 3, 5)
	e := newTestEngine(t, snap)
	if _, err := e.Check(t.Context(), "ten_a", &CheckRequest{APIKey: plain["ckey_m0"], Path: "/cus/x", Hold: true}, t0); err == nil {
		t.Fatal("a reservation under a per-customer limit was taken")
	}
	a, err := e.Check(t.Context(), "ten_a", &CheckRequest{APIKey: plain["ckey_m0"], Path: "/cus/x", Wait: time.Second}, t0)
	if err != nil || !a.Allowed || a.WaitRefused != WaitRefusedCustomer {
		t.Fatalf("a check with a wait: %+v, %v", a, err)
	}
}

// BenchmarkEngineCheckPerCustomer compares a check of a customer's key
// under a tier with one per-key limit to one under a tier that adds a
// per-customer limit (two buckets decided together).
func BenchmarkEngineCheckPerCustomer(b *testing.B) {
	snap, plain := customerSnapshot(b, 1, 1_000_000_000, 1_000_000_000)
	snap.Policies = append(snap.Policies, tenants.Policy{ID: "pol_key", TenantID: "ten_a", Name: "per-key", Method: "*", Path: "/key/*",
		Consistency: "exact", CreatedAt: t0, Tiers: map[string]tenants.Limits{"pro": {
			{Name: "rate", Algorithm: "token_bucket", Limit: 1_000_000_000, Period: "1h"},
		}}})
	e := newTestEngine(b, snap)
	for _, c := range []struct{ name, path string }{{"per key", "/key/x"}, {"per key and customer", "/cus/x"}} {
		b.Run(c.name, func(b *testing.B) {
			req := CheckRequest{APIKey: plain["ckey_m0"], Path: c.path}
			now := t0
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Microsecond)
				if a, err := e.Check(b.Context(), "ten_a", &req, now); err != nil || !a.Allowed {
					b.Fatal(a, err)
				}
			}
		})
	}
}

// A tenant at its bound of buckets: a customer's key whose own bucket
// cannot be made is decided on the tenant's overflow bucket, together with
// its customer's, which still counts every admitted check.
func TestCustomerLimitsAtTheTenantBound(t *testing.T) {
	snap, plain := customerSnapshot(t, 5, 3, 5)
	e := boundedEngine(t, snap, 2) // the first key's bucket and the customer's
	admitted := 0
	for i := range 5 {
		for range 2 {
			a, err := e.Check(t.Context(), "ten_a", &CheckRequest{APIKey: plain["ckey_m"+itoa(i)], Path: "/cus/x"}, t0)
			if err != nil {
				t.Fatal(err)
			}
			if a.Allowed {
				admitted++
			}
		}
	}
	if admitted != 5 {
		t.Fatalf("admitted %d through five keys at the bound, want the customer's 5", admitted)
	}
	tl := e.view.Load().tenant("ten_a").byID["pol_cus"].tiers["pro"]
	if u := usedIn(t, e, bus.AppendCustomerBucketKey(nil, "ten_a", "pol_cus", "cus_1"), tl.cus); u[0] != 5 {
		t.Fatalf("the customer's bucket took %v, want 5", u)
	}
	if n := e.cache.TenantLen("ten_a"); n > 3 {
		t.Fatalf("the tenant holds %d buckets past its bound of 2 (and one overflow bucket)", n)
	}
}
