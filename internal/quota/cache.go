package quota

// The hot cache holds one bucket per key ("tenant/policy/identity") in memory.
//
// Sharding and locks. A key's 64-bit seeded maphash picks one of a fixed
// number of shards; each shard is a mutex and a hash table. A Check takes
// exactly one shard lock, so there is no global lock, decisions for one key
// are serialised (one writer per key: no read-modify-write race), and keys in
// different shards are decided in parallel. Operations over every shard
// (DrainDirty, Sweep, Len) lock one shard at a time and never two, so there
// is no lock order, and a sweep stalls at most one shard at a time.
//
// Table layout. At a million keys a check is bound by memory latency, not by
// arithmetic, so the table is laid out for one cache miss per check: each
// shard is an open-addressing table (linear probing) of 64-byte slots, and a
// slot holds everything a single-limit check reads and writes — the key's
// identity, its first limit's state and the identity of its limits slice.
// The key itself, extra limits' states and sliding logs live in a separate
// cold record that a check only touches for multi-limit or sliding-log
// buckets. A slot identifies its key by two independent 64-bit seeded hashes,
// so the key bytes are never read on the hot path; with random seeds, two
// live keys share both hashes with probability about 2^-119 per pair, far
// below any hardware error rate. Deletions leave tombstones; a table is
// rebuilt when tombstones or its size call for it.
//
// Dirty protocol. A bucket is dirty when it holds consumption not yet handed
// to DrainDirty. Only an allowed, consuming check (and Reset) marks a bucket
// dirty: denials and peeks never do, so abusive traffic costs no writes
// downstream. Each shard lists the slots of its dirty buckets, so a drain
// costs the number of changed buckets; the invariant is slot.dirty == (slot
// is in its shard's dirty list). Sweep never removes a dirty bucket, inserts
// never move a slot, and a rebuild recomputes the list.
//
// Expiry. A bucket is full again at an instant derived from its state
// (Limit.FullAt). Sweep drops buckets that are full and not dirty: memory is
// bounded by active identities, and a dropped bucket is indistinguishable
// from the full bucket a later Check would create.
//
// Policy changes. A slot remembers the address and length of the limits
// slice it was last decided with. Callers share one immutable slice per
// policy version, so the steady-state check is a pointer comparison; a
// different slice is compared by value and, if the limits really changed,
// the bucket's states are remapped.

import (
	"hash/maphash"
	"strings"
	"sync"
)

const (
	// shardBits sets the shard count, a power of two well above the number
	// of cores, so two busy keys rarely share a lock.
	shardBits = 9
	numShards = 1 << shardBits
	// minSlots is the smallest table a shard allocates.
	minSlots = 8
)

// Cache is the in-memory store of buckets, one per key. It is safe for
// concurrent use. The zero Cache is not usable; call NewCache.
type Cache struct {
	seed1, seed2 maphash.Seed
	shards       [numShards]shard
}

type shard struct {
	mu    sync.Mutex
	slots []slot // power-of-two length; nil while empty
	used  int    // live slots
	tombs int    // tombstones
	dirty []uint32

	// metas are recent shared bucketMetas, so the single-limit buckets of
	// one policy share one; interned are recent copies made by Load. Both
	// only save memory: duplicates are harmless.
	metas    [8]*bucketMeta
	interned [4][]Limit
	nextM    uint8
	nextI    uint8
}

// Slot tags: 0 is an empty slot, tombstone a deleted one, and a live slot's
// tag is its key's first hash with the low bit set (the low bits pick the
// shard, so they carry no information within one).
const tombstone = 2

// slot is one bucket's hot part: 64 bytes, one cache line.
type slot struct {
	tag   uint64
	h2    uint64
	c     cell   // state of limits[0]
	first *Limit // &limits[0] of the bucket's limits: identity without touching cold
	cold  *coldBucket
	n     uint32 // len(limits)
	dirty bool
	ext   bool // cold.meta holds states: the bucket needs cold memory
}

// coldBucket is what a single-limit check does not need.
type coldBucket struct {
	key  string
	meta *bucketMeta
}

// cell is the compact state of one limit: State without Log.
type cell struct {
	a, b float64 // State.Tokens, State.Prev
	at   int64   // State.At
}

