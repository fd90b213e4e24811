package quota

import (
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"testing"
	"time"
)

// The cache is checked against a model that keeps each bucket's limits and
// states in a map and decides with the same functions. Random checks, peeks,
// loads, resets, forces, sweeps and drains over many keys, with policy
// changes between every storage layout (one entry, a wide entry, cold
// states), must give the same answers, states and dirty sets: whatever the
// table does underneath (growth, tombstones, moves, rebuilds), no bucket is
// lost, mixed up or changed.

type modelBucket struct {
	limits []Limit
	states []State
	dirty  bool
}

type cacheModel map[string]*modelBucket

// normalize drops what the cache does not keep: Prev outside sliding
// windows when the state sits in the entry, and logs outside sliding logs.
func normalize(limits []Limit, states []State) []State {
	ext, _ := layout(limits)
	out := make([]State, len(limits))
	for k := range limits {
		if k >= len(states) {
			continue
		}
		st := states[k].Clone()
		if limits[k].Algorithm != SlidingLog {
			st.Log = nil
		} else if lim := limits[k].Limit; int64(len(st.Log)) > lim {
			st.Log = st.Log[int64(len(st.Log))-lim:]
		}
		if len(st.Log) == 0 {
			st.Log = nil
		}
		if !ext && limits[k].Algorithm != SlidingWindow {
			st.Prev = 0
		}
		out[k] = st
	}
	return out
}

func (m cacheModel) bucket(key string, limits []Limit, now int64) *modelBucket {
	b := m[key]
	if b == nil {
		b = &modelBucket{limits: limits, states: make([]State, len(limits))}
		m[key] = b
	} else if !equalLimits(b.limits, limits) {
		b.states = normalize(limits, remap(b.limits, limits, b.states, now))
		b.limits = limits
	}
	return b
}

func (m cacheModel) check(key string, limits []Limit, now, cost int64, consume bool, out []Outcome) bool {
	b := m.bucket(key, limits, now)
	states := make([]State, len(limits))
	for k := range states {
		states[k] = b.states[k].Clone()
	}
	var allowed bool
	if len(limits) == 1 {
		out[0] = limits[0].Decide(&states[0], now, cost, consume)
		allowed = out[0].Allowed
	} else {
		allowed, _ = DecideAll(limits, states, now, cost, consume, out)
	}
	if allowed && consume {
		b.states, b.dirty = normalize(limits, states), true
	}
	return allowed
}

func sameStates(a, b []State) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		x, y := a[k], b[k]
		if len(x.Log) == 0 && len(y.Log) == 0 {
			x.Log, y.Log = nil, nil
		}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

func TestCacheMatchesModel(t *testing.T) {
	for _, tc := range []struct{ keys, ops int }{{40, 20_000}, {3_000, 60_000}, {30_000, 120_000}} {
		t.Run(fmt.Sprint(tc.keys, "keys"), func(t *testing.T) {
			runModel(t, rand.New(rand.NewSource(int64(tc.keys))), tc.keys, tc.ops)
		})
	}
}

