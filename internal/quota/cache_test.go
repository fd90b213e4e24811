package quota

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

func tb(limit int64, period time.Duration) []Limit {
	return []Limit{{Algorithm: TokenBucket, Limit: limit, Period: period}}
}

type drained struct {
	limits []Limit
	states []State
	fullAt int64
}

func drainAll(c *Cache) map[string]drained {
	got := map[string]drained{}
	c.DrainDirty(func(key string, limits []Limit, states []State, fullAt int64) {
		cp := make([]State, len(states))
		for i := range states {
			cp[i] = states[i].Clone()
		}
		got[key] = drained{limits, cp, fullAt}
	})
	return got
}

// 100 goroutines race for one key limited to 10: exactly 10 win.
func TestCacheConcurrentExact(t *testing.T) {
	for _, a := range []Algorithm{TokenBucket, SlidingWindow, SlidingLog, FixedWindow} {
		c := NewCache()
		limits := []Limit{{Algorithm: a, Limit: 10, Period: time.Hour}}
		var allowed atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out := make([]Outcome, 1)
				<-start
				if ok, _ := c.Check("t/p/ip:203.0.113.7", limits, t0+int64(i), 1, true, out); ok {
					allowed.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if n := allowed.Load(); n != 10 {
			t.Fatalf("%v: %d allowed, want 10", a, n)
		}
	}
}

// Many goroutines over several keys and limits, mixing checks, peeks, drains,
// sweeps, loads and resets: meaningful under -race.
func TestCacheConcurrentMixed(t *testing.T) {
	c := NewCache()
	limits := []Limit{
		{Name: "a", Algorithm: TokenBucket, Limit: 5, Period: time.Second},
		{Name: "b", Algorithm: SlidingLog, Limit: 8, Period: time.Second},
	}
	var wg sync.WaitGroup
	var admitted [4]atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]Outcome, 2)
			for i := range 500 {
				k := i % 4
				now := t0 + int64(i)*int64(time.Microsecond)
				switch {
				case g == 0 && i%50 == 0:
					c.DrainDirty(func(string, []Limit, []State, int64) {})
				case g == 1 && i%70 == 0:
					c.Sweep(now)
				default:
					if ok, _ := c.Check(fmt.Sprintf("k%d", k), limits, now, 1, i%3 != 0, out); ok && i%3 != 0 {
						admitted[k].Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	// All instants fall within one second: the token bucket (5) binds.
	for k := range admitted {
		if n := admitted[k].Load(); n != 5 {
			t.Errorf("key %d: %d admitted, want 5", k, n)
		}
	}
}

func TestCacheDirtyOnlyForAllowedConsumingChecks(t *testing.T) {
	c := NewCache()
	limits := tb(2, time.Minute)
	out := make([]Outcome, 1)
	c.Check("peek", limits, t0, 1, false, out)
	if got := drainAll(c); len(got) != 0 {
		t.Fatalf("a peek made %d dirty entries", len(got))
	}
	for range 2 {
		c.Check("k", limits, t0, 1, true, out)
	}
	got := drainAll(c)
	d, ok := got["k"]
	if len(got) != 1 || !ok {
		t.Fatalf("drained %v", got)
	}
	if &d.limits[0] != &limits[0] || d.states[0].Tokens != 0 || d.states[0].At != t0 || d.fullAt != t0+int64(time.Minute) {
		t.Fatalf("drained %+v", d)
	}
	// The bucket is empty: every further check is denied, and denials write nothing.
	for i := range 50 {
		if ok, _ := c.Check("k", limits, t0+int64(i), 1, true, out); ok {
			t.Fatal("allowed past the limit")
		}
	}
	if got := drainAll(c); len(got) != 0 {
		t.Fatalf("denials made %d dirty entries", len(got))
	}
	// A cost above capacity on a new key creates a bucket but no dirty entry.
	c.Check("big", limits, t0, 3, true, out)
	if got := drainAll(c); len(got) != 0 {
		t.Fatalf("an impossible request made %d dirty entries", len(got))
	}
}

func TestCacheSweep(t *testing.T) {
	c := NewCache()
	limits := tb(10, time.Minute) // a token per 6 s
	out := make([]Outcome, 1)
	c.Check("used", limits, t0, 2, true, out) // full again at t0+12s
	c.Check("peeked", limits, t0, 1, false, out)
	c.Check("denied", limits, t0, 11, true, out)
	if c.Len() != 3 {
		t.Fatalf("len %d", c.Len())
	}
	// Dirty buckets survive any sweep, even once full.
	if n := c.Sweep(t0 + int64(time.Hour)); n != 2 || c.Len() != 1 {
		t.Fatalf("swept %d, len %d", n, c.Len())
	}
	if got := drainAll(c); got["used"].fullAt != t0+int64(12*time.Second) {
		t.Fatalf("fullAt %d", got["used"].fullAt)
	}
	// Drained but not yet full: kept.
	if n := c.Sweep(t0 + int64(12*time.Second) - 1); n != 0 || c.Len() != 1 {
		t.Fatalf("swept %d before full", n)
	}
	if n := c.Sweep(t0 + int64(12*time.Second)); n != 1 || c.Len() != 0 {
		t.Fatalf("swept %d when full, len %d", n, c.Len())
	}
}

// A bucket is never swept while it holds usage, whatever the algorithm.
func TestCacheSweepKeepsUsage(t *testing.T) {
	for _, l := range []Limit{
		{Algorithm: TokenBucket, Limit: 3, Period: time.Minute},
		{Algorithm: FixedWindow, Limit: 3, Period: time.Minute},
		{Algorithm: SlidingWindow, Limit: 3, Period: time.Minute},
		{Algorithm: SlidingLog, Limit: 3, Period: time.Minute},
	} {
		c := NewCache()
		limits := []Limit{l}
		out := make([]Outcome, 1)
		c.Check("k", limits, t0+int64(10*time.Second), 3, true, out)
		drainAll(c)
		for now := t0; ; now += int64(100 * time.Millisecond) {
			// A peek for the whole capacity is allowed only by a full bucket
			// (and does not mark it dirty); Sweep must agree exactly.
			full, _ := c.Check("k", limits, now, 3, false, out)
			swept := c.Sweep(now) == 1
			if swept != full {
				t.Fatalf("%v at +%v: full %v, swept %v", l.Algorithm, time.Duration(now-t0), full, swept)
			}
			if swept {
				break
			}
			if now > t0+int64(10*time.Minute) {
				t.Fatalf("%v: never swept", l.Algorithm)
			}
		}
	}
}

func TestCacheRemapKeepsConsumption(t *testing.T) {
	c := NewCache()
	out := make([]Outcome, 3)
	v1 := tb(10, time.Minute)
	c.Check("k", v1, t0, 4, true, out) // 6 tokens left

	// A larger capacity keeps the 6 tokens (the key spent 4).
	v2 := tb(20, time.Minute)
	if ok, _ := c.Check("k", v2, t0, 1, true, out); !ok || out[0].Remaining != 5 || out[0].Limit != 20 {
		t.Fatalf("v2: %+v", out[0])
	}
	// A smaller one clamps: 5 tokens into a capacity of 3.
	v3 := []Limit{{Algorithm: TokenBucket, Limit: 10, Period: time.Minute, Burst: 3}}
	if ok, _ := c.Check("k", v3, t0, 1, true, out); !ok || out[0].Remaining != 2 {
		t.Fatalf("v3: %+v", out[0])
	}
	// Same name, another algorithm: starts full.
	v4 := []Limit{{Algorithm: FixedWindow, Limit: 10, Period: time.Minute}}
	if ok, _ := c.Check("k", v4, t0, 1, true, out); !ok || out[0].Remaining != 9 {
		t.Fatalf("v4: %+v", out[0])
	}

	// Named limits are matched by Name+Algorithm, whatever their order.
	m1 := []Limit{
		{Name: "burst", Algorithm: TokenBucket, Limit: 10, Period: time.Minute},
		{Name: "daily", Algorithm: FixedWindow, Limit: 100, Period: 24 * time.Hour},
	}
	c.Check("m", m1, t0, 5, true, out)
	m2 := []Limit{
		{Name: "daily", Algorithm: FixedWindow, Limit: 100, Period: 24 * time.Hour},
		{Name: "new", Algorithm: SlidingLog, Limit: 5, Period: time.Minute},
		{Name: "burst", Algorithm: TokenBucket, Limit: 10, Period: time.Minute},
	}
	if ok, report := c.Check("m", m2, t0, 1, true, out); !ok || out[0].Remaining != 94 || out[1].Remaining != 4 || out[2].Remaining != 4 || report != 1 {
		t.Fatalf("m2: %v %d %+v", ok, report, out)
	}

	// A sliding log shrinks to its newest entries.
	l1 := []Limit{{Algorithm: SlidingLog, Limit: 10, Period: time.Minute}}
	for i := range 8 {
		c.Check("log", l1, at(time.Duration(i)*time.Second), 1, true, out)
	}
	l2 := []Limit{{Algorithm: SlidingLog, Limit: 5, Period: time.Minute}}
	// Kept: 3 s … 7 s, five entries, so the next one waits for the 3 s entry.
	if ok, _ := c.Check("log", l2, at(10*time.Second), 1, true, out); ok || out[0].RetryAfter != 53*time.Second {
		t.Fatalf("l2: %+v", out[0])
	}
}

func TestCacheRemapWindowPeriodChange(t *testing.T) {
	c := NewCache()
	out := make([]Outcome, 1)
	for _, a := range []Algorithm{FixedWindow, SlidingWindow} {
		key := a.String()
		c.Check(key, []Limit{{Algorithm: a, Limit: 10, Period: time.Minute}}, at(30*time.Second), 6, true, out)
		// Usage carries into the new, longer window.
		v2 := []Limit{{Algorithm: a, Limit: 10, Period: time.Hour}}
		if ok, _ := c.Check(key, v2, at(40*time.Second), 5, true, out); ok || out[0].Remaining != 4 {
			t.Fatalf("%v: %+v", a, out[0])
		}
		if ok, _ := c.Check(key, v2, at(40*time.Second), 4, true, out); !ok || out[0].Remaining != 0 {
			t.Fatalf("%v: %+v", a, out[0])
		}
	}
}

// The steady state compares slice identity; a copy with equal contents (what
// Load installs) is adopted without touching the state.
func TestCacheEqualLimitsAreNotRemapped(t *testing.T) {
	c := NewCache()
	out := make([]Outcome, 1)
	a := tb(10, time.Minute)
	c.Load("k", a, []State{{Tokens: 3.5, At: t0}}, t0+int64(39*time.Second))
	b := tb(10, time.Minute)
	if ok, _ := c.Check("k", b, t0, 1, true, out); !ok || out[0].Remaining != 2 {
		t.Fatalf("%+v", out[0])
	}
	got := drainAll(c)
	if d := got["k"]; &d.limits[0] != &b[0] || d.states[0].Tokens != 2.5 {
		t.Fatalf("%+v", d)
	}
}

func TestCacheLoadCopies(t *testing.T) {
	c := NewCache()
	limits := []Limit{{Algorithm: SlidingLog, Limit: 3, Period: time.Minute}}
	log := []int64{at(0), at(time.Second), at(2 * time.Second), at(3 * time.Second)}
	states := []State{{Log: log}}
	c.Load("k", limits, states, at(time.Minute))
	limits[0].Limit = 1000 // the caller reuses its buffers
	log[3] = 0
	out := make([]Outcome, 1)
	want := []Limit{{Algorithm: SlidingLog, Limit: 3, Period: time.Minute}}
	// Kept the newest 3 (1 s, 2 s, 3 s): full until the 1 s entry expires.
	if ok, _ := c.Check("k", want, at(10*time.Second), 1, true, out); ok || out[0].RetryAfter != 51*time.Second {
		t.Fatalf("%+v", out[0])
	}
	// Load replaces an existing bucket.
	c.Load("k", want, nil, 0)
	if ok, _ := c.Check("k", want, at(10*time.Second), 3, true, out); !ok {
		t.Fatalf("%+v", out[0])
	}
	if c.Len() != 1 {
		t.Fatalf("len %d", c.Len())
	}
	c.Load("empty", nil, nil, 0)
	if c.Len() != 1 {
		t.Fatal("Load without limits created a bucket")
	}
}

func TestCacheLoadIfAbsentKeepsBucket(t *testing.T) {
	c := NewCache()
	limits := []Limit{{Algorithm: TokenBucket, Limit: 10, Period: time.Hour}}
	out := make([]Outcome, 1)
	if c.Has([]byte("k")) {
		t.Fatal("empty cache has k")
	}
	c.Check("k", limits, t0, 3, true, out)
	if !c.Has([]byte("k")) {
		t.Fatal("checked key missing")
	}
	// A persisted copy older than what a check did is not loaded over it.
	if c.LoadIfAbsent("k", limits, []State{{Tokens: 9, At: t0}}, 0) {
		t.Fatal("LoadIfAbsent replaced a bucket")
	}
	if c.Check("k", limits, t0, 1, true, out); out[0].Remaining != 6 {
		t.Fatalf("remaining %d, want 6", out[0].Remaining)
	}
	if !c.LoadIfAbsent("j", limits, []State{{Tokens: 4, At: t0}}, 0) {
		t.Fatal("LoadIfAbsent did not load an absent key")
	}
	if c.Check("j", limits, t0, 1, true, out); out[0].Remaining != 3 {
		t.Fatalf("remaining %d, want 3", out[0].Remaining)
	}
	if c.LoadIfAbsent("none", nil, nil, 0) || c.Len() != 2 {
		t.Fatal("LoadIfAbsent without limits created a bucket")
	}
}

func TestCacheReset(t *testing.T) {
	c := NewCache()
	limits := []Limit{
		{Name: "a", Algorithm: TokenBucket, Limit: 2, Period: time.Hour},
		{Name: "b", Algorithm: SlidingLog, Limit: 2, Period: time.Hour},
	}
	out := make([]Outcome, 2)
	c.Check("k", limits, t0, 2, true, out)
	drainAll(c)
	if c.Reset("missing") {
		t.Fatal("reset a missing key")
	}
	if !c.Reset("k") {
		t.Fatal("reset found nothing")
	}
	got := drainAll(c)
	d, ok := got["k"]
	if !ok || d.fullAt != 0 || d.states[0].At != 0 || len(d.states[1].Log) != 0 {
		t.Fatalf("drained %+v", got)
	}
	if ok, _ := c.Check("k", limits, t0, 2, true, out); !ok {
		t.Fatal("not full after reset")
	}
}

func TestCheckBytesSharesBuckets(t *testing.T) {
	c := NewCache()
	limits := tb(3, time.Hour)
	out := make([]Outcome, 1)
	buf := []byte("tenant/policy/ip:198.51.100.4")
	c.CheckBytes(buf, limits, t0, 2, true, out)
	copy(buf, "XXXXXX") // the cache must have copied the key
	if ok, _ := c.Check("tenant/policy/ip:198.51.100.4", limits, t0, 1, true, out); !ok || out[0].Remaining != 0 {
		t.Fatalf("%+v", out[0])
	}
	if c.Len() != 1 {
		t.Fatalf("len %d", c.Len())
	}
	if ok, report := c.Check("k", nil, t0, 1, true, out); !ok || report != -1 || c.Len() != 1 {
		t.Fatal("no limits")
	}
}

func TestCheckDoesNotAllocate(t *testing.T) {
	cases := map[string][]Limit{
		"token_bucket":   {{Algorithm: TokenBucket, Limit: 1e9, Period: time.Second}},
		"sliding_window": {{Algorithm: SlidingWindow, Limit: 1e9, Period: time.Second}},
		"fixed_window":   {{Algorithm: FixedWindow, Limit: 1e9, Period: time.Second}},
		"calendar":       {{Algorithm: FixedWindow, Limit: 1e9, Period: time.Hour, Calendar: newCal(t, CalendarMonth, "Europe/Paris", 17)}},
		"sliding_log":    {{Algorithm: SlidingLog, Limit: 50, Period: time.Millisecond}},
		"multi": {
			{Name: "a", Algorithm: TokenBucket, Limit: 1e9, Period: time.Second},
			{Name: "b", Algorithm: SlidingLog, Limit: 1000, Period: time.Millisecond},
			{Name: "c", Algorithm: SlidingWindow, Limit: 1e9, Period: time.Hour},
		},
		"denied": {{Algorithm: TokenBucket, Limit: 1, Period: time.Hour}},
	}
	for name, limits := range cases {
		c := NewCache()
		out := make([]Outcome, len(limits))
		key := "tenant-000001/policy-0001/ip:203.0.113.7"
		buf := []byte(key)
		now := t0
		step := func() {
			now += 1000 // 1 µs: sliding logs expire and reuse their array
			c.Check(key, limits, now, 1, true, out)
			c.CheckBytes(buf, limits, now, 1, true, out)
			c.Check(key, limits, now, 1, false, out)
		}
		for range 5000 { // reach the steady state (log arrays at full size)
			step()
		}
		if n := testing.AllocsPerRun(1000, step); n != 0 {
			t.Errorf("%s: %v allocs per check", name, n)
		}
	}
}

func TestBucketMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 100k buckets")
	}
	perBucket, keyLen := measureBucketMemory(100_000)
	t.Logf("%.0f B per idle single-limit token-bucket bucket (key %d bytes)", perBucket, keyLen)
	if perBucket > 256 {
		t.Fatalf("%.0f B per bucket", perBucket)
	}
}