// bucketMeta holds a bucket's limits and, for multi-limit and sliding-log
// buckets, the states that do not fit in the slot. A meta without states is
// shared by every such bucket of one limits slice and never mutated; a meta
// with states belongs to one bucket (slot.ext).
type bucketMeta struct {
	limits []Limit   // never mutated
	cells  []cell    // states of limits[1:]
	logs   [][]int64 // per limit, State.Log; nil when no limit is a sliding log
}

// NewCache returns an empty Cache.
func NewCache() *Cache {
	return &Cache{seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed()}
}

// Check decides a request of cost units for key at instant now under limits,
// as DecideAll does, on the key's bucket, creating a full bucket if the key is
// absent. It returns DecideAll's results and fills out (len(out) >= len(limits)).
// With no limits it allows, reports -1 and creates nothing.
//
// limits must be a slice the caller shares across keys and never mutates (a
// new policy version is a new slice). If the bucket was last decided under
// other limits, its states are remapped first: a limit with the same Name and
// Algorithm keeps its consumption (token bucket tokens clamped to the new
// capacity, a sliding log truncated to its newest new-Limit entries, window
// counts kept, or carried into the new window when the period changed); any
// other limit starts full.
//
// An allowed consuming check marks the bucket dirty; denials and peeks
// (consume false) never do. Check allocates nothing once the key exists,
// except when remapping after a policy change. A caller that builds keys in a
// reused []byte should call CheckBytes: converting a key longer than 32 bytes
// to a string allocates at the call site.
func (c *Cache) Check(key string, limits []Limit, now int64, cost int64, consume bool, out []Outcome) (allowed bool, report int) {
	if len(limits) == 0 {
		return true, -1
	}
	h1, h2 := maphash.String(c.seed1, key), maphash.String(c.seed2, key)
	sh := &c.shards[h1&(numShards-1)]
	sh.mu.Lock()
	i := sh.find(h1, h2)
	if i < 0 {
		i = sh.create(h1, h2, strings.Clone(key), limits)
	}
	allowed, report = sh.check(i, limits, now, cost, consume, out)
	sh.mu.Unlock()
	return allowed, report
}

// CheckBytes is Check with the key in a byte slice, for callers that build
// keys in a reused buffer: nothing is allocated for an existing key, and the
// key is copied only when a bucket is created.
func (c *Cache) CheckBytes(key []byte, limits []Limit, now int64, cost int64, consume bool, out []Outcome) (allowed bool, report int) {
	if len(limits) == 0 {
		return true, -1
	}
	h1, h2 := maphash.Bytes(c.seed1, key), maphash.Bytes(c.seed2, key)
	sh := &c.shards[h1&(numShards-1)]
	sh.mu.Lock()
	i := sh.find(h1, h2)
	if i < 0 {
		i = sh.create(h1, h2, string(key), limits)
	}
	allowed, report = sh.check(i, limits, now, cost, consume, out)
	sh.mu.Unlock()
	return allowed, report
}

// check runs one decision on the bucket in slot i; sh.mu must be held.
func (sh *shard) check(i int, limits []Limit, now, cost int64, consume bool, out []Outcome) (allowed bool, report int) {
	s := &sh.slots[i]
	if s.first != &limits[0] || int(s.n) != len(limits) {
		sh.adopt(s, limits, now)
	}
	n := len(limits)
	if n == 1 {
		var st State
		s.get(0, &st)
		out[0] = limits[0].Decide(&st, now, cost, consume)
		allowed = out[0].Allowed
		if allowed && consume {
			s.put(0, &st)
		}
	} else {
		var buf [4]State
		states := buf[:]
		if n > len(buf) {
			states = make([]State, n)
		}
		states = states[:n]
		for k := range states {
			s.get(k, &states[k])
		}
		allowed, report = DecideAll(limits, states, now, cost, consume, out)
		if allowed && consume {
			for k := range states {
				s.put(k, &states[k])
			}
		}
	}
	if allowed && consume && !s.dirty {
		sh.markDirty(i)
	}
	return allowed, report
}

func (sh *shard) markDirty(i int) {
	sh.slots[i].dirty = true
	sh.dirty = append(sh.dirty, uint32(i))
}

