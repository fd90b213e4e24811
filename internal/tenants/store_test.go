package tenants_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tenants"
)

// t0 is the fixed instant the tests run at; its sub-millisecond part
// checks that the store truncates.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123_456_789, time.UTC)

func newStore(t *testing.T) *tenants.Store {
	t.Helper()
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, filepath.Join(t.TempDir(), "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return tenants.NewStore(db)
}

func mustTenant(t *testing.T, s *tenants.Store, name string) tenants.Tenant {
	t.Helper()
	tn, _, _, err := s.Tenants().Create(context.Background(), name, name+"@example.com", "correct horse battery", t0)
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

func samplePolicy(name string) tenants.Policy {
	return tenants.Policy{
		Name:  name,
		Path:  "/api/" + name,
		Query: map[string]string{"mode": "heavy"},
		Tiers: map[string]tenants.Limits{
			"anonymous": {{Algorithm: tenants.TokenBucket, Limit: 10, Period: "60s"}},
			"pro": {
				{Name: "burst", Algorithm: tenants.SlidingWindow, Limit: 100, Period: "1m"},
				{Name: "daily", Algorithm: tenants.FixedWindow, Limit: 10000, Period: "1d"},
			},
		},
	}
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if !errs.Is(err, code) {
		t.Fatalf("err = %v, want code %s", err, code)
	}
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func version(t *testing.T, s *tenants.Store) int64 {
	t.Helper()
	return must[int64](t)(s.ConfigVersion(context.Background()))
}

// checkChanges asserts that a write moved the version by exactly one and
// stamped every change with it.
func checkChanges(t *testing.T, s *tenants.Store, before int64, changes []tenants.Change, kinds ...string) {
	t.Helper()
	after := version(t, s)
	if after != before+1 {
		t.Fatalf("config version %d -> %d, want +1", before, after)
	}
	if len(changes) != len(kinds) {
		t.Fatalf("got %d changes, want %v", len(changes), kinds)
	}
	for i, c := range changes {
		if c.Version != after || c.Kind != kinds[i] {
			t.Fatalf("change %d = version %d kind %q, want %d %q", i, c.Version, c.Kind, after, kinds[i])
		}
	}
}

func TestCreateTenant(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	tn, key, changes, err := s.Tenants().Create(ctx, "acme", "Owner@Example.com", "correct horse battery", t0)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, 0, changes, tenants.ChangeTenant, tenants.ChangeServiceKey, tenants.ChangeUserSession)
	if !strings.HasPrefix(tn.ID, "ten_") || tn.Name != "acme" || !tn.CreatedAt.Equal(t0.Truncate(time.Millisecond)) {
		t.Fatalf("tenant = %+v", tn)
	}
	if !tenants.WellFormedKey(key, tenants.KindServiceKey) {
		t.Fatalf("service key %q", key)
	}
	sk := changes[1].ServiceKey
	if sk.Hash != tenants.HashKey(key) || sk.Prefix != key[:8] || sk.TenantID != tn.ID {
		t.Fatalf("service key record %+v", sk)
	}
	if got := must[tenants.Tenant](t)(s.Tenants().Get(ctx, tn.ID)); got != tn {
		t.Fatalf("GetTenant = %+v, want %+v", got, tn)
	}

	owner, err := s.Users().Authenticate(ctx, "owner@example.com", "correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	if owner.Role != tenants.RoleOwner || owner.TenantID != tn.ID || owner.Email != "owner@example.com" {
		t.Fatalf("owner = %+v", owner)
	}
	_, err = s.Users().Authenticate(ctx, "owner@example.com", "wrong horse battery")
	wantCode(t, err, errs.Unauthenticated)
	_, err = s.Users().Authenticate(ctx, "nobody@example.com", "correct horse battery")
	wantCode(t, err, errs.Unauthenticated)

	_, _, _, err = s.Tenants().Create(ctx, "acme", "other@example.com", "correct horse battery", t0)
	wantCode(t, err, errs.Conflict)
	_, _, _, err = s.Tenants().Create(ctx, "other", "OWNER@example.com", "correct horse battery", t0)
	wantCode(t, err, errs.Conflict)
	_, _, _, err = s.Tenants().Create(ctx, "Bad/Name", "x@example.com", "correct horse battery", t0)
	wantCode(t, err, errs.Invalid)
	_, _, _, err = s.Tenants().Create(ctx, "short", "x@example.com", "short", t0)
	if errs.Message(err) != "owner_password: must be at least 12 characters" {
		t.Fatalf("err = %v", err)
	}
	if v := version(t, s); v != 1 {
		t.Fatalf("failed writes moved the version to %d", v)
	}

	mustTenant(t, s, "beta")
	_ = must[tenants.Policy](t)(first(s.Policies().Create(ctx, tn.ID, samplePolicy("a"), t0)))
	list := must[[]tenants.TenantSummary](t)(s.Tenants().List(ctx))
	if len(list) != 2 || list[0].Name != "acme" || list[0].Policies != 1 || list[0].ServiceKeys != 1 || list[0].Users != 1 || list[1].Policies != 0 {
		t.Fatalf("ListTenants = %+v", list)
	}
}

func first[A, B any](a A, _ B, err error) (A, error) { return a, err }

func first4[A, B, C any](a A, _ B, _ C, err error) (A, error) { return a, err }

func TestServiceKeys(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	v := version(t, s)
	k, plain, changes, err := s.ServiceKeys().Create(ctx, a.ID, t0)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, v, changes, tenants.ChangeServiceKey)
	if k.Hash != tenants.HashKey(plain) {
		t.Fatal("hash mismatch")
	}
	if keys := must[[]tenants.ServiceKey](t)(s.ServiceKeys().List(ctx, a.ID)); len(keys) != 2 {
		t.Fatalf("ListServiceKeys = %d keys", len(keys))
	}
	_, _, err = s.ServiceKeys().Revoke(ctx, b.ID, k.ID, t0)
	wantCode(t, err, errs.NotFound)
	v = version(t, s)
	k2, changes, err := s.ServiceKeys().Revoke(ctx, a.ID, k.ID, t0)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, v, changes, tenants.ChangeServiceKey)
	if k2.RevokedAt == nil {
		t.Fatal("not revoked")
	}
	if _, changes, err := s.ServiceKeys().Revoke(ctx, a.ID, k.ID, t0.Add(time.Hour)); err != nil || len(changes) != 0 {
		t.Fatalf("second revoke: %v, %d changes", err, len(changes))
	}
	_, _, _, err = s.ServiceKeys().Create(ctx, "ten_missing", t0)
	wantCode(t, err, errs.NotFound)

	// The last active key is kept: a tenant without one is locked out.
	var last string
	for _, k := range must[[]tenants.ServiceKey](t)(s.ServiceKeys().List(ctx, a.ID)) {
		if k.RevokedAt == nil {
			last = k.ID
		}
	}
	v = version(t, s)
	_, _, err = s.ServiceKeys().Revoke(ctx, a.ID, last, t0)
	wantCode(t, err, errs.Conflict)
	if version(t, s) != v {
		t.Fatal("a refused revocation moved the config version")
	}
}

