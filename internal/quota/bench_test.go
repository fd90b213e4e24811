package quota

import (
	"fmt"
	"math/rand"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// benchKey builds a realistic key: tenant and policy ids, then the identity.
func benchKey(i int) string {
	return fmt.Sprintf("t_4kq7yc2m/p_9d1xw0sn/ip:10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
}

func benchLimits() []Limit {
	return []Limit{{Algorithm: TokenBucket, Limit: 1_000_000, Period: time.Second}}
}

func BenchmarkCheckHotKey(b *testing.B) {
	c := NewCache()
	limits := benchLimits()
	out := make([]Outcome, 1)
	key := []byte(benchKey(1))
	now := t0
	c.CheckBytes(key, limits, now, 1, true, out)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		now += 1000
		c.CheckBytes(key, limits, now, 1, true, out)
	}
}

// benchManyKeys checks n existing keys in a random order. The keys are laid
// out in visiting order in one buffer, so reading the next key costs what
// reading a freshly built key buffer costs a server, and the benchmark
// measures the cache's own memory accesses.
func benchManyKeys(b *testing.B, n int) { benchManyKeysUnder(b, n, benchLimits(), false) }

// benchManyKeysUnder is benchManyKeys under limits. With serial, each check's
// key depends on the last check's answer, so no two checks overlap.
func benchManyKeysUnder(b *testing.B, n int, limits []Limit, serial bool) {
	c, buf, offs := benchCache(n, limits)
	out := make([]Outcome, 1)
	now := t0
	b.ReportAllocs()
	b.ResetTimer()
	if serial {
		k := 0
		for range b.N {
			now += 1000
			c.CheckBytes(buf[offs[k]:offs[k+1]], limits, now, 1, true, out)
			// Remaining is below 2^62, so this adds 1, but only once the
			// check is done: the next key cannot be read before.
			if k += 1 + int(uint64(out[0].Remaining)>>62); k >= n {
				k = 0
			}
		}
		return
	}
	for i := range b.N {
		k := i % n
		now += 1000
		c.CheckBytes(buf[offs[k]:offs[k+1]], limits, now, 1, true, out)
	}
}

// benchCache returns a cache of n keys checked once under limits, and the
// keys, laid out in visiting order in buf (key k is buf[offs[k]:offs[k+1]]).
func benchCache(n int, limits []Limit) (c *Cache, buf []byte, offs []int) {
	c = NewCache()
	out := make([]Outcome, 1)
	offs = make([]int, 0, n+1)
	for _, i := range rand.New(rand.NewSource(1)).Perm(n) {
		offs = append(offs, len(buf))
		buf = append(buf, benchKey(i)...)
	}
	offs = append(offs, len(buf))
	// Populate in another random order, so that neither the buckets nor
	// their keys sit in memory in visiting order.
	for _, i := range rand.New(rand.NewSource(2)).Perm(n) {
		c.CheckBytes(buf[offs[i]:offs[i+1]], limits, t0, 1, true, out)
	}
	// Finish the collection that building the cache started, so that its
	// marking (on the other core, through the same caches) is not timed.
	runtime.GC()
	return c, buf, offs
}

// BenchmarkCheckBound1MKeys is BenchmarkCheck1MKeys through
// CheckBytesBound, the engine's call, with a bound its tenant is under,
// beside CheckBytes in the same loop: on an existing bucket the two must
// cost the same. (Loops that differ only in how they are compiled measure
// 150 and 200 ns apart at a million keys, so only the same loop compares.)
func BenchmarkCheckBound1MKeys(b *testing.B) { benchBoundKeys(b, 1_000_000, false) }

// BenchmarkCheckBound1MKeysSerial is BenchmarkCheck1MKeysSerial the same way.
func BenchmarkCheckBound1MKeysSerial(b *testing.B) { benchBoundKeys(b, 1_000_000, true) }

func benchBoundKeys(b *testing.B, n int, serial bool) {
	limits := benchLimits()
	c, buf, offs := benchCache(n, limits)
	for _, bounded := range []bool{false, true} {
		name := "call=CheckBytes"
		if bounded {
			name = "call=CheckBytesBound"
		}
		b.Run(name, func(b *testing.B) {
			out := make([]Outcome, 1)
			now := t0
			b.ReportAllocs()
			k := 0
			for i := range b.N {
				now += 1000
				if bounded {
					c.CheckBytesBound(buf[offs[k]:offs[k+1]], 2*n, limits, now, 1, true, out)
				} else {
					c.CheckBytes(buf[offs[k]:offs[k+1]], limits, now, 1, true, out)
				}
				if serial {
					// As benchManyKeysUnder: the next key waits for
					// this check's answer.
					if k += 1 + int(uint64(out[0].Remaining)>>62); k >= n {
						k = 0
					}
				} else {
					k = (i + 1) % n
				}
			}
		})
	}
}

// BenchmarkCheckBoundHotKey is BenchmarkCheckHotKey through CheckBytesBound.
func BenchmarkCheckBoundHotKey(b *testing.B) {
	c := NewCache()
	limits := benchLimits()
	out := make([]Outcome, 1)
	key := []byte(benchKey(1))
	now := t0
	c.CheckBytesBound(key, 10, limits, now, 1, true, out)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		now += 1000
		c.CheckBytesBound(key, 10, limits, now, 1, true, out)
	}
}

