package ui_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// The customers page: a member adds a customer (a duplicate external id is
// refused naming the field), searches and pages the list, and opens a
// customer to see its keys; another tenant's customer is not found.
func TestCustomersPage(t *testing.T) {
	s := bootSite(t)
	tn := s.tenant("shop")
	owner := s.asOwner(tn)
	p := want(t, owner.get("/ui/customers"), http.StatusOK, "customers")
	if !p.has("customer-none") || !p.has("customer-form") {
		t.Fatal("a new tenant's customers page")
	}
	want(t, owner.post("/ui/customers", url.Values{"external_id": {"org_42"}, "name": {"Acme"}, "tier": {"pro"}}), http.StatusSeeOther, "add")
	p = want(t, owner.post("/ui/customers", url.Values{"external_id": {"org_42"}, "tier": {"pro"}}), http.StatusBadRequest, "a duplicate")
	if !strings.Contains(p.text("form-errors"), "external_id:") || p.inputValue("external_id") != "org_42" {
		t.Fatalf("duplicate: %q", p.text("form-errors"))
	}
	for i := range 50 {
		s.api("POST", "/v1/customers", tn.key, map[string]any{"external_id": fmt.Sprintf("bulk_%02d", i), "tier": "free"})
	}
	p = want(t, owner.get("/ui/customers"), http.StatusOK, "the first page")
	if n := len(p.testID("customer-row")); n != 50 || !p.has("customer-next") || p.has("customer-prev") {
		t.Fatalf("first page: %d rows", n)
	}
	p = want(t, owner.get("/ui/customers?offset=50"), http.StatusOK, "the second page")
	if n := len(p.testID("customer-row")); n != 1 || !p.has("customer-prev") {
		t.Fatalf("second page: %d rows", n)
	}
	p = want(t, owner.get("/ui/customers?q=ACME"), http.StatusOK, "a search")
	if n := len(p.testID("customer-row")); n != 1 || !strings.Contains(p.text("customer-row"), "org_42") {
		t.Fatalf("search: %d rows", n)
	}
	id := p.attr("customer-row", "data-customer-id")
	key := s.api("POST", "/v1/keys", tn.key, map[string]any{"name": "acme-app", "tier": "pro", "customer_id": id})
	p = want(t, owner.get("/ui/customers/"+id), http.StatusOK, "the customer")
	if p.text("customer-title") != "org_42" || p.attr("customer-key-row", "data-key-id") != key["id"] {
		t.Fatalf("customer page: %q, key %q", p.text("customer-title"), p.attr("customer-key-row", "data-key-id"))
	}
	p = want(t, owner.get("/ui/keys/"+key["id"].(string)), http.StatusOK, "the customer's key")
	if p.text("key-customer") != id {
		t.Fatalf("the key page names customer %q, want %q", p.text("key-customer"), id)
	}
	other := s.tenant("other")
	want(t, s.asOwner(other).get("/ui/customers/"+id), http.StatusNotFound, "another tenant's customer")
}
