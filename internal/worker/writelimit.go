package worker

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/tenants"
)

// WriteLimits bounds the writes each tenant's requests make the worker do,
// per second, with bursts of BurstSeconds seconds' worth. The worker is the
// cluster's one writer, so a bucket here is one bucket for the tenant
// across every server: a limit that is exact however many servers there
// are, and that costs a request no other round trip. A request past its
// tenant's limit is refused before it is read or written.
type WriteLimits struct {
	// Settles is POST /v1/settle per tenant per second.
	Settles int
	// Reserves is reservations (checks with reserve) per tenant per second.
	Reserves int
	// ConfigWrites is config writes (policies, keys, webhooks, members,
	// service keys, bucket resets) per tenant per second. The operator's
	// own writes (tenants, blocks) are not limited.
	ConfigWrites int
	// BurstSeconds is how many seconds' worth of each a tenant may use
	// at once.
	BurstSeconds int
}

// Default write limits per tenant.
const (
	DefaultSettlesPerSecond      = 5000
	DefaultReservesPerSecond     = 5000
	DefaultConfigWritesPerSecond = 20
	DefaultWriteBurstSeconds     = 5
)

// WithDefaults fills the zero fields.
func (l WriteLimits) WithDefaults() WriteLimits {
	if l.Settles == 0 {
		l.Settles = DefaultSettlesPerSecond
	}
	if l.Reserves == 0 {
		l.Reserves = DefaultReservesPerSecond
	}
	if l.ConfigWrites == 0 {
		l.ConfigWrites = DefaultConfigWritesPerSecond
	}
	if l.BurstSeconds == 0 {
		l.BurstSeconds = DefaultWriteBurstSeconds
	}
	return l
}

// Validate rejects limits out of range (zero fields take their defaults).
func (l WriteLimits) Validate() error {
	l = l.WithDefaults()
	for _, f := range []struct {
		name string
		v    int
	}{{"--tenant-settles-per-second", l.Settles}, {"--tenant-reserves-per-second", l.Reserves},
		{"--tenant-config-writes-per-second", l.ConfigWrites}} {
		if f.v < 1 || f.v > 1_000_000 {
			return fmt.Errorf("%s %d: must be between 1 and 1000000", f.name, f.v)
		}
	}
	if l.BurstSeconds < 1 || l.BurstSeconds > 3600 {
		return fmt.Errorf("--tenant-write-burst-seconds %d: must be between 1 and 3600", l.BurstSeconds)
	}
	return nil
}

// RegisterWriteLimitFlags adds --tenant-settles-per-second,
// --tenant-reserves-per-second, --tenant-config-writes-per-second and
// --tenant-write-burst-seconds to fs, with SLUICE_TENANT_* environment
// twins read through getenv (the flag wins). cmd/worker and cmd/server (for
// its embedded worker) share them: the worker enforces them.
func RegisterWriteLimitFlags(fs *flag.FlagSet, l *WriteLimits, getenv func(string) string) error {
	*l = l.WithDefaults()
	var bad []error
	add := func(name, env string, p *int, usage string) {
		if v := getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				bad = append(bad, fmt.Errorf("%s: want a positive integer, not %q", env, v))
			} else {
				*p = n
			}
		}
		fs.IntVar(p, name, *p, usage+" ("+env+")")
	}
	add("tenant-settles-per-second", "SLUICE_TENANT_SETTLES_PER_SECOND", &l.Settles, "settles one tenant may make per second, across the cluster")
	add("tenant-reserves-per-second", "SLUICE_TENANT_RESERVES_PER_SECOND", &l.Reserves, "reservations one tenant may make per second, across the cluster")
	add("tenant-config-writes-per-second", "SLUICE_TENANT_CONFIG_WRITES_PER_SECOND", &l.ConfigWrites, "config writes one tenant may make per second, across the cluster")
	add("tenant-write-burst-seconds", "SLUICE_TENANT_WRITE_BURST_SECONDS", &l.BurstSeconds, "seconds' worth of settles, reservations and config writes one tenant may make at once")
	return errors.Join(bad...)
}

// writeKind is what a tenant's write is, each limited on its own.
type writeKind int

const (
	writeSettle writeKind = iota
	writeReserve
	writeConfig
	writeKinds
)

var writeKindNames = [writeKinds]string{"settle", "reserve", "config write"}

// maxWriteTenants bounds the tenants whose buckets of one kind of write
// the worker holds at once. A bucket full again is dropped before a new
// tenant's is made, so only tenants active within the last burst period
// count; past the bound the least recently active tenant's bucket is
// evicted.
const maxWriteTenants = 1 << 16

// writeLimiter holds one token bucket per tenant and kind of write, a
// bounded table per kind (keyed.Buckets). Safe for concurrent use.
// Tenants come authenticated from the servers; a tenant's bucket that is
// full again is dropped as new tenants come, so each table holds the
// tenants active in the last burst period, at a cost per request that
// stays constant.
type writeLimiter struct {
	mu    sync.Mutex
	kinds [writeKinds]*keyed.Buckets[string]
}

func newWriteLimiter(l WriteLimits) *writeLimiter {
	l = l.WithDefaults()
	wl := &writeLimiter{}
	for k, rate := range [writeKinds]int{l.Settles, l.Reserves, l.ConfigWrites} {
		lim := quota.Limit{Algorithm: quota.TokenBucket, Limit: int64(rate), Period: time.Second, Burst: int64(rate * l.BurstSeconds)}
		wl.kinds[k] = keyed.NewBuckets[string](lim, maxWriteTenants)
	}
	return wl
}