// DrainDirty calls fn for every bucket marked dirty since the last drain and
// clears the mark. fn runs under the bucket's shard lock, so it must be quick
// and must not call the Cache; states (including Log slices) and limits are
// only valid during the call, and fn must copy or encode what it keeps.
// fullAt (unix ns) is the instant the bucket is full again (Limit.FullAt over
// its limits): at or before now, or 0, means full, as after Reset.
func (c *Cache) DrainDirty(fn func(key string, limits []Limit, states []State, fullAt int64)) {
	var scratch []State
	for i := range c.shards {
		scratch = c.shards[i].drain(fn, scratch)
	}
}

func (sh *shard) drain(fn func(string, []Limit, []State, int64), scratch []State) []State {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, i := range sh.dirty {
		s := &sh.slots[i]
		if s.tag&1 == 0 || !s.dirty {
			continue // only if an earlier fn panicked mid-drain
		}
		limits := s.cold.meta.limits
		if cap(scratch) < len(limits) {
			scratch = make([]State, len(limits))
		}
		st := scratch[:len(limits)]
		for k := range st {
			s.get(k, &st[k])
		}
		s.dirty = false
		fn(s.cold.key, limits, st, fullAt(limits, st))
	}
	clear(scratch) // drop references to logs
	if cap(sh.dirty) > 1024 && len(sh.dirty) < cap(sh.dirty)/4 {
		sh.dirty = nil // let a burst's list go
	} else {
		sh.dirty = sh.dirty[:0]
	}
	return scratch
}

// Load installs a persisted bucket for key (hydration at start, or a state
// replicated from another server), replacing any existing bucket. It copies
// limits and states, so the caller may reuse them. A missing state
// (len(states) < len(limits)) starts full. fullAt is accepted for symmetry
// with DrainDirty and not trusted: the cache derives it from the states.
// Load neither sets nor clears the dirty mark. A Load with no limits does
// nothing.
func (c *Cache) Load(key string, limits []Limit, states []State, fullAt int64) {
	if len(limits) == 0 {
		return
	}
	h1, h2 := maphash.String(c.seed1, key), maphash.String(c.seed2, key)
	sh := &c.shards[h1&(numShards-1)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	lim := sh.intern(limits)
	i := sh.find(h1, h2)
	if i < 0 {
		i = sh.create(h1, h2, strings.Clone(key), lim)
	}
	s := &sh.slots[i]
	sh.setStates(s, lim, states)
}

// intern returns a private copy of limits, shared with recent Loads of equal
// limits; sh.mu must be held.
func (sh *shard) intern(limits []Limit) []Limit {
	for _, l := range sh.interned {
		if equalLimits(l, limits) {
			return l
		}
	}
	cp := append([]Limit(nil), limits...)
	sh.interned[sh.nextI%uint8(len(sh.interned))] = cp
	sh.nextI++
	return cp
}

// sharedMeta returns a stateless meta for limits (the same array and
// length), shared with recent buckets; sh.mu must be held.
func (sh *shard) sharedMeta(limits []Limit) *bucketMeta {
	for _, m := range sh.metas {
		if m != nil && sameSlice(m.limits, limits) {
			return m
		}
	}
	m := &bucketMeta{limits: limits}
	sh.metas[sh.nextM%uint8(len(sh.metas))] = m
	sh.nextM++
	return m
}

// Reset makes key's bucket full again and marks it dirty, so the reset is
// persisted; DrainDirty reports it with fullAt 0. It reports whether key had
// a bucket.
func (c *Cache) Reset(key string) bool {
	h1, h2 := maphash.String(c.seed1, key), maphash.String(c.seed2, key)
	sh := &c.shards[h1&(numShards-1)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.find(h1, h2)
	if i < 0 {
		return false
	}
	s := &sh.slots[i]
	sh.setStates(s, s.cold.meta.limits, nil)
	if !s.dirty {
		sh.markDirty(i)
	}
	return true
}

// Sweep removes the buckets that are full again at now and not dirty, and
// returns how many it removed. It locks one shard at a time.
func (c *Cache) Sweep(now int64) int {
	n := 0
	for i := range c.shards {
		n += c.shards[i].sweep(now)
	}
	return n
}

func (sh *shard) sweep(now int64) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	for i := range sh.slots {
		s := &sh.slots[i]
		if s.tag&1 == 0 || s.dirty {
			continue
		}
		var full int64
		if s.n == 1 && !s.ext { // the common case reads the slot only
			var st State
			s.c.get(&st)
			full = s.first.FullAt(&st)
		} else {
			limits := s.cold.meta.limits
			for k := range limits {
				var st State
				s.get(k, &st)
				full = max(full, limits[k].FullAt(&st))
			}
		}
		if full <= now {
			sh.remove(s)
			n++
		}
	}
	// Rebuild a table that is mostly tombstones or mostly empty, so memory
	// follows active identities after a burst.
	if sh.tombs*4 > len(sh.slots) || len(sh.slots) > 64 && sh.used*8 < len(sh.slots) {
		sh.rehash(sh.used)
	}
	return n
}

// Len returns the number of buckets in the cache.
func (c *Cache) Len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += sh.used
		sh.mu.Unlock()
	}
	return n
}

