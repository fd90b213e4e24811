package quota

import (
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func fixed(n int64, period time.Duration) []Limit {
	return []Limit{{Name: "w", Algorithm: FixedWindow, Limit: n, Period: period}}
}

// levels2 is a check of a caller's own bucket and its customer's.
func levels2(own, cus string, ownL, cusL []Limit) []Level {
	return []Level{
		{Key: []byte(own), Limits: ownL, Out: make([]Outcome, len(ownL))},
		{Key: []byte(cus), Limits: cusL, Out: make([]Outcome, len(cusL))},
	}
}

// usedOf is what key's bucket has consumed of its only limit.
func usedOf(t *testing.T, c *Cache, key string, limits []Limit, now int64) int64 {
	t.Helper()
	used := make([]float64, 1)
	c.Used([]byte(key), limits, now, used)
	return int64(used[0])
}

// Every level admits: both are debited. One level denies: neither is, and
// the level that admitted describes its bucket as it is.
func TestCheckLevelsAllOrNothing(t *testing.T) {
	c := NewCache()
	now := int64(1_000_000) * s1
	own, cus := fixed(10, time.Minute), fixed(3, time.Minute)
	for n := 1; n <= 3; n++ {
		lv := levels2("t/p/key@cus_1:key_a", "t/p/customer:cus_1", own, cus)
		allowed, denied, ok := c.CheckLevelsBound(lv, -1, now, 1, true, Lease{})
		if !allowed || denied != -1 || !ok {
			t.Fatalf("check %d: allowed %v denied %d ok %v", n, allowed, denied, ok)
		}
		if lv[0].Out[0].Remaining != 10-int64(n) || lv[1].Out[0].Remaining != 3-int64(n) {
			t.Fatalf("check %d: remaining %d and %d", n, lv[0].Out[0].Remaining, lv[1].Out[0].Remaining)
		}
	}
	lv := levels2("t/p/key@cus_1:key_b", "t/p/customer:cus_1", own, cus)
	allowed, denied, ok := c.CheckLevelsBound(lv, -1, now, 1, true, Lease{})
	if allowed || denied != 1 || !ok {
		t.Fatalf("fourth check: allowed %v denied %d ok %v", allowed, denied, ok)
	}
	if !lv[0].Out[0].Allowed || lv[0].Out[0].Remaining != 10 || lv[1].Out[0].Allowed {
		t.Fatalf("fourth check's outcomes: %+v %+v", lv[0].Out[0], lv[1].Out[0])
	}
	if u := usedOf(t, c, "t/p/key@cus_1:key_b", own, now); u != 0 {
		t.Fatalf("a key's bucket charged %d for a check its customer denied", u)
	}
	if u := usedOf(t, c, "t/p/key@cus_1:key_a", own, now); u != 3 {
		t.Fatalf("key_a used %d, want 3", u)
	}
	// The own level denying leaves the customer's untouched.
	tight := fixed(1, time.Minute)
	c2 := NewCache()
	for n, want := range []bool{true, false} {
		lv := levels2("t/p/key@cus_1:key_a", "t/p/customer:cus_1", tight, own)
		allowed, denied, _ := c2.CheckLevelsBound(lv, -1, now, 1, true, Lease{})
		if allowed != want || (!want && denied != 0) {
			t.Fatalf("check %d: allowed %v denied %d", n, allowed, denied)
		}
	}
	if u := usedOf(t, c2, "t/p/customer:cus_1", own, now); u != 1 {
		t.Fatalf("customer used %d, want 1", u)
	}
}

// A peek decides every level and changes and creates nothing; a consuming
// check that would make a bucket past its tenant's bound decides nothing.
func TestCheckLevelsPeekAndBound(t *testing.T) {
	c := NewCache()
	now := int64(1_000_000) * s1
	own, cus := fixed(10, time.Minute), fixed(3, time.Minute)
	lv := levels2("t/p/key@cus_1:key_a", "t/p/customer:cus_1", own, cus)
	if allowed, _, ok := c.CheckLevelsBound(lv, -1, now, 1, false, Lease{}); !allowed || !ok || c.Len() != 0 {
		t.Fatalf("peek: allowed %v ok %v, %d buckets", allowed, ok, c.Len())
	}
	c.Check("t/p/key:other", own, now, 1, true, make([]Outcome, 1))
	if allowed, _, ok := c.CheckLevelsBound(lv, 2, now, 1, true, Lease{}); allowed || ok {
		t.Fatalf("past the bound: allowed %v ok %v", allowed, ok)
	}
	if u := usedOf(t, c, "t/p/key@cus_1:key_a", own, now); u != 0 {
		t.Fatalf("past the bound, the key's bucket used %d", u)
	}
	if allowed, _, ok := c.CheckLevelsBound(lv, 3, now, 1, true, Lease{}); !allowed || !ok {
		t.Fatalf("at the bound: allowed %v ok %v", allowed, ok)
	}
}

// Concurrency leases are taken in every level's concurrency limits, or in
// none, and given back by Release at each level.
func TestCheckLevelsLeases(t *testing.T) {
	c := NewCache()
	now := int64(1_000_000) * s1
	lv := levels2("t/p/key@cus_1:key_a", "t/p/customer:cus_1", conc(5), conc(1))
	if allowed, _, _ := c.CheckLevelsBound(lv, -1, now, 1, true, Lease{Token: 7, Expires: now + 10*s1}); !allowed {
		t.Fatal("first lease denied")
	}
	lv = levels2("t/p/key@cus_1:key_a", "t/p/customer:cus_1", conc(5), conc(1))
	if allowed, denied, _ := c.CheckLevelsBound(lv, -1, now, 1, true, Lease{Token: 8, Expires: now + 10*s1}); allowed || denied != 1 {
		t.Fatalf("second lease: allowed %v denied %d", allowed, denied)
	}
	n := make([]int64, 1)
	if c.InFlight([]byte("t/p/key@cus_1:key_a"), now, n); n[0] != 1 {
		t.Fatalf("the key holds %d leases, want 1", n[0])
	}
	if !c.Release([]byte("t/p/key@cus_1:key_a"), 7, now) || !c.Release([]byte("t/p/customer:cus_1"), 7, now) {
		t.Fatal("the lease was not held at both levels")
	}
}

// 300 concurrent checks through five keys of one customer whose limit is
// 50 admit exactly 50, and the keys' buckets together are charged exactly
// the admitted checks; single-bucket checks of the same buckets and checks
// naming the levels in the other order run alongside without a deadlock.
func TestCheckLevelsConcurrentExact(t *testing.T) {
	c := NewCache()
	now := int64(1_000_000) * s1
	own, cus := fixed(1000, time.Hour), fixed(50, time.Hour)
	other := fixed(1_000_000, time.Hour)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("t/p/key@cus_1:key_%d", g%5)
			lv := levels2(key, "t/p/customer:cus_1", own, cus)
			if g%2 == 1 {
				lv[0], lv[1] = lv[1], lv[0]
			}
			if allowed, _, ok := c.CheckLevelsBound(lv, -1, now, 1, true, Lease{}); ok && allowed {
				admitted.Add(1)
			}
			// Unrelated traffic in the same shards.
			out := make([]Outcome, 1)
			c.CheckBytes([]byte(fmt.Sprintf("t/q/key:%d", g)), other, now, 1, true, out)
		}()
	}
	wg.Wait()
	if admitted.Load() != 50 {
		t.Fatalf("admitted %d, want 50", admitted.Load())
	}
	sum := int64(0)
	for k := range 5 {
		sum += usedOf(t, c, fmt.Sprintf("t/p/key@cus_1:key_%d", k), own, now)
	}
	if sum != 50 {
		t.Fatalf("the keys' buckets were charged %d, want 50", sum)
	}
	if u := usedOf(t, c, "t/p/customer:cus_1", cus, now); u != 50 {
		t.Fatalf("the customer's bucket used %d", u)
	}
}

