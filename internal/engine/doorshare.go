package engine

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/keyed"
)

// DefaultEnvoyBytesPerSecond is each tenant's share of a server's Envoy
// door (gRPC and the HTTP batch): the bytes of descriptors (domain, keys
// and values) its large calls may make the server read and decide per
// second, in bursts of a second's worth. Calls of doorFreeBytes or less,
// which is every call Envoy sends in practice (a few descriptors of a few
// hundred bytes), are not charged; a tenant sending calls at the door's
// bounds (1 MiB each) is held to 8 a second per server, and the CPU they
// would take stays with the other tenants.
const DefaultEnvoyBytesPerSecond = 8 << 20

// doorFreeBytes is the largest call the share does not charge: its cost
// is that of any cheap request, bounded like checks are, by the CPU it
// takes.
const doorFreeBytes = 4 << 10

const (
	// doorWaitMax is the longest a call past its tenant's share waits
	// for it (within the call's own deadline) before it is refused.
	doorWaitMax = time.Second
	// doorWaitersMax is the most calls of one tenant waiting at once on a
	// server; past it the next is refused at once.
	doorWaitersMax = 8
	// doorTenantsMax bounds the tenants remembered (they are
	// authenticated); past it the least recently seen is forgotten.
	doorTenantsMax = 1 << 16
)

// doorShare holds each tenant's share of the Envoy door on this server,
// as a token bucket of bytes per tenant kept in its GCRA form: the instant
// the tenant's bucket is full again, tat. A call of n bytes reserves its
// bytes at once, moving tat on by n's time at the rate, and waits until
// its reservation is within the burst: calls past the share are decided
// in the order they came, each waiting only its own bytes' time (a
// keyed.Buckets, which only answers yes or no, would let a call that
// polls at the right moment pass another that waits). A call whose wait
// would pass doorWaitMax, or that would be the tenant's doorWaitersMax+1-th
// waiting, is refused and reserves nothing. Safe for concurrent use; nil
// shares nothing.
type doorShare struct {
	rate  float64 // bytes a nanosecond
	burst int64   // bytes

	mu      sync.Mutex
	tat     *keyed.Table[string, int64] // unix ns
	waiting map[string]int
}

// newDoorShare returns the share of perSecond bytes a second per tenant;
// nil (no share) when perSecond is negative.
func newDoorShare(perSecond int64) *doorShare {
	if perSecond < 0 {
		return nil
	}
	if perSecond == 0 {
		perSecond = DefaultEnvoyBytesPerSecond
	}
	return &doorShare{rate: float64(perSecond) / 1e9, burst: perSecond,
		tat: keyed.NewTable[string, int64](doorTenantsMax), waiting: map[string]int{}}
}

// callBytes is what a call costs the door: its domain's, keys' and
// values' bytes.
func callBytes(req *RLSRequest) int64 {
	n := int64(len(req.Domain))
	for i := range req.Descriptors {
		for _, en := range req.Descriptors[i].Entries {
			n += int64(len(en.Key) + len(en.Value))
		}
	}
	return n
}

// take charges a call of n bytes to tenant, waiting for its share when
// past it. It answers how long it waited, or the refusal: rate_limited
// when waiting would take too long or too many of the tenant's calls
// wait already, the context's error when the call ends first (its bytes
// stay spent: the server read them).
func (d *doorShare) take(ctx context.Context, tenant string, n int64) (time.Duration, error) {
	if d == nil || n <= doorFreeBytes {
		return 0, nil
	}
	n = min(n, d.burst) // a call of more than a burst is a burst's worth
	cost := int64(float64(n) / d.rate)
	window := int64(float64(d.burst) / d.rate) // the burst's time
	now := time.Now().UnixNano()
	d.mu.Lock()
	tat, _ := d.tat.Get(tenant, 0)
	next := max(*tat, now) + cost
	wait := time.Duration(next - window - now)
	if wait <= 0 {
		*tat = next
		d.mu.Unlock()
		return 0, nil
	}
	if wait > doorWaitMax || d.waiting[tenant] >= doorWaitersMax {
		d.mu.Unlock()
		return 0, errs.Limited(wait, "envoy: this tenant's calls are past its share of this server (%d bytes of descriptors a second); retry after %d ms",
			d.burst, max(wait.Milliseconds(), 1))
	}
	*tat = next
	d.waiting[tenant]++
	d.mu.Unlock()
	t := time.NewTimer(wait)
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	d.mu.Lock()
	if d.waiting[tenant]--; d.waiting[tenant] == 0 {
		delete(d.waiting, tenant)
	}
	d.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return wait, err
	}
	return wait, nil
}
