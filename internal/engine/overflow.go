package engine

// The bound on a tenant's buckets. A bucket is made on a new caller's
// first check and leaves memory only once it is full again and swept, so a
// tenant whose callers come from random addresses, keys or descriptor
// values would grow every server's memory, and the state written to the
// worker, without bound. Each server therefore holds at most TenantBuckets
// live buckets of a tenant (quota.Cache counts them). A check whose caller
// has no bucket while its tenant is at the bound is decided on the
// tenant's overflow bucket instead: one bucket shared by every caller past
// the bound, per policy and tier (or consumer key with limits of its own),
// named so that it falls in the caller's bucket's partition, where the same
// owner decides it with no forward more. Callers with a bucket keep it;
// buckets that are swept make room for new callers. Loads of persisted
// buckets (hydration, a partition's hand-over) are never refused, but
// count.

import (
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/quota"
)

// DefaultTenantBuckets is the live buckets a tenant may hold in a server's
// hot cache. A bucket of an IPv6 caller takes 186-193 B of heap
// (quota.BenchmarkBucketMemoryIPv6), so a tenant at the bound holds about
// 46 MiB of a server.
const DefaultTenantBuckets = 250_000

// KindOverflow is the caller kind of a tenant's overflow buckets:
// "<tenant>/<policy>/overflow:<tier>.<n>", or
// "<tenant>/<policy>/overflow:<tier>.<key id>.<n>" for a consumer key's
// own limits, where n is the smallest number that puts the key in the
// partition of the caller's. No caller has this kind.
const KindOverflow = "overflow"

const (
	// overflowKeysMax bounds the overflow keys remembered, one per tenant,
	// policy, tier and partition; past it the least recently used is
	// found again when next needed.
	overflowKeysMax = 4096
	// overflowShards is how many locks the overflow keys are under.
	overflowShards = 16
	// overflowSearchMax bounds the search for n. Each n falls in the
	// partition with a chance of 1 in bus.Partitions, so the search ends
	// within a few hundred; past the bound the caller's own key is used.
	overflowSearchMax = 1 << 16
	// overflowWarnEvery is the least time between two warnings of a
	// tenant at its bound.
	overflowWarnEvery = time.Minute
	// overflowWarnedMax bounds the tenants whose last warning is kept.
	overflowWarnedMax = 1 << 16
)

// overflowID names one overflow bucket.
type overflowID struct {
	tenant, policy, tier, keyID string
	part                        int
}

// tenantBound applies the bound on a tenant's buckets on this server
// (see the top of this file). Safe for concurrent use.
type tenantBound struct {
	max   int // negative: no bound
	cache *quota.Cache
	log   *slog.Logger

	// keys is sharded by partition, so that tenants at their bound, and
	// one tenant's callers in different partitions, do not wait on one
	// lock.
	keys [overflowShards]overflowKeys

	warnMu sync.Mutex
	warned *keyed.Table[string, time.Time]

	overflows prometheus.Counter
	atBound   prometheus.GaugeFunc
}

// overflowKeys is one shard of the overflow keys found.
type overflowKeys struct {
	mu   sync.Mutex
	keys *keyed.Table[overflowID, foundKey]
}

// foundKey is an overflow key once searched for (nil if none was found).
type foundKey struct {
	key  []byte
	done bool
}

// newTenantBound returns the bound of n buckets a tenant (0: the default,
// negative: none) on cache's buckets.
func newTenantBound(n int, cache *quota.Cache, log *slog.Logger) *tenantBound {
	if n == 0 {
		n = DefaultTenantBuckets
	}
	b := &tenantBound{max: max(n, -1), cache: cache, log: log, warned: keyed.NewTable[string, time.Time](overflowWarnedMax)}
	for i := range b.keys {
		b.keys[i].keys = keyed.NewTable[overflowID, foundKey](overflowKeysMax / overflowShards)
	}
	b.overflows = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_tenant_bucket_overflow_total",
		Help: "Decisions made on a tenant's overflow bucket: the caller had no bucket and its tenant had its bound of live buckets on this server (--tenant-buckets).",
	})
	b.atBound = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_tenants_at_bucket_bound",
		Help: "Tenants holding their bound of live buckets in this server's hot cache (--tenant-buckets): their new callers share an overflow bucket.",
	}, func() float64 { return float64(cache.TenantsAtBound(b.max)) })
	return b
}

