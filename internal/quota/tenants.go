package quota

// Live buckets per tenant. A tenant whose callers are many (random IPs,
// random descriptor values) would otherwise grow the cache without bound,
// so the cache counts each tenant's buckets where buckets are created and
// removed, never on the check of an existing bucket, and the bounded calls
// (CheckBytesBound, CountBytesBound) create none past a bound: the caller
// decides elsewhere (the engine's overflow bucket). A bucket's tenant is
// its key up to the first '/' (the whole key when there is none).

import (
	"bytes"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
)

// tenantCounts counts the live buckets of each tenant. Lookups take the
// read lock; only a tenant's first bucket and the pruning of tenants with
// none take the write lock, so creating buckets in different shards does
// not serialise on it.
type tenantCounts struct {
	mu sync.RWMutex
	m  map[string]*atomic.Int64
}

func tenantOf(key string) string {
	if i := strings.IndexByte(key, '/'); i >= 0 {
		return key[:i]
	}
	return key
}

func tenantOfBytes(key []byte) []byte {
	if i := bytes.IndexByte(key, '/'); i >= 0 {
		return key[:i]
	}
	return key
}

// counter returns tenant's counter, making it if needed.
func (t *tenantCounts) counter(tenant string) *atomic.Int64 {
	t.mu.RLock()
	n := t.m[tenant]
	t.mu.RUnlock()
	if n != nil {
		return n
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if n = t.m[tenant]; n == nil {
		if t.m == nil {
			t.m = make(map[string]*atomic.Int64)
		}
		n = new(atomic.Int64)
		t.m[strings.Clone(tenant)] = n
	}
	return n
}

// add counts one more bucket of tenant.
func (t *tenantCounts) add(tenant string) { t.counter(tenant).Add(1) }

// tryAdd counts one more bucket of tenant, the key's tenant, unless it has
// bound already (bound < 0: no bound); it reports whether it counted. Two
// creations racing at the bound cannot both pass it.
func (t *tenantCounts) tryAdd(key []byte, bound int) bool {
	tb := tenantOfBytes(key)
	if bound < 0 {
		t.add(string(tb))
		return true
	}
	t.mu.RLock()
	n := t.m[string(tb)]
	t.mu.RUnlock()
	if n == nil {
		if bound == 0 {
			return false
		}
		n = t.counter(string(tb))
	}
	if n.Add(1) > int64(bound) {
		n.Add(-1)
		return false
	}
	return true
}

// sub counts one bucket of tenant less.
func (t *tenantCounts) sub(tenant string) {
	t.mu.RLock()
	n := t.m[tenant]
	t.mu.RUnlock()
	if n != nil {
		n.Add(-1)
	}
}

// get returns tenant's live buckets.
func (t *tenantCounts) get(tenant []byte) int {
	t.mu.RLock()
	n := t.m[string(tenant)]
	t.mu.RUnlock()
	if n == nil {
		return 0
	}
	return int(n.Load())
}

// prune forgets the tenants that have no bucket.
func (t *tenantCounts) prune() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, n := range t.m {
		if n.Load() == 0 {
			delete(t.m, k)
		}
	}
}

// TenantLen returns the live buckets of tenant in the cache.
func (c *Cache) TenantLen(tenant string) int { return c.counts.get([]byte(tenant)) }

// AtBound reports whether the tenant of key has bound live buckets or more
// (never, for a negative bound).
func (c *Cache) AtBound(key []byte, bound int) bool {
	return bound >= 0 && c.counts.get(tenantOfBytes(key)) >= bound
}

// TenantsAtBound returns how many tenants have bound live buckets or more
// (0 for a negative bound).
func (c *Cache) TenantsAtBound(bound int) int {
	if bound < 0 {
		return 0
	}
	c.counts.mu.RLock()
	defer c.counts.mu.RUnlock()
	k := 0
	for _, n := range c.counts.m {
		if n.Load() >= int64(bound) && n.Load() > 0 {
			k++
		}
	}
	return k
}

// CheckBytesBound is CheckBytes that creates a bucket for an absent key only
// while the key's tenant has fewer than bound live buckets (a negative
// bound: always). When it would have to create one past the bound, it
// decides nothing and reports ok false. A peek (consume false) of an absent
// key creates nothing: under the bound it answers a full bucket, at it ok
// false. On an existing bucket it is CheckBytes, with no more work.
func (c *Cache) CheckBytesBound(key []byte, bound int, limits []Limit, now int64, cost int64, consume bool, out []Outcome) (allowed bool, report int, ok bool) {
	if len(limits) == 0 {
		return true, -1, true
	}
	h1, h2 := maphash.Bytes(c.seed1, key), maphash.Bytes(c.seed2, key)
	sh := &c.shards[h1&shardMask]
	sh.mu.Lock()
	i := sh.find(h1, h2)
	if i < 0 {
		if i = c.createBound(sh, h1, h2, key, bound, limits, consume); i < 0 {
			sh.mu.Unlock()
			return c.absent(key, bound, limits, now, cost, consume, out)
		}
	} else if consume && sh.allow(i, limits, now, cost, &out[0]) {
		sh.mu.Unlock()
		return true, 0, true
	}
	allowed, report = sh.check(i, limits, now, cost, consume, out)
	sh.mu.Unlock()
	return allowed, report, true
}

// createBound makes the bucket of an absent key for a consuming check
// when its tenant is under bound, and returns its index; -1 when it makes
// none. It is kept out of CheckBytesBound, as absent is, so that the check
// of an existing bucket has the shape of CheckBytes' (BENCHMARKS.md, "A
// tenant's buckets, bounded").
//
//go:noinline
func (c *Cache) createBound(sh *shard, h1, h2 uint64, key []byte, bound int, limits []Limit, consume bool) int {
	if !consume || !c.counts.tryAdd(key, bound) {
		return -1
	}
	return sh.newBucket(h1, h2, string(key), limits)
}

// absent answers CheckBytesBound for a key createBound made no bucket for:
// a peek under the bound sees a full bucket; otherwise nothing is decided.
//
//go:noinline
func (c *Cache) absent(key []byte, bound int, limits []Limit, now, cost int64, consume bool, out []Outcome) (allowed bool, report int, ok bool) {
	if consume || c.AtBound(key, bound) {
		return false, 0, false
	}
	allowed, report = decideFull(limits, now, cost, out)
	return allowed, report, true
}

// decideFull is a peek at a bucket that does not exist: a full one.
func decideFull(limits []Limit, now, cost int64, out []Outcome) (bool, int) {
	var buf [4]State
	states := stateBuf(&buf, len(limits))
	return DecideAll(limits, states, now, cost, false, out)
}
