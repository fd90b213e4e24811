package ui_test

import (
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/app"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Each dashboard form that adds what a tenant cap bounds shows the cap's
// message when the tenant is full, with 409.
func TestDashboardShowsTenantCaps(t *testing.T) {
	s := bootSiteWith(t, func(c *app.Config) {
		c.Caps = tenants.Caps{Policies: 1, LimitsPerPolicy: 2, ConsumerKeys: 1, ServiceKeys: 1, Blocks: 1, Members: 1}
	})
	tn := s.tenant("full")
	a := s.agent()
	a.signIn(tn.email, tn.password)
	shows := func(p page, what, cap string) {
		t.Helper()
		body := html.UnescapeString(p.body)
		if p.status != http.StatusConflict || !strings.Contains(body, `tenant cap "`+cap+`"`) {
			t.Fatalf("%s: status %d, want 409 and the %s cap's message on the page:\n%s", what, p.status, cap, p.body)
		}
	}

	a.get("/ui/policies/new")
	form := policyForm("wide", 10)
	form.Set("tiers", "3")
	form.Set("tier.2.name", "default")
	form.Set("tier.2.limits", "1")
	form.Set("tier.2.limit.0.algorithm", "token_bucket")
	form.Set("tier.2.limit.0.limit", "5")
	form.Set("tier.2.limit.0.period", "1s")
	shows(a.post("/ui/policies", form), "a policy of 3 limits", tenants.CapLimitsPerPolicy)
	a.createPolicy("one", 10)
	a.get("/ui/policies/new")
	p := a.post("/ui/policies", policyForm("two", 10))
	shows(p, "a second policy", tenants.CapPolicies)
	if p.has("error-name") {
		t.Fatal("the policy cap is shown as a taken name")
	}

	a.createKey("k1", "pro")
	a.get("/ui/keys")
	shows(a.post("/ui/keys", url.Values{"name": {"k2"}, "tier": {"pro"}}), "a second key", tenants.CapConsumerKeys)

	a.get("/ui/service-keys")
	shows(a.post("/ui/service-keys", nil), "a second service key", tenants.CapServiceKeys)

	a.get("/ui/members")
	// Whether the address has a login elsewhere or not, the answer is the cap's.
	for _, email := range []string{"new@full.test", opEmail} {
		p := a.post("/ui/members", url.Values{"email": {email}, "password": {"member passphrase"}})
		shows(p, "an invite to "+email, tenants.CapMembers)
	}

	s.api("POST", "/v1/admin/blocks", opToken, map[string]any{"tenant_id": tn.id, "identity": map[string]any{"kind": "ip", "id": "192.0.2.1"}})
	a.get("/ui/callers?kind=ip&id=192.0.2.2")
	p = a.post("/ui/callers/block", url.Values{"kind": {"ip"}, "id": {"192.0.2.2"}, "expiry": {"1h"}})
	if !strings.Contains(html.UnescapeString(p.body), `tenant cap "blocks"`) {
		t.Fatalf("a second block: status %d, the page does not show the cap:\n%s", p.status, p.body)
	}
}