// overflow returns the overflow bucket's key for key's caller under tier
// and keyID (the decision's), and counts and tells that a decision goes
// there. The key is shared: the caller must not change it.
func (b *tenantBound) overflow(key []byte, tier, keyID string) []byte {
	of, tenant := b.keyOf(key, tier, keyID, true)
	if tenant != "" {
		b.log.Warn("a tenant holds its bound of live buckets on this server: its new callers share an overflow bucket per policy and tier until swept buckets make room; raise the bound with --tenant-buckets (SLUICE_TENANT_BUCKETS) if its callers are that many",
			"tenant", tenant, "bound", b.max, "flag", "--tenant-buckets")
	}
	return of
}

// keyOf returns the overflow bucket's key for key's caller (key itself if
// it has none). With note it counts the decision, and answers the tenant
// when it is time to warn about it ("" otherwise).
func (b *tenantBound) keyOf(key []byte, tier, keyID string, note bool) (of []byte, warn string) {
	tenant, policy, _, ok := bus.SplitBucketKey(string(key))
	if !ok {
		return key, ""
	}
	id := overflowID{tenant: tenant, policy: policy, tier: tier, keyID: keyID, part: bus.Partition(key)}
	if note {
		b.overflows.Inc()
		now := time.Now()
		b.warnMu.Lock()
		last, fresh := b.warned.Get(tenant, time.Time{})
		if fresh || now.Sub(*last) >= overflowWarnEvery {
			*last, warn = now, tenant
		}
		b.warnMu.Unlock()
	}
	sh := &b.keys[id.part%overflowShards]
	sh.mu.Lock()
	k, _ := sh.keys.Get(id, foundKey{})
	of, done := k.key, k.done
	sh.mu.Unlock()
	if !done {
		// The search (a few hundred hashes) runs outside the lock; two
		// checks that both miss find the same key.
		of = findOverflowKey(id)
		sh.mu.Lock()
		k, _ := sh.keys.Get(id, foundKey{})
		*k = foundKey{key: of, done: true}
		sh.mu.Unlock()
	}
	if of == nil {
		return key, warn
	}
	return of, warn
}

// hydrating returns, while the server hydrates, the overflow key a check of
// key would use now, so that its persisted bucket is loaded first (nil when
// the check has or may make its own bucket).
func (b *tenantBound) hydrating(key []byte, tier, keyID string) []byte {
	if b.max < 0 || !b.cache.AtBound(key, b.max) || b.cache.Has(key) {
		return nil
	}
	of, _ := b.keyOf(key, tier, keyID, false)
	return of
}

// findOverflowKey finds id's overflow key: the first n whose key falls in
// id's partition (nil if none within overflowSearchMax).
func findOverflowKey(id overflowID) []byte {
	caller := id.tier + "."
	if id.keyID != "" {
		caller += id.keyID + "."
	}
	var k []byte
	for n := range overflowSearchMax {
		k = bus.AppendBucketKey(k[:0], id.tenant, id.policy, KindOverflow, caller)
		k = strconv.AppendInt(k, int64(n), 10)
		if bus.Partition(k) == id.part {
			return k
		}
	}
	return nil
}

// route returns the key a settle or a forced consumption of key goes to:
// key when its bucket exists or its tenant is under the bound, else the
// overflow bucket's (as for a check). Unlike a check it looks for the
// bucket first, which these rare calls can afford.
func (b *tenantBound) route(key []byte, tier, keyID string) []byte {
	if b == nil || b.max < 0 || !b.cache.AtBound(key, b.max) || b.cache.Has(key) {
		return key
	}
	return b.overflow(key, tier, keyID)
}
