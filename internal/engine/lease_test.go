package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/tenants"
)

// concSnapshot is snapshot with a policy whose anonymous tier holds 2
// slots beside a rate limit of 3 per hour, and a policy of tenant b.
func concSnapshot(tb testing.TB) tenants.Snapshot {
	snap, _ := snapshot(tb)
	snap.Policies = append(snap.Policies,
		tenants.Policy{ID: "pol_c", TenantID: "ten_a", Name: "export", Method: "*", Path: "/export", Consistency: "exact", CreatedAt: t0,
			Tiers: map[string]tenants.Limits{"anonymous": {
				{Name: "rate", Algorithm: "fixed_window", Limit: 3, Period: "1h"},
				{Name: "slots", Algorithm: "concurrency", Limit: 2},
			}}},
		tenants.Policy{ID: "pol_cb", TenantID: "ten_b", Name: "stream", Method: "*", Path: "/stream", Consistency: "exact", CreatedAt: t0,
			Tiers: map[string]tenants.Limits{"anonymous": {{Algorithm: "concurrency", Limit: 1}}}},
	)
	return snap
}

func mustCheckC(t *testing.T, e *Engine, tenant string, r CheckRequest, at time.Time) Answer {
	t.Helper()
	a, err := e.Check(t.Context(), tenant, &r, at)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Slots are taken by allowed checks, answered with a lease, given back by
// a release and by expiry (the engine's clock, no sleeping); a denial by
// the concurrency limit says so and takes no unit of the rate limit.
func TestConcurrencyLeases(t *testing.T) {
	e := newTestEngine(t, concSnapshot(t))
	req := CheckRequest{IP: "192.0.2.1", Path: "/export", LeaseTTL: 10 * time.Second}
	a1 := mustCheckC(t, e, "ten_a", req, t0)
	if !a1.Allowed || !strings.HasPrefix(a1.Lease, "lse_") || !a1.LeaseExpires.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("first: %+v", a1)
	}
	a2 := mustCheckC(t, e, "ten_a", req, t0)
	if !a2.Allowed || a2.Lease == a1.Lease {
		t.Fatalf("second: %+v", a2)
	}
	a3 := mustCheckC(t, e, "ten_a", req, t0.Add(time.Second))
	if a3.Allowed || a3.Reason != ReasonConcurrencyLimited || a3.Lease != "" || a3.RetryAfter != 9*time.Second {
		t.Fatalf("third, both slots held: %+v", a3)
	}
	if a3.Limits[0].Remaining != 1 {
		t.Fatalf("the concurrency denial took a unit of the rate limit: %+v", a3.Limits)
	}

	r, err := e.Release(t.Context(), "ten_a", a1.Lease, t0.Add(2*time.Second))
	if err != nil || r.Status != LeaseReleased {
		t.Fatalf("release: %+v %v", r, err)
	}
	r, err = e.Release(t.Context(), "ten_a", a1.Lease, t0.Add(2*time.Second))
	if err != nil || r.Status != LeaseAlreadyReleased {
		t.Fatalf("release twice: %+v %v", r, err)
	}
	a4 := mustCheckC(t, e, "ten_a", req, t0.Add(2*time.Second))
	if !a4.Allowed || a4.Lease == "" {
		t.Fatalf("after a release: %+v", a4)
	}
	// The rate limit (3 an hour) is spent now: its denial takes no slot.
	mustCheckC(t, e, "ten_a", CheckRequest{IP: "192.0.2.1", Path: "/export"}, t0.Add(3*time.Second)) // denied: slots
	r, _ = e.Release(t.Context(), "ten_a", a4.Lease, t0.Add(3*time.Second))
	a5 := mustCheckC(t, e, "ten_a", req, t0.Add(3*time.Second))
	if a5.Allowed || a5.Reason != ReasonRateLimited {
		t.Fatalf("rate limit spent: %+v", a5)
	}
	if got := e.leases.inFlight(t0.Add(3 * time.Second).UnixNano()); got != 1 {
		t.Fatalf("in flight %d, want 1 (a2): a rate-limit denial took a slot", got)
	}
	// a2 expires at t0+10s by itself; releasing it after answers expired.
	if got := e.leases.inFlight(t0.Add(10 * time.Second).UnixNano()); got != 0 {
		t.Fatalf("in flight after the TTL %d, want 0", got)
	}
	r, err = e.Release(t.Context(), "ten_a", a2.Lease, t0.Add(11*time.Second))
	if err != nil || r.Status != LeaseExpired {
		t.Fatalf("release after expiry: %+v %v", r, err)
	}
}

