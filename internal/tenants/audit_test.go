package tenants_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

var owner = tenants.Actor{Kind: tenants.ActorUser, ID: "usr_1", Label: "owner@acme.test"}

func auditPage(t *testing.T, s *tenants.Store, q tenants.AuditQuery) tenants.AuditPage {
	t.Helper()
	p, err := s.Audit().List(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func changeText(cs []tenants.FieldChange) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "%s: %q → %q\n", c.Field, c.Before, c.After)
	}
	return b.String()
}

func hasChange(t *testing.T, e tenants.AuditEntry, want tenants.FieldChange) {
	t.Helper()
	for _, c := range e.Changes {
		if c == want {
			return
		}
	}
	t.Fatalf("entry %s %s %s lacks %+v; has:\n%s", e.Action, e.ObjectType, e.ObjectName, want, changeText(e.Changes))
}

// TestAuditRecordsWhoWhenWhat follows one policy and one key through their
// lives and reads the tenant's log back, newest first.
func TestAuditRecordsWhoWhenWhat(t *testing.T) {
	s := newStore(t)
	ctx := tenants.WithActor(context.Background(), owner)
	tn := mustTenant(t, s, "acme")

	p, _, err := s.Policies().Create(ctx, tn.ID, samplePolicy("search"), t0)
	if err != nil {
		t.Fatal(err)
	}
	upd := samplePolicy("search")
	upd.Tiers["anonymous"] = tenants.Limits{{Algorithm: tenants.TokenBucket, Limit: 20, Period: "60s", Burst: 5}}
	delete(upd.Tiers, "pro")
	if _, _, err := s.Policies().Update(ctx, tn.ID, p.ID, upd, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	k, _, _, err := s.Keys().Create(ctx, tn.ID, "mobile app", "pro", nil, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	svc := tenants.WithActor(context.Background(), tenants.ServiceKeyActor("sk_AbC12defghijklmnopqrstuvwxyz0123456789"))
	if _, _, err := s.Keys().Revoke(svc, tn.ID, k.ID, t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Revoking again changes nothing and records nothing.
	if _, _, err := s.Keys().Revoke(svc, tn.ID, k.ID, t0.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Policies().Delete(ctx, tn.ID, p.ID, t0.Add(4*time.Minute)); err != nil {
		t.Fatal(err)
	}

	got := auditPage(t, s, tenants.AuditQuery{TenantID: tn.ID}).Entries
	var summary []string
	for _, e := range got {
		summary = append(summary, e.Actor.String()+" "+e.Action+" "+e.ObjectType+" "+e.ObjectName)
	}
	want := []string{
		"owner@acme.test deleted policy search",
		"service key sk_AbC12… revoked consumer_key mobile app (" + k.Prefix + "…)",
		"owner@acme.test created consumer_key mobile app (" + k.Prefix + "…)",
		"owner@acme.test updated policy search",
		"owner@acme.test created policy search",
		"Sluice created tenant acme", // mustTenant runs without an actor
	}
	if !reflect.DeepEqual(summary, want) {
		t.Fatalf("log:\n%s\nwant:\n%s", strings.Join(summary, "\n"), strings.Join(want, "\n"))
	}
	updated := got[3]
	if !updated.At.Equal(t0.Add(time.Minute).Truncate(time.Millisecond)) || updated.ObjectID != p.ID || updated.TenantID != tn.ID {
		t.Fatalf("updated entry = %+v", updated)
	}
	hasChange(t, updated, tenants.FieldChange{Field: "anonymous › limit", Before: "10", After: "20"})
	hasChange(t, updated, tenants.FieldChange{Field: "anonymous › burst", After: "5"})
	hasChange(t, updated, tenants.FieldChange{Field: "pro › daily › limit", Before: "10000"})
	if len(updated.Changes) != 2+2*3 { // the two anonymous fields, three fields of each pro limit
		t.Fatalf("update changes:\n%s", changeText(updated.Changes))
	}
	hasChange(t, got[4], tenants.FieldChange{Field: "path", After: "/api/search"})
	hasChange(t, got[1], tenants.FieldChange{Field: "status", Before: "active", After: "revoked"})
	hasChange(t, got[0], tenants.FieldChange{Field: "anonymous › limit", Before: "20"})
	if got[1].Actor.Kind != tenants.ActorServiceKey || strings.Contains(got[1].Actor.Label, "defgh") {
		t.Fatalf("service key actor = %+v: want the prefix only", got[1].Actor)
	}
}

// TestAuditNeverRecordsSecrets changes every credential and looks for any
// secret or hash in the stored entries.
func TestAuditNeverRecordsSecrets(t *testing.T) {
	s := newStore(t)
	ctx := tenants.WithActor(context.Background(), owner)
	tn, svcKey, _, err := s.Tenants().Create(ctx, "acme", "owner@acme.test", "correct horse battery", t0)
	if err != nil {
		t.Fatal(err)
	}
	_, ckKey, _, err := s.Keys().Create(ctx, tn.ID, "app", "pro", nil, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	_, sk2, _, err := s.ServiceKeys().Create(ctx, tn.ID, t0)
	if err != nil {
		t.Fatal(err)
	}
	u, err := s.Users().Create(ctx, tn.ID, "dev@acme.test", "member password one", tenants.RoleMember, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Users().ChangePassword(ctx, u.ID, "member password one", "member password two", t0); err != nil {
		t.Fatal(err)
	}
	u, _, err = s.Users().ChangeEmail(ctx, u.ID, "member password two", "dev2@acme.test", t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Users().SetRole(ctx, tn.ID, u.ID, tenants.RoleOwner, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Users().EndSessions(ctx, u.ID, t0); err != nil {
		t.Fatal(err)
	}
	op := tenants.WithActor(context.Background(), tenants.OperatorTokenActor())
	if _, _, err := s.Operator().SetTokenHash(op, tenants.HashToken("op_secret_token_value"), false, t0); err != nil {
		t.Fatal(err)
	}
	stored, err := s.Users().Get(ctx, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	all := auditPage(t, s, tenants.AuditQuery{AllTenants: true, Limit: 200}).Entries
	if len(all) != 9 {
		t.Fatalf("%d entries, want 9", len(all))
	}
	var text strings.Builder
	for _, e := range all {
		fmt.Fprintf(&text, "%+v\n", e)
	}
	for _, secret := range []string{svcKey, ckKey, sk2, "member password", stored.PasswordHash, tenants.HashToken("op_secret_token_value"), "correct horse"} {
		if strings.Contains(text.String(), secret) {
			t.Fatalf("the audit log holds a secret %q:\n%s", secret, text.String())
		}
	}
	hasChange(t, all[3], tenants.FieldChange{Field: "email", Before: "dev@acme.test", After: "dev2@acme.test"})
	hasChange(t, all[2], tenants.FieldChange{Field: "role", Before: "member", After: "owner"})
	hasChange(t, all[4], tenants.FieldChange{Field: "password", After: "changed"})
	if all[0].TenantID != "" || all[0].ObjectType != tenants.AuditOperator || all[0].Actor.String() != "operator" {
		t.Fatalf("operator token entry = %+v", all[0])
	}
}

// TestAuditFailedChangeRecordsNothing: a refused write leaves no entry.
func TestAuditFailedChangeRecordsNothing(t *testing.T) {
	s := newStore(t)
	ctx := tenants.WithActor(context.Background(), owner)
	tn := mustTenant(t, s, "acme")
	if _, _, err := s.Policies().Create(ctx, tn.ID, samplePolicy("search"), t0); err != nil {
		t.Fatal(err)
	}
	before := auditPage(t, s, tenants.AuditQuery{TenantID: tn.ID}).Entries
	_, _, err := s.Policies().Create(ctx, tn.ID, samplePolicy("search"), t0) // the name is taken
	wantCode(t, err, errs.Conflict)
	_, _, err = s.ServiceKeys().Revoke(ctx, tn.ID, must[[]tenants.ServiceKey](t)(s.ServiceKeys().List(ctx, tn.ID))[0].ID, t0) // the last one
	wantCode(t, err, errs.Conflict)
	if after := auditPage(t, s, tenants.AuditQuery{TenantID: tn.ID}).Entries; len(after) != len(before) {
		t.Fatalf("%d entries after refused writes, want %d", len(after), len(before))
	}
}

// TestAuditTenantIsolation: a tenant's page and entry lookups never reach
// another tenant's entries or the platform's.
func TestAuditTenantIsolation(t *testing.T) {
	s := newStore(t)
	ctx := tenants.WithActor(context.Background(), owner)
	a, b := mustTenant(t, s, "acme"), mustTenant(t, s, "globex")
	if _, _, err := s.Policies().Create(ctx, a.ID, samplePolicy("a-only"), t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Policies().Create(ctx, b.ID, samplePolicy("b-only"), t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Operator().SetTokenHash(ctx, tenants.HashToken("op_x"), false, t0); err != nil {
		t.Fatal(err)
	}
	for _, e := range auditPage(t, s, tenants.AuditQuery{TenantID: b.ID}).Entries {
		if e.TenantID != b.ID || e.ObjectName == "a-only" {
			t.Fatalf("globex's log shows %+v", e)
		}
	}
	aEntries := auditPage(t, s, tenants.AuditQuery{TenantID: a.ID}).Entries
	if _, err := s.Audit().Get(ctx, b.ID, aEntries[0].ID, false); !errs.Is(err, errs.NotFound) {
		t.Fatalf("another tenant's entry: err = %v, want not_found", err)
	}
	platform := auditPage(t, s, tenants.AuditQuery{AllTenants: true, ObjectType: tenants.AuditOperator}).Entries
	if _, err := s.Audit().Get(ctx, "", platform[0].ID, false); !errs.Is(err, errs.NotFound) {
		t.Fatalf("a platform entry without a tenant: err = %v, want not_found", err)
	}
	if e, err := s.Audit().Get(ctx, a.ID, aEntries[0].ID, false); err != nil || e.TenantName != "acme" {
		t.Fatalf("own entry = %+v, %v", e, err)
	}
	if _, err := s.Audit().List(ctx, tenants.AuditQuery{}); !errs.Is(err, errs.Invalid) {
		t.Fatalf("a query without a tenant: err = %v, want invalid_request", err)
	}
	all := auditPage(t, s, tenants.AuditQuery{AllTenants: true}).Entries
	if len(all) != 5 || all[0].TenantID != "" || all[1].TenantName != "globex" {
		t.Fatalf("operator's log = %+v", all)
	}
	if got := auditPage(t, s, tenants.AuditQuery{AllTenants: true, TenantID: b.ID}).Entries; len(got) != 2 {
		t.Fatalf("operator's log of globex: %d entries, want 2", len(got))
	}
}

// TestAuditPagesAndFilters pages through many entries by keyset, newest
// first, with and without filters.
func TestAuditPagesAndFilters(t *testing.T) {
	s := newStore(t)
	tn := mustTenant(t, s, "acme")
	alice := tenants.WithActor(context.Background(), tenants.Actor{Kind: tenants.ActorUser, ID: "usr_a", Label: "alice@acme.test"})
	bob := tenants.WithActor(context.Background(), tenants.Actor{Kind: tenants.ActorUser, ID: "usr_b", Label: "bob@acme.test"})
	for i := range 120 {
		ctx := alice
		if i%3 == 0 {
			ctx = bob
		}
		if _, _, _, err := s.Keys().Create(ctx, tn.ID, fmt.Sprintf("key %d", i), "pro", nil, nil, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Policies().Create(alice, tn.ID, samplePolicy("search"), t0); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	q := tenants.AuditQuery{TenantID: tn.ID}
	for pages := 0; ; pages++ {
		p := auditPage(t, s, q)
		if len(p.Entries) > tenants.DefaultAuditPage {
			t.Fatalf("page of %d", len(p.Entries))
		}
		for _, e := range p.Entries {
			ids = append(ids, e.ID)
		}
		if p.Next == 0 {
			if pages != 2 {
				t.Fatalf("%d pages, want 3", pages+1)
			}
			break
		}
		q.Before = p.Next
	}
	if len(ids) != 122 { // the tenant, 120 keys, the policy
		t.Fatalf("%d entries over all pages, want 122", len(ids))
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] >= ids[i-1] {
			t.Fatalf("not newest first at %d: %v", i, ids[i-1:i+1])
		}
	}
	byBob := auditPage(t, s, tenants.AuditQuery{TenantID: tn.ID, Actor: "bob@acme.test", Limit: 200}).Entries
	if len(byBob) != 40 {
		t.Fatalf("bob: %d entries, want 40", len(byBob))
	}
	policies := auditPage(t, s, tenants.AuditQuery{TenantID: tn.ID, ObjectType: tenants.AuditPolicy}).Entries
	if len(policies) != 1 || policies[0].ObjectName != "search" {
		t.Fatalf("policy entries = %+v", policies)
	}
	if _, err := s.Audit().List(context.Background(), tenants.AuditQuery{TenantID: tn.ID, ObjectType: "spaceship"}); !errs.Is(err, errs.Invalid) {
		t.Fatalf("unknown object type: err = %v", err)
	}
}

// TestAuditRetention deletes entries older than the cut and keeps the rest.
func TestAuditRetention(t *testing.T) {
	s := newStore(t)
	tn := mustTenant(t, s, "acme") // at t0
	ctx := tenants.WithActor(context.Background(), owner)
	for i := range 7 {
		if _, _, _, err := s.Keys().Create(ctx, tn.ID, fmt.Sprintf("k%d", i), "pro", nil, nil, t0.Add(time.Duration(i)*24*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.Audit().Prune(ctx, t0.Add(3*24*time.Hour), 2)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 { // the tenant and keys 0–2
		t.Fatalf("pruned %d, want 4", n)
	}
	left := auditPage(t, s, tenants.AuditQuery{TenantID: tn.ID}).Entries
	if len(left) != 4 || left[len(left)-1].ObjectName[:2] != "k3" {
		t.Fatalf("left = %+v", left)
	}
}
