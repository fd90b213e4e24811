package tenants_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

// A tenant starts in UTC; its time zone is set, audited and announced, a
// bad zone is refused naming the field and changes nothing, and setting
// the zone it has changes nothing either.
func TestTenantTimeZone(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a := mustTenant(t, s, "zoned")
	if a.Zone() != "UTC" || a.TimeZone != "UTC" {
		t.Fatalf("new tenant's zone: %q", a.TimeZone)
	}
	v := version(t, s)
	got, changes, err := s.Tenants().SetTimeZone(ctx, a.ID, "Europe/Paris", t0)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, v, changes, tenants.ChangeTenant)
	if got.TimeZone != "Europe/Paris" || changes[0].Tenant.TimeZone != "Europe/Paris" {
		t.Fatalf("after set: %+v", got)
	}
	if back, err := s.Tenants().Get(ctx, a.ID); err != nil || back.TimeZone != "Europe/Paris" {
		t.Fatalf("read back: %+v %v", back, err)
	}
	page, err := s.Audit().List(ctx, tenants.AuditQuery{TenantID: a.ID, Limit: 10})
	if err != nil || len(page.Entries) == 0 || page.Entries[0].Action != tenants.ActionUpdated {
		t.Fatalf("audit: %+v %v", page, err)
	}
	for _, bad := range []string{"", "Local", "Mars/Olympus", "Europe/Paris ", "../../etc/passwd"} {
		_, _, err := s.Tenants().SetTimeZone(ctx, a.ID, bad, t0)
		if !errs.Is(err, errs.Invalid) || errs.Message(err)[:len("time_zone:")] != "time_zone:" {
			t.Errorf("zone %q: %v, want invalid_request naming time_zone", bad, err)
		}
	}
	if _, changes, err := s.Tenants().SetTimeZone(ctx, a.ID, "Europe/Paris", t0); err != nil || len(changes) != 0 {
		t.Fatalf("same zone: %v changes, %v", len(changes), err)
	}
	if _, _, err := s.Tenants().SetTimeZone(ctx, "ten_missing", "UTC", t0); !errs.Is(err, errs.NotFound) {
		t.Fatalf("unknown tenant: %v", err)
	}
}