// A lease of tenant a is unknown to tenant b, and a malformed or forged
// one to both: 404, and the slot stays held.
func TestReleaseTenantIsolation(t *testing.T) {
	e := newTestEngine(t, concSnapshot(t))
	a := mustCheckC(t, e, "ten_a", CheckRequest{IP: "192.0.2.1", Path: "/export"}, t0)
	if !a.Allowed || a.Lease == "" {
		t.Fatalf("check: %+v", a)
	}
	b := mustCheckC(t, e, "ten_b", CheckRequest{IP: "192.0.2.1", Path: "/stream"}, t0)
	for _, id := range []string{a.Lease, "lse_", "lse_!!!", "nope", strings.Repeat("x", 5000), a.Lease[:len(a.Lease)-3], "lse_AQ"} {
		if _, err := e.Release(t.Context(), "ten_b", id, t0); errs.Code(err) != errs.NotFound {
			t.Fatalf("tenant b releasing %.40q: %v, want not_found", id, err)
		}
	}
	if _, err := e.Release(t.Context(), "ten_a", b.Lease, t0); errs.Code(err) != errs.NotFound {
		t.Fatalf("tenant a releasing b's lease: %v, want not_found", err)
	}
	if got := e.leases.inFlight(t0.UnixNano()); got != 2 {
		t.Fatalf("in flight %d, want 2: a refused release freed a slot", got)
	}
}

func TestLeaseTTLBounds(t *testing.T) {
	e := newTestEngine(t, concSnapshot(t))
	for _, ttl := range []time.Duration{time.Millisecond, 999 * time.Millisecond, 25 * time.Hour, -time.Second} {
		_, err := e.Check(t.Context(), "ten_a", &CheckRequest{IP: "192.0.2.1", Path: "/export", LeaseTTL: ttl}, t0)
		if errs.Code(err) != errs.Invalid || !strings.HasPrefix(errs.Message(err), "lease_ttl:") {
			t.Fatalf("lease_ttl %v: %v, want invalid naming lease_ttl", ttl, err)
		}
	}
	a := mustCheckC(t, e, "ten_a", CheckRequest{IP: "192.0.2.1", Path: "/export"}, t0)
	if !a.LeaseExpires.Equal(t0.Add(DefaultLeaseTTL)) {
		t.Fatalf("default TTL: expires %v", a.LeaseExpires)
	}
	// A peek takes no slot and answers no lease.
	for range 3 {
		if p := mustCheckC(t, e, "ten_a", CheckRequest{IP: "192.0.2.2", Path: "/export", Peek: true}, t0); !p.Allowed || p.Lease != "" {
			t.Fatalf("peek: %+v", p)
		}
	}
}

func TestLeaseIDRoundTrip(t *testing.T) {
	id := leaseID([]byte("ten_a/pol_c/ip:192.0.2.1"), "anonymous", "ckey_1", leaseOf(-5, 77))
	p, ok := parseLease(id)
	if !ok || p.key != "ten_a/pol_c/ip:192.0.2.1" || p.tier != "anonymous" || p.keyID != "ckey_1" || p.lease.Token != -5 || p.lease.Expires != 77 {
		t.Fatalf("parse %q: %+v %v", id, p, ok)
	}
	for n := range len(id) {
		if _, ok := parseLease(id[:n]); ok && n < len(id)-1 {
			t.Fatalf("a lease id cut at %d parsed", n)
		}
	}
}

func leaseOf(token, expires int64) quota.Lease { return quota.Lease{Token: token, Expires: expires} }

// BenchmarkEngineAcquireRelease is a check that takes a slot and its
// release, on one server, against BenchmarkEngineCheck.
func BenchmarkEngineAcquireRelease(b *testing.B) {
	snap, _ := snapshot(b)
	snap.Policies = append(snap.Policies, tenants.Policy{ID: "pol_c", TenantID: "ten_a", Name: "export", Method: "*", Path: "/export", Consistency: "exact", CreatedAt: t0,
		Tiers: map[string]tenants.Limits{"anonymous": {{Algorithm: "concurrency", Limit: 10}}}})
	e := newTestEngine(b, snap)
	b.ReportAllocs()
	for b.Loop() {
		r := CheckRequest{IP: "10.0.0.1", Path: "/export", Method: "GET"}
		a, err := e.Check(b.Context(), "ten_a", &r, t0)
		if err != nil || !a.Allowed {
			b.Fatal(a, err)
		}
		if rel, err := e.Release(b.Context(), "ten_a", a.Lease, t0); err != nil || rel.Status != LeaseReleased {
			b.Fatal(rel, err)
		}
	}
}

// A concurrency denial counts for analytics under its own reason, and in
// sluice_checks_total with the reason concurrency_limited.
func TestConcurrencyDenialCounted(t *testing.T) {
	e := newTestEngine(t, concSnapshot(t))
	req := CheckRequest{IP: "192.0.2.1", Path: "/export"}
	for range 3 {
		mustCheckC(t, e, "ten_a", req, t0)
	}
	var cl, rl, d int64
	for _, r := range e.counters.drain() {
		cl, rl, d = cl+r.ConcurrencyLimited, rl+r.RateLimited, d+r.Denied
	}
	if cl != 1 || rl != 0 || d != 1 {
		t.Fatalf("counted %d concurrency_limited, %d rate_limited, %d denied; want 1, 0, 1", cl, rl, d)
	}
	if got := testutil.ToFloat64(e.metrics.byReason.concurrencyLimited); got != 1 {
		t.Fatalf("sluice_checks_total{reason=concurrency_limited} = %v, want 1", got)
	}
}
