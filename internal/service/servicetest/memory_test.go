package servicetest

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// One tenant's objects are not found through another's id, and every write
// moves the version.
func TestMemoryKeepsTenantsApart(t *testing.T) {
	ctx := context.Background()
	s := New(nil).Services()
	a, err := s.Tenants.Create(ctx, "a", "owner@a.test", "a long passphrase")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Tenants.Create(ctx, "b", "owner@b.test", "a long passphrase")
	if err != nil {
		t.Fatal(err)
	}
	if b.Version <= a.Version {
		t.Fatalf("versions %d then %d, want increasing", a.Version, b.Version)
	}
	ta, tb := a.Result.Tenant.ID, b.Result.Tenant.ID
	p, err := s.Policies.Create(ctx, ta, tenants.Policy{Name: "search", Method: "GET", Path: "/search"})
	if err != nil {
		t.Fatal(err)
	}
	k, err := s.Keys.Create(ctx, service.KeyCreate{TenantID: ta, Name: "acme", Tier: "pro"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Policies.Get(ctx, tb, p.Result.ID); !errs.Is(err, errs.NotFound) {
		t.Errorf("tenant b read tenant a's policy: %v", err)
	}
	if _, err := s.Keys.Revoke(ctx, tb, k.Result.Key.ID); !errs.Is(err, errs.NotFound) {
		t.Errorf("tenant b revoked tenant a's key: %v", err)
	}
	if ps, _ := s.Policies.List(ctx, tb); len(ps) != 0 {
		t.Errorf("tenant b lists %v", ps)
	}
	if n, _ := s.Policies.Count(ctx, ta); n != 1 {
		t.Errorf("tenant a counts %d policies, want 1", n)
	}
	if names, _ := s.Keys.Names(ctx, tb, []string{k.Result.Key.ID}); len(names) != 0 {
		t.Errorf("tenant b names tenant a's key: %v", names)
	}
	if _, err := s.Users.SignIn(ctx, "owner@a.test", "wrong"); !errs.Is(err, errs.Unauthenticated) {
		t.Errorf("a wrong password: %v", err)
	}
	rec, err := s.Users.SignIn(ctx, "owner@a.test", "a long passphrase")
	if err != nil || rec.User.TenantID != ta {
		t.Errorf("sign-in: %+v %v", rec, err)
	}
}
