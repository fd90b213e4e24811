package tenants_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

func TestCustomerCRUD(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	before := version(t, s)
	c, cs, err := s.Customers().Create(ctx, a.ID, tenants.CustomerBody{ExternalID: ptr("org_42"), Name: ptr("Acme"), Tier: ptr("pro"),
		BillingAnchor: ptr(17), Metadata: &map[string]string{"crm": "hs-1"}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, before, cs, tenants.ChangeCustomer)
	if cs[0].Customer.Metadata != nil {
		t.Errorf("the change carries metadata to servers: %+v", cs[0].Customer)
	}
	if got := must[tenants.Customer](t)(s.Customers().Get(ctx, a.ID, c.ID)); got.ExternalID != "org_42" || got.BillingAnchor != 17 || got.Metadata["crm"] != "hs-1" {
		t.Fatalf("get: %+v", got)
	}
	// Another tenant may use the same external id, and sees nothing of a's.
	if _, _, err := s.Customers().Create(ctx, b.ID, tenants.CustomerBody{ExternalID: ptr("org_42"), Tier: ptr("pro")}, t0); err != nil {
		t.Fatalf("another tenant's customer with the same external id: %v", err)
	}
	_, err = s.Customers().Get(ctx, b.ID, c.ID)
	wantCode(t, err, errs.NotFound)
	_, _, err = s.Customers().Update(ctx, b.ID, c.ID, tenants.CustomerBody{Name: ptr("x")}, t0)
	wantCode(t, err, errs.NotFound)
	_, err = s.Customers().Delete(ctx, b.ID, c.ID, t0)
	wantCode(t, err, errs.NotFound)
	_, _, _, err = s.Keys().Issue(ctx, tenants.NewKey{TenantID: b.ID, Name: "k", Tier: "pro", CustomerID: c.ID}, t0)
	wantCode(t, err, errs.NotFound)

	// A duplicate external id, created or patched to, changes nothing.
	other := first3(s.Customers().Create(ctx, a.ID, tenants.CustomerBody{ExternalID: ptr("org_43"), Tier: ptr("pro")}, t0))
	_, _, err = s.Customers().Create(ctx, a.ID, tenants.CustomerBody{ExternalID: ptr("org_42"), Tier: ptr("pro")}, t0)
	wantCode(t, err, errs.Conflict)
	_, _, err = s.Customers().Update(ctx, a.ID, other.ID, tenants.CustomerBody{ExternalID: ptr("org_42")}, t0)
	wantCode(t, err, errs.Conflict)

	// A key joins, the customer cannot be deleted, the key leaves.
	k, _, _, err := s.Keys().Issue(ctx, tenants.NewKey{TenantID: a.ID, Name: "app", Tier: "pro", CustomerID: c.ID, BillingAnchor: 3}, t0)
	if err != nil || k.CustomerID != c.ID || k.BillingAnchor != 3 {
		t.Fatalf("issue with a customer: %+v %v", k, err)
	}
	page := must[tenants.KeyPage](t)(s.Keys().Page(ctx, tenants.KeyQuery{TenantID: a.ID, CustomerID: c.ID}))
	if page.Matched != 1 || page.Keys[0].ID != k.ID {
		t.Fatalf("the customer's keys: %+v", page)
	}
	_, err = s.Customers().Delete(ctx, a.ID, c.ID, t0)
	wantCode(t, err, errs.Conflict)
	k2, _, err := s.Keys().Update(ctx, a.ID, k.ID, tenants.KeyPatch{CustomerID: ptr("")}, t0)
	if err != nil || k2.CustomerID != "" {
		t.Fatalf("detach: %+v %v", k2, err)
	}
	snap := must[tenants.Snapshot](t)(s.Snapshot(ctx))
	if len(snap.Customers) != 3 || snap.Customers[0].Metadata != nil {
		t.Fatalf("snapshot customers: %+v", snap.Customers)
	}
	before = version(t, s)
	cs, err = s.Customers().Delete(ctx, a.ID, c.ID, t0)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, before, cs, tenants.ChangeCustomerDeleted)
	if err := snap.Apply(cs...); err != nil || len(snap.Customers) != 2 {
		t.Fatalf("snapshot after delete: %v, %d", err, len(snap.Customers))
	}
}

func first3[A, B, C any](a A, _ B, _ C) A { return a }

