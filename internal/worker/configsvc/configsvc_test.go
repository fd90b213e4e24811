package configsvc

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Writes through the service commit to a real SQLite file, are announced
// in version order, keep tenants apart, and run the worker's hooks.
func TestServiceOverSQLite(t *testing.T) {
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, filepath.Join(t.TempDir(), "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var announced []int64
	var deleted []string
	svc := New(tenants.NewStore(db), nil, Hooks{
		Announce:      func(cs []tenants.Change) { announced = append(announced, cs[0].Version) },
		TenantDeleted: func(id string) { deleted = append(deleted, id) },
	}, nil).Services()

	a, err := svc.Tenants.Create(ctx, "acme", "owner@acme.test", "a long passphrase")
	if err != nil {
		t.Fatal(err)
	}
	b, err := svc.Tenants.Create(ctx, "other", "owner@other.test", "a long passphrase")
	if err != nil {
		t.Fatal(err)
	}
	ta, tb := a.Result.Tenant.ID, b.Result.Tenant.ID
	tiers := map[string]tenants.Limits{"default": {{Algorithm: "token_bucket", Limit: 10, Period: "1m"}}}
	p, err := svc.Policies.Create(ctx, ta, tenants.Policy{Name: "search", Method: "GET", Path: "/search", Tiers: tiers})
	if err != nil {
		t.Fatal(err)
	}
	if len(announced) != 3 || announced[0] >= announced[1] || announced[1] >= announced[2] || announced[2] != p.Version {
		t.Fatalf("announced versions %v, the policy's %d: want three, increasing, the last the policy's", announced, p.Version)
	}
	if _, err := svc.Policies.Get(ctx, tb, p.Result.ID); !errs.Is(err, errs.NotFound) {
		t.Errorf("another tenant read the policy: %v", err)
	}
	if n, err := svc.Policies.Count(ctx, ta); err != nil || n != 1 {
		t.Errorf("count %d %v, want 1", n, err)
	}
	if l, err := svc.Policies.Names(ctx, ta, nil); err != nil || l.Total != 1 || len(l.Policies) != 1 || l.Policies[0].Name != "search" {
		t.Errorf("names %+v %v", l, err)
	}
	rec, err := svc.Users.SignIn(ctx, "owner@acme.test", "a long passphrase")
	if err != nil || rec.User.TenantID != ta {
		t.Fatalf("sign-in: %+v %v", rec, err)
	}
	if _, err := svc.Users.SignIn(ctx, "owner@acme.test", "not the passphrase"); !errs.Is(err, errs.Unauthenticated) {
		t.Errorf("a wrong password: %v", err)
	}
	if _, err := svc.Tenants.Delete(ctx, tb); err != nil {
		t.Fatal(err)
	}
	if len(deleted) != 1 || deleted[0] != tb {
		t.Errorf("deleted hook saw %v, want [%s]", deleted, tb)
	}
	if ts, err := svc.Tenants.List(ctx); err != nil || len(ts) != 1 || ts[0].ID != ta {
		t.Errorf("tenants after the delete: %+v %v", ts, err)
	}
}