// find returns the index of the live slot with hashes h1, h2, or -1; sh.mu
// must be held.
func (sh *shard) find(h1, h2 uint64) int {
	if len(sh.slots) == 0 {
		return -1
	}
	mask := uint64(len(sh.slots) - 1)
	tag := h1 | 1
	for i := (h1 >> shardBits) & mask; ; i = (i + 1) & mask {
		s := &sh.slots[i]
		if s.tag == tag && s.h2 == h2 {
			return int(i)
		}
		if s.tag == 0 {
			return -1
		}
	}
}

// create adds a full bucket for a key known to be absent and returns its
// slot index; key must be a private copy. sh.mu must be held.
func (sh *shard) create(h1, h2 uint64, key string, limits []Limit) int {
	// Keep a fifth of the slots empty so probes stay short and end.
	if (sh.used+sh.tombs+1)*5 > len(sh.slots)*4 {
		sh.rehash(sh.used + 1)
	}
	i := sh.place(h1)
	s := &sh.slots[i]
	if s.tag == tombstone {
		sh.tombs--
	}
	sh.used++
	*s = slot{tag: h1 | 1, h2: h2, cold: &coldBucket{key: key}}
	sh.setStates(s, limits, nil)
	return i
}

// place returns the index of the first free (empty or tombstone) slot on
// h1's probe path.
func (sh *shard) place(h1 uint64) int {
	mask := uint64(len(sh.slots) - 1)
	for i := (h1 >> shardBits) & mask; ; i = (i + 1) & mask {
		if sh.slots[i].tag&1 == 0 {
			return int(i)
		}
	}
}

// remove turns s into a tombstone; s must not be dirty.
func (sh *shard) remove(s *slot) {
	*s = slot{tag: tombstone}
	sh.used--
	sh.tombs++
}

// rehash rebuilds the table with room for need live slots at half load,
// dropping tombstones and recomputing the dirty list (slots move).
func (sh *shard) rehash(need int) {
	size := minSlots
	for size < 2*need {
		size *= 2
	}
	old := sh.slots
	sh.slots, sh.tombs = nil, 0
	if need > 0 {
		sh.slots = make([]slot, size)
	}
	sh.dirty = sh.dirty[:0]
	for i := range old {
		o := &old[i]
		if o.tag&1 == 0 {
			continue
		}
		j := sh.place(o.tag)
		sh.slots[j] = *o
		if o.dirty {
			sh.dirty = append(sh.dirty, uint32(j))
		}
	}
}

func (c *cell) get(s *State) { s.Tokens, s.Prev, s.At = c.a, c.b, c.at }
func (c *cell) put(s *State) { c.a, c.b, c.at = s.Tokens, s.Prev, s.At }

// get loads the state of limit i into st.
func (s *slot) get(i int, st *State) {
	st.Log = nil
	if !s.ext {
		s.c.get(st)
		return
	}
	x := s.cold.meta
	if i == 0 {
		s.c.get(st)
	} else {
		x.cells[i-1].get(st)
	}
	if x.logs != nil {
		st.Log = x.logs[i]
	}
}

// put stores st as the state of limit i.
func (s *slot) put(i int, st *State) {
	if !s.ext {
		s.c.put(st)
		return
	}
	x := s.cold.meta
	if i == 0 {
		s.c.put(st)
	} else {
		x.cells[i-1].put(st)
	}
	if x.logs != nil {
		x.logs[i] = st.Log
	}
}

