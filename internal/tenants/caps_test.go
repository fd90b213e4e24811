package tenants_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

// wantCap asserts that err is the cap error of cap, naming it and its value.
func wantCap(t *testing.T, err error, cap string, value int) {
	t.Helper()
	if !errs.Is(err, errs.Conflict) || !tenants.CapReached(err) {
		t.Fatalf("err = %v, want the %s cap's conflict", err, cap)
	}
	msg := errs.Message(err)
	if !strings.Contains(msg, fmt.Sprintf("%q", cap)) || !strings.Contains(msg, fmt.Sprintf(" %d ", value)) {
		t.Fatalf("message %q does not name the cap %q and its value %d", msg, cap, value)
	}
}

func wantUsage(t *testing.T, s *tenants.Store, tenantID string, want tenants.Usage) {
	t.Helper()
	got, err := s.Tenants().Usage(context.Background(), tenantID)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("usage = %+v, want %+v", got, want)
	}
}

func TestCapPolicies(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	s.SetCaps(tenants.Caps{Policies: 2})
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	p1 := must[tenants.Policy](t)(first2(s.Policies().Create(ctx, a.ID, samplePolicy("one"), t0)))
	must[tenants.Policy](t)(first2(s.Policies().Create(ctx, a.ID, samplePolicy("two"), t0)))
	before := version(t, s)
	_, cs, err := s.Policies().Create(ctx, a.ID, samplePolicy("three"), t0)
	wantCap(t, err, tenants.CapPolicies, 2)
	if cs != nil || version(t, s) != before {
		t.Fatal("a refused write moved the config version")
	}
	// Another tenant has its own room; a deletion makes room again.
	must[tenants.Policy](t)(first2(s.Policies().Create(ctx, b.ID, samplePolicy("three"), t0)))
	must[[]tenants.Change](t)(s.Policies().Delete(ctx, a.ID, p1.ID, t0))
	must[tenants.Policy](t)(first2(s.Policies().Create(ctx, a.ID, samplePolicy("three"), t0)))
	wantUsage(t, s, a.ID, tenants.Usage{Policies: 2, ServiceKeys: 1, Members: 1})
}

func TestCapLimitsPerPolicy(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	s.SetCaps(tenants.Caps{LimitsPerPolicy: 3})
	a := mustTenant(t, s, "a")
	p := samplePolicy("three") // 1 + 2 limits
	created := must[tenants.Policy](t)(first2(s.Policies().Create(ctx, a.ID, p, t0)))
	p.Name = "four"
	p.Tiers["default"] = tenants.Limits{{Algorithm: tenants.TokenBucket, Limit: 5, Period: "1s"}}
	_, _, err := s.Policies().Create(ctx, a.ID, p, t0)
	wantCap(t, err, tenants.CapLimitsPerPolicy, 3)
	// An update is held to the same cap.
	p.Name = "three"
	_, _, err = s.Policies().Update(ctx, a.ID, created.ID, p, t0)
	wantCap(t, err, tenants.CapLimitsPerPolicy, 3)
	if !strings.Contains(errs.Message(err), "this one has 4") {
		t.Fatalf("message %q does not say how many limits the policy has", errs.Message(err))
	}
}

func TestCapConsumerKeys(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	s.SetCaps(tenants.Caps{ConsumerKeys: 2})
	a := mustTenant(t, s, "a")
	k1, _, _, err := s.Keys().Create(ctx, a.ID, "k1", "pro", nil, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.Keys().Create(ctx, a.ID, "k2", "pro", nil, nil, t0); err != nil {
		t.Fatal(err)
	}
	// A revoked key still counts: servers keep it.
	must[tenants.ConsumerKey](t)(first2(s.Keys().Revoke(ctx, a.ID, k1.ID, t0)))
	_, _, _, err = s.Keys().Create(ctx, a.ID, "k3", "pro", nil, nil, t0)
	wantCap(t, err, tenants.CapConsumerKeys, 2)
	wantUsage(t, s, a.ID, tenants.Usage{ConsumerKeys: 2, ServiceKeys: 1, Members: 1})
}

func TestCapServiceKeys(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	s.SetCaps(tenants.Caps{ServiceKeys: 2})
	a := mustTenant(t, s, "a") // its first service key
	k2, _, _, err := s.ServiceKeys().Create(ctx, a.ID, t0)
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, err = s.ServiceKeys().Create(ctx, a.ID, t0)
	wantCap(t, err, tenants.CapServiceKeys, 2)
	// Only active keys count: a rotation (revoke, then add) always works.
	must[tenants.ServiceKey](t)(first2(s.ServiceKeys().Revoke(ctx, a.ID, k2.ID, t0)))
	if _, _, _, err := s.ServiceKeys().Create(ctx, a.ID, t0); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, s, a.ID, tenants.Usage{ServiceKeys: 2, Members: 1})
}

