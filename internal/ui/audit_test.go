package ui_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// auditRows reads the audit page's rows as "who | what | changes".
func auditRows(p page) []string {
	var out []string
	for _, row := range p.testID("audit-row") {
		sub := page{doc: row}
		out = append(out, sub.text("audit-actor")+" | "+sub.text("audit-what")+" | "+strings.Join(changeTexts(sub), "; "))
	}
	return out
}

func changeTexts(p page) []string {
	var out []string
	for _, li := range p.testID("audit-change") {
		out = append(out, page{doc: li}.textOf())
	}
	return out
}

// textOf is the whole page's text, spaces collapsed.
func (p page) textOf() string {
	var b strings.Builder
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(p.doc)
	return strings.Join(strings.Fields(b.String()), " ")
}

// TestAuditLogPages: a tenant's changes made in the dashboard and through
// the API are listed on its Audit log page with who made them and what
// changed; another tenant sees none of them; the operator sees both
// tenants', filters by tenant, and the filters and pages work.
func TestAuditLogPages(t *testing.T) {
	s := bootSite(t)
	acme, globex := s.tenant("acme"), s.tenant("globex")
	a := s.agent()
	a.signIn(acme.email, acme.password)
	id := a.createPolicy("search", 10)
	want(t, a.post("/ui/policies/"+id, policyForm("search", 25)), http.StatusSeeOther, "edit policy")
	keyID, _ := a.createKey("mobile", "pro")
	want(t, a.post("/ui/keys/"+keyID+"/revoke", nil), http.StatusSeeOther, "revoke key")
	s.api("POST", "/v1/keys", acme.key, map[string]any{"name": "by api", "tier": "pro"})

	p := want(t, a.get("/ui/audit"), http.StatusOK, "audit page")
	if p.attr("nav-audit", "aria-current") != "page" {
		t.Errorf("the Audit log nav entry is not current")
	}
	rows := auditRows(p)
	joined := strings.Join(rows, "\n")
	for _, w := range []string{
		"service key " + acme.key[:8] + "… | created consumer key by api",
		acme.email + " | revoked consumer key mobile",
		acme.email + " | updated policy search | anonymous › limit: 10 → 25",
		acme.email + " | created policy search",
		"operator | created tenant acme",
	} {
		if !strings.Contains(joined, w) {
			t.Errorf("the audit page lacks %q:\n%s", w, joined)
		}
	}
	if strings.Contains(p.body, acme.key) || strings.Contains(p.body, acme.password) {
		t.Errorf("the audit page shows a secret")
	}

	// Filters: by actor (the row's link) and by object type.
	byKey := want(t, a.get("/ui/audit?actor="+url.QueryEscape(acme.key[:8]+"…")), http.StatusOK, "filter by actor")
	if got := auditRows(byKey); len(got) != 1 || !strings.Contains(got[0], "by api") {
		t.Errorf("filtered by the service key: %q", got)
	}
	pols := want(t, a.get("/ui/audit?object_type=policy"), http.StatusOK, "filter by type")
	if got := auditRows(pols); len(got) != 2 || !pols.has("audit-filter-clear") {
		t.Errorf("policies only: %q", got)
	}

	// Another tenant sees none of acme's entries, whatever it asks for.
	g := s.agent()
	g.signIn(globex.email, globex.password)
	for _, path := range []string{"/ui/audit", "/ui/audit?actor=" + url.QueryEscape(acme.email), "/ui/audit?tenant_id=" + acme.id} {
		gp := want(t, g.get(path), http.StatusOK, "globex "+path)
		for _, r := range auditRows(gp) {
			if r != "operator | created tenant globex | name: globex; owner: "+globex.email+"; service key: "+globex.key[:8]+"…" {
				t.Errorf("globex's %s lists %q", path, r)
			}
		}
	}
	if r := g.get("/ui/admin/audit"); r.status != http.StatusForbidden {
		t.Errorf("a tenant opens the operator's audit log: %d", r.status)
	}

	// The operator: every tenant, with a tenant filter.
	op := s.agent()
	op.signIn(opEmail, opPassword)
	all := want(t, op.get("/ui/admin/audit"), http.StatusOK, "operator's audit log")
	txt := strings.Join(auditRows(all), "\n")
	if !strings.Contains(txt, "updated policy search | anonymous › limit: 10 → 25") || !strings.Contains(txt, "created tenant globex") {
		t.Errorf("operator's log:\n%s", txt)
	}
	only := want(t, op.get("/ui/admin/audit?tenant_id="+globex.id), http.StatusOK, "operator's log of globex")
	for _, n := range only.testID("audit-tenant") {
		if got := (page{doc: n}).textOf(); got != "globex" {
			t.Errorf("the globex filter lists an entry of %q", got)
		}
	}
	if only.selected("tenant_id") != globex.id {
		t.Errorf("tenant filter shows %q", only.selected("tenant_id"))
	}

	// Pages of 50, newest first: 60 more keys make two pages.
	for i := range 60 {
		s.api("POST", "/v1/keys", acme.key, map[string]any{"name": fmt.Sprintf("bulk %02d", i), "tier": "pro"})
	}
	first := want(t, a.get("/ui/audit"), http.StatusOK, "first page")
	if n := len(first.testID("audit-row")); n != 50 || !first.has("audit-older") || first.has("audit-newest") {
		t.Fatalf("first page: %d rows, older link %v", n, first.has("audit-older"))
	}
	if got := auditRows(first)[0]; !strings.Contains(got, "bulk 59") {
		t.Errorf("newest first: %q", got)
	}
	second := want(t, a.get(first.attr("audit-older", "href")), http.StatusOK, "second page")
	if n := len(second.testID("audit-row")); n != 16 || second.has("audit-older") || !second.has("audit-newest") {
		t.Errorf("second page: %d rows", n)
	}
}
