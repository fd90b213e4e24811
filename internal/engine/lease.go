package engine

// Leases of concurrency limits. An allowed check under a tier with a
// concurrency limit takes a slot in its bucket (quota.Cache.AcquireBytesBound)
// under a random 64-bit token, all or nothing with the tier's other
// limits; the slot is held by the bucket's owner until a release names the
// token or the lease's expiry passes. The slots live in the bucket's state,
// so they are flushed to the worker and hydrated like any consumption.
//
// A lease id is "lse_" and the unpadded base64url of
//
//	0x01 str(bucket key) str(tier) str(key id) token(8 bytes) varint(expiry ns)
//
// (str = uvarint length and bytes): everything a server needs to find the
// bucket's partition, and so its owner, and the overflow bucket the slot
// may have been taken on (overflow.go). The bucket key begins with the
// tenant's id: a release by another tenant is refused before anything is
// looked up, and answers as an unknown lease does.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/quota"
)

// Bounds of a check's lease_ttl.
const (
	DefaultLeaseTTL = 60 * time.Second
	MinLeaseTTL     = time.Second
	MaxLeaseTTL     = 24 * time.Hour
)

const (
	leasePrefix  = "lse_"
	leaseVersion = 1
	// maxLeaseID bounds a lease id's length before it is decoded: a bucket
	// key, a tier and a key id, each far shorter.
	maxLeaseID = 2048
)

// Release outcomes (Released.Status).
const (
	LeaseReleased        = "released"
	LeaseAlreadyReleased = "already_released"
	LeaseExpired         = "expired"
)

// Released answers a release.
type Released struct {
	// Status is LeaseReleased when this release freed the slot;
	// LeaseExpired when the lease had expired (its slot was free already);
	// LeaseAlreadyReleased when it had not expired but no slot was held
	// under it: released before. Nothing changed in the last two.
	Status  string
	Expires time.Time
}

// newLeaseToken draws a lease's token: 64 random bits, never 0.
func newLeaseToken() int64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
		if t := int64(binary.LittleEndian.Uint64(b[:])); t != 0 {
			return t
		}
	}
}

// leaseID builds the id of lease, taken on the bucket key under the
// caller's tier and override key id.
func leaseID(key []byte, tier, keyID string, lease quota.Lease) string {
	b := make([]byte, 0, 1+len(key)+len(tier)+len(keyID)+24)
	b = append(b, leaseVersion)
	b = bus.AppendBytes(b, string(key))
	b = bus.AppendBytes(b, tier)
	b = bus.AppendBytes(b, keyID)
	b = binary.LittleEndian.AppendUint64(b, uint64(lease.Token))
	b = binary.AppendVarint(b, lease.Expires)
	return leasePrefix + base64.RawURLEncoding.EncodeToString(b)
}

// parsedLease is a lease id's contents.
type parsedLease struct {
	key, tier, keyID string
	lease            quota.Lease
}

// parseLease reads a lease id; ok is false for anything malformed.
func parseLease(id string) (p parsedLease, ok bool) {
	if len(id) > maxLeaseID || len(id) <= len(leasePrefix) || id[:len(leasePrefix)] != leasePrefix {
		return p, false
	}
	b, err := base64.RawURLEncoding.DecodeString(id[len(leasePrefix):])
	if err != nil || len(b) == 0 || b[0] != leaseVersion {
		return p, false
	}
	r := bus.VarintReader{B: b[1:]}
	p.key = string(r.Bytes(maxLeaseID))
	p.tier = string(r.Bytes(maxLeaseID))
	p.keyID = string(r.Bytes(maxLeaseID))
	if r.Bad || len(r.B) < 8 {
		return p, false
	}
	p.lease.Token = int64(binary.LittleEndian.Uint64(r.B))
	r.B = r.B[8:]
	p.lease.Expires = r.Varint()
	if r.Bad || len(r.B) != 0 || p.lease.Token == 0 || p.lease.Expires <= 0 {
		return p, false
	}
	return p, true
}

// errNoLease answers a lease id that is malformed, unknown or another
// tenant's alike.
func errNoLease() error {
	return errs.Errorf(errs.NotFound, "lease: no such lease")
}