func BenchmarkCheck100kKeys(b *testing.B) { benchManyKeys(b, 100_000) }
func BenchmarkCheck1MKeys(b *testing.B)   { benchManyKeys(b, 1_000_000) }

// BenchmarkCheck1MKeysSerial is BenchmarkCheck1MKeys with every check
// waiting for the last one's answer: no two table reads overlap, as between
// the requests of a server, where each check is separated from the next by
// far more work than the processor looks ahead. It is a check's latency at a
// million keys; BenchmarkCheck1MKeys is the cache's throughput for checks
// made back to back, as in a batch.
func BenchmarkCheck1MKeysSerial(b *testing.B) {
	benchManyKeysUnder(b, 1_000_000, benchLimits(), true)
}

// BenchmarkCheck1MKeysWindows is BenchmarkCheck1MKeys under the window
// algorithms. shard.allow decides the fixed window; the sliding window goes
// through Decide, and its bucket takes a whole line (a 128 MiB table).
func BenchmarkCheck1MKeysWindows(b *testing.B) {
	for _, a := range []Algorithm{FixedWindow, SlidingWindow} {
		b.Run(a.String(), func(b *testing.B) {
			benchManyKeysUnder(b, 1_000_000, []Limit{{Algorithm: a, Limit: 1_000_000_000, Period: time.Hour}}, false)
		})
	}
}

// BenchmarkCheck1MKeysCalendar is BenchmarkCheck1MKeys under a fixed window
// counting in calendar months of a zone with DST: shard.allow decides it,
// with the window from the calendar's cache.
func BenchmarkCheck1MKeysCalendar(b *testing.B) {
	loc, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		b.Skip(err)
	}
	cal, err := NewCalendar(CalendarMonth, loc, 17)
	if err != nil {
		b.Fatal(err)
	}
	limits := []Limit{{Algorithm: FixedWindow, Limit: 1_000_000_000, Period: 30 * 24 * time.Hour, Calendar: cal}}
	benchManyKeysUnder(b, 1_000_000, limits, false)
}

func BenchmarkCheckParallel(b *testing.B) {
	const n = 100_000
	c := NewCache()
	limits := benchLimits()
	out := make([]Outcome, 1)
	var buf []byte
	offs := make([]int, 0, n+1)
	for _, i := range rand.New(rand.NewSource(1)).Perm(n) {
		offs = append(offs, len(buf))
		buf = append(buf, benchKey(i)...)
	}
	offs = append(offs, len(buf))
	for i := range n {
		c.CheckBytes(buf[offs[i]:offs[i+1]], limits, t0, 1, true, out)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		out := make([]Outcome, 1)
		k := int(next.Add(n/8)) % n // each goroutine walks its own stretch
		now := t0
		for pb.Next() {
			now += 1000
			c.CheckBytes(buf[offs[k]:offs[k+1]], limits, now, 1, true, out)
			if k++; k == n {
				k = 0
			}
		}
	})
}