func runModel(t *testing.T, rng *rand.Rand, keys, ops int) {
	sets := [][]Limit{
		{{Algorithm: TokenBucket, Limit: 5, Period: time.Minute}},
		{{Algorithm: TokenBucket, Limit: 5, Period: time.Minute}}, // equal by value to the first
		{{Algorithm: FixedWindow, Limit: 4, Period: time.Minute}},
		{{Algorithm: SlidingWindow, Limit: 6, Period: time.Minute}},
		{{Algorithm: SlidingWindow, Limit: 6, Period: 2 * time.Minute}},
		{{Algorithm: SlidingLog, Limit: 3, Period: time.Minute}},
		{{Name: "burst", Algorithm: TokenBucket, Limit: 4, Period: time.Minute}, {Name: "day", Algorithm: SlidingWindow, Limit: 9, Period: time.Hour}},
		{{Name: "burst", Algorithm: TokenBucket, Limit: 7, Period: time.Minute}},
		{{Name: "burst", Algorithm: SlidingLog, Limit: 2, Period: time.Minute}, {Name: "day", Algorithm: FixedWindow, Limit: 9, Period: time.Hour}},
		// Calendar days: the windows change between these, an hour and a
		// day UTC, and the second is equal by value to the first.
		{{Algorithm: FixedWindow, Limit: 4, Period: time.Minute, Calendar: newCal(t, CalendarDay, "America/New_York", 0)}},
		{{Algorithm: FixedWindow, Limit: 4, Period: time.Minute, Calendar: newCal(t, CalendarDay, "America/New_York", 0)}},
		{{Name: "burst", Algorithm: TokenBucket, Limit: 4, Period: time.Minute}, {Name: "day", Algorithm: FixedWindow, Limit: 9, Period: time.Hour, Calendar: newCal(t, CalendarDay, "UTC", 0)}},
	}
	c, m := NewCache(), cacheModel{}
	now := t0
	out, want := make([]Outcome, 2), make([]Outcome, 2)
	// The population drifts, so old buckets are swept while new ones are
	// created: tables grow, fill with tombstones and are rebuilt.
	key := func(op int) string { return fmt.Sprint("t/p/k", op*3*keys/ops+rng.Intn(keys)) }
	// Most keys keep one policy, as in service; some change it.
	policy := func(k string) []Limit {
		if rng.Intn(8) == 0 {
			return sets[rng.Intn(len(sets))]
		}
		return sets[len(k)*7%len(sets)]
	}
	for op := range ops {
		now += int64(rng.Intn(int(3 * time.Second)))
		if rng.Intn(50) == 0 {
			now -= int64(time.Second) // a clock step back
		}
		k := key(op)
		switch r := rng.Intn(100); {
		case r < 70:
			limits := policy(k)
			cost, consume := int64(1+rng.Intn(2)), rng.Intn(5) != 0
			var got bool
			if rng.Intn(2) == 0 {
				got, _ = c.Check(k, limits, now, cost, consume, out)
			} else {
				got, _ = c.CheckBytes([]byte(k), limits, now, cost, consume, out)
			}
			exp := m.check(k, limits, now, cost, consume, want)
			if got != exp || !reflect.DeepEqual(out[:len(limits)], want[:len(limits)]) {
				t.Fatalf("op %d: check %s: got %v %+v, want %v %+v", op, k, got, out[:len(limits)], exp, want[:len(limits)])
			}
		case r < 76:
			limits := policy(k)
			states := make([]State, rng.Intn(len(limits)+1))
			for i := range states {
				l := limits[i]
				states[i] = State{Tokens: float64(rng.Intn(int(l.Limit) + 1)), Prev: float64(rng.Intn(3)), At: now - int64(rng.Intn(int(time.Minute)))}
				for range rng.Intn(4) {
					states[i].Log = append(states[i].Log, now-int64(rng.Intn(int(time.Minute))))
				}
				slices.Sort(states[i].Log)
			}
			c.Load(k, limits, states, 0)
			b := m[k]
			if b == nil {
				b = &modelBucket{}
				m[k] = b
			}
			b.limits, b.states = limits, normalize(limits, states)
		case r < 79:
			ok := c.Reset(k)
			if b := m[k]; (b != nil) != ok {
				t.Fatalf("op %d: reset %s: %v", op, k, ok)
			} else if ok {
				b.states, b.dirty = make([]State, len(b.limits)), true
			}
		case r < 82:
			limits, cost := policy(k), int64(1+rng.Intn(3))
			c.Force(k, limits, now, cost)
			b := m.bucket(k, limits, now)
			for i := range limits {
				limits[i].Force(&b.states[i], now, cost)
			}
			b.states, b.dirty = normalize(limits, b.states), true
		case r < 84:
			at := now + int64(rng.Intn(int(2*time.Hour)))
			n := 0
			for k, b := range m {
				if !b.dirty && fullAt(b.limits, b.states) <= at {
					delete(m, k)
					n++
				}
			}
			if got := c.Sweep(at); got != n {
				t.Fatalf("op %d: swept %d, model %d", op, got, n)
			}
		case r < 87:
			got := drainAll(c)
			for k, b := range m {
				d, ok := got[k]
				if ok != b.dirty {
					t.Fatalf("op %d: %s drained %v, dirty %v", op, k, ok, b.dirty)
				}
				if ok && (!equalLimits(d.limits, b.limits) || !sameStates(d.states, b.states) || d.fullAt != fullAt(b.limits, b.states)) {
					t.Fatalf("op %d: %s drained %+v, model %+v", op, k, d, *b)
				}
				b.dirty = false
			}
			if len(got) > len(m) {
				t.Fatalf("op %d: drained %d buckets, model has %d", op, len(got), len(m))
			}
		default:
			if got := c.Len(); got != len(m) {
				t.Fatalf("op %d: len %d, model %d", op, got, len(m))
			}
		}
	}
	// Every bucket the model holds is in the cache with the same states.
	for k, b := range m {
		b.dirty = true
		c.Reset(k) // marks it dirty; restore the model's states below
		c.Load(k, b.limits, b.states, 0)
	}
	got := drainAll(c)
	if len(got) != len(m) {
		t.Fatalf("cache holds %d buckets, model %d", len(got), len(m))
	}
	for k, b := range m {
		if d := got[k]; !sameStates(d.states, b.states) {
			t.Fatalf("%s: %+v, model %+v", k, d.states, b.states)
		}
	}
	checkShards(t, c)
}