func TestPolicyCRUD(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a := mustTenant(t, s, "a")

	v := version(t, s)
	p, changes, err := s.Policies().Create(ctx, a.ID, samplePolicy("heavy"), t0)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, v, changes, tenants.ChangePolicy)
	if p.Method != "*" || p.Consistency != "exact" || p.TenantID != a.ID || !strings.HasPrefix(p.ID, "pol_") {
		t.Fatalf("defaults not filled: %+v", p)
	}
	if !reflect.DeepEqual(*changes[0].Policy, p) {
		t.Fatalf("change carries %+v, want %+v", *changes[0].Policy, p)
	}
	got := must[tenants.Policy](t)(s.Policies().Get(ctx, a.ID, p.ID))
	if !reflect.DeepEqual(got, p) {
		t.Fatalf("GetPolicy = %+v\nwant %+v", got, p)
	}
	// What the API returns survives JSON unchanged.
	b, _ := json.Marshal(got)
	var back tenants.Policy
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, got) {
		t.Fatalf("JSON round trip: %v\n%s", err, b)
	}

	_, _, err = s.Policies().Create(ctx, a.ID, samplePolicy("heavy"), t0)
	wantCode(t, err, errs.Conflict)
	other := must[tenants.Policy](t)(first(s.Policies().Create(ctx, a.ID, samplePolicy("light"), t0)))

	upd := samplePolicy("heavy2")
	upd.Method = "post"
	upd.Shadow = true
	upd.Consistency = "local"
	upd.Query = nil
	later := t0.Add(time.Minute)
	v = version(t, s)
	p2, changes, err := s.Policies().Update(ctx, a.ID, p.ID, upd, later)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, v, changes, tenants.ChangePolicy)
	if p2.ID != p.ID || !p2.CreatedAt.Equal(p.CreatedAt) || !p2.UpdatedAt.Equal(later.Truncate(time.Millisecond)) ||
		p2.Method != "POST" || !p2.Shadow || p2.Query != nil || p2.Name != "heavy2" {
		t.Fatalf("updated = %+v", p2)
	}
	if got := must[tenants.Policy](t)(s.Policies().Get(ctx, a.ID, p.ID)); !reflect.DeepEqual(got, p2) {
		t.Fatalf("after update GetPolicy = %+v", got)
	}
	upd.Name = other.Name
	_, _, err = s.Policies().Update(ctx, a.ID, p.ID, upd, later)
	wantCode(t, err, errs.Conflict)
	// Keeping its own name is no conflict.
	if _, _, err := s.Policies().Update(ctx, a.ID, other.ID, samplePolicy("light"), later); err != nil {
		t.Fatal(err)
	}

	list := must[[]tenants.Policy](t)(s.Policies().List(ctx, a.ID))
	if len(list) != 2 || list[0].Name != "heavy2" || list[1].Name != "light" {
		t.Fatalf("ListPolicies = %v", list)
	}

	v = version(t, s)
	changes, err = s.Policies().Delete(ctx, a.ID, p.ID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, v, changes, tenants.ChangePolicyDeleted)
	if changes[0].ID != p.ID || changes[0].TenantID != a.ID {
		t.Fatalf("delete change = %+v", changes[0])
	}
	_, err = s.Policies().Get(ctx, a.ID, p.ID)
	wantCode(t, err, errs.NotFound)
	_, err = s.Policies().Delete(ctx, a.ID, p.ID, time.Now())
	wantCode(t, err, errs.NotFound)

	bad := samplePolicy("bad")
	bad.Tiers["pro"][1].Period = "soon"
	_, _, err = s.Policies().Create(ctx, a.ID, bad, t0)
	if errs.Message(err) != `tiers.pro[1].period: must be a duration such as "60s" or "1m"` {
		t.Fatalf("err = %v", err)
	}
	_, _, err = s.Policies().Create(ctx, "ten_missing", samplePolicy("x"), t0)
	wantCode(t, err, errs.NotFound)
}