func BenchmarkSweep100kNothingToRemove(b *testing.B) {
	const n = 100_000
	c := NewCache()
	limits := benchLimits()
	out := make([]Outcome, 1)
	for i := range n {
		c.Check(benchKey(i), limits, t0, 1, true, out)
	}
	c.DrainDirty(func(string, []Limit, []State, int64) {})
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if c.Sweep(t0) != 0 {
			b.Fatal("removed a bucket in use")
		}
	}
}

func BenchmarkDrainDirty100k(b *testing.B) {
	const n = 100_000
	c := NewCache()
	limits := benchLimits()
	out := make([]Outcome, 1)
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = []byte(benchKey(i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for _, k := range keys {
			c.CheckBytes(k, limits, t0, 1, true, out)
		}
		b.StartTimer()
		c.DrainDirty(func(string, []Limit, []State, int64) {})
	}
}

// measureBucketMemory returns the heap bytes per idle single-limit
// token-bucket bucket, including its key and map entry, over n buckets.
func measureBucketMemory(n int) (perBucket float64, keyLen int) {
	return measureBucketMemoryOf(n, benchKey)
}

// measureBucketMemoryOf is measureBucketMemory with the keys keyOf builds.
func measureBucketMemoryOf(n int, keyOf func(int) string) (perBucket float64, keyLen int) {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = keyOf(i)
	}
	limits := benchLimits()
	out := make([]Outcome, 1)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := NewCache()
	for _, k := range keys {
		c.Check(k, limits, t0, 1, true, out)
	}
	c.DrainDirty(func(string, []Limit, []State, int64) {}) // idle: not dirty
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(c)
	runtime.KeepAlive(keys)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n), len(keys[n-1])
}

func BenchmarkBucketMemory(b *testing.B) {
	var per float64
	for range b.N {
		per, _ = measureBucketMemory(100_000)
	}
	b.ReportMetric(per, "B/bucket")
}

// benchKeyIPv6 is a caller's key from a random IPv6 address, the longest
// common key: the callers a per-tenant bound on buckets is for.
func benchKeyIPv6(i int) string {
	return fmt.Sprintf("t_4kq7yc2m/p_9d1xw0sn/ip:2001:db8:%x:%x:%x:%x:%x:%x", i>>16&0xffff, i&0xffff, i*7919&0xffff, i*104729&0xffff, i*1299709&0xffff, i*15485863&0xffff)
}

// BenchmarkBucketMemoryIPv6 is BenchmarkBucketMemory over a million
// buckets of IPv6 callers, the callers a per-tenant bound on buckets is
// for, and over the default bound's number of them (the engine's
// DefaultTenantBuckets, chosen from these figures).
func BenchmarkBucketMemoryIPv6(b *testing.B) {
	for _, n := range []int{250_000, 1_000_000} {
		b.Run(fmt.Sprintf("buckets=%d", n), func(b *testing.B) {
			var per float64
			var keyLen int
			for range b.N {
				per, keyLen = measureBucketMemoryOf(n, benchKeyIPv6)
			}
			b.ReportMetric(per, "B/bucket")
			b.ReportMetric(per*float64(n)/(1<<20), "MiB")
			b.ReportMetric(float64(keyLen), "key-bytes")
		})
	}
}

// BenchmarkMemoryLatencyFloor is one dependent read of a random cache line in
// a table as large as the 1M-key cache's (4096 entries of 32 bytes in each of
// 512 shards: 1M lines, 64 MiB). Each read's address comes from the previous
// one, so misses cannot overlap: it is what BenchmarkCheck1MKeys would cost
// if every check waited out its own table read. Checks of different keys are
// independent, and a check short enough lets the processor overlap one
// check's read with the next one's (see "Short checks" in cache.go), which
// is how a 1M-key check can cost less than this.
func BenchmarkMemoryLatencyFloor(b *testing.B) {
	type line struct {
		next uint64
		_    [7]uint64
	}
	tab := make([]line, 1<<20)
	perm := rand.New(rand.NewSource(1)).Perm(len(tab))
	for i := range perm {
		tab[perm[i]].next = uint64(perm[(i+1)%len(perm)])
	}
	j := uint64(perm[0])
	b.ResetTimer()
	for range b.N {
		j = tab[j].next
	}
	latencySink = j
}

var latencySink uint64
