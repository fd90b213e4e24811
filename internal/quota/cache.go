package quota

// The hot cache holds one bucket per key ("tenant/policy/identity") in
// memory: 512 shards of a mutex and an open-addressing table of 32-byte
// entries, two to a cache line, so that a check takes one lock and reads
// one line. Its design (table layout, key identity by 87 hash bits, the
// limits table, the short path of the common checks, the dirty protocol,
// expiry) and the measurements behind it are in docs/ARCHITECTURE.md, "The
// hot cache". Two rules for whoever edits it: an operation over every shard
// locks one shard at a time, never two; and shard.allow must compute what
// Decide computes (TestAllowMatchesDecide) — measure BenchmarkCheck1MKeys
// before and after any change to that path.

import (
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"time"
)

const (
	// shardBits sets the shard count, a power of two well above the number
	// of cores, so two busy keys rarely share a lock.
	shardBits = 9
	numShards = 1 << shardBits
	shardMask = numShards - 1
	// minEntries is the smallest table a shard allocates.
	minEntries = 8
)

// Cache is the in-memory store of buckets, one per key. It is safe for
// concurrent use. The zero Cache is not usable; call NewCache.
type Cache struct {
	seed1, seed2 maphash.Seed
	shards       [numShards]shard
	counts       tenantCounts // live buckets per tenant (tenants.go)
}

type shard struct {
	mu    sync.Mutex
	ents  []entry // power-of-two length, two entries per cache line; nil while empty
	colds []cold  // colds[i] is the cold part of the bucket at ents[i]
	lims  []limRef
	used  int // occupied entries: a wide bucket counts two
	tombs int // tombstones
	n     int // buckets
	dirty []uint32

	limIdx  map[sliceID]uint32 // lims by slice
	limFree []uint32           // unreferenced lims
	// interned are recent copies made by Load, so that buckets loaded with
	// equal limits share one slice. It only saves memory.
	interned [4][]Limit
	nextI    uint8
}

// Entry flags, in the low bits of entry.tag that the shard index leaves
// free. A live entry has fLive; an empty one is 0; tombstone marks a deleted
// entry (probes go on past it) and cont a wide bucket's second entry.
const (
	fLive  = 1
	fDirty = 2 // consumption not yet drained
	fExt   = 4 // states in cold storage
	fWide  = 8 // the next entry holds State.Prev
	fState = fDirty | fExt | fWide

	tombstone = 2
	cont      = 16
)

// entry is a bucket's hot part: 32 bytes, half a cache line.
type entry struct {
	tag uint64  // the first hash above the shard bits, and flags
	id  uint64  // the second hash's upper half << 32 | index in shard.lims
	a   float64 // State.Tokens of the only limit; in a cont entry, State.Prev
	at  int64   // State.At of the only limit
}

// cold is what a check on a single-limit bucket does not read.
type cold struct {
	key string
	x   *extState // ext buckets only
}

// extState holds every limit's state of a multi-limit or sliding-log bucket.
type extState struct {
	cells []cell    // State without Log
	logs  [][]int64 // per limit, State.Log; nil when no limit is a sliding log
}

type cell struct {
	a, b float64 // State.Tokens, State.Prev
	at   int64   // State.At
}

// limRef is one limits slice in use by refs buckets of a shard.
type limRef struct {
	limits []Limit // never mutated
	refs   int
	fast   fastLimit // set for a single valid token bucket or fixed window
}

// fastLimit is what shard.allow computes with for a single token bucket or
// fixed window, converted once per limits slice instead of on every check.
// The float copies are derivable from the integers, but converting them on
// every check made it six instructions longer, and its 1M-key time went from
// 172-199 ns to 240-280 ns (see "Short checks" above).
type fastLimit struct {
	ok                      bool
	alg                     Algorithm
	limit, capacity, period int64
	capF, limF, pF          float64
	cal                     *Calendar // a fixed window's calendar, or nil
}

func fastLimitOf(limits []Limit) fastLimit {
	if len(limits) != 1 || !limits[0].usable() {
		return fastLimit{}
	}
	l := &limits[0]
	if l.Algorithm != TokenBucket && l.Algorithm != FixedWindow {
		return fastLimit{}
	}
	return fastLimit{
		ok: true, alg: l.Algorithm, limit: l.Limit, capacity: l.Capacity(), period: int64(l.Period),
		capF: float64(l.Capacity()), limF: float64(l.Limit), pF: float64(l.Period), cal: l.Calendar,
	}
}