func TestConsumerKeyCRUD(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a := mustTenant(t, s, "a")
	_ = must[tenants.Policy](t)(first(s.Policies().Create(ctx, a.ID, samplePolicy("heavy"), t0)))
	exp := t0.Add(24 * time.Hour)
	overrides := map[string]tenants.Limits{"heavy": {{Algorithm: tenants.TokenBucket, Limit: 50, Period: "1s", Burst: 100}}}

	v := version(t, s)
	k, plain, changes, err := s.Keys().Create(ctx, a.ID, "mobile app", "pro", &exp, overrides, t0)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, v, changes, tenants.ChangeConsumerKey)
	if !tenants.WellFormedKey(plain, tenants.KindConsumerKey) || k.Prefix != plain[:8] || k.Hash != tenants.HashKey(plain) {
		t.Fatalf("key %q, record %+v", plain, k)
	}
	if rec := changes[0].ConsumerKey; rec.Hash != k.Hash || !reflect.DeepEqual(rec.ConsumerKey, k) {
		t.Fatalf("change record = %+v", rec)
	}
	got := must[tenants.ConsumerKey](t)(s.Keys().Get(ctx, a.ID, k.ID))
	if !reflect.DeepEqual(got, k) {
		t.Fatalf("GetConsumerKey = %+v\nwant %+v", got, k)
	}
	if !got.Active(t0) || got.Active(exp) {
		t.Fatal("Active wrong around expiry")
	}

	_, _, _, err = s.Keys().Create(ctx, a.ID, "x", "pro", nil, map[string]tenants.Limits{"nope": overrides["heavy"]}, t0)
	if errs.Message(err) != "overrides.nope: no policy has this name" {
		t.Fatalf("err = %v", err)
	}
	past := t0.Add(-time.Second)
	_, _, _, err = s.Keys().Create(ctx, a.ID, "x", "pro", &past, nil, t0)
	if errs.Message(err) != "expires_at: must be in the future" {
		t.Fatalf("err = %v", err)
	}

	// Patch: rename, move tier, drop the expiry and the overrides.
	name, tier := "renamed", "free"
	empty := map[string]tenants.Limits{}
	later := t0.Add(time.Minute)
	v = version(t, s)
	k2, changes, err := s.Keys().Update(ctx, a.ID, k.ID, tenants.KeyPatch{Name: &name, Tier: &tier, ClearExpiry: true, Overrides: &empty}, later)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, v, changes, tenants.ChangeConsumerKey)
	if k2.Name != name || k2.Tier != tier || k2.ExpiresAt != nil || k2.Overrides != nil || k2.Hash != k.Hash || !k2.CreatedAt.Equal(k.CreatedAt) {
		t.Fatalf("patched = %+v", k2)
	}
	if got := must[tenants.ConsumerKey](t)(s.Keys().Get(ctx, a.ID, k.ID)); !reflect.DeepEqual(got, k2) {
		t.Fatalf("after patch = %+v", got)
	}
	v = version(t, s)
	if _, changes, err := s.Keys().Update(ctx, a.ID, k.ID, tenants.KeyPatch{}, later); err != nil || len(changes) != 0 || version(t, s) != v {
		t.Fatalf("empty patch: %v, %d changes", err, len(changes))
	}
	bad := "Bad Tier"
	_, _, err = s.Keys().Update(ctx, a.ID, k.ID, tenants.KeyPatch{Tier: &bad}, later)
	if errs.Message(err) != "tier: must be 1 to 32 characters of a-z, 0-9, _ and -" {
		t.Fatalf("err = %v", err)
	}

	v = version(t, s)
	k3, changes, err := s.Keys().Revoke(ctx, a.ID, k.ID, later)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, v, changes, tenants.ChangeConsumerKey)
	if k3.RevokedAt == nil || k3.Active(later) {
		t.Fatalf("revoked = %+v", k3)
	}
	k4, changes, err := s.Keys().Revoke(ctx, a.ID, k.ID, later.Add(time.Hour))
	if err != nil || len(changes) != 0 || !k4.RevokedAt.Equal(*k3.RevokedAt) {
		t.Fatalf("second revoke: %v, %d changes, %+v", err, len(changes), k4)
	}

	_ = must[tenants.ConsumerKey](t)(first4(s.Keys().Create(ctx, a.ID, "second", "pro", nil, nil, later)))
	list := must[[]tenants.ConsumerKey](t)(s.Keys().List(ctx, a.ID))
	if len(list) != 2 || list[0].ID != k.ID || list[1].Name != "second" {
		t.Fatalf("ListConsumerKeys = %+v", list)
	}
}