// checkShards verifies each shard's bookkeeping against its entries.
func checkShards(t *testing.T, c *Cache) {
	t.Helper()
	for si := range c.shards {
		sh := &c.shards[si]
		used, tombs, n := 0, 0, 0
		refs := map[uint32]int{}
		for i := 0; i < len(sh.ents); i++ {
			switch tag := sh.ents[i].tag; {
			case tag == tombstone:
				tombs++
			case tag == cont:
				t.Fatalf("shard %d: a second entry without its first at %d", si, i)
			case tag&fLive != 0:
				n++
				used++
				refs[uint32(sh.ents[i].id)]++
				if (tag&fExt != 0) != (sh.colds[i].x != nil) {
					t.Fatalf("shard %d: ext flag and cold state disagree at %d", si, i)
				}
				if tag&fWide != 0 {
					if i%2 != 0 || sh.ents[i+1].tag != cont {
						t.Fatalf("shard %d: wide bucket at %d", si, i)
					}
					used++
					i++
				}
			}
		}
		if used != sh.used || tombs != sh.tombs || n != sh.n {
			t.Fatalf("shard %d: used %d/%d tombs %d/%d buckets %d/%d", si, used, sh.used, tombs, sh.tombs, n, sh.n)
		}
		for k, l := range sh.lims {
			if l.refs != refs[uint32(k)] {
				t.Fatalf("shard %d: limits %d has %d refs, %d entries use it", si, k, l.refs, refs[uint32(k)])
			}
		}
	}
}

// A sliding window's previous count, kept in a wide bucket's second entry,
// survives the table's growth and its shrinking after a sweep.
func TestCacheRebuildKeepsWideState(t *testing.T) {
	c := NewCache()
	sw := []Limit{{Algorithm: SlidingWindow, Limit: 10, Period: time.Minute}}
	short := tb(1, time.Second)
	out := make([]Outcome, 1)
	const n = 2_000
	for i := range n {
		k := fmt.Sprint("sw", i)
		c.Check(k, sw, t0, 3, true, out)
		c.Check(k, sw, t0+int64(time.Minute), 1, true, out) // the 3 move to Prev
	}
	// Many more buckets grow every shard's table; then they expire and a
	// sweep shrinks the tables again.
	for i := range 20 * n {
		c.Check(fmt.Sprint("tb", i), short, t0, 1, true, out)
	}
	drainAll(c)
	if got := c.Sweep(t0 + int64(time.Minute)); got != 20*n {
		t.Fatalf("swept %d", got)
	}
	checkShards(t, c)
	for i := range n {
		k := fmt.Sprint("sw", i)
		// 3 × (1 - 0) of the previous window, 1 in this one, and this
		// request's 1: 5 left.
		if c.Check(k, sw, t0+int64(time.Minute), 1, false, out); out[0].Remaining != 5 {
			t.Fatalf("%s: %+v", k, out[0])
		}
	}
}

