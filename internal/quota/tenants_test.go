package quota

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// wantTenants fails unless each tenant has the live buckets given and the
// cache as many as they add up to.
func wantTenants(t *testing.T, c *Cache, want map[string]int) {
	t.Helper()
	sum := 0
	for tenant, n := range want {
		sum += n
		if got := c.TenantLen(tenant); got != n {
			t.Errorf("tenant %q: %d live buckets, want %d", tenant, got, n)
		}
	}
	if c.Len() != sum {
		t.Errorf("cache holds %d buckets, the tenants' counts add up to %d", c.Len(), sum)
	}
}

// Every way a bucket comes into the cache counts it once for its tenant,
// a bucket decided or loaded again counts nothing more, and Reset, which
// keeps the bucket, keeps its count.
func TestTenantCountsCreateLoadReset(t *testing.T) {
	c := NewCache()
	limits := tb(10, time.Minute)
	out := make([]Outcome, 1)
	c.Check("a/p/ip:1", limits, t0, 1, true, out)
	c.CheckBytes([]byte("a/p/ip:2"), limits, t0, 1, true, out)
	c.CountBytes([]byte("a/p/d:x"), limits, t0, 1, out)
	c.Force("b/p/ip:1", limits, t0, 1)
	c.Load("b/p/ip:2", limits, nil, 0)
	c.LoadIfAbsent("b/p/ip:3", limits, nil, 0)
	c.Check("nokey", limits, t0, 1, true, out)
	wantTenants(t, c, map[string]int{"a": 3, "b": 3, "nokey": 1})

	// Again, on the same buckets: no count moves.
	c.Check("a/p/ip:1", limits, t0+1, 1, true, out)
	c.CheckBytes([]byte("a/p/ip:2"), limits, t0+1, 1, false, out)
	c.CountBytes([]byte("a/p/d:x"), limits, t0+1, 1, out)
	c.Force("a/p/ip:1", limits, t0+1, 1)
	c.Load("b/p/ip:1", limits, nil, 0)
	if c.LoadIfAbsent("b/p/ip:2", limits, nil, 0) {
		t.Fatal("LoadIfAbsent loaded over a bucket")
	}
	c.Refund([]byte("a/p/ip:1"), limits, t0+1, 1)
	c.Refund([]byte("a/p/ip:absent"), limits, t0+1, 1) // creates nothing
	if !c.Reset("a/p/ip:1") {
		t.Fatal("no bucket to reset")
	}
	wantTenants(t, c, map[string]int{"a": 3, "b": 3, "nokey": 1})

	// A load that changes a bucket's layout moves it (a wide sliding
	// window, then a multi-limit bucket, then one limit again): one
	// bucket all along.
	sw := []Limit{{Algorithm: SlidingWindow, Limit: 10, Period: time.Minute}}
	two := []Limit{{Name: "s", Algorithm: TokenBucket, Limit: 10, Period: time.Second}, {Name: "m", Algorithm: FixedWindow, Limit: 100, Period: time.Minute}}
	c.Load("a/p/ip:1", sw, []State{{Tokens: 3, At: t0}}, 0)
	c.Check("a/p/ip:1", two, t0+2, 1, true, make([]Outcome, 2))
	c.Load("a/p/ip:1", limits, nil, 0)
	wantTenants(t, c, map[string]int{"a": 3, "b": 3, "nokey": 1})
}

// Sweep counts its removals off, tables rebuilt on growth and on shrinking
// (buckets move) leave the counts alone, and a tenant with no bucket left
// is forgotten.
func TestTenantCountsSweepAndRehash(t *testing.T) {
	c := NewCache()
	limits := tb(10, time.Minute) // a token per 6 s
	sw := []Limit{{Algorithm: SlidingWindow, Limit: 10, Period: time.Minute}}
	out := make([]Outcome, 1)
	const n = 20_000 // every shard's table grows several times
	for i := range n {
		l := limits
		if i%3 == 0 {
			l = sw // wide buckets: two entries each
		}
		c.Check(fmt.Sprintf("big/p/ip:%d", i), l, t0, 1, true, out)
		if i%10 == 0 {
			c.Check(fmt.Sprintf("small/p/ip:%d", i), limits, t0, 1, true, out)
		}
	}
	wantTenants(t, c, map[string]int{"big": n, "small": n / 10})
	drainAll(c)
	// The token buckets are full again after 6 s, the sliding windows
	// after two minutes.
	swept := c.Sweep(t0 + int64(6*time.Second))
	wantBig := n / 3
	if n%3 != 0 {
		wantBig++
	}
	if swept != n-wantBig+n/10 {
		t.Fatalf("swept %d", swept)
	}
	wantTenants(t, c, map[string]int{"big": wantBig, "small": 0})
	c.counts.mu.RLock()
	_, kept := c.counts.m["small"]
	c.counts.mu.RUnlock()
	if kept {
		t.Error("a tenant with no bucket is still counted")
	}
	c.Sweep(t0 + int64(time.Hour))
	wantTenants(t, c, map[string]int{"big": 0})
}