// An entry is half a cache line, and tables start on a line, so a check on
// a single-limit bucket (a wide one included) reads one line.
func TestEntryIsHalfACacheLine(t *testing.T) {
	if size := reflect.TypeFor[entry]().Size(); size != 32 {
		t.Fatalf("entry is %d bytes", size)
	}
	c := NewCache()
	out := make([]Outcome, 1)
	for i := range 20_000 {
		c.Check(fmt.Sprint("k", i), tb(1, time.Hour), t0, 1, true, out)
	}
	for i := range c.shards {
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(c.shards[i].ents))); p%64 != 0 {
			t.Fatalf("shard %d table at %#x", i, p)
		}
	}
}

// The table grows, keeps every bucket through rebuilds, and shrinks back.
func TestCacheTableGrowsAndShrinks(t *testing.T) {
	c := NewCache()
	limits := tb(5, time.Minute)
	out := make([]Outcome, 1)
	const n = 20_000
	for i := range n {
		c.Check(fmt.Sprint("k", i), limits, t0, 1+int64(i%3), true, out)
	}
	if c.Len() != n {
		t.Fatalf("len %d", c.Len())
	}
	// Every bucket was dirtied before tables grew under it: each is drained
	// once, with its own key and state.
	got := drainAll(c)
	if len(got) != n {
		t.Fatalf("drained %d of %d", len(got), n)
	}
	for i := range n {
		d := got[fmt.Sprint("k", i)]
		if len(d.states) != 1 || d.states[0].Tokens != float64(5-1-i%3) {
			t.Fatalf("key %d drained %+v", i, d)
		}
	}
	// Half the keys are touched again: every one still holds its usage.
	for i := 0; i < n; i += 2 {
		if _, _ = c.Check(fmt.Sprint("k", i), limits, t0, 1, false, out); out[0].Remaining != int64(4-i%3-1) {
			t.Fatalf("key %d: remaining %d", i, out[0].Remaining)
		}
	}
	// Costs 1 and 2 refill within 12 s, cost 3 within 36 s.
	refilled := 0
	for i := range n {
		if i%3 != 2 {
			refilled++
		}
	}
	if got := c.Sweep(t0 + int64(24*time.Second)); got != refilled {
		t.Fatalf("swept %d", got)
	}
	for i := range n {
		_, _ = c.Check(fmt.Sprint("k", i), limits, t0+int64(24*time.Second), 5, false, out)
		if want := i%3 != 2; out[0].Allowed != want {
			t.Fatalf("key %d after sweep: %+v", i, out[0])
		}
	}
	// The peeks re-created the swept keys, full: all n go now.
	if got := c.Sweep(t0 + int64(time.Hour)); got != n {
		t.Fatalf("second sweep removed %d", got)
	}
	if c.Len() != 0 {
		t.Fatalf("len %d", c.Len())
	}
	for i := range c.shards {
		if sh := &c.shards[i]; len(sh.ents) > 64 {
			t.Fatalf("shard %d kept %d entries", i, len(sh.ents))
		}
	}
}

// Keys whose first hashes collide are told apart by the second.
func TestCacheFirstHashCollision(t *testing.T) {
	var sh shard
	limits := tb(1, time.Hour)
	const h1, x, y, z = 0xabc000, 1 << 32, 2 << 32, 3 << 32
	a := sh.newBucket(h1, x, "a", limits)
	b := sh.newBucket(h1, y, "b", limits)
	if a == b || sh.find(h1, x) != a || sh.find(h1, y) != b || sh.find(h1, z) != -1 {
		t.Fatalf("a %d, b %d, find %d %d %d", a, b, sh.find(h1, x), sh.find(h1, y), sh.find(h1, z))
	}
	if sh.colds[a].key != "a" || sh.colds[b].key != "b" {
		t.Fatal("keys mixed up")
	}
}