func TestBlocks(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	exp := t0.Add(time.Hour)

	v := version(t, s)
	blk, changes, err := s.Blocks().Create(ctx, tenants.Block{TenantID: a.ID, Identity: tenants.Identity{Kind: "ip", ID: "2001:DB8::1"}, Reason: "scraping", ExpiresAt: &exp}, t0)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, v, changes, tenants.ChangeBlock)
	if blk.Identity.ID != "2001:db8::1" || !strings.HasPrefix(blk.ID, "blk_") {
		t.Fatalf("block = %+v", blk)
	}
	if got := must[tenants.Block](t)(s.Blocks().Get(ctx, blk.ID)); !reflect.DeepEqual(got, blk) {
		t.Fatalf("GetBlock = %+v", got)
	}
	_ = must[tenants.Block](t)(first(s.Blocks().Create(ctx, tenants.Block{TenantID: b.ID, Identity: tenants.Identity{Kind: "key", ID: "ckey_x"}}, t0.Add(time.Second))))

	_, _, err = s.Blocks().Create(ctx, tenants.Block{TenantID: "ten_missing", Identity: tenants.Identity{Kind: "ip", ID: "192.0.2.1"}}, t0)
	wantCode(t, err, errs.NotFound)
	_, _, err = s.Blocks().Create(ctx, tenants.Block{TenantID: a.ID, Identity: tenants.Identity{Kind: "ip", ID: "not-an-ip"}}, t0)
	if errs.Message(err) != "identity.id: must be an IPv4 or IPv6 address" {
		t.Fatalf("err = %v", err)
	}

	if all := must[[]tenants.Block](t)(s.Blocks().List(ctx, "")); len(all) != 2 || all[0].TenantID != b.ID {
		t.Fatalf("ListBlocks(all) = %+v", all)
	}
	if onlyA := must[[]tenants.Block](t)(s.Blocks().List(ctx, a.ID)); len(onlyA) != 1 || onlyA[0].ID != blk.ID {
		t.Fatalf("ListBlocks(a) = %+v", onlyA)
	}

	v = version(t, s)
	changes, err = s.Blocks().Delete(ctx, "", blk.ID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, v, changes, tenants.ChangeBlockDeleted)
	if changes[0].ID != blk.ID || changes[0].TenantID != a.ID {
		t.Fatalf("change = %+v", changes[0])
	}
	_, err = s.Blocks().Delete(ctx, "", blk.ID, time.Now())
	wantCode(t, err, errs.NotFound)

	// Purging: one expired block goes, the permanent one stays.
	_ = must[tenants.Block](t)(first(s.Blocks().Create(ctx, tenants.Block{TenantID: a.ID, Identity: tenants.Identity{Kind: "ip", ID: "192.0.2.1"}, ExpiresAt: &exp}, t0)))
	v = version(t, s)
	changes, err = s.Blocks().PurgeExpired(ctx, exp)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, v, changes, tenants.ChangeBlockDeleted)
	if n := len(must[[]tenants.Block](t)(s.Blocks().List(ctx, ""))); n != 1 {
		t.Fatalf("%d blocks after purge", n)
	}
	if changes, err := s.Blocks().PurgeExpired(ctx, exp); err != nil || len(changes) != 0 || version(t, s) != v+1 {
		t.Fatalf("idle purge: %v, %d changes", err, len(changes))
	}
}