// setStates makes limits the bucket's limits, lays out storage for them and
// fills it with copies of states; missing states are full. sh.mu must be held.
func (sh *shard) setStates(s *slot, limits []Limit, states []State) {
	hasLog := false
	for i := range limits {
		hasLog = hasLog || limits[i].Algorithm == SlidingLog
	}
	s.first, s.n, s.c = &limits[0], uint32(len(limits)), cell{}
	s.ext = len(limits) > 1 || hasLog
	if !s.ext {
		s.cold.meta = sh.sharedMeta(limits)
	} else {
		m := &bucketMeta{limits: limits, cells: make([]cell, len(limits)-1)}
		if hasLog {
			m.logs = make([][]int64, len(limits))
		}
		s.cold.meta = m
	}
	for i := 0; i < len(limits) && i < len(states); i++ {
		st := states[i]
		if limits[i].Algorithm != SlidingLog || !hasLog {
			st.Log = nil
		} else if len(st.Log) > 0 {
			log := st.Log
			if lim := limits[i].Limit; int64(len(log)) > lim && lim > 0 {
				log = log[int64(len(log))-lim:] // keep the newest
			}
			st.Log = append([]int64(nil), log...)
		}
		s.put(i, &st)
	}
}

// adopt switches the bucket in s to limits, remapping its states unless the
// limits are equal by value to its current ones. sh.mu must be held.
func (sh *shard) adopt(s *slot, limits []Limit, now int64) {
	old := s.cold.meta.limits
	if equalLimits(old, limits) {
		s.first = &limits[0]
		if !s.ext {
			s.cold.meta = sh.sharedMeta(limits)
		} else {
			s.cold.meta.limits = limits // a private meta
		}
		return
	}
	oldStates := make([]State, len(old))
	for i := range old {
		s.get(i, &oldStates[i])
	}
	newStates := make([]State, len(limits))
	used := make([]bool, len(old))
	for i := range limits {
		for j := range old {
			if !used[j] && old[j].Name == limits[i].Name && old[j].Algorithm == limits[i].Algorithm {
				used[j] = true
				newStates[i] = carry(&old[j], &limits[i], oldStates[j], now)
				break
			}
		}
	}
	sh.setStates(s, limits, newStates)
}

// carry converts the state s of limit from into a state of limit to (same
// Name and Algorithm), keeping its consumption as of now.
func carry(from, to *Limit, s State, now int64) State {
	if !from.usable() || !to.usable() || from.Algorithm != to.Algorithm {
		return State{}
	}
	switch to.Algorithm {
	case TokenBucket:
		if s.At == 0 {
			return State{}
		}
		tokens, at := from.tbLevel(&s, now)
		if tokens >= float64(to.Capacity()) {
			return State{}
		}
		return State{Tokens: tokens, At: at}
	case FixedWindow:
		if from.Period == to.Period {
			return State{Tokens: s.Tokens, At: s.At}
		}
		start, count := from.fwCount(&s, now)
		if !(count > 0) {
			return State{}
		}
		// The old window's usage counts in the new window containing now.
		return State{Tokens: count, At: windowStart(max(now, start), int64(to.Period))}
	case SlidingWindow:
		if from.Period == to.Period {
			return State{Tokens: s.Tokens, Prev: s.Prev, At: s.At}
		}
		w := from.swinOf(&s, now)
		count := w.countAt(now)
		if !(count > 0) {
			return State{}
		}
		return State{Tokens: count, At: windowStart(max(now, w.start), int64(to.Period))}
	default:
		if len(s.Log) == 0 {
			return State{}
		}
		log := s.Log
		if int64(len(log)) > to.Limit {
			log = log[int64(len(log))-to.Limit:]
		}
		return State{Log: append([]int64(nil), log...)}
	}
}

// fullAt is the instant every limit's bucket is full again.
func fullAt(limits []Limit, states []State) int64 {
	var t int64
	for i := range limits {
		t = max(t, limits[i].FullAt(&states[i]))
	}
	return t
}

func sameSlice(a, b []Limit) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func equalLimits(a, b []Limit) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