func TestCapBlocks(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	s.SetCaps(tenants.Caps{Blocks: 2})
	a := mustTenant(t, s, "a")
	block := func(ip string) (tenants.Block, error) {
		b, _, err := s.Blocks().Create(ctx, tenants.Block{TenantID: a.ID, Identity: tenants.Identity{Kind: tenants.IdentityIP, ID: ip}}, t0)
		return b, err
	}
	b1 := must[tenants.Block](t)(block("192.0.2.1"))
	must[tenants.Block](t)(block("192.0.2.2"))
	_, err := block("192.0.2.3")
	wantCap(t, err, tenants.CapBlocks, 2)
	must[[]tenants.Change](t)(s.Blocks().Delete(ctx, a.ID, b1.ID, t0))
	must[tenants.Block](t)(block("192.0.2.3"))
	wantUsage(t, s, a.ID, tenants.Usage{Blocks: 2, ServiceKeys: 1, Members: 1})
}

func TestCapMembers(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	s.SetCaps(tenants.Caps{Members: 2})
	a := mustTenant(t, s, "a") // its owner
	mustTenant(t, s, "b")
	m, err := s.Users().Create(ctx, a.ID, "m1@example.com", "correct horse battery", tenants.RoleMember, t0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Users().Create(ctx, a.ID, "m2@example.com", "correct horse battery", tenants.RoleMember, t0)
	wantCap(t, err, tenants.CapMembers, 2)
	// An address that already has a login gets the same answer: the cap
	// is checked first and says nothing of who signs in where.
	_, err = s.Users().Create(ctx, a.ID, "b@example.com", "correct horse battery", tenants.RoleMember, t0)
	wantCap(t, err, tenants.CapMembers, 2)
	must[tenants.User](t)(first2(s.Users().Delete(ctx, a.ID, m.ID, t0)))
	if _, err := s.Users().Create(ctx, a.ID, "m2@example.com", "correct horse battery", tenants.RoleMember, t0); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, s, a.ID, tenants.Usage{ServiceKeys: 1, Members: 2})
}

// Writes racing for a tenant's last places: exactly the cap's number
// succeed, however they interleave.
func TestCapIsExactUnderConcurrentWrites(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	s.SetCaps(tenants.Caps{ConsumerKeys: 5})
	a := mustTenant(t, s, "a")
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := 0, 0
	for i := range 20 {
		wg.Go(func() {
			_, _, _, err := s.Keys().Create(ctx, a.ID, fmt.Sprint("k", i), "pro", nil, nil, t0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case tenants.CapReached(err):
				refused++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ok != 5 || refused != 15 {
		t.Fatalf("%d created and %d refused, want 5 and 15", ok, refused)
	}
}

// The counts follow a tenant's deletion and never count another tenant's
// objects or the operator's login.
func TestTenantUsageFollowsDeletion(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	if _, _, err := s.Operator().Ensure(ctx, "op@example.com", "correct horse battery", t0); err != nil {
		t.Fatal(err)
	}
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	for _, id := range []string{a.ID, b.ID} {
		must[tenants.Policy](t)(first2(s.Policies().Create(ctx, id, samplePolicy("p"), t0)))
		if _, _, _, err := s.Keys().Create(ctx, id, "k", "pro", nil, nil, t0); err != nil {
			t.Fatal(err)
		}
	}
	must[tenants.Tenant](t)(first2(s.Tenants().Delete(ctx, a.ID)))
	if _, err := s.Tenants().Usage(ctx, a.ID); !errs.Is(err, errs.NotFound) {
		t.Fatalf("deleted tenant's usage: %v", err)
	}
	wantUsage(t, s, b.ID, tenants.Usage{Policies: 1, ConsumerKeys: 1, ServiceKeys: 1, Members: 1})
}

func TestCapsValidate(t *testing.T) {
	if err := (tenants.Caps{}).Validate(); err != nil {
		t.Fatal(err)
	}
	err := tenants.Caps{Blocks: -1}.Validate()
	if err == nil || !strings.Contains(err.Error(), "--tenant-max-blocks") {
		t.Fatalf("err = %v, want one naming --tenant-max-blocks", err)
	}
	if d := (tenants.Caps{Policies: 7}).WithDefaults(); d.Policies != 7 || d.ConsumerKeys != tenants.DefaultMaxConsumerKeys {
		t.Fatalf("WithDefaults = %+v", d)
	}
}

// first2 drops the changes of a write's result.
func first2[T any](v T, _ []tenants.Change, err error) (T, error) { return v, err }
