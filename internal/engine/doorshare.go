package engine

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/quota"
)

// DefaultEnvoyBytesPerSecond is each tenant's share of a server's Envoy
// door (gRPC and the HTTP batch): the bytes of descriptors (domain, keys
// and values) its calls may make the server read and decide per second,
// in bursts of a second's worth. A call of ordinary descriptors is a few
// hundred bytes, so this is tens of thousands of calls a second; a tenant
// sending calls at the door's bounds (1 MiB each) is held to 8 a second
// per server, and the CPU they would take stays with the other tenants.
const DefaultEnvoyBytesPerSecond = 8 << 20

const (
	// doorWaitMax is the longest a call past its tenant's share waits
	// for it (within the call's own deadline) before it is refused.
	doorWaitMax = time.Second
	// doorWaitersMax is the most calls of one tenant waiting at once on a
	// server; past it the next is refused at once.
	doorWaitersMax = 8
	// doorTenantsMax bounds the tenants remembered (they are
	// authenticated; full buckets are dropped first).
	doorTenantsMax = 1 << 16
)

// doorShare holds each tenant's share of the Envoy door on this server: a
// token bucket of bytes per tenant. A call past it waits until its bytes
// are there (at most doorWaitMax, and at most doorWaitersMax calls of the
// tenant at once), then is decided; else it is refused with
// rate_limited. Safe for concurrent use; nil shares nothing.
type doorShare struct {
	burst int64

	mu      sync.Mutex
	b       *keyed.Buckets[string]
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
	l := quota.Limit{Algorithm: quota.TokenBucket, Limit: perSecond, Period: time.Second, Burst: perSecond}
	return &doorShare{burst: perSecond, b: keyed.NewBuckets[string](l, doorTenantsMax), waiting: map[string]int{}}
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
// wait already, the context's error when the call ends first.
func (d *doorShare) take(ctx context.Context, tenant string, n int64) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	n = min(n, d.burst) // a call of more than a burst is a burst's worth
	start := time.Now()
	waited := time.Duration(0)
	for {
		d.mu.Lock()
		o := d.b.Take(tenant, time.Now().UnixNano(), n)
		if o.Allowed {
			d.mu.Unlock()
			return waited, nil
		}
		wait := o.RetryAfter
		if waited+wait > doorWaitMax || d.waiting[tenant] >= doorWaitersMax {
			d.mu.Unlock()
			return waited, errs.Limited(wait, "envoy: this tenant's calls are past its share of this server (%d bytes of descriptors a second); retry after %d ms",
				d.burst, max(wait.Milliseconds(), 1))
		}
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
		waited = time.Since(start)
		if err := ctx.Err(); err != nil {
			return waited, err
		}
	}
}
