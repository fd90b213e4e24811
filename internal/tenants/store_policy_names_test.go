package tenants_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

func TestPolicyNames(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	ids := map[string]string{}
	for _, name := range []string{"search", "checkout", "login"} {
		p, _, err := s.Policies().Create(ctx, a.ID, samplePolicy(name), t0)
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = p.ID
	}
	// Another tenant's policy; its id asked for by tenant a stays out.
	other, _, err := s.Policies().Create(ctx, b.ID, samplePolicy("admin"), t0)
	if err != nil {
		t.Fatal(err)
	}

	all, err := s.Policies().Names(ctx, a.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []tenants.PolicyName{{ids["checkout"], "checkout"}, {ids["login"], "login"}, {ids["search"], "search"}}
	if !reflect.DeepEqual(all, want) {
		t.Errorf("all names %v, want %v", all, want)
	}
	some, err := s.Policies().Names(ctx, a.ID, []string{ids["search"], other.ID, "pol_unknown"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(some, []tenants.PolicyName{{ids["search"], "search"}}) {
		t.Errorf("names by id %v: want tenant a's search only", some)
	}
	none, err := s.Policies().Names(ctx, "ten_unknown", nil)
	if err != nil || none == nil || len(none) != 0 {
		t.Errorf("unknown tenant: %v, %v; want an empty list", none, err)
	}
	if _, err := s.Policies().Names(ctx, a.ID, make([]string, tenants.MaxPolicyNameIDs+1)); !errs.Is(err, errs.Invalid) {
		t.Errorf("too many ids: %v", err)
	}

	for tenant, want := range map[string]int{a.ID: 3, b.ID: 1, "ten_unknown": 0} {
		if n, err := s.Policies().Count(ctx, tenant); err != nil || n != want {
			t.Errorf("count of %s: %d, %v; want %d", tenant, n, err, want)
		}
	}
}