type sliceID struct {
	first *Limit
	n     int
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
// counts kept, or carried into the new window when the windows changed, as
// carry describes); any other limit starts full. Limits are compared with
// Limit.Equal, so a recompiled but equal policy (equal Calendars made anew
// included) keeps every bucket's state as it is.
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
	sh := &c.shards[h1&shardMask]
	sh.mu.Lock()
	i := sh.find(h1, h2)
	if i < 0 {
		i = c.create(sh, h1, h2, strings.Clone(key), limits)
	} else if consume && sh.allow(i, limits, now, cost, &out[0]) {
		sh.mu.Unlock()
		return true, 0
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
	sh := &c.shards[h1&shardMask]
	sh.mu.Lock()
	i := sh.find(h1, h2)
	if i < 0 {
		i = c.create(sh, h1, h2, string(key), limits)
	} else if consume && sh.allow(i, limits, now, cost, &out[0]) {
		sh.mu.Unlock()
		return true, 0
	}
	allowed, report = sh.check(i, limits, now, cost, consume, out)
	sh.mu.Unlock()
	return allowed, report
}

// allow is the common check, taken before check: a consuming request that
// the bucket admits, on an existing bucket of a single token bucket (used
// before, decided at a later instant) or fixed window. It computes exactly
// what tokenBucket or fixedWindow computes, with the same float operations in
// the same order (TestAllowMatchesDecide holds them equal), and reports
// false, changing nothing, in every other case, which check then decides.
// sh.mu must be held.
func (sh *shard) allow(i int, limits []Limit, now, cost int64, o *Outcome) bool {
	e := &sh.ents[i]
	r := &sh.lims[uint32(e.id)]
	if !r.fast.ok || e.tag&(fExt|fWide) != 0 || !sameSlice(r.limits, limits) || cost < 1 || cost > r.fast.capacity {
		return false
	}
	if r.fast.alg == FixedWindow {
		if !r.fast.fixedWindow(e, now, cost, o) {
			return false
		}
		if e.tag&fDirty == 0 {
			sh.markDirty(i)
		}
		return true
	}
	tokens, at := e.a, e.at
	elapsed := now - at
	if at == 0 || elapsed <= 0 || now <= at || !(tokens >= 0) {
		return false
	}
	tb := &r.fast
	tokens = min(tokens, tb.capF)
	tokens += float64(elapsed) * tb.limF / tb.pF
	tokens = min(tokens, tb.capF)
	c := float64(cost)
	if !(tokens >= c) {
		return false
	}
	after := tokens - c
	var reset int64
	if missing := tb.capF - after; missing > 0 {
		reset = ceilNanos(missing * tb.pF / tb.limF)
	}
	*o = Outcome{Allowed: true, Limit: tb.limit, Remaining: floorUnits(after), Reset: time.Duration(reset)}
	e.a, e.at = after, now
	if e.tag&fDirty == 0 {
		sh.markDirty(i)
	}
	return true
}

// fixedWindow is allow for a fixed window: fixedWindow's allowed, consuming
// path, on the state in e.
func (f *fastLimit) fixedWindow(e *entry, now, cost int64, o *Outcome) bool {
	if f.cal != nil {
		return f.calendarWindow(e, now, cost, o)
	}
	start, count := windowStart(now, f.period), 0.0
	if e.at != 0 && e.at >= start { // this window, or a later one if the clock went back
		start, count = e.at, sanitizeCount(e.a)
	}
	c := float64(cost)
	if !(count+c <= f.limF) {
		return false
	}
	*o = Outcome{Allowed: true, Limit: f.limit, Remaining: floorUnits(f.limF - count - c), Reset: time.Duration(start + f.period - now)}
	e.a, e.at = count+c, start
	return true
}

// calendarWindow is fixedWindow for a calendar's windows. A state in a later
// window (the clock went back) is left to Decide.
func (f *fastLimit) calendarWindow(e *entry, now, cost int64, o *Outcome) bool {
	var start, end int64
	if w := f.cal.last.Load(); w != nil && now >= w.start && now < w.end {
		start, end = w.start, w.end // Calendar.Window's hit, which is too long to inline
	} else {
		start, end = f.cal.window(now)
	}
	count := 0.0
	if e.at != 0 && e.at >= start {
		if e.at != start {
			return false
		}
		count = sanitizeCount(e.a)
	}
	c := float64(cost)
	if !(count+c <= f.limF) {
		return false
	}
	*o = Outcome{Allowed: true, Limit: f.limit, Remaining: floorUnits(f.limF - count - c), Reset: time.Duration(end - now)}
	e.a, e.at = count+c, start
	return true
}

// check runs one decision on the bucket at i; sh.mu must be held.
func (sh *shard) check(i int, limits []Limit, now, cost int64, consume bool, out []Outcome) (allowed bool, report int) {
	if !sameSlice(sh.limitsOf(i), limits) {
		i = sh.adopt(i, limits, now)
	}
	e := &sh.ents[i]
	if e.tag&fExt == 0 {
		st := State{Tokens: e.a, At: e.at}
		if e.tag&fWide != 0 {
			st.Prev = sh.ents[i+1].a
		}
		limits[0].decide(&st, now, cost, consume, &out[0])
		allowed = out[0].Allowed
		if allowed && consume {
			e.a, e.at = st.Tokens, st.At
			if e.tag&fWide != 0 {
				sh.ents[i+1].a = st.Prev
			}
		}
	} else {
		var buf [4]State
		states := stateBuf(&buf, len(limits))
		sh.getStates(i, states)
		allowed, report = DecideAll(limits, states, now, cost, consume, out)
		if allowed && consume {
			sh.colds[i].x.put(states)
		}
	}
	if allowed && consume && e.tag&fDirty == 0 {
		sh.markDirty(i)
	}
	return allowed, report
}

// stateBuf returns n states, in buf when they fit, so that the common
// bucket of a few limits needs no allocation.
func stateBuf(buf *[4]State, n int) []State {
	if n > len(buf) {
		return make([]State, n)
	}
	return buf[:n]
}

func (sh *shard) markDirty(i int) {
	sh.ents[i].tag |= fDirty
	sh.dirty = append(sh.dirty, uint32(i))
}

// limitsOf returns the limits of the bucket at i.
func (sh *shard) limitsOf(i int) []Limit { return sh.lims[uint32(sh.ents[i].id)].limits }

// getStates loads the states of the bucket at i, one per limit, into states.
func (sh *shard) getStates(i int, states []State) {
	e := &sh.ents[i]
	if e.tag&fExt != 0 {
		sh.colds[i].x.get(states)
		return
	}
	states[0] = State{Tokens: e.a, At: e.at}
	if e.tag&fWide != 0 {
		states[0].Prev = sh.ents[i+1].a
	}
}

// putStates stores states as the bucket's at i.
func (sh *shard) putStates(i int, states []State) {
	e := &sh.ents[i]
	if e.tag&fExt != 0 {
		sh.colds[i].x.put(states)
		return
	}
	e.a, e.at = states[0].Tokens, states[0].At
	if e.tag&fWide != 0 {
		sh.ents[i+1].a = states[0].Prev
	}
}

func (x *extState) get(states []State) {
	for k := range states {
		s := &states[k]
		c := &x.cells[k]
		s.Tokens, s.Prev, s.At, s.Log = c.a, c.b, c.at, nil
		if x.logs != nil {
			s.Log = x.logs[k]
		}
	}
}

func (x *extState) put(states []State) {
	for k := range states {
		s := &states[k]
		x.cells[k] = cell{a: s.Tokens, b: s.Prev, at: s.At}
		if x.logs != nil {
			x.logs[k] = s.Log
		}
	}
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
		e := &sh.ents[i]
		if e.tag&fLive == 0 || e.tag&fDirty == 0 {
			continue // a stale index, or an earlier fn panicked mid-drain
		}
		limits := sh.limitsOf(int(i))
		if cap(scratch) < len(limits) {
			scratch = make([]State, len(limits))
		}
		st := scratch[:len(limits)]
		sh.getStates(int(i), st)
		e.tag &^= fDirty
		fn(sh.colds[i].key, limits, st, fullAt(limits, st))
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
	sh := &c.shards[h1&shardMask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	lim := sh.intern(limits)
	i := sh.find(h1, h2)
	if i < 0 {
		i = c.create(sh, h1, h2, strings.Clone(key), lim)
	}
	sh.install(i, lim, states)
}

// LoadIfAbsent is Load for a key that has no bucket yet; it reports whether
// it loaded. A server that fills its cache from persisted state while it
// already decides checks uses it: a bucket that a check created, or that was
// loaded since, is at least as new as any persisted copy and must be kept.
func (c *Cache) LoadIfAbsent(key string, limits []Limit, states []State, fullAt int64) bool {
	if len(limits) == 0 {
		return false
	}
	h1, h2 := maphash.String(c.seed1, key), maphash.String(c.seed2, key)
	sh := &c.shards[h1&shardMask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.find(h1, h2) >= 0 {
		return false
	}
	lim := sh.intern(limits)
	sh.install(c.create(sh, h1, h2, strings.Clone(key), lim), lim, states)
	return true
}

// Has reports whether key has a bucket.
func (c *Cache) Has(key []byte) bool {
	h1, h2 := maphash.Bytes(c.seed1, key), maphash.Bytes(c.seed2, key)
	sh := &c.shards[h1&shardMask]
	sh.mu.Lock()
	i := sh.find(h1, h2)
	sh.mu.Unlock()
	return i >= 0
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

// Reset makes key's bucket full again and marks it dirty, so the reset is
// persisted; DrainDirty reports it with fullAt 0. It reports whether key had
// a bucket.
func (c *Cache) Reset(key string) bool {
	h1, h2 := maphash.String(c.seed1, key), maphash.String(c.seed2, key)
	sh := &c.shards[h1&shardMask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.find(h1, h2)
	if i < 0 {
		return false
	}
	sh.setStates(i, sh.limitsOf(i), nil)
	if sh.ents[i].tag&fDirty == 0 {
		sh.markDirty(i)
	}
	return true
}

// Sweep removes the buckets that are full again at now and not dirty, and
// returns how many it removed. It locks one shard at a time.
func (c *Cache) Sweep(now int64) int {
	n := 0
	for i := range c.shards {
		n += c.shards[i].sweep(now, &c.counts)
	}
	c.counts.prune()
	return n
}

func (sh *shard) sweep(now int64, counts *tenantCounts) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	var buf [4]State
	for i := range sh.ents {
		e := &sh.ents[i]
		if e.tag&fLive == 0 || e.tag&fDirty != 0 {
			continue
		}
		limits := sh.limitsOf(i)
		states := stateBuf(&buf, len(limits))
		sh.getStates(i, states)
		if fullAt(limits, states) <= now {
			sh.remove(i, counts)
			n++
		}
	}
	clear(buf[:]) // drop references to logs
	// Rebuild a table that is mostly tombstones or mostly empty, so memory
	// follows active identities after a burst.
	if sh.tombs*4 > len(sh.ents) || len(sh.ents) > 64 && sh.used*8 < len(sh.ents) {
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
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// find returns the index of the live bucket with hashes h1, h2, or -1; sh.mu
// must be held. A probe ends at an empty entry, or after the whole table:
// a wide bucket's placement can turn the last empty entries into
// tombstones, and the next insert then rebuilds the table.
func (sh *shard) find(h1, h2 uint64) int {
	n := uint64(len(sh.ents))
	mask := n - 1
	want, hi := h1&^shardMask|fLive, uint32(h2>>32)
	for i, k := home(h1, mask), uint64(0); k < n; i, k = (i+1)&mask, k+1 {
		e := &sh.ents[i]
		if e.tag&^fState == want && uint32(e.id>>32) == hi {
			return int(i)
		}
		if e.tag == 0 {
			return -1
		}
	}
	return -1
}

// home is the first entry of a hash's home line.
func home(h1, mask uint64) uint64 { return h1 >> shardBits & mask &^ 1 }

func isFree(tag uint64) bool { return tag == 0 || tag == tombstone }

// layout tells how a bucket with limits is stored.
func layout(limits []Limit) (ext, wide bool) {
	ext = len(limits) > 1 || limits[0].Algorithm == SlidingLog || limits[0].Algorithm == Concurrency
	return ext, !ext && limits[0].Algorithm == SlidingWindow
}

// create adds a full bucket to sh for a key known to be absent, counting it
// for its tenant, and returns its index; key must be a private copy. sh.mu
// must be held. Buckets are made here, or with shard.newBucket once their
// tenant's count has counted them: never otherwise.
func (c *Cache) create(sh *shard, h1, h2 uint64, key string, limits []Limit) int {
	c.counts.add(tenantOf(key))
	return sh.newBucket(h1, h2, key, limits)
}

// newBucket adds a full bucket for a key known to be absent, already
// counted for its tenant (Cache.create), and returns its index; key must
// be a private copy. sh.mu must be held.
func (sh *shard) newBucket(h1, h2 uint64, key string, limits []Limit) int {
	tag := h1&^shardMask | fLive
	if _, wide := layout(limits); wide {
		tag |= fWide
	}
	i := sh.insert(entry{tag: tag, id: h2>>32<<32 | uint64(sh.ref(limits))}, cold{key: key})
	sh.n++
	sh.setStates(i, limits, nil)
	return i
}

// insert places e (one entry, or two if it is wide) and its cold part,
// growing the table if needed, and returns its index. A dirty e is listed.
func (sh *shard) insert(e entry, c cold) int {
	w := width(e.tag)
	// Keep a fifth of the entries empty so probes stay short and end.
	if (sh.used+sh.tombs+w)*5 > len(sh.ents)*4 {
		sh.rehash(sh.used + w)
	}
	i := sh.place(e.tag)
	for i < 0 { // no free line left for a wide bucket
		sh.rehash(max(len(sh.ents), sh.used+w))
		i = sh.place(e.tag)
	}
	sh.put(i, e, c)
	return i
}

func width(tag uint64) int {
	if tag&fWide != 0 {
		return 2
	}
	return 1
}

// place returns the first free index on tag's probe path where a bucket of
// tag's width fits, or -1 if none does. A wide bucket takes a whole free
// line; empty entries it passes become tombstones, so that lookups, which
// stop at the first empty entry, still reach it.
func (sh *shard) place(tag uint64) int {
	n := uint64(len(sh.ents))
	if n == 0 {
		return -1
	}
	mask, start := n-1, home(tag, n-1)
	if tag&fWide == 0 {
		for i, k := start, uint64(0); k < n; i, k = (i+1)&mask, k+1 {
			if isFree(sh.ents[i].tag) {
				return int(i)
			}
		}
		return -1
	}
	for i, k := start, uint64(0); k < n; i, k = (i+2)&mask, k+2 {
		if isFree(sh.ents[i].tag) && isFree(sh.ents[i+1].tag) {
			for j := start; j != i; j = (j + 1) & mask {
				if sh.ents[j].tag == 0 {
					sh.ents[j].tag = tombstone
					sh.tombs++
				}
			}
			return int(i)
		}
	}
	return -1
}

// put writes e and c at free index i (and a wide bucket's second entry).
func (sh *shard) put(i int, e entry, c cold) {
	w := width(e.tag)
	for j := i; j < i+w; j++ {
		if sh.ents[j].tag == tombstone {
			sh.tombs--
		}
	}
	sh.ents[i], sh.colds[i] = e, c
	if w == 2 {
		sh.ents[i+1] = entry{tag: cont}
	}
	sh.used += w
	if e.tag&fDirty != 0 {
		sh.dirty = append(sh.dirty, uint32(i))
	}
}

// free turns the bucket at i into tombstones and returns its entry and cold
// part.
func (sh *shard) free(i int) (entry, cold) {
	e, c := sh.ents[i], sh.colds[i]
	w := width(e.tag)
	if w == 2 {
		sh.ents[i+1] = entry{tag: tombstone}
	}
	sh.ents[i], sh.colds[i] = entry{tag: tombstone}, cold{}
	sh.used -= w
	sh.tombs += w
	return e, c
}

// remove deletes the bucket at i, which must not be dirty, and counts it
// off its tenant's buckets in counts.
func (sh *shard) remove(i int, counts *tenantCounts) {
	e, c := sh.free(i)
	sh.unref(uint32(e.id))
	sh.n--
	counts.sub(tenantOf(c.key))
}

// move re-places the bucket at i with or without a second entry and returns
// its new index; a new second entry holds a zero State.Prev.
func (sh *shard) move(i int, wide bool) int {
	e, c := sh.free(i)
	e.tag &^= fWide
	if wide {
		e.tag |= fWide
	}
	return sh.insert(e, c)
}

// rehash rebuilds the table with room for need entries at half load,
// dropping tombstones and recomputing the dirty list (buckets move).
func (sh *shard) rehash(need int) {
	size := minEntries
	for size < 2*need {
		size *= 2
	}
	for {
		if sh.rebuild(size, need > 0) {
			return
		}
		size *= 2 // a wide bucket found no free line: vanishingly rare
	}
}

func (sh *shard) rebuild(size int, alloc bool) bool {
	oldE, oldC := sh.ents, sh.colds
	sh.ents, sh.colds, sh.used, sh.tombs = nil, nil, 0, 0
	if alloc {
		sh.ents, sh.colds = make([]entry, size), make([]cold, size)
	}
	sh.dirty = sh.dirty[:0]
	for i := range oldE {
		o := &oldE[i]
		if o.tag&fLive == 0 {
			continue
		}
		j := sh.place(o.tag)
		if j < 0 {
			sh.ents, sh.colds = oldE, oldC
			sh.recount()
			return false
		}
		sh.put(j, *o, oldC[i])
		if o.tag&fWide != 0 {
			sh.ents[j+1].a = oldE[i+1].a
		}
	}
	return true
}

// recount recomputes used, tombs and the dirty list from the entries.
func (sh *shard) recount() {
	sh.used, sh.tombs, sh.dirty = 0, 0, sh.dirty[:0]
	for i := range sh.ents {
		switch t := sh.ents[i].tag; {
		case t == tombstone:
			sh.tombs++
		case t == cont:
			sh.used++
		case t&fLive != 0:
			sh.used++
			if t&fDirty != 0 {
				sh.dirty = append(sh.dirty, uint32(i))
			}
		}
	}
}

// ref returns the index of limits in sh.lims, adding it if needed, and
// counts one more reference to it.
func (sh *shard) ref(limits []Limit) uint32 {
	id := sliceID{&limits[0], len(limits)}
	if k, ok := sh.limIdx[id]; ok {
		sh.lims[k].refs++
		return k
	}
	var k uint32
	if n := len(sh.limFree); n > 0 {
		k, sh.limFree = sh.limFree[n-1], sh.limFree[:n-1]
	} else {
		k = uint32(len(sh.lims))
		sh.lims = append(sh.lims, limRef{})
	}
	sh.lims[k] = limRef{limits: limits, refs: 1, fast: fastLimitOf(limits)}
	if sh.limIdx == nil {
		sh.limIdx = make(map[sliceID]uint32)
	}
	sh.limIdx[id] = k
	return k
}

// unref drops one reference to sh.lims[k], freeing it after the last.
func (sh *shard) unref(k uint32) {
	l := &sh.lims[k]
	if l.refs--; l.refs > 0 {
		return
	}
	delete(sh.limIdx, sliceID{&l.limits[0], len(l.limits)})
	*l = limRef{}
	sh.limFree = append(sh.limFree, k)
}

// setLimits makes limits the limits of the bucket at i, without touching its
// states.
func (sh *shard) setLimits(i int, limits []Limit) {
	e := &sh.ents[i]
	old := uint32(e.id)
	if sameSlice(sh.lims[old].limits, limits) {
		return
	}
	e.id = e.id&^0xffffffff | uint64(sh.ref(limits))
	sh.unref(old)
}

// install makes limits the limits of the bucket at i with copies of states
// (missing ones full), moving the bucket if its layout changes, and returns
// its index. sh.mu must be held.
func (sh *shard) install(i int, limits []Limit, states []State) int {
	if _, wide := layout(limits); wide != (sh.ents[i].tag&fWide != 0) {
		i = sh.move(i, wide)
	}
	sh.setLimits(i, limits)
	sh.setStates(i, limits, states)
	return i
}

// setStates fills the bucket at i, whose layout fits limits, with copies of
// states; missing states are full. sh.mu must be held.
func (sh *shard) setStates(i int, limits []Limit, states []State) {
	e := &sh.ents[i]
	ext, wide := layout(limits)
	e.a, e.at = 0, 0
	if wide {
		sh.ents[i+1].a = 0
	}
	if !ext {
		e.tag &^= fExt
		sh.colds[i].x = nil
		if len(states) > 0 {
			e.a, e.at = states[0].Tokens, states[0].At
			if wide {
				sh.ents[i+1].a = states[0].Prev
			}
		}
		return
	}
	e.tag |= fExt
	hasLog := false
	for k := range limits {
		hasLog = hasLog || limits[k].Algorithm == SlidingLog || limits[k].Algorithm == Concurrency
	}
	x := &extState{cells: make([]cell, len(limits))}
	if hasLog {
		x.logs = make([][]int64, len(limits))
	}
	for k := 0; k < len(limits) && k < len(states); k++ {
		st := states[k]
		x.cells[k] = cell{a: st.Tokens, b: st.Prev, at: st.At}
		if limits[k].Algorithm == SlidingLog && len(st.Log) > 0 {
			log := st.Log
			if lim := limits[k].Limit; int64(len(log)) > lim && lim > 0 {
				log = log[int64(len(log))-lim:] // keep the newest
			}
			x.logs[k] = append([]int64(nil), log...)
		}
		if limits[k].Algorithm == Concurrency && len(st.Log) > 0 {
			log := st.Log
			if n := 2 * MaxConcurrency; len(log) > n {
				log = log[len(log)-n:]
			}
			x.logs[k] = append([]int64(nil), log...)
		}
	}
	sh.colds[i].x = x
}

// adopt switches the bucket at i to limits, remapping its states unless the
// limits are equal by value to its current ones, and returns its index,
// which changes when the new limits need another layout. sh.mu must be held.
func (sh *shard) adopt(i int, limits []Limit, now int64) int {
	old := sh.limitsOf(i)
	if equalLimits(old, limits) {
		sh.setLimits(i, limits)
		return i
	}
	states := make([]State, len(old))
	sh.getStates(i, states)
	return sh.install(i, limits, remap(old, limits, states, now))
}

// remap converts the states of a bucket under limits old into states under
// limits, as Check documents.
func remap(old, limits []Limit, states []State, now int64) []State {
	out := make([]State, len(limits))
	used := make([]bool, len(old))
	for i := range limits {
		for j := range old {
			if !used[j] && old[j].Name == limits[i].Name && old[j].Algorithm == limits[i].Algorithm {
				used[j] = true
				out[i] = carry(&old[j], &limits[i], states[j], now)
				break
			}
		}
	}
	return out
}

// carry converts the state s of limit from into a state of limit to (same
// Name and Algorithm), keeping its consumption as of now.
//
// A fixed window whose windows stay the same (equal Periods, or Equal
// Calendars) keeps its state as it is. Otherwise the count of the old window
// that now falls in (zero once that window has ended) is carried into the
// new window that now falls in, with State.At that window's start: a state
// never keeps an old window's start, which the new windows would misread.
// Between two periodic windows the whole count is carried, as it always
// was: epoch-aligned windows nest when one period divides the other, and an
// over-count lasts one new window at most. When a calendar is on either
// side and the old window began before the new one, only the share of the
// count proportional to their overlap is carried (rounded up), so that
// changing a month's zone or anchor, or a month to a day, does not charge
// last month's usage to a month or a day that has just begun.
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
		if sameWindows(from, to) {
			return State{Tokens: s.Tokens, At: s.At}
		}
		start, _, count := from.fwCount(&s, now)
		if !(count > 0) {
			return State{}
		}
		// The old window's usage counts in the new window containing now.
		ns := to.windowOf(max(now, start))
		if start < ns && (from.Calendar != nil || to.Calendar != nil) {
			// Part of the usage may predate the new window, and a count has
			// no instants to tell which. Carry the share of it that the
			// overlap's length gives, rounded up: nearly all of it when a
			// zone moves a month's start by hours, next to nothing when the
			// new window began a minute ago.
			count = math.Ceil(count * float64(now-ns) / float64(now-start))
			if !(count > 0) {
				return State{}
			}
		}
		return State{Tokens: count, At: ns}
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
	case Concurrency:
		// Every live lease keeps its slot: a lower limit admits again once
		// enough of them are released or expire.
		if log := liveLeases(s.Log, now); len(log) > 0 {
			return State{Log: log}
		}
		return State{}
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

// sameWindows reports whether two fixed windows count in the same windows.
func sameWindows(a, b *Limit) bool {
	if a.Calendar == nil && b.Calendar == nil {
		return a.Period == b.Period
	}
	return a.Calendar.Equal(b.Calendar)
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
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}