// A rebuild that finds no free line for a wide bucket leaves the table as
// it was, and rehash then picks a larger table.
func TestCacheRebuildWithNoFreeLine(t *testing.T) {
	c := NewCache()
	sh := &c.shards[0]
	sh.rehash(8) // 16 entries
	narrow, wide := tb(5, time.Hour), []Limit{{Algorithm: SlidingWindow, Limit: 5, Period: time.Hour}}
	// Four narrow buckets whose home lines are 0-3 in a table of 8 entries
	// as in one of 16, and a wide one whose home in a table of 8 is line 0.
	var keys []uint64
	for line := range uint64(4) {
		h1 := line * 2 << shardBits
		sh.newBucket(h1, h1<<32, fmt.Sprint("n", line), narrow)
		keys = append(keys, h1)
	}
	w := uint64(8) << shardBits
	sh.newBucket(w, w<<32, "w", wide)
	keys = append(keys, w)
	if sh.rebuild(8, true) {
		t.Fatal("rebuilt into 8 entries with no free line for the wide bucket")
	}
	checkShards(t, c)
	for _, h := range keys {
		if sh.find(h, h<<32) < 0 {
			t.Fatalf("bucket %#x lost", h)
		}
	}
	sh.rehash(sh.used) // 6 entries: tries 16, which fits
	if len(sh.ents) != 16 {
		t.Fatalf("%d entries", len(sh.ents))
	}
	for _, h := range keys {
		if i := sh.find(h, h<<32); i < 0 || sh.colds[i].key == "" {
			t.Fatalf("bucket %#x lost after rehash", h)
		}
	}
}

// A wide bucket placed past half-full lines turns the empty entries it
// passes into tombstones, and can leave a table with no empty entry at all.
// A lookup of an absent key must still end, and the next insert rebuilds.
func TestLookupEndsInATableWithNoEmptyEntry(t *testing.T) {
	c := NewCache()
	sh := &c.shards[0]
	sh.rehash(8) // 16 entries, 8 lines
	narrow, wide := tb(5, time.Hour), []Limit{{Algorithm: SlidingWindow, Limit: 5, Period: time.Hour}}
	var keys []uint64
	for line := range uint64(7) { // one narrow bucket in each of lines 0-6
		h1 := line * 2 << shardBits
		sh.newBucket(h1, h1<<32, fmt.Sprint("n", line), narrow)
		keys = append(keys, h1)
	}
	w := uint64(0)<<shardBits | 1<<40 // home line 0, another identity
	sh.newBucket(w, w<<32, "w", wide) // passes lines 0-6, lands in line 7
	keys = append(keys, w)
	if empty := len(sh.ents) - sh.used - sh.tombs; empty != 0 {
		t.Fatalf("%d empty entries; the test wants none", empty)
	}
	checkShards(t, c)
	done := make(chan int, 1)
	absent := uint64(3) << 41
	go func() { done <- sh.find(absent, absent<<32) }()
	select {
	case i := <-done:
		if i != -1 {
			t.Fatalf("an absent key found at %d", i)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the lookup of an absent key did not end")
	}
	sh.newBucket(absent, absent<<32, "absent", narrow)
	keys = append(keys, absent)
	checkShards(t, c)
	for _, h := range keys {
		if sh.find(h, h<<32) < 0 {
			t.Fatalf("bucket %#x lost", h)
		}
	}
}
