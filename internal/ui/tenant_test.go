package ui_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// The operator's tenant page shows the tenant's details, suspends and
// resumes it, and deletes it only with its name typed out; tenant users do
// not reach it, and another tenant is untouched.
func TestTenantPage(t *testing.T) {
	s := bootSite(t)
	tn, other := s.tenant("acme"), s.tenant("bystander")
	owner := s.asOwner(tn)
	want(t, owner.get("/ui/admin/tenants/"+tn.id), http.StatusForbidden, "owner on the tenant page")

	op := s.agent()
	op.signIn(opEmail, opPassword)
	list := want(t, op.get("/ui/admin/tenants"), http.StatusOK, "tenants")
	if href := list.attr("tenant-link", "href"); href != "/ui/admin/tenants/"+tn.id {
		t.Fatalf("the first tenant row links to %q", href)
	}
	p := want(t, op.get("/ui/admin/tenants/"+tn.id), http.StatusOK, "tenant page")
	if p.text("tenant-title") != "acme" || p.text("tenant-status") != "active" || p.text("tenant-id") != tn.id ||
		p.text("tenant-owners") != tn.email || p.text("tenant-users") != "1" || !strings.HasPrefix(p.text("tenant-service-key-count"), "1 active") {
		t.Fatalf("details: %q", p.text("tenant-details"))
	}
	want(t, op.get("/ui/admin/tenants/ten_missing"), http.StatusNotFound, "unknown tenant")

	p = want(t, op.post("/ui/admin/tenants/"+tn.id+"/suspend", nil), http.StatusSeeOther, "suspend")
	if p.location != "/ui/admin/tenants/"+tn.id+"?done=tenant-suspended" {
		t.Fatalf("after suspending: to %q", p.location)
	}
	if st := s.apiStatus("GET", "/v1/policies", tn.key); st != http.StatusForbidden {
		t.Fatalf("suspended tenant's key: %d", st)
	}
	if st := s.apiStatus("GET", "/v1/policies", other.key); st != http.StatusOK {
		t.Fatalf("the other tenant's key: %d", st)
	}
	if p := owner.get("/ui/keys"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.location, "/ui/login") {
		t.Fatalf("suspended owner's session: %d to %q", p.status, p.location)
	}
	p = want(t, op.get("/ui/admin/tenants/"+tn.id+"?done=tenant-suspended"), http.StatusOK, "suspended page")
	if p.text("tenant-status") != "suspended" || !p.has("tenant-resume") || !strings.Contains(p.text("flash"), "403") {
		t.Fatalf("suspended page: %q / %q", p.text("tenant-status"), p.text("flash"))
	}
	want(t, op.post("/ui/admin/tenants/"+tn.id+"/resume", nil), http.StatusSeeOther, "resume")
	if st := s.apiStatus("GET", "/v1/policies", tn.key); st != http.StatusOK {
		t.Fatalf("resumed tenant's key: %d", st)
	}

	// A wrong or missing name deletes nothing.
	op.get("/ui/admin/tenants/" + tn.id)
	for _, typed := range []string{"", "acm", "ACME"} {
		p := op.post("/ui/admin/tenants/"+tn.id+"/delete", url.Values{"confirm_name": {typed}})
		if p.status != http.StatusBadRequest || !strings.Contains(p.text("error-confirm_name"), "acme") {
			t.Fatalf("delete with %q typed: %d %q", typed, p.status, p.text("error-confirm_name"))
		}
	}
	if st := s.apiStatus("GET", "/v1/policies", tn.key); st != http.StatusOK {
		t.Fatal("a refused delete touched the tenant")
	}
	p = want(t, op.post("/ui/admin/tenants/"+tn.id+"/delete", url.Values{"confirm_name": {"acme"}}), http.StatusSeeOther, "delete")
	if p.location != "/ui/admin/tenants?done=tenant-deleted" {
		t.Fatalf("after deleting: to %q", p.location)
	}
	if st := s.apiStatus("GET", "/v1/policies", tn.key); st != http.StatusUnauthorized {
		t.Fatalf("deleted tenant's key: %d", st)
	}
	list = want(t, op.get("/ui/admin/tenants?done=tenant-deleted"), http.StatusOK, "tenants after the delete")
	if strings.Contains(list.text("tenant-list"), "acme") || !strings.Contains(list.text("tenant-list"), "bystander") {
		t.Fatalf("list after the delete: %q", list.text("tenant-list"))
	}
	want(t, op.get("/ui/admin/tenants/"+tn.id), http.StatusNotFound, "deleted tenant's page")
}