func TestCustomerPages(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a := mustTenant(t, s, "a")
	for i, id := range []string{"org_1", "org_2", "ACME-3", "org_4"} {
		if _, _, err := s.Customers().Create(ctx, a.ID, tenants.CustomerBody{ExternalID: ptr(id), Tier: ptr("pro")}, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	p := must[tenants.CustomerPage](t)(s.Customers().Page(ctx, tenants.CustomerQuery{TenantID: a.ID, Search: "acme"}))
	if p.Total != 4 || p.Matched != 1 || len(p.Customers) != 1 || p.Customers[0].ExternalID != "ACME-3" {
		t.Fatalf("search: %+v", p)
	}
	p = must[tenants.CustomerPage](t)(s.Customers().Page(ctx, tenants.CustomerQuery{TenantID: a.ID, Limit: 3, Offset: 3}))
	if p.Matched != 4 || len(p.Customers) != 1 || p.Customers[0].ExternalID != "org_4" {
		t.Fatalf("second page: %+v", p)
	}
	p = must[tenants.CustomerPage](t)(s.Customers().Page(ctx, tenants.CustomerQuery{TenantID: a.ID, Limit: 3, Offset: 99}))
	if p.Offset != 3 {
		t.Fatalf("an offset past the end is moved back to the last page: %+v", p)
	}
	_, err := s.Customers().Page(ctx, tenants.CustomerQuery{TenantID: a.ID, Limit: tenants.MaxCustomerPage + 1})
	wantCode(t, err, errs.Invalid)
}

func TestCapCustomers(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	s.SetCaps(tenants.Caps{Customers: 2})
	a := mustTenant(t, s, "a")
	for _, id := range []string{"c1", "c2"} {
		if _, _, err := s.Customers().Create(ctx, a.ID, tenants.CustomerBody{ExternalID: ptr(id), Tier: ptr("pro")}, t0); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := s.Customers().Create(ctx, a.ID, tenants.CustomerBody{ExternalID: ptr("c3"), Tier: ptr("pro")}, t0)
	wantCap(t, err, tenants.CapCustomers, 2)
	wantUsage(t, s, a.ID, tenants.Usage{ServiceKeys: 1, Members: 1, Customers: 2})
}

// A body round-trips through JSON, as it travels to the worker: a removed
// anchor and emptied maps stay removed.
func TestCustomerBodyJSON(t *testing.T) {
	in := tenants.CustomerBody{Name: ptr("n"), BillingAnchor: ptr(0), Overrides: &map[string]tenants.Limits{}, Metadata: &map[string]string{"a": "b"}}
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out tenants.CustomerBody
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	if *out.Name != "n" || out.BillingAnchor == nil || *out.BillingAnchor != 0 || out.Overrides == nil || len(*out.Overrides) != 0 || (*out.Metadata)["a"] != "b" || out.Tier != nil {
		t.Fatalf("round trip of %s: %+v", raw, out)
	}
	for body, field := range map[string]string{
		`{"billing_anchor":0}`: "billing_anchor", `{"metadata":[]}`: "metadata", `{"tier":null}`: "tier", `{"x":1}`: "unknown field",
	} {
		err := json.Unmarshal([]byte(body), &out)
		if errs.Code(err) != errs.Invalid || len(errs.Message(err)) < len(field) || errs.Message(err)[:len(field)] != field {
			t.Errorf("%s: %v, want an error naming %s", body, err, field)
		}
	}
}

// Deleting a tenant takes its customers with it, keys attached or not,
// and leaves another tenant's as they were.
func TestTenantDeleteTakesItsCustomers(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	ca := first3(s.Customers().Create(ctx, a.ID, tenants.CustomerBody{ExternalID: ptr("org_1"), Tier: ptr("pro")}, t0))
	cb := first3(s.Customers().Create(ctx, b.ID, tenants.CustomerBody{ExternalID: ptr("org_1"), Tier: ptr("pro")}, t0))
	if _, _, _, err := s.Keys().Issue(ctx, tenants.NewKey{TenantID: a.ID, Name: "k", Tier: "pro", CustomerID: ca.ID}, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Tenants().Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	snap := must[tenants.Snapshot](t)(s.Snapshot(ctx))
	if len(snap.Customers) != 1 || snap.Customers[0].ID != cb.ID {
		t.Fatalf("customers after the tenant's deletion: %+v", snap.Customers)
	}
	var changes []tenants.Change
	snap.Customers = append(snap.Customers, ca)
	changes = append(changes, tenants.Change{Kind: tenants.ChangeTenantDeleted, TenantID: a.ID, Version: snap.Version + 1})
	if err := snap.Apply(changes...); err != nil || len(snap.Customers) != 1 {
		t.Fatalf("a snapshot applying the deletion keeps %d customers: %v", len(snap.Customers), err)
	}
}
