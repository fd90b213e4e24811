package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/internal/tenants"
)

// A key's check names its customer, from the snapshot and from changes:
// a customer's new external id, a key that leaves, a deleted customer. A
// key of another tenant's customer id (which the store never writes)
// names nothing.
func TestCheckNamesCustomer(t *testing.T) {
	snap, _ := snapshot(t)
	plain, prefix, hash, _ := tenants.GenerateKey("ck_")
	other, otherPrefix, otherHash, _ := tenants.GenerateKey("ck_")
	snap.Customers = []tenants.Customer{
		{ID: "cus_1", TenantID: "ten_a", ExternalID: "org_42", Tier: "pro"},
		{ID: "cus_b", TenantID: "ten_b", ExternalID: "org_b", Tier: "pro"},
	}
	key := tenants.ConsumerKey{ID: "ckey_1", TenantID: "ten_a", Tier: "pro", Prefix: prefix, Hash: hash, CustomerID: "cus_1"}
	snap.ConsumerKeys = []tenants.ConsumerKeyRecord{{ConsumerKey: key},
		{ConsumerKey: tenants.ConsumerKey{ID: "ckey_2", TenantID: "ten_a", Tier: "pro", Prefix: otherPrefix, Hash: otherHash, CustomerID: "cus_b"}}}
	e := newTestEngine(t, snap)
	check := func(k string) Answer {
		t.Helper()
		a, err := e.Check(t.Context(), "ten_a", &CheckRequest{APIKey: k, Path: "/api/example?mode=heavy", Peek: true}, t0)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	apply := func(c tenants.Change) {
		t.Helper()
		v, err := e.view.Load().apply(c)
		if err != nil {
			t.Fatal(err)
		}
		e.view.Store(v)
	}
	if a := check(plain); a.Customer == nil || *a.Customer != (Customer{ID: "cus_1", ExternalID: "org_42"}) {
		t.Fatalf("from the snapshot: %+v", a)
	}
	if a := check(other); a.Customer != nil {
		t.Fatalf("a key naming another tenant's customer: %+v", a)
	}
	apply(tenants.Change{Version: 2, Kind: tenants.ChangeCustomer, TenantID: "ten_a", Customer: &tenants.Customer{ID: "cus_1", TenantID: "ten_a", ExternalID: "org_43", Tier: "pro"}})
	if a := check(plain); a.Customer == nil || a.Customer.ExternalID != "org_43" {
		t.Fatalf("after the external id changed: %+v", a)
	}
	key.CustomerID = ""
	apply(tenants.Change{Version: 3, Kind: tenants.ChangeConsumerKey, TenantID: "ten_a", ConsumerKey: &tenants.ConsumerKeyRecord{ConsumerKey: key}})
	if a := check(plain); a.Customer != nil {
		t.Fatalf("a detached key: %+v", a)
	}
	key.CustomerID = "cus_1"
	apply(tenants.Change{Version: 4, Kind: tenants.ChangeConsumerKey, TenantID: "ten_a", ConsumerKey: &tenants.ConsumerKeyRecord{ConsumerKey: key}})
	apply(tenants.Change{Version: 5, Kind: tenants.ChangeCustomerDeleted, TenantID: "ten_a", ID: "cus_1"})
	if a := check(plain); a.Customer != nil || !a.Allowed {
		t.Fatalf("after the customer is gone: %+v", a)
	}
}

// BenchmarkEngineCheckCustomer compares a check with a key of a customer,
// whose answer names it, to one with a key of none.
func BenchmarkEngineCheckCustomer(b *testing.B) {
	snap, _ := snapshot(b)
	plain, prefix, hash, _ := tenants.GenerateKey("ck_")
	member, memberPrefix, memberHash, _ := tenants.GenerateKey("ck_")
	snap.Customers = []tenants.Customer{{ID: "cus_1", TenantID: "ten_a", ExternalID: "org_42", Tier: "default"}}
	snap.ConsumerKeys = []tenants.ConsumerKeyRecord{
		{ConsumerKey: tenants.ConsumerKey{ID: "ckey_plain", TenantID: "ten_a", Tier: "default", Prefix: prefix, Hash: hash}},
		{ConsumerKey: tenants.ConsumerKey{ID: "ckey_member", TenantID: "ten_a", Tier: "default", Prefix: memberPrefix, Hash: memberHash, CustomerID: "cus_1"}},
	}
	snap.Policies = append(snap.Policies, tenants.Policy{ID: "pol_wide_keys", TenantID: "ten_a", Name: "wide-keys", Method: "*", Path: "/wide/*", CreatedAt: t0,
		Tiers: map[string]tenants.Limits{"default": limit("token_bucket", 1_000_000_000, "1s")}})
	e := newTestEngine(b, snap)
	for _, c := range []struct{ name, key, customer string }{{"key", plain, ""}, {"key_of_customer", member, "cus_1"}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := CheckRequest{APIKey: c.key, Path: "/wide/items"}
				a, err := e.Check(context.Background(), "ten_a", &r, t0)
				if err != nil || !a.Allowed || (a.Customer != nil) != (c.customer != "") {
					b.Fatal(a, err)
				}
			}
		})
	}
}

// A token's customer claim names the tenant's customer of that external
// id, following the customer's changes; a claim naming no customer of the
// tenant (another tenant's included), an oversized one, or an issuer
// without the claim leaves the caller without a customer, and the token
// is valid all the same.
func TestJWTNamesCustomer(t *testing.T) {
	snap := jwtSnapshot(t)
	snap.JWTIssuers[0].Claims.Customer = "org"
	snap.Customers = []tenants.Customer{
		{ID: "cus_1", TenantID: "ten_a", ExternalID: "org_42", Tier: "pro"},
		{ID: "cus_b", TenantID: "ten_b", ExternalID: "org_b", Tier: "pro"},
	}
	e := newTestEngine(t, snap)
	k := testKeys()
	check := func(org any) Answer {
		t.Helper()
		c := claimsAt(issA, "alice", t0)
		if org != nil {
			c["org"] = org
		}
		r := CheckRequest{JWT: sign(t, jwt.SigningMethodES256, k.ec, "e1", c), Path: "/jwt/x", Peek: true}
		a, err := e.Check(t.Context(), "ten_a", &r, t0)
		if err != nil || a.Reason == ReasonInvalidToken {
			t.Fatalf("check: %+v %v", a, err)
		}
		return a
	}
	if a := check("org_42"); a.Customer == nil || a.Customer.ID != "cus_1" || a.IdentityID != "alice" {
		t.Fatalf("a token naming org_42: %+v", a)
	}
	for _, org := range []any{nil, "org_b", "org_nope", 42, strings.Repeat("o", tenants.MaxExternalID+1)} {
		if a := check(org); a.Customer != nil {
			t.Fatalf("a token with org %v names %+v", org, a.Customer)
		}
	}
	v, err := e.view.Load().apply(tenants.Change{Version: 2, Kind: tenants.ChangeCustomer, TenantID: "ten_a",
		Customer: &tenants.Customer{ID: "cus_1", TenantID: "ten_a", ExternalID: "org_43", Tier: "pro"}})
	if err != nil {
		t.Fatal(err)
	}
	e.view.Store(v)
	if a := check("org_42"); a.Customer != nil {
		t.Fatalf("the old external id still names the customer: %+v", a.Customer)
	}
	if a := check("org_43"); a.Customer == nil || a.Customer.ID != "cus_1" {
		t.Fatalf("the new external id: %+v", a)
	}
}
