package engine

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/tenants"
)

// calendarSnapshot is a tenant in New York with a month quota of 3 on
// /api/*, and the instant of the last second of January there.
func calendarSnapshot(t testing.TB) (tenants.Snapshot, time.Time) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	snap := tenants.Snapshot{Version: 1,
		Tenants: []tenants.Tenant{{ID: "ten_a", Name: "a", TimeZone: "America/New_York"}},
		Policies: []tenants.Policy{{ID: "pol_m", TenantID: "ten_a", Name: "monthly", Method: "*", Path: "/api/*", Consistency: "exact", CreatedAt: t0,
			Tiers: map[string]tenants.Limits{"anonymous": {{Algorithm: "fixed_window", Limit: 3, Calendar: "month"}}}}},
	}
	return snap, time.Date(2027, time.January, 31, 23, 59, 59, 0, ny)
}

func mustCheck(t *testing.T, e *Engine, ip string, now time.Time) Answer {
	t.Helper()
	a, err := e.Check(context.Background(), "ten_a", &CheckRequest{IP: ip, Path: "/api/x"}, now)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A month quota counts to the month's end in the tenant's zone: the third
// call in the last second of January is allowed, the fourth waits exactly
// until local midnight, and February starts full. Moving the tenant to
// another zone moves the next reset.
func TestCalendarQuotaInTheTenantsZone(t *testing.T) {
	snap, last := calendarSnapshot(t)
	e := newTestEngine(t, snap)
	for i := 0; i < 3; i++ {
		if a := mustCheck(t, e, "198.51.100.1", last); !a.Allowed {
			t.Fatalf("call %d denied: %+v", i+1, a)
		}
	}
	a := mustCheck(t, e, "198.51.100.1", last)
	if a.Allowed || a.RetryAfter != time.Second || a.Reset != time.Second {
		t.Fatalf("fourth call: %+v, want denied, retry and reset in 1s (local midnight)", a)
	}
	if len(a.Limits) != 1 || a.Limits[0].Period != 30*24*time.Hour {
		t.Fatalf("limits %+v", a.Limits)
	}
	feb := last.Add(time.Second)
	a = mustCheck(t, e, "198.51.100.1", feb)
	if !a.Allowed || a.Remaining != 2 {
		t.Fatalf("first call of February: %+v", a)
	}
	// February 2027 has 28 days: the reset is March 1 in New York.
	ny := last.Location()
	if want := time.Date(2027, time.March, 1, 0, 0, 0, 0, ny).Sub(feb); a.Reset != want {
		t.Fatalf("February's reset in %s, want %s", a.Reset, want)
	}
	// At 23:59:59 in New York it is already February in UTC: a UTC tenant's
	// caller starts February there.
	v, err := e.view.Load().apply(tenants.Change{Kind: tenants.ChangeTenant, Version: 2, Tenant: &tenants.Tenant{ID: "ten_a", Name: "a", TimeZone: "UTC"}})
	if err != nil {
		t.Fatal(err)
	}
	e.view.Store(v)
	a = mustCheck(t, e, "198.51.100.2", last)
	if want := time.Date(2027, time.March, 1, 0, 0, 0, 0, time.UTC).Sub(last); !a.Allowed || a.Reset != want {
		t.Fatalf("after the move to UTC: %+v, want a reset at March 1 UTC (%s)", a, want)
	}
}

// A bucket persisted in the last second of a month and loaded again (a
// restart, or a partition moving to another server) keeps its count in
// that second and starts full in the next month: a restart neither resets
// early nor carries over.
func TestCalendarQuotaAcrossARestart(t *testing.T) {
	snap, last := calendarSnapshot(t)
	e := newTestEngine(t, snap)
	mustCheck(t, e, "198.51.100.1", last)
	mustCheck(t, e, "198.51.100.1", last)
	var saved []byte
	var key string
	e.cache.DrainDirty(func(k string, limits []quota.Limit, states []quota.State, _ int64) {
		key = k
		saved = bus.AppendState(nil, bus.EncodeLimits(limits), bus.EncodeStates(states))
	})
	if saved == nil {
		t.Fatal("nothing to persist")
	}
	restart := func() *Engine {
		e2 := newTestEngine(t, snap)
		limits, states, err := bus.DecodeStateInto(saved, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		e2.cache.Load(key, limits, states, 0)
		return e2
	}
	e2 := restart()
	if a := mustCheck(t, e2, "198.51.100.1", last.Add(500*time.Millisecond)); !a.Allowed || a.Remaining != 0 {
		t.Fatalf("after a restart in the same second: %+v, want the third and last call allowed", a)
	}
	if a := mustCheck(t, e2, "198.51.100.1", last.Add(600*time.Millisecond)); a.Allowed {
		t.Fatalf("after a restart in the same second, a fourth call: %+v, want denied", a)
	}
	e3 := restart()
	if a := mustCheck(t, e3, "198.51.100.1", last.Add(time.Second)); !a.Allowed || a.Remaining != 2 {
		t.Fatalf("after a restart in the next month: %+v, want a full bucket", a)
	}
}

// A key's billing anchor moves its month quotas to its own day: a key
// anchored on the 31st resets on the last day of shorter months, and its
// neighbour without an anchor on the 1st.
func TestCalendarQuotaOnTheKeysAnchor(t *testing.T) {
	snap, _ := calendarSnapshot(t)
	ny, _ := time.LoadLocation("America/New_York")
	plain, _, hash, _ := tenants.GenerateKey("ck_")
	other, _, otherHash, _ := tenants.GenerateKey("ck_")
	snap.Policies[0].Tiers["pro"] = tenants.Limits{{Algorithm: "fixed_window", Limit: 2, Calendar: "month"}}
	snap.ConsumerKeys = []tenants.ConsumerKeyRecord{
		{ConsumerKey: tenants.ConsumerKey{ID: "key_31", TenantID: "ten_a", Name: "anchored", Tier: "pro", Hash: hash, BillingAnchor: 31}},
		{ConsumerKey: tenants.ConsumerKey{ID: "key_1", TenantID: "ten_a", Name: "plain", Tier: "pro", Hash: otherHash}},
	}
	e := newTestEngine(t, snap)
	check := func(key string, at time.Time) Answer {
		t.Helper()
		a, err := e.Check(context.Background(), "ten_a", &CheckRequest{APIKey: key, Path: "/api/x"}, at)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	// March 5: the anchored key's month began on February 28 (2027 is not
	// a leap year) and ends on March 31; the other key's on March 1 and
	// April 1.
	at := time.Date(2027, time.March, 5, 12, 0, 0, 0, ny)
	a := check(plain, at)
	if want := time.Date(2027, time.March, 31, 0, 0, 0, 0, ny).Sub(at); !a.Allowed || a.Reset != want {
		t.Fatalf("anchored key: %+v, want a reset on March 31 (%s)", a, want)
	}
	b := check(other, at)
	if want := time.Date(2027, time.April, 1, 0, 0, 0, 0, ny).Sub(at); !b.Allowed || b.Reset != want {
		t.Fatalf("key without an anchor: %+v, want a reset on April 1 (%s)", b, want)
	}
	check(plain, at)
	if a := check(plain, at); a.Allowed {
		t.Fatalf("third call of the anchored key's month: %+v", a)
	}
	if a := check(plain, time.Date(2027, time.March, 31, 0, 0, 0, 0, ny)); !a.Allowed || a.Remaining != 1 {
		t.Fatalf("the anchored key on March 31: %+v, want a new month", a)
	}
	// A forwarded decision finds the same limits by the key.
	ls := e.view.Load().limitsFor("ten_a", "pol_m", "pro", "key_31")
	if len(ls) != 1 || ls[0].Calendar == nil || ls[0].Calendar.Anchor() != 31 {
		t.Fatalf("limitsFor the anchored key: %+v", ls)
	}
	// A peek names the key too, so a forwarded peek reads the same bucket
	// with the same limits on the owner.
	tv := e.view.Load().tenant("ten_a")
	key, _ := tv.keys.byID.get("key_31")
	if _, tl, keyID := tv.policies[0].callerBucket(key, "pro"); keyID != "key_31" || tl == nil || tl.limits[0].Calendar.Anchor() != 31 {
		t.Fatalf("a peek of the anchored key: key %q, limits %+v; want the key named and its anchor", keyID, tl)
	}
}

// A key's overrides apply whatever they hold; one with a calendar limit
// follows the tenant's time zone when it changes.
func TestOverridesAndTheTenantsZone(t *testing.T) {
	snap, last := calendarSnapshot(t)
	plain, _, hash, _ := tenants.GenerateKey("ck_")
	cal, _, calHash, _ := tenants.GenerateKey("ck_")
	snap.ConsumerKeys = []tenants.ConsumerKeyRecord{
		{ConsumerKey: tenants.ConsumerKey{ID: "key_p", TenantID: "ten_a", Name: "periodic", Tier: "pro", Hash: hash,
			Overrides: map[string]tenants.Limits{"monthly": {{Algorithm: "token_bucket", Limit: 50, Period: "60s"}}}}},
		{ConsumerKey: tenants.ConsumerKey{ID: "key_c", TenantID: "ten_a", Name: "calendar", Tier: "pro", Hash: calHash,
			Overrides: map[string]tenants.Limits{"monthly": {{Algorithm: "fixed_window", Limit: 7, Calendar: "day"}}}}},
	}
	e := newTestEngine(t, snap)
	check := func(key string) Answer {
		t.Helper()
		a, err := e.Check(context.Background(), "ten_a", &CheckRequest{APIKey: key, Path: "/api/x"}, last)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := check(plain); a.Limit != 50 {
		t.Fatalf("periodic override: %+v, want its limit of 50", a)
	}
	if a := check(cal); a.Limit != 7 || a.Reset != time.Second {
		t.Fatalf("calendar override in New York: %+v, want 7 resetting at local midnight (1s)", a)
	}
	v, err := e.view.Load().apply(tenants.Change{Kind: tenants.ChangeTenant, Version: 2, Tenant: &tenants.Tenant{ID: "ten_a", Name: "a", TimeZone: "Asia/Tokyo"}})
	if err != nil {
		t.Fatal(err)
	}
	e.view.Store(v)
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	lt := last.In(tokyo)
	want := time.Date(lt.Year(), lt.Month(), lt.Day()+1, 0, 0, 0, 0, tokyo).Sub(last)
	if a := check(cal); a.Limit != 7 || a.Reset != want {
		t.Fatalf("calendar override after the move to Tokyo: %+v, want a reset at Tokyo's midnight (%s)", a, want)
	}
	if a := check(plain); a.Limit != 50 {
		t.Fatalf("periodic override after the move: %+v", a)
	}
}

// BenchmarkEngineCheckCalendar is BenchmarkEngineCheck for consumer keys
// under a month quota in a zone with a half-hour offset, each check
// costing 3 units: the path a tenant billing by usage takes.
func BenchmarkEngineCheckCalendar(b *testing.B) {
	snap := tenants.Snapshot{Version: 1,
		Tenants: []tenants.Tenant{{ID: "ten_a", Name: "a", TimeZone: "Asia/Kolkata"}},
		Policies: []tenants.Policy{{ID: "pol_m", TenantID: "ten_a", Name: "monthly", Method: "*", Path: "/api/*", Consistency: "exact", CreatedAt: t0,
			Tiers: map[string]tenants.Limits{"pro": {{Algorithm: "fixed_window", Limit: 1 << 40, Calendar: "month"}}}}},
	}
	for _, n := range []int{1, 10_000} {
		secrets := make([]string, n)
		recs := make([]tenants.ConsumerKeyRecord, n)
		for i := range secrets {
			plain, _, hash, err := tenants.GenerateKey("ck_")
			if err != nil {
				b.Fatal(err)
			}
			secrets[i] = plain
			recs[i] = tenants.ConsumerKeyRecord{ConsumerKey: tenants.ConsumerKey{ID: "key_" + itoa(i), TenantID: "ten_a", Tier: "pro", Hash: hash}}
		}
		s := snap
		s.ConsumerKeys = recs
		e := newTestEngine(b, s)
		b.Run("keys="+itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r := CheckRequest{APIKey: secrets[i%n], Path: "/api/items", Method: "GET", Cost: 3}
				if _, err := e.Check(context.Background(), "ten_a", &r, t0); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