// A bounded check creates no bucket past its tenant's bound and decides
// nothing then; buckets that exist go on as before, other tenants are
// unaffected, and a sweep makes room again.
func TestCheckBytesBound(t *testing.T) {
	c := NewCache()
	limits := tb(10, time.Minute)
	out := make([]Outcome, 1)
	check := func(key string, cost int64, consume bool) (bool, bool) {
		allowed, _, ok := c.CheckBytesBound([]byte(key), 3, limits, t0, cost, consume, out)
		return allowed, ok
	}
	for i := range 3 {
		if allowed, ok := check(fmt.Sprintf("a/p/ip:%d", i), 4, true); !allowed || !ok {
			t.Fatalf("caller %d under the bound: allowed %v, ok %v", i, allowed, ok)
		}
	}
	if _, ok := check("a/p/ip:new", 1, true); ok {
		t.Fatal("a fourth bucket was made past a bound of 3")
	}
	if _, ok := check("a/p/ip:new", 1, false); ok {
		t.Fatal("a peek past the bound was answered from a bucket that does not exist")
	}
	wantTenants(t, c, map[string]int{"a": 3})
	// The three callers keep their own buckets: 6 of 10 left each.
	for i := range 3 {
		allowed, ok := check(fmt.Sprintf("a/p/ip:%d", i), 6, true)
		if !allowed || !ok || out[0].Remaining != 0 {
			t.Fatalf("caller %d: allowed %v, ok %v, remaining %d", i, allowed, ok, out[0].Remaining)
		}
		if allowed, _ := check(fmt.Sprintf("a/p/ip:%d", i), 1, true); allowed {
			t.Fatalf("caller %d: an 11th unit", i)
		}
	}
	// Another tenant is not bounded by a's buckets.
	if allowed, ok := check("b/p/ip:0", 1, true); !allowed || !ok {
		t.Fatal("another tenant was refused")
	}
	// A peek under the bound answers a full bucket and creates none.
	if allowed, ok := check("b/p/ip:peek", 1, false); !allowed || !ok || out[0].Remaining != 9 {
		t.Fatalf("peek: allowed %v, ok %v, remaining %d", allowed, ok, out[0].Remaining)
	}
	wantTenants(t, c, map[string]int{"a": 3, "b": 1})
	// Once a's buckets are full again and swept, new callers get theirs.
	drainAll(c)
	c.Sweep(t0 + int64(time.Hour))
	if _, _, ok := c.CheckBytesBound([]byte("a/p/ip:new"), 3, limits, t0+int64(time.Hour), 1, true, out); !ok {
		t.Fatal("no room after the sweep")
	}
	wantTenants(t, c, map[string]int{"a": 1, "b": 0})
	// A negative bound is no bound; 0 admits no bucket at all.
	if _, _, ok := c.CheckBytesBound([]byte("a/p/ip:x"), -1, limits, t0, 1, true, out); !ok {
		t.Fatal("refused with no bound")
	}
	if _, _, ok := c.CheckBytesBound([]byte("z/p/ip:x"), 0, limits, t0, 1, true, out); ok {
		t.Fatal("a bucket made under a bound of 0")
	}
}

func TestCountBytesBound(t *testing.T) {
	c := NewCache()
	limits := []Limit{{Algorithm: FixedWindow, Limit: 2, Period: time.Minute}}
	out := make([]Outcome, 1)
	count := func(key string, cost int64) (bool, bool) {
		allowed, _, ok := c.CountBytesBound([]byte(key), 2, limits, t0, cost, out)
		return allowed, ok
	}
	count("a/p/d:1", 1)
	count("a/p/d:2", 5) // denied, counted: the bucket exists
	if _, ok := count("a/p/d:3", 1); ok {
		t.Fatal("a third bucket past a bound of 2")
	}
	if _, ok := count("a/p/d:3", 0); ok {
		t.Fatal("a look past the bound was answered")
	}
	if allowed, ok := count("b/p/d:1", 0); !allowed || !ok || out[0].Remaining != 2 {
		t.Fatalf("a look at an absent bucket: allowed %v, ok %v, remaining %d", allowed, ok, out[0].Remaining)
	}
	if allowed, ok := count("a/p/d:1", 1); !allowed || !ok || out[0].Remaining != 0 {
		t.Fatalf("an existing bucket: allowed %v, ok %v, remaining %d", allowed, ok, out[0].Remaining)
	}
	wantTenants(t, c, map[string]int{"a": 2, "b": 0})
}

// Creations racing on every core at the bound never pass it.
func TestCheckBytesBoundConcurrent(t *testing.T) {
	c := NewCache()
	limits := tb(10, time.Minute)
	const bound = 100
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			out := make([]Outcome, 1)
			for i := range 1000 {
				c.CheckBytesBound(fmt.Appendf(nil, "a/p/ip:%d.%d", g, i), bound, limits, t0, 1, true, out)
			}
		})
	}
	wg.Wait()
	wantTenants(t, c, map[string]int{"a": bound})
}

// The bounded check allocates nothing on an existing bucket, as CheckBytes.
func TestCheckBytesBoundDoesNotAllocate(t *testing.T) {
	c := NewCache()
	limits := tb(1_000_000, time.Second)
	out := make([]Outcome, 1)
	key := []byte("a/p/ip:1")
	c.CheckBytesBound(key, 1, limits, t0, 1, true, out)
	now := t0
	if n := testing.AllocsPerRun(1000, func() {
		now += 1000
		c.CheckBytesBound(key, 1, limits, now, 1, true, out)
	}); n != 0 {
		t.Fatalf("%v allocs per check", n)
	}
}