// take takes n writes of kind for tenant at now, or answers the
// rate_limited error to refuse them with, naming what was limited and
// when to retry. A refusal takes nothing.
func (l *writeLimiter) take(tenant string, kind writeKind, n int, now time.Time) error {
	if n <= 0 {
		return nil
	}
	b := l.kinds[kind]
	l.mu.Lock()
	o := b.Take(tenant, now.UnixNano(), int64(n))
	l.mu.Unlock()
	if o.Allowed {
		return nil
	}
	lim := b.Limit()
	if o.RetryAfter == quota.Never {
		return errs.Errorf(errs.Invalid, "%s: more at once than the tenant's limit of %d", writeKindNames[kind], lim.Burst)
	}
	return errs.Limited(o.RetryAfter, "%s: more than %d a second for this tenant across the cluster; retry after %d ms",
		writeKindNames[kind], lim.Limit, max(o.RetryAfter.Milliseconds(), 1))
}

// held is the buckets held, over every kind.
func (l *writeLimiter) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, b := range l.kinds {
		n += b.Len()
	}
	return n
}

// Config writes in flight. Each tenant has at most maxConfigInFlight
// config writes past admission at once (between the rate limit and the
// reply); more wait their turn in the tenant's own line, at most
// maxConfigWaiting of them, and past that are refused. So a tenant's
// flood never puts more than maxConfigInFlight writes ahead of another
// tenant's in the store's one writer.
const (
	maxConfigInFlight = 2
	maxConfigWaiting  = 64
)

// configWriteOps are the config writes a tenant's requests make, limited
// per tenant (WriteLimits.ConfigWrites and tenantTurns). Each request
// names its tenant in "tenant_id".
var configWriteOps = map[string]bool{
	bus.OpTenantTimeZone.Name: true,
	bus.OpPolicyCreate.Name:   true, bus.OpPolicyUpdate.Name: true, bus.OpPolicyDelete.Name: true,
	bus.OpKeyCreate.Name: true, bus.OpKeyUpdate.Name: true, bus.OpKeyRevoke.Name: true,
	bus.OpBucketReset.Name: true,
	bus.OpUserCreate.Name:  true, bus.OpUserRole.Name: true, bus.OpUserDelete.Name: true,
	bus.OpServiceKeyCreate.Name: true, bus.OpServiceKeyRevoke.Name: true,
	bus.OpWebhookCreate.Name: true, bus.OpWebhookUpdate.Name: true, bus.OpWebhookDelete.Name: true,
	bus.OpWebhookRotate.Name: true, bus.OpWebhookResend.Name: true,
	bus.OpCustomerCreate.Name: true, bus.OpCustomerUpdate.Name: true, bus.OpCustomerDelete.Name: true,
	bus.OpJWTIssuerCreate.Name: true, bus.OpJWTIssuerUpdate.Name: true, bus.OpJWTIssuerDelete.Name: true,
	bus.OpBlockCreate.Name: true, bus.OpBlockDelete.Name: true,
}

// admitConfigWrite admits one request of op: a tenant's config write is
// limited by the tenant's rate and waits for one of its turns; the
// operator's and Sluice's own writes, and every other operation, pass.
// The returned release ends the write's turn.
func (w *Worker) admitConfigWrite(ctx context.Context, op string, data []byte) (release func(), err error) {
	if !configWriteOps[op] {
		return func() {}, nil
	}
	if a, ok := tenants.ActorFrom(ctx); ok && (a.Kind == tenants.ActorOperator || a.Kind == tenants.ActorSystem) {
		return func() {}, nil
	}
	var scope struct {
		TenantID string `json:"tenant_id"`
	}
	if json.Unmarshal(data, &scope) != nil || scope.TenantID == "" {
		return func() {}, nil // the operation itself refuses it
	}
	if err := w.writes.limits.take(scope.TenantID, writeConfig, 1, w.cfg.Now()); err != nil {
		return nil, err
	}
	return w.writes.configTurns.acquire(ctx, scope.TenantID)
}

// tenantTurns gives each tenant at most perTenant turns at once; more
// wait, first come first served, up to maxWaiting per tenant. Safe for
// concurrent use; a tenant with nobody holding or waiting has no entry.
type tenantTurns struct {
	perTenant, maxWaiting int

	mu sync.Mutex
	m  map[string]*turns
}

type turns struct {
	sem   chan struct{}
	users int // holding or waiting
}

func newTenantTurns(perTenant, maxWaiting int) *tenantTurns {
	return &tenantTurns{perTenant: perTenant, maxWaiting: maxWaiting, m: map[string]*turns{}}
}

// acquire waits for one of tenant's turns, or refuses when too many of
// its writes wait already; release gives the turn back.
func (t *tenantTurns) acquire(ctx context.Context, tenant string) (release func(), err error) {
	t.mu.Lock()
	s := t.m[tenant]
	if s == nil {
		s = &turns{sem: make(chan struct{}, t.perTenant)}
		t.m[tenant] = s
	}
	if s.users >= t.perTenant+t.maxWaiting {
		t.mu.Unlock()
		return nil, errs.Limited(time.Second, "config write: %d of this tenant's writes are waiting already; retry after 1000 ms", t.maxWaiting)
	}
	s.users++
	t.mu.Unlock()
	done := func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if s.users--; s.users == 0 {
			delete(t.m, tenant)
		}
	}
	select {
	case s.sem <- struct{}{}:
		return func() { <-s.sem; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}