// Release gives back the slot of a lease taken by one of tenantID's checks.
// A malformed id, another tenant's, or one whose policy no longer exists
// answers errs.NotFound; a lease that expired or was released before
// answers as much, changing nothing. In a cluster the release goes to the
// owner of the lease's bucket, waiting through a hand-over as a check does.
func (e *Engine) Release(ctx context.Context, tenantID, id string, now time.Time) (Released, error) {
	p, ok := parseLease(id)
	if !ok {
		return Released{}, errNoLease()
	}
	tenant, policy, _, ok := bus.SplitBucketKey(p.key)
	if !ok || tenant != tenantID {
		return Released{}, errNoLease()
	}
	tv := e.view.Load().tenant(tenantID)
	if tv == nil {
		return Released{}, errs.Errorf(errs.Unauthenticated, "The service key's tenant no longer exists.")
	}
	pv := tv.byID[policy]
	if pv == nil {
		return Released{}, errNoLease()
	}
	nowNS := now.UnixNano()
	d := decision{key: []byte(p.key), tenantID: tenantID, pv: pv, tier: p.tier, keyID: p.keyID, now: nowNS, lease: p.lease, release: true}
	held, _, err := e.decide(ctx, &d, nil)
	if err != nil {
		return Released{}, err
	}
	r := Released{Status: LeaseReleased, Expires: time.Unix(0, p.lease.Expires).UTC()}
	switch {
	case held:
	case nowNS >= p.lease.Expires:
		r.Status = LeaseExpired
	default:
		r.Status = LeaseAlreadyReleased
	}
	return r, nil
}

// leaseBook takes and gives back the slots of concurrency limits in this
// server's hot cache, as their buckets' owner, and counts them for the
// metrics.
type leaseBook struct {
	cache *quota.Cache
	bound *tenantBound
	keys  leaseKeys
	// acquired and released count slots taken and given back here.
	acquired, released prometheus.Counter
}

func newLeaseBook(cache *quota.Cache, bound *tenantBound) *leaseBook {
	return &leaseBook{cache: cache, bound: bound,
		acquired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_concurrency_leases_acquired_total", Help: "Slots of concurrency limits taken on this server, as their buckets' owner.",
		}),
		released: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_concurrency_leases_released_total", Help: "Slots of concurrency limits given back by a release on this server, as their buckets' owner (expired leases are not counted).",
		}),
	}
}

// acquire decides d, a consuming check that takes a lease: on its bucket,
// or on its tenant's overflow bucket when the tenant holds its bound of
// buckets here (as Engine.decideCache).
func (lb *leaseBook) acquire(d *decision, out []quota.Outcome) (bool, int) {
	key, b := d.key, lb.bound
	allowed, report, ok := lb.cache.AcquireBytesBound(key, b.max, d.limits, d.now, d.cost, d.lease, out)
	if !ok {
		key = b.overflow(d.key, d.tier, d.keyID)
		allowed, report, _ = lb.cache.AcquireBytesBound(key, -1, d.limits, d.now, d.cost, d.lease, out)
	}
	if allowed && hasConcurrency(d.limits) {
		lb.acquired.Inc()
		lb.keys.note(key, d.limits)
	}
	return allowed, report
}

// release gives back d's lease, from its bucket or its tenant's overflow
// bucket, and reports whether either held it live at d.now.
func (lb *leaseBook) release(d *decision) bool {
	held := lb.cache.Release(d.key, d.lease.Token, d.now)
	if !held {
		of, _ := lb.bound.keyOf(d.key, d.tier, d.keyID, false)
		held = !bytes.Equal(of, d.key) && lb.cache.Release(of, d.lease.Token, d.now)
	}
	if held {
		lb.released.Inc()
	}
	return held
}

// inFlight counts the slots held here at now.
func (lb *leaseBook) inFlight(now int64) int64 { return lb.keys.inFlight(lb.cache, now) }

// leaseKeys remembers the buckets of this server's cache that may hold
// leases, for the in-flight gauge: those it took a lease on or loaded
// with leases. A scrape counts their live leases and forgets the buckets
// that hold none, so the set is bounded by the buckets with slots held.
// The zero leaseKeys is ready to use.
type leaseKeys struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

// note remembers key if limits hold a concurrency limit.
func (lk *leaseKeys) note(key []byte, limits []quota.Limit) {
	if lk == nil || !hasConcurrency(limits) {
		return
	}
	lk.mu.Lock()
	if lk.keys == nil {
		lk.keys = map[string]struct{}{}
	}
	if _, ok := lk.keys[string(key)]; !ok {
		lk.keys[string(key)] = struct{}{}
	}
	lk.mu.Unlock()
}

// inFlight counts the leases live at now in the noted buckets of cache.
func (lk *leaseKeys) inFlight(cache *quota.Cache, now int64) int64 {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	var total int64
	var n [MaxLimits]int64
	for k := range lk.keys {
		held := int64(0)
		if cache.InFlight([]byte(k), now, n[:]) {
			for _, v := range n {
				held += v
			}
		}
		if held == 0 {
			delete(lk.keys, k)
		}
		total += held
	}
	return total
}

// hasConcurrency reports whether limits hold a concurrency limit.
func hasConcurrency(limits []quota.Limit) bool {
	for i := range limits {
		if limits[i].Algorithm == quota.Concurrency {
			return true
		}
	}
	return false
}
