package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
)

// Units reach the daily usage through the counter stream exactly once,
// each on its day in the tenant's zone: in Kolkata (+05:30) the minute
// starting at 18:29 UTC is still January 31, the next is February 1. A
// key's units past the analytics' top identities stay the key's; IP
// callers count under no key; a refund subtracts.
func TestDailyUsageInTheTenantsZone(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	tn, _, _, err := e.w.store.CreateTenant(ctx, "billing", "owner@billing.test", "a long passphrase", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.w.store.SetTenantTimeZone(ctx, tn.ID, "Asia/Kolkata", time.Now()); err != nil {
		t.Fatal(err)
	}
	key, _, _, err := e.w.store.CreateConsumerKey(ctx, tn.ID, "customer", "pro", nil, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.run(t)
	lastJan := time.Date(2027, time.January, 31, 18, 29, 0, 0, time.UTC).Unix() / 60 // 23:59 in Kolkata
	row := func(policy, kind, id string, minute, allowed, denied, units int64) bus.CounterRow {
		return bus.CounterRow{CounterKey: bus.CounterKey{TenantID: tn.ID, Policy: policy, Tier: "pro", IdentityKind: kind, IdentityID: id, Minute: minute},
			Allowed: allowed, Denied: denied, Units: units}
	}
	batch := bus.CounterBatch{V: bus.WireVersion, Node: "n1", Rows: []bus.CounterRow{
		row("api", "key", key.ID, lastJan, 2, 1, 7),
		row("api", "key", key.ID, lastJan+1, 1, 0, 5),
		row("api", "ip", "192.0.2.1", lastJan, 1, 0, 1),
		row("search", "key", key.ID, lastJan+1, 3, 0, 3),
		row("api", "key", key.ID, lastJan+1, 0, 0, -2), // a refund, units alone
		row("api", "key", "key_gone", lastJan, 1, 0, 4),
		row("api", "key", "invalid_key", lastJan, 0, 9, 0),
	}}
	// Many more identities than the analytics keep: the usage rows stay.
	for i := range 50 {
		batch.Rows = append(batch.Rows, row("api", "ip", fmt.Sprintf("10.0.0.%d", i), lastJan, 0, 1, 0))
	}
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-c-1", batch)
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-c-1", batch) // a retried publish
	// Another tenant's units, and a tenant that no longer exists.
	other := bus.CounterBatch{V: bus.WireVersion, Node: "n1", Rows: []bus.CounterRow{
		{CounterKey: bus.CounterKey{TenantID: "ten_gone", Policy: "api", IdentityKind: "ip", IdentityID: "192.0.2.9", Minute: lastJan}, Allowed: 1, Units: 100},
	}}
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-c-2", other)
	eventually(t, 10*time.Second, "usage committed", func() bool {
		var n int64
		_ = e.db.QueryRow(`SELECT COALESCE(SUM(units), 0) FROM usage_daily`).Scan(&n)
		return n == 7+5+1+3-2+4
	})
	time.Sleep(300 * time.Millisecond) // the duplicate and the gone tenant's batch had their chance
	byKey, err := e.w.usage(ctx, service.UsageQuery{TenantID: tn.ID, From: "2027-01-31", To: "2027-02-01"})
	if err != nil {
		t.Fatal(err)
	}
	if byKey.Group != "key" || byKey.TimeZone != "Asia/Kolkata" || byKey.Total != 18 {
		t.Fatalf("usage %+v", byKey)
	}
	want := []service.UsageRow{
		{Day: "2027-01-31", KeyID: "", Policy: "api", Units: 1},
		{Day: "2027-01-31", KeyID: key.ID, KeyName: "customer", KeyPrefix: key.Prefix, Policy: "api", Units: 7},
		{Day: "2027-01-31", KeyID: "key_gone", Policy: "api", Units: 4},
		{Day: "2027-02-01", KeyID: key.ID, KeyName: "customer", KeyPrefix: key.Prefix, Policy: "api", Units: 3},
		{Day: "2027-02-01", KeyID: key.ID, KeyName: "customer", KeyPrefix: key.Prefix, Policy: "search", Units: 3},
	}
	if fmt.Sprint(byKey.Rows) != fmt.Sprint(want) {
		t.Fatalf("rows by key\n got %+v\nwant %+v", byKey.Rows, want)
	}
	byPolicy, err := e.w.usage(ctx, service.UsageQuery{TenantID: tn.ID, From: "2027-01-31T18:30:00Z", To: "2027-02-01", Group: "policy"})
	if err != nil {
		t.Fatal(err)
	}
	wantP := []service.UsageRow{{Day: "2027-02-01", Policy: "api", Units: 3}, {Day: "2027-02-01", Policy: "search", Units: 3}}
	if byPolicy.From != "2027-02-01" || fmt.Sprint(byPolicy.Rows) != fmt.Sprint(wantP) {
		t.Fatalf("by policy from an RFC 3339 time (February 1 in Kolkata): %+v", byPolicy)
	}

	for _, c := range []struct {
		q     service.UsageQuery
		field string
	}{
		{service.UsageQuery{From: "soon", To: "2027-01-01"}, "from"},
		{service.UsageQuery{From: "2027-01-01", To: "1 Jan"}, "to"},
		{service.UsageQuery{From: "2027-13-01", To: "2027-01-01"}, "from"},
		{service.UsageQuery{From: "2027-02-01", To: "2027-01-01"}, "to"},
		{service.UsageQuery{From: "2026-01-01", To: "2027-02-05"}, "to"},
		{service.UsageQuery{From: "2027-01-01", To: "2027-01-02", Group: "tier"}, "group"},
	} {
		c.q.TenantID = tn.ID
		_, err := e.w.usage(ctx, c.q)
		if errs.Code(err) != errs.Invalid || !strings.HasPrefix(errs.Message(err), c.field+":") {
			t.Errorf("%+v: %v, want an invalid request naming %s", c.q, err, c.field)
		}
	}
	if _, err := e.w.usage(ctx, service.UsageQuery{TenantID: tn.ID, From: "2026-01-01", To: "2027-02-04"}); err != nil {
		t.Errorf("400 days: %v", err)
	}

	// Retention: rows older than 400 days go, the rest stay.
	if _, err := e.db.Exec(`INSERT INTO usage_daily (tenant_id, day, policy, key_id, units) VALUES (?, '2025-12-01', 'api', '', 1)`, tn.ID); err != nil {
		t.Fatal(err)
	}
	n, err := e.w.pruneUsage(ctx, time.Date(2027, time.February, 1, 0, 0, 0, 0, time.UTC))
	if err != nil || n != 1 {
		t.Fatalf("pruned %d rows (%v), want the one older than 400 days", n, err)
	}
}

// A range whose answer would pass MaxUsageRows is refused, naming to, and
// the same days per policy, a few rows, are answered.
func TestDailyUsageRowCap(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	tn, _, _, err := e.w.store.CreateTenant(ctx, "big", "owner@big.test", "a long passphrase", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tx, err := e.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	st, err := tx.Prepare(`INSERT INTO usage_daily (tenant_id, day, policy, key_id, units) VALUES (?, ?, 'api', ?, 1)`)
	if err != nil {
		t.Fatal(err)
	}
	for i := range service.MaxUsageRows + 1 {
		day := "2027-01-01"
		if i%2 == 1 {
			day = "2027-01-02"
		}
		if _, err := st.Exec(tn.ID, day, fmt.Sprintf("key_%06d", i)); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	_, err = e.w.usage(ctx, service.UsageQuery{TenantID: tn.ID, From: "2027-01-01", To: "2027-01-02"})
	if errs.Code(err) != errs.Invalid || !strings.HasPrefix(errs.Message(err), "to: ") {
		t.Fatalf("a range of %d rows: %v", service.MaxUsageRows+1, err)
	}
	one, err := e.w.usage(ctx, service.UsageQuery{TenantID: tn.ID, From: "2027-01-01", To: "2027-01-01"})
	if err != nil || len(one.Rows) != service.MaxUsageRows/2+1 {
		t.Fatalf("one day: %d rows, %v", len(one.Rows), err)
	}
	byPolicy, err := e.w.usage(ctx, service.UsageQuery{TenantID: tn.ID, From: "2027-01-01", To: "2027-01-02", Group: "policy"})
	if err != nil || len(byPolicy.Rows) != 2 || byPolicy.Total != service.MaxUsageRows+1 {
		t.Fatalf("per policy: %+v, %v", byPolicy.Rows, err)
	}
}

// Without from and to, usage is the current month in the tenant's zone;
// one end given keeps it and defaults the other.
func TestUsageRangeDefaults(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Skip(err)
	}
	now := time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC) // December 1st in Tokyo
	for _, tc := range []struct {
		from, to         string
		loc              *time.Location
		wantFrom, wantTo string
	}{
		{"", "", time.UTC, "2026-11-01", "2026-11-30"},
		{"", "", tokyo, "2026-12-01", "2026-12-31"},
		{"2026-11-10", "", time.UTC, "2026-11-10", "2026-11-30"},
		{"", "2026-10-12", time.UTC, "2026-10-01", "2026-10-12"},
		{"2026-09-01", "2026-09-03", tokyo, "2026-09-01", "2026-09-03"},
	} {
		from, to, err := usageRange(tc.from, tc.to, tc.loc, now)
		if err != nil || from.Format(time.DateOnly) != tc.wantFrom || to.Format(time.DateOnly) != tc.wantTo {
			t.Errorf("%q–%q in %s: %s–%s %v, want %s–%s", tc.from, tc.to, tc.loc, from.Format(time.DateOnly), to.Format(time.DateOnly), err, tc.wantFrom, tc.wantTo)
		}
	}
	if _, _, err := usageRange("soon", "", time.UTC, now); err == nil {
		t.Error("a from that is no date: no error")
	}
}