// Many pairs made in few shards (tables grow and rehash while a pair's
// other bucket is already placed): each pair is decided on its own buckets.
func TestCheckLevelsGrowingShards(t *testing.T) {
	c := NewCache()
	now := int64(1_000_000) * s1
	one := fixed(1, time.Hour)
	for i := range 5000 {
		lv := levels2(fmt.Sprintf("t/p/key@cus_%d:k", i), fmt.Sprintf("t/p/customer:cus_%d", i), one, one)
		if allowed, _, _ := c.CheckLevelsBound(lv, -1, now, 1, true, Lease{}); !allowed {
			t.Fatalf("pair %d denied on its first check", i)
		}
	}
	for i := range 5000 {
		lv := levels2(fmt.Sprintf("t/p/key@cus_%d:k", i), fmt.Sprintf("t/p/customer:cus_%d", i), one, one)
		if allowed, denied, _ := c.CheckLevelsBound(lv, -1, now, 1, true, Lease{}); allowed || denied != 0 {
			t.Fatalf("pair %d: allowed %v denied %d on its second check", i, allowed, denied)
		}
	}
	if c.Len() != 10000 {
		t.Fatalf("%d buckets, want 10000", c.Len())
	}
}

// BenchmarkCheckLevels1MKeys is BenchmarkCheck1MKeys for a two-level check:
// a million keys' own buckets, five keys to a customer, each check deciding
// a key's bucket and its customer's together.
func BenchmarkCheckLevels1MKeys(b *testing.B) {
	const n = 1_000_000
	c := NewCache()
	own, cus := benchLimits(), []Limit{{Algorithm: TokenBucket, Limit: 5_000_000, Period: time.Second}}
	keys := make([][2][]byte, n)
	for k, i := range rand.New(rand.NewSource(1)).Perm(n) {
		keys[k] = [2][]byte{
			[]byte(fmt.Sprintf("t_4kq7yc2m/p_9d1xw0sn/key@cus_%d:key_%d", i/5, i)),
			[]byte(fmt.Sprintf("t_4kq7yc2m/p_9d1xw0sn/customer:cus_%d", i/5)),
		}
	}
	lv := []Level{{Limits: own, Out: make([]Outcome, 1)}, {Limits: cus, Out: make([]Outcome, 1)}}
	for k := range n {
		lv[0].Key, lv[1].Key = keys[k][0], keys[k][1]
		c.CheckLevelsBound(lv, -1, t0, 1, true, Lease{})
	}
	runtime.GC()
	now := t0
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		k := i % n
		now += 1000
		lv[0].Key, lv[1].Key = keys[k][0], keys[k][1]
		c.CheckLevelsBound(lv, -1, now, 1, true, Lease{})
	}
}