func TestTenantIsolation(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	p := must[tenants.Policy](t)(first(s.Policies().Create(ctx, a.ID, samplePolicy("heavy"), t0)))
	k := must[tenants.ConsumerKey](t)(first4(s.Keys().Create(ctx, a.ID, "k", "pro", nil, nil, t0)))
	v := version(t, s)

	_, err := s.Policies().Get(ctx, b.ID, p.ID)
	wantCode(t, err, errs.NotFound)
	_, _, err = s.Policies().Update(ctx, b.ID, p.ID, samplePolicy("stolen"), t0)
	wantCode(t, err, errs.NotFound)
	_, err = s.Policies().Delete(ctx, b.ID, p.ID, time.Now())
	wantCode(t, err, errs.NotFound)
	_, err = s.Keys().Get(ctx, b.ID, k.ID)
	wantCode(t, err, errs.NotFound)
	name := "stolen"
	_, _, err = s.Keys().Update(ctx, b.ID, k.ID, tenants.KeyPatch{Name: &name}, t0)
	wantCode(t, err, errs.NotFound)
	_, _, err = s.Keys().Revoke(ctx, b.ID, k.ID, t0)
	wantCode(t, err, errs.NotFound)
	_, err = s.Policies().ResetBuckets(ctx, b.ID, p.Name, tenants.Identity{Kind: "ip", ID: "192.0.2.1"}, time.Now())
	wantCode(t, err, errs.NotFound)
	// Tenant B may not point an override at A's policy either.
	_, _, _, err = s.Keys().Create(ctx, b.ID, "k", "pro", nil, map[string]tenants.Limits{"heavy": samplePolicy("x").Tiers["anonymous"]}, t0)
	wantCode(t, err, errs.Invalid)
	// The same message as for an id that never existed.
	_, errMissing := s.Policies().Get(ctx, b.ID, "pol_missing")
	_, errForeign := s.Policies().Get(ctx, b.ID, p.ID)
	if errMissing.Error() != errForeign.Error() {
		t.Fatalf("foreign %q differs from missing %q", errForeign, errMissing)
	}

	for name, n := range map[string]int{
		"policies": len(must[[]tenants.Policy](t)(s.Policies().List(ctx, b.ID))),
		"keys":     len(must[[]tenants.ConsumerKey](t)(s.Keys().List(ctx, b.ID))),
		"blocks":   len(must[[]tenants.Block](t)(s.Blocks().List(ctx, b.ID))),
	} {
		if n != 0 {
			t.Errorf("tenant b lists %d %s of tenant a", n, name)
		}
	}
	if version(t, s) != v {
		t.Fatal("refused writes moved the config version")
	}
	// A's objects are untouched.
	if got := must[tenants.Policy](t)(s.Policies().Get(ctx, a.ID, p.ID)); !reflect.DeepEqual(got, p) {
		t.Fatalf("policy changed: %+v", got)
	}
	if got := must[tenants.ConsumerKey](t)(s.Keys().Get(ctx, a.ID, k.ID)); !reflect.DeepEqual(got, k) {
		t.Fatalf("key changed: %+v", got)
	}
}

func TestUsersAndOperator(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a := mustTenant(t, s, "a")
	v := version(t, s)

	m, err := s.Users().Create(ctx, a.ID, "Member@Example.com", "member password 1", tenants.RoleMember, t0)
	if err != nil {
		t.Fatal(err)
	}
	if m.Email != "member@example.com" || m.Role != tenants.RoleMember {
		t.Fatalf("member = %+v", m)
	}
	_, err = s.Users().Create(ctx, a.ID, "member@example.com", "member password 1", tenants.RoleMember, t0)
	wantCode(t, err, errs.Conflict)
	_, err = s.Users().Create(ctx, a.ID, "x@example.com", "member password 1", tenants.RoleOperator, t0)
	wantCode(t, err, errs.Invalid)
	_, err = s.Users().Create(ctx, "ten_missing", "y@example.com", "member password 1", tenants.RoleMember, t0)
	wantCode(t, err, errs.NotFound)
	if users := must[[]tenants.User](t)(s.Users().List(ctx, a.ID)); len(users) != 2 {
		t.Fatalf("ListUsers = %+v", users)
	}
	got := must[tenants.User](t)(s.Users().ByEmail(ctx, "MEMBER@example.com"))
	if got.ID != m.ID || !tenants.CheckPassword(got.PasswordHash, "member password 1") {
		t.Fatalf("UserByEmail = %+v", got)
	}
	if b, _ := json.Marshal(got); strings.Contains(string(b), "argon2") || strings.Contains(string(b), "password") {
		t.Fatalf("user JSON leaks the hash: %s", b)
	}

	op, cs, err := s.Operator().Ensure(ctx, "ops@example.com", "operator password", t0)
	if err != nil {
		t.Fatal(err)
	}
	if op.Role != tenants.RoleOperator || op.TenantID != "" || len(cs) != 1 || cs[0].Kind != tenants.ChangeUserSession {
		t.Fatalf("operator = %+v, changes %+v", op, cs)
	}
	if _, cs, err := s.Operator().Ensure(ctx, "ops@example.com", "operator password", t0); err != nil || len(cs) != 0 {
		t.Fatalf("an unchanged operator login: %v, changes %+v", err, cs)
	}
	// A new password ends the operator's older sessions.
	op2, cs, err := s.Operator().Ensure(ctx, "ops@example.com", "a new operator password", t0)
	if err != nil || op2.ID != op.ID || op2.SessionVersion != op.SessionVersion+1 || len(cs) != 1 ||
		cs[0].UserSession == nil || cs[0].UserSession.Version != op2.SessionVersion {
		t.Fatalf("EnsureOperator again: %v, %+v, changes %+v", err, op2, cs)
	}
	if _, err := s.Users().Authenticate(ctx, "ops@example.com", "operator password"); !errs.Is(err, errs.Unauthenticated) {
		t.Fatal("old operator password still works")
	}
	if _, err := s.Users().Authenticate(ctx, "ops@example.com", "a new operator password"); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Operator().Ensure(ctx, "member@example.com", "operator password", t0)
	wantCode(t, err, errs.Conflict)
	if _, err := s.Users().Authenticate(ctx, "ops@example.com", "a new operator password"); err != nil {
		t.Fatalf("a refused operator email retired the current operator: %v", err)
	}
	// A new configured email replaces the operator login: the old one
	// can no longer sign in and its user is gone.
	op3, cs, err := s.Operator().Ensure(ctx, "Root@Example.com", "the root password", t0)
	if err != nil || op3.ID == op.ID || op3.Email != "root@example.com" {
		t.Fatalf("EnsureOperator with a new email: %v, %+v", err, op3)
	}
	if len(cs) != 2 || cs[1].Kind != tenants.ChangeUserDeleted || cs[1].ID != op.ID {
		t.Fatalf("retiring the previous operator announced %+v, want its deletion", cs)
	}
	if _, err := s.Users().Authenticate(ctx, "ops@example.com", "a new operator password"); !errs.Is(err, errs.Unauthenticated) {
		t.Fatalf("previous operator still signs in: %v", err)
	}
	if _, err := s.Users().ByEmail(ctx, "ops@example.com"); !errs.Is(err, errs.NotFound) {
		t.Fatalf("previous operator login kept: %v", err)
	}
	if _, err := s.Users().Authenticate(ctx, "root@example.com", "the root password"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Users().ByEmail(ctx, "member@example.com"); err != nil {
		t.Fatalf("tenant users are not operator logins: %v", err)
	}
	// Three operator writes changed something (created, new password, new
	// email): each is one config version, announced to the servers.
	if got := version(t, s); got != v+3 {
		t.Fatalf("config version %d after the operator writes, want %d", got, v+3)
	}

	hash := tenants.HashToken("op_token_0123456789012345678901234567890")
	set, c, err := s.Operator().SetTokenHash(ctx, hash, true, time.Now())
	if err != nil || !set {
		t.Fatalf("first set: %v %v", set, err)
	}
	checkChanges(t, s, v+3, []tenants.Change{c}, tenants.ChangeOperatorToken)
	if set, _, err := s.Operator().SetTokenHash(ctx, "other", true, time.Now()); err != nil || set {
		t.Fatalf("onlyIfAbsent overwrote: %v %v", set, err)
	}
	if set, _, err := s.Operator().SetTokenHash(ctx, hash, false, time.Now()); err != nil || set {
		t.Fatalf("same hash rewritten: %v %v", set, err)
	}
	v = version(t, s)
	set, c, err = s.Operator().SetTokenHash(ctx, "other", false, time.Now())
	if err != nil || !set {
		t.Fatalf("replace: %v %v", set, err)
	}
	checkChanges(t, s, v, []tenants.Change{c}, tenants.ChangeOperatorToken)
	if h := must[string](t)(s.Operator().TokenHash(ctx)); h != "other" {
		t.Fatalf("hash = %q", h)
	}
}

func TestResetBuckets(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a := mustTenant(t, s, "a")
	p := must[tenants.Policy](t)(first(s.Policies().Create(ctx, a.ID, samplePolicy("heavy"), t0)))
	v := version(t, s)
	changes, err := s.Policies().ResetBuckets(ctx, a.ID, "heavy", tenants.Identity{Kind: "ip", ID: "::ffff:192.0.2.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, v, changes, tenants.ChangeBucketReset)
	want := tenants.BucketReset{PolicyID: p.ID, Policy: "heavy", Identity: tenants.Identity{Kind: "ip", ID: "192.0.2.1"}}
	if *changes[0].BucketReset != want {
		t.Fatalf("reset = %+v", *changes[0].BucketReset)
	}
	_, err = s.Policies().ResetBuckets(ctx, a.ID, "missing", tenants.Identity{Kind: "ip", ID: "192.0.2.1"}, time.Now())
	wantCode(t, err, errs.NotFound)
}

// TestSnapshotFollowsChanges replays every change a sequence of writes
// announced onto the snapshot taken before them, through JSON as servers
// receive them, and expects the snapshot taken after.
func TestSnapshotFollowsChanges(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustTenant(t, s, "a")
	start := must[tenants.Snapshot](t)(s.Snapshot(ctx))
	if start.Version != 1 || len(start.Tenants) != 1 || len(start.ServiceKeys) != 1 {
		t.Fatalf("start = %+v", start)
	}

	var all []tenants.Change
	record := func(changes []tenants.Change, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, changes...)
	}
	b, _, changes, err := s.Tenants().Create(ctx, "b", "b@example.com", "correct horse battery", t0)
	record(changes, err)
	p, changes, err := s.Policies().Create(ctx, b.ID, samplePolicy("heavy"), t0)
	record(changes, err)
	_, changes, err = s.Policies().Create(ctx, b.ID, samplePolicy("light"), t0)
	record(changes, err)
	_, changes, err = s.Policies().Update(ctx, b.ID, p.ID, samplePolicy("heavier"), t0)
	record(changes, err)
	k, _, changes, err := s.Keys().Create(ctx, b.ID, "k", "pro", nil, nil, t0)
	record(changes, err)
	_, changes, err = s.Keys().Revoke(ctx, b.ID, k.ID, t0)
	record(changes, err)
	blk, changes, err := s.Blocks().Create(ctx, tenants.Block{TenantID: b.ID, Identity: tenants.Identity{Kind: "ip", ID: "192.0.2.9"}, Reason: "abuse"}, t0)
	record(changes, err)
	_, changes, err = s.Blocks().Create(ctx, tenants.Block{TenantID: b.ID, Identity: tenants.Identity{Kind: "key", ID: k.ID}}, t0)
	record(changes, err)
	changes, err = s.Blocks().Delete(ctx, "", blk.ID, time.Now())
	record(changes, err)
	changes, err = s.Policies().Delete(ctx, b.ID, p.ID, time.Now())
	record(changes, err)
	_, c, err := s.Operator().SetTokenHash(ctx, tenants.HashToken("token"), false, time.Now())
	record([]tenants.Change{c}, err)
	changes, err = s.Policies().ResetBuckets(ctx, b.ID, "light", tenants.Identity{Kind: "ip", ID: "192.0.2.1"}, time.Now())
	record(changes, err)
	m, err := s.Users().Create(ctx, b.ID, "m@example.com", "member password 1", tenants.RoleMember, t0)
	if err != nil {
		t.Fatal(err)
	}
	record(s.Users().Announce(ctx, m.ID))
	_, changes, err = s.Users().ChangePassword(ctx, m.ID, "member password 1", "member password 2", time.Now())
	record(changes, err)
	_, changes, err = s.Users().SetRole(ctx, b.ID, m.ID, tenants.RoleOwner, time.Now())
	record(changes, err)
	m2, err := s.Users().Create(ctx, b.ID, "m2@example.com", "member password 1", tenants.RoleMember, t0)
	if err != nil {
		t.Fatal(err)
	}
	record(s.Users().Announce(ctx, m2.ID))
	_, changes, err = s.Users().Delete(ctx, b.ID, m2.ID, time.Now())
	record(changes, err)

	end := must[tenants.Snapshot](t)(s.Snapshot(ctx))
	if end.Version != start.Version+17 {
		t.Fatalf("17 writes moved the version from %d to %d", start.Version, end.Version)
	}

	wire, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	var received []tenants.Change
	if err := json.Unmarshal(wire, &received); err != nil {
		t.Fatal(err)
	}
	replayed := roundTrip(t, start)
	if err := replayed.Apply(received...); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(replayed, end) {
		t.Fatalf("replayed snapshot differs\n got %+v\nwant %+v", replayed, end)
	}
	// Applying everything again changes nothing.
	if err := replayed.Apply(received...); err != nil || !reflect.DeepEqual(replayed, end) {
		t.Fatalf("re-applying: %v", err)
	}
	// The snapshot itself survives JSON, hashes included.
	if got := roundTrip(t, end); !reflect.DeepEqual(got, end) {
		t.Fatalf("snapshot JSON round trip differs\n got %+v\nwant %+v", got, end)
	}
	if end.ConsumerKeys[0].Hash == "" || end.ServiceKeys[0].Hash == "" {
		t.Fatal("snapshot lacks key hashes")
	}
}

func roundTrip[T any](t *testing.T, v T) T {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return out
}

// TestConcurrentWriters writes from several goroutines through two
// Stores on separate connection pools, as two processes would, so that
// SQLite's own locking is exercised and not only the Store's semaphore.
func TestConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sluice.db")
	var stores [2]*tenants.Store
	for i := range stores {
		db, err := sqlitedb.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		stores[i] = tenants.NewStore(db)
	}
	s := stores[0]
	a := mustTenant(t, s, "a")
	v := version(t, s)
	const writers, each = 8, 10
	var wg sync.WaitGroup
	errc := make(chan error, 2*writers*each)
	for w := range writers {
		s := stores[w%2]
		wg.Go(func() {
			for i := range each {
				if _, _, err := s.Policies().Create(ctx, a.ID, samplePolicy(fmt.Sprintf("p%d-%d", w, i)), t0); err != nil {
					errc <- err
				}
				if _, err := s.Snapshot(ctx); err != nil {
					errc <- err
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if got := version(t, s); got != v+writers*each {
		t.Fatalf("version = %d, want %d", got, v+writers*each)
	}
	if n := len(must[[]tenants.Policy](t)(s.Policies().List(ctx, a.ID))); n != writers*each {
		t.Fatalf("%d policies", n)
	}
}

// A policy keeps what it does with tiers it does not list: allow when not
// said, deny when asked, and nothing else is accepted.
func TestPolicyUnlistedTiers(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	tn := mustTenant(t, s, "unlisted")
	p := tenants.Policy{Name: "p", Path: "/p", Tiers: map[string]tenants.Limits{"pro": {{Algorithm: "token_bucket", Limit: 1, Period: "1s"}}}}
	created, _, err := s.Policies().Create(ctx, tn.ID, p, t0)
	if err != nil || created.UnlistedTiers != tenants.UnlistedAllow {
		t.Fatalf("default: %v %+v", err, created)
	}
	p.UnlistedTiers = tenants.UnlistedDeny
	if _, _, err := s.Policies().Update(ctx, tn.ID, created.ID, p, t0); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Policies().Get(ctx, tn.ID, created.ID); err != nil || got.UnlistedTiers != tenants.UnlistedDeny {
		t.Fatalf("after update: %v %+v", err, got)
	}
	p.UnlistedTiers = "maybe"
	_, _, err = s.Policies().Update(ctx, tn.ID, created.ID, p, t0)
	wantCode(t, err, errs.Invalid)
}
