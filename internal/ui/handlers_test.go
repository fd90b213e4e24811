package ui_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

// policyForm is the form for a policy with an anonymous and a pro tier.
func policyForm(name string, anonLimit int) url.Values {
	return url.Values{
		"name": {name}, "method": {"GET"}, "path": {"/api/" + name}, "query": {""}, "consistency": {"exact"},
		"tiers":       {"2"},
		"tier.0.name": {"anonymous"}, "tier.0.limits": {"1"},
		"tier.0.limit.0.algorithm": {"token_bucket"}, "tier.0.limit.0.limit": {strconv.Itoa(anonLimit)}, "tier.0.limit.0.period": {"60s"},
		"tier.1.name": {"pro"}, "tier.1.limits": {"1"},
		"tier.1.limit.0.algorithm": {"sliding_window"}, "tier.1.limit.0.limit": {"1000"}, "tier.1.limit.0.period": {"1m"},
		"do": {"save"},
	}
}

func (a *agent) createPolicy(name string, anonLimit int) string {
	a.s.t.Helper()
	want(a.s.t, a.post("/ui/policies", policyForm(name, anonLimit)), http.StatusSeeOther, "create policy "+name)
	for _, n := range a.get("/ui/policies").testID("policy-link") {
		if strings.Contains(n.FirstChild.Data, name) {
			return strings.TrimPrefix(attrOf(n, "href"), "/ui/policies/")
		}
	}
	a.s.t.Fatalf("policy %s not listed", name)
	return ""
}

func (a *agent) createKey(name, tier string) (id, secret string) {
	a.s.t.Helper()
	p := want(a.s.t, a.post("/ui/keys", url.Values{"name": {name}, "tier": {tier}}), http.StatusSeeOther, "create key")
	if p.location != "/ui/keys" {
		a.s.t.Fatalf("create key: to %q", p.location)
	}
	p = want(a.s.t, a.get(p.location), http.StatusOK, "after creating a key")
	secret = p.text("key-secret")
	// The secret is shown once: a reload shows the list without it and
	// makes no second key.
	if again := want(a.s.t, a.get("/ui/keys"), http.StatusOK, "reload"); again.has("key-secret") || len(again.testID("key-row")) != len(p.testID("key-row")) {
		a.s.t.Fatal("a reload of the keys page shows the secret again or adds a key")
	}
	for _, row := range p.testID("key-row") {
		if strings.Contains(attrOf(row, "data-key-id"), "ckey_") {
			id = attrOf(row, "data-key-id")
		}
	}
	if !strings.HasPrefix(secret, "ck_") || id == "" {
		a.s.t.Fatalf("created key: secret %q id %q", secret, id)
	}
	return id, secret
}

func TestPagesNeedSignIn(t *testing.T) {
	s := bootSite(t)
	a := s.agent()
	for _, path := range []string{"/ui/", "/ui/policies", "/ui/policies/new", "/ui/policies/pol_x", "/ui/keys", "/ui/keys/ckey_x",
		"/ui/analytics", "/ui/analytics/identity?kind=ip&id=192.0.2.1", "/ui/members", "/ui/admin/tenants", "/ui/admin/abuse", "/ui/admin/blocks"} {
		p := want(t, a.get(path), http.StatusSeeOther, "GET "+path)
		if path == "/ui/" {
			if p.location != "/ui/login" {
				t.Errorf("GET /ui/: to %q", p.location)
			}
			continue
		}
		if p.location != "/ui/login?next="+url.QueryEscape(path) {
			t.Errorf("GET %s: to %q", path, p.location)
		}
	}
	for _, path := range []string{"/ui/logout", "/ui/policies", "/ui/policies/test", "/ui/policies/pol_x", "/ui/policies/pol_x/delete", "/ui/keys",
		"/ui/keys/ckey_x", "/ui/keys/ckey_x/overrides", "/ui/keys/ckey_x/revoke", "/ui/keys/ckey_x/reset", "/ui/analytics/reset", "/ui/members",
		"/ui/admin/tenants", "/ui/admin/blocks", "/ui/admin/blocks/blk_x/delete"} {
		if p := want(t, a.post(path, url.Values{"_csrf": {"x"}}), http.StatusSeeOther, "POST "+path); p.location != "/ui/login" {
			t.Errorf("POST %s: to %q", path, p.location)
		}
	}
	// Signing in returns to the page asked for.
	a.get("/ui/login?next=%2Fui%2Fkeys")
	p := a.post("/ui/login", url.Values{"email": {opEmail}, "password": {opPassword}, "next": {"/ui/admin/blocks"}})
	if p.status != http.StatusSeeOther || p.location != "/ui/admin/blocks" {
		t.Fatalf("sign-in: %d to %q", p.status, p.location)
	}
}

// TestTenantPages walks every page and form of a tenant's owner.
func TestTenantPages(t *testing.T) {
	s := bootSite(t)
	tn := s.tenant("acme")
	a := s.agent()
	a.signIn(tn.email, tn.password)

	p := want(t, a.get("/ui/"), http.StatusOK, "overview")
	if !p.has("empty-policies") {
		t.Error("a new tenant's overview does not say what to do first")
	}
	want(t, a.get("/ui/policies"), http.StatusOK, "policies")
	want(t, a.get("/ui/policies/new"), http.StatusOK, "new policy")

	// Invalid: the worker's message lands next to the input it names.
	bad := policyForm("heavy", 3)
	bad.Set("tier.1.limit.0.period", "soon")
	p = want(t, a.post("/ui/policies", bad), http.StatusBadRequest, "invalid policy")
	if msg := p.text("error-tier.1.limit.0.period"); !strings.Contains(msg, "duration") {
		t.Errorf("period error %q", msg)
	}
	if p.inputValue("tier.1.limit.0.period") != "soon" || p.inputValue("name") != "heavy" {
		t.Error("the form does not keep what was typed")
	}
	bad = policyForm("heavy", 3)
	bad.Set("path", "api/heavy")
	if msg := want(t, a.post("/ui/policies", bad), http.StatusBadRequest, "invalid path").text("error-path"); !strings.Contains(msg, `start with "/"`) {
		t.Errorf("path error %q", msg)
	}
	// Row buttons edit the form without saving.
	add := policyForm("heavy", 3)
	add.Set("do", "add-tier")
	if p := want(t, a.post("/ui/policies", add), http.StatusOK, "add a tier"); len(p.testID("tier-card")) != 3 {
		t.Errorf("%d tier cards after adding one", len(p.testID("tier-card")))
	}
	add.Set("do", "add-limit:1")
	if p := want(t, a.post("/ui/policies", add), http.StatusOK, "add a limit"); len(p.testID("limit-row")) != 3 {
		t.Errorf("%d limit rows after adding one", len(p.testID("limit-row")))
	}
	polID := a.createPolicy("heavy", 3)
	if p := a.post("/ui/policies", policyForm("heavy", 3)); p.status != http.StatusBadRequest || !strings.Contains(p.text("error-name"), "another policy") {
		t.Errorf("duplicate name: %d %q", p.status, p.text("error-name"))
	}

	// Edit: the form shows the stored policy; saving changes it.
	p = want(t, a.get("/ui/policies/"+polID), http.StatusOK, "edit policy")
	if p.inputValue("tier.0.limit.0.limit") != "3" || p.inputValue("tier.1.name") != "pro" {
		t.Errorf("edit form: limit %q tier %q", p.inputValue("tier.0.limit.0.limit"), p.inputValue("tier.1.name"))
	}
	want(t, a.post("/ui/policies/"+polID, policyForm("heavy", 4)), http.StatusSeeOther, "update policy")
	got := s.api("GET", "/v1/policies/"+polID, tn.key, nil)
	if lim := got["tiers"].(map[string]any)["anonymous"].(map[string]any)["limit"]; lim != float64(4) {
		t.Errorf("stored limit %v, want 4", lim)
	}

	// The path tester peeks: it names policy and tier and consumes nothing.
	for range 2 {
		p = want(t, a.post("/ui/policies/test", url.Values{"method": {"GET"}, "path": {"/api/heavy.json"}, "caller": {"192.0.2.10"}}), http.StatusOK, "path test")
		if p.attr("path-test-result", "data-policy") != "heavy" || p.attr("path-test-result", "data-tier") != "anonymous" {
			t.Fatalf("path test: %q", p.text("path-test-result"))
		}
	}
	if c := s.check(tn, map[string]any{"ip": "192.0.2.10", "path": "/api/heavy"}); c["remaining"] != float64(3) {
		t.Errorf("after two peeks the first check leaves %v of 4", c["remaining"])
	}
	if p := a.post("/ui/policies/test", url.Values{"method": {"GET"}, "path": {"/api/heavy"}, "caller": {"not an ip"}}); p.status != http.StatusBadRequest || !p.has("path-test-error") {
		t.Errorf("bad caller: %d", p.status)
	}

	// Keys: create (secret once), list, edit, overrides, reset, revoke.
	want(t, a.get("/ui/keys"), http.StatusOK, "keys")
	keyID, secret := a.createKey("mobile app", "pro")
	if p := a.post("/ui/keys", url.Values{"name": {"x"}, "tier": {"Not A Tier"}}); p.status != http.StatusBadRequest || p.text("error-tier") == "" {
		t.Errorf("bad tier: %d %q", p.status, p.text("error-tier"))
	}
	if p := a.get("/ui/keys"); strings.Contains(p.body, secret) {
		t.Error("the key list shows the secret again")
	}
	p = want(t, a.get("/ui/keys/"+keyID), http.StatusOK, "key page")
	if p.text("key-tier-value") != "pro" {
		t.Errorf("key tier %q", p.text("key-tier-value"))
	}
	want(t, a.post("/ui/keys/"+keyID, url.Values{"name": {"mobile app"}, "tier": {"gold"}, "expires_at": {"2099-01-01T00:00"}}), http.StatusSeeOther, "edit key")
	k := s.api("GET", "/v1/keys/"+keyID, tn.key, nil)
	if k["tier"] != "gold" || !strings.HasPrefix(k["expires_at"].(string), "2099-01-01T00:00:00") {
		t.Errorf("stored key %v", k)
	}
	if p := a.post("/ui/keys/"+keyID, url.Values{"name": {"mobile app"}, "tier": {"gold"}, "expires_at": {"2001-01-01T00:00"}}); p.status != http.StatusBadRequest || p.text("error-expires_at") == "" {
		t.Errorf("past expiry: %d", p.status)
	}
	// An override of 2 per minute on heavy for this key only.
	add = url.Values{"rows": {"0"}, "do": {"add"}}
	if p := want(t, a.post("/ui/keys/"+keyID+"/overrides", add), http.StatusOK, "add override row"); p.inputValue("override.0.limit") != "" || !p.has("overrides-form") {
		t.Error("no override row")
	}
	ov := url.Values{"rows": {"1"}, "override.0.policy": {"heavy"}, "override.0.algorithm": {"token_bucket"}, "override.0.limit": {"2"}, "override.0.period": {"1m"}, "do": {"save"}}
	want(t, a.post("/ui/keys/"+keyID+"/overrides", ov), http.StatusSeeOther, "save overrides")
	for i := range 3 {
		c := s.check(tn, map[string]any{"api_key": secret, "path": "/api/heavy"})
		if allowed := c["allowed"].(bool); allowed != (i < 2) {
			t.Fatalf("check %d with the override: %v", i, c)
		}
	}
	ov.Set("override.0.period", "whenever")
	if p := a.post("/ui/keys/"+keyID+"/overrides", ov); p.status != http.StatusBadRequest || !strings.Contains(p.text("error-override.0.period"), "duration") {
		t.Errorf("bad override: %d %q", p.status, p.text("error-override.0.period"))
	}
	want(t, a.post("/ui/keys/"+keyID+"/reset", url.Values{"policy": {"heavy"}}), http.StatusSeeOther, "reset")
	if c := s.check(tn, map[string]any{"api_key": secret, "path": "/api/heavy"}); !c["allowed"].(bool) {
		t.Errorf("after the reset: %v", c)
	}
	if p := a.post("/ui/keys/"+keyID+"/reset", url.Values{"policy": {"nope"}}); p.status != http.StatusBadRequest || !p.has("reset-form") {
		t.Errorf("reset of an unknown policy: %d", p.status)
	}
	want(t, a.post("/ui/keys/"+keyID+"/revoke", nil), http.StatusSeeOther, "revoke")
	// The page answered after this server applied the revocation.
	if c := s.check(tn, map[string]any{"api_key": secret, "path": "/api/heavy"}); c["reason"] != "invalid_key" {
		t.Errorf("check right after revoking: %v", c)
	}
	if p := a.get("/ui/keys/" + keyID); p.text("key-status") != "revoked" || p.has("key-revoke") {
		t.Error("revoked key page")
	}
	if p := a.get("/ui/keys"); p.has("key-row") {
		t.Error("revoked keys are listed without asking")
	}
	if p := a.get("/ui/keys?revoked=1"); !p.has("key-row") {
		t.Error("revoked keys are not listed when asked")
	}

	// Analytics: the denials arrive within a couple of seconds.
	for range 6 {
		s.check(tn, map[string]any{"ip": "203.0.113.50", "path": "/api/heavy"})
	}
	// The key denied earlier is an offender already, so wait for this IP's
	// own row, not for any row.
	hasIP := func(p page) bool {
		for _, row := range p.testID("offender-row") {
			if attrOf(row, "data-identity") == "203.0.113.50" {
				return true
			}
		}
		return false
	}
	waitFor(t, 15*time.Second, "the IP's denials on the analytics page", func() bool {
		p := a.get("/ui/analytics?range=1h&step=5m&policy=heavy")
		return p.attr("chart", "data-denied") != "" && p.attr("chart", "data-denied") != "0" && hasIP(p)
	})
	p = want(t, a.get("/ui/analytics?range=1h"), http.StatusOK, "analytics")
	if !hasIP(p) {
		t.Fatalf("offenders: %q", p.text("offenders"))
	}
	p = want(t, a.get("/ui/analytics/identity?kind=ip&id=203.0.113.50&range=1h"), http.StatusOK, "identity")
	if p.attr("chart", "data-denied") != "2" {
		t.Errorf("identity chart shows %q denials, want 2", p.attr("chart", "data-denied"))
	}
	want(t, a.post("/ui/analytics/reset", url.Values{"kind": {"ip"}, "id": {"203.0.113.50"}, "policy": {"heavy"}}), http.StatusSeeOther, "reset from analytics")
	if c := s.check(tn, map[string]any{"ip": "203.0.113.50", "path": "/api/heavy"}); !c["allowed"].(bool) {
		t.Errorf("after the reset: %v", c)
	}
	if p := a.get("/ui/analytics?range=30d&step=1m"); !strings.Contains(p.text("analytics-error"), "longer step") {
		t.Errorf("too many points: %q", p.text("analytics-error"))
	}
	if p := a.get("/ui/"); p.attr("chart", "data-denied") == "0" || !p.has("top-policies") || !p.has("top-identities") {
		t.Error("overview does not show the denials")
	} else if p.text("top-policy-link") != "heavy" || p.attr("top-policy-link", "href") != "/ui/policies/"+polID {
		t.Errorf("most denied policy %q at %q, want heavy at its page", p.text("top-policy-link"), p.attr("top-policy-link", "href"))
	}
	want(t, a.get("/ui/?range=7d"), http.StatusOK, "overview, week")

	// Members: the owner invites; the member works but cannot invite.
	want(t, a.get("/ui/members"), http.StatusOK, "members")
	if p := a.post("/ui/members", url.Values{"email": {"m@acme.test"}, "password": {"short"}}); p.status != http.StatusBadRequest || p.text("error-password") == "" {
		t.Errorf("short password: %d", p.status)
	}
	want(t, a.post("/ui/members", url.Values{"email": {"m@acme.test"}, "password": {"member passphrase"}}), http.StatusCreated, "invite")
	m := s.agent()
	m.signIn("m@acme.test", "member passphrase")
	want(t, m.get("/ui/policies"), http.StatusOK, "member: policies")
	want(t, m.get("/ui/members"), http.StatusForbidden, "member: members")
	want(t, m.get("/ui/admin/abuse"), http.StatusForbidden, "member: abuse report")

	// Delete, and sign out.
	want(t, a.post("/ui/policies/"+polID+"/delete", nil), http.StatusSeeOther, "delete policy")
	if c := s.check(tn, map[string]any{"ip": "203.0.113.50", "path": "/api/heavy"}); c["policy"] != nil {
		t.Errorf("the deleted policy still applies: %v", c)
	}
	p = want(t, a.post("/ui/logout", nil), http.StatusSeeOther, "sign out")
	if p := want(t, a.get("/ui/"), http.StatusSeeOther, "after signing out"); p.location != "/ui/login" {
		t.Errorf("after signing out: to %q", p.location)
	}
}

// TestTenantIsolation: a tenant's user cannot see or touch another
// tenant's objects; their ids answer 404 as unknown ids do.
func TestTenantIsolation(t *testing.T) {
	s := bootSite(t)
	ta, tb := s.tenant("alpha"), s.tenant("beta")
	bPolicy := s.api("POST", "/v1/policies", tb.key, map[string]any{"name": "secret-endpoint", "path": "/b", "tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 1, "period": "1h"}}})["id"].(string)
	bKey := s.api("POST", "/v1/keys", tb.key, map[string]any{"name": "beta customer", "tier": "pro"})
	bKeyID, bSecret := bKey["id"].(string), bKey["key"].(string)
	s.check(tb, map[string]any{"ip": "198.51.100.1", "path": "/b"})
	s.check(tb, map[string]any{"ip": "198.51.100.1", "path": "/b"})

	a := s.agent()
	a.signIn(ta.email, ta.password)
	a.createPolicy("mine", 5)

	for _, path := range []string{"/ui/policies/" + bPolicy, "/ui/keys/" + bKeyID, "/ui/policies/pol_doesnotexist"} {
		want(t, a.get(path), http.StatusNotFound, "GET "+path)
	}
	for path, form := range map[string]url.Values{
		"/ui/policies/" + bPolicy:             policyForm("stolen", 100),
		"/ui/policies/" + bPolicy + "/delete": nil,
		"/ui/keys/" + bKeyID:                  {"name": {"mine now"}, "tier": {"free"}},
		"/ui/keys/" + bKeyID + "/overrides":   {"rows": {"0"}, "do": {"save"}},
		"/ui/keys/" + bKeyID + "/revoke":      nil,
		"/ui/keys/" + bKeyID + "/reset":       {"policy": {"secret-endpoint"}},
	} {
		if p := a.post(path, form); p.status != http.StatusNotFound || strings.Contains(p.body, "secret-endpoint") || strings.Contains(p.body, "beta customer") {
			t.Errorf("POST %s: %d", path, p.status)
		}
	}
	// B's objects are untouched.
	if k := s.api("GET", "/v1/keys/"+bKeyID, tb.key, nil); k["revoked_at"] != nil || k["name"] != "beta customer" {
		t.Errorf("B's key changed: %v", k)
	}
	if p := s.api("GET", "/v1/policies/"+bPolicy, tb.key, nil); p["name"] != "secret-endpoint" {
		t.Errorf("B's policy changed: %v", p)
	}
	if c := s.check(tb, map[string]any{"api_key": bSecret, "path": "/x"}); c["reason"] != "ok" {
		t.Errorf("B's key: %v", c)
	}
	// A bucket reset names the policy by name: B's name is unknown in A.
	if p := a.post("/ui/analytics/reset", url.Values{"kind": {"ip"}, "id": {"198.51.100.1"}, "policy": {"secret-endpoint"}}); p.status != http.StatusBadRequest {
		t.Errorf("reset with B's policy name: %d", p.status)
	}
	if c := s.check(tb, map[string]any{"ip": "198.51.100.1", "path": "/b"}); c["allowed"].(bool) {
		t.Error("A reset B's bucket")
	}
	// A's pages show none of B's data, B's key id included.
	for _, path := range []string{"/ui/", "/ui/policies", "/ui/keys", "/ui/analytics?range=1h", "/ui/analytics/identity?kind=key&id=" + bKeyID} {
		p := want(t, a.get(path), http.StatusOK, "GET "+path)
		for _, leak := range []string{"secret-endpoint", "beta customer", "198.51.100.1", "/ui/keys/" + bKeyID} {
			if strings.Contains(p.body, leak) {
				t.Errorf("GET %s shows %q", path, leak)
			}
		}
		if path == "/ui/analytics/identity?kind=key&id="+bKeyID && p.attr("chart", "data-allowed") != "0" {
			t.Errorf("B's key history leaks: %q allowed", p.attr("chart", "data-allowed"))
		}
	}
	// Tenant users are kept off the operator's pages, and the operator off tenants'.
	for _, path := range []string{"/ui/admin/tenants", "/ui/admin/abuse", "/ui/admin/blocks"} {
		want(t, a.get(path), http.StatusForbidden, "tenant user GET "+path)
	}
	if p := a.post("/ui/admin/blocks", url.Values{"tenant_id": {tb.id}, "kind": {"ip"}, "id": {"198.51.100.9"}, "expiry": {"1h"}}); p.status != http.StatusForbidden {
		t.Errorf("tenant user blocking: %d", p.status)
	}
	op := s.agent()
	op.signIn(opEmail, opPassword)
	want(t, op.get("/ui/policies"), http.StatusForbidden, "operator GET /ui/policies")
	if p := op.get("/ui/"); p.status != http.StatusSeeOther || p.location != "/ui/admin/tenants" {
		t.Errorf("operator home: %d to %q", p.status, p.location)
	}
	// The operator reads any tenant's key, without forms; a key under
	// another tenant's id is unknown, and tenant users cannot open it.
	keyPage := "/ui/admin/tenants/" + tb.id + "/keys/" + bKeyID
	if p := want(t, op.get(keyPage), http.StatusOK, "operator GET "+keyPage); !p.has("key-read-only") || p.has("key-edit-form") || p.has("key-revoke") ||
		!strings.Contains(p.text("key-title"), "beta customer") || p.attr("key-tenant-link", "href") != "/ui/admin/tenants/"+tb.id {
		t.Errorf("the operator's view of B's key: %q", p.text("key-title"))
	}
	want(t, op.get("/ui/admin/tenants/"+ta.id+"/keys/"+bKeyID), http.StatusNotFound, "operator, B's key under A")
	want(t, a.get(keyPage), http.StatusForbidden, "tenant user GET "+keyPage)
}

func TestOperatorPages(t *testing.T) {
	s := bootSite(t)
	op := s.agent()
	op.signIn(opEmail, opPassword)
	p := want(t, op.get("/ui/admin/tenants"), http.StatusOK, "tenants")
	if !p.has("empty-tenants") {
		t.Error("no empty state")
	}
	if p := op.post("/ui/admin/tenants", url.Values{"name": {"acme"}, "owner_email": {"o@acme.test"}, "owner_password": {"short"}}); p.status != http.StatusBadRequest || p.text("error-owner_password") == "" {
		t.Errorf("short password: %d", p.status)
	}
	p = want(t, op.post("/ui/admin/tenants", url.Values{"name": {"acme"}, "owner_email": {"o@acme.test"}, "owner_password": {"owner passphrase"}}), http.StatusCreated, "create tenant")
	sk := p.text("service-key")
	if !strings.HasPrefix(sk, "sk_") || !p.has("tenant-row") {
		t.Fatalf("created tenant: key %q", sk)
	}
	tenantID := p.attr("tenant-row", "data-tenant-id")
	if p := op.post("/ui/admin/tenants", url.Values{"name": {"acme"}, "owner_email": {"o2@acme.test"}, "owner_password": {"owner passphrase"}}); p.status != http.StatusBadRequest || !p.has("form-errors") {
		t.Errorf("duplicate tenant: %d", p.status)
	}
	tn := tenantInfo{id: tenantID, key: sk}
	s.api("POST", "/v1/policies", sk, map[string]any{"name": "p", "path": "/p", "tiers": map[string]any{"anonymous": map[string]any{"algorithm": "fixed_window", "limit": 1, "period": "1h"}}})
	for range 4 {
		s.check(tn, map[string]any{"ip": "2001:db8:1:2::7", "path": "/p"})
	}
	// The owner can sign in with what the operator chose.
	s.agent().signIn("o@acme.test", "owner passphrase")

	var row page
	waitFor(t, 15*time.Second, "the abuse report", func() bool {
		row = op.get("/ui/admin/abuse?range=1h")
		return row.has("abuse-row")
	})
	if id := row.attr("abuse-row", "data-identity"); id != "2001:db8:1:2::/64" || !strings.Contains(row.text("abuse-row"), "acme") {
		t.Fatalf("abuse row %q: %q", id, row.text("abuse-row"))
	}
	// One click: the form carries everything, with a default reason and expiry.
	form := url.Values{}
	for _, in := range row.all(func(n *html.Node) bool { return n.Data == "input" || n.Data == "select" }) {
		if name := attrOf(in, "name"); name != "" && name != "_csrf" {
			form.Set(name, attrOf(in, "value"))
		}
	}
	form.Set("expiry", "24h")
	p = want(t, op.post("/ui/admin/blocks", form), http.StatusSeeOther, "block")
	if !strings.HasPrefix(p.location, "/ui/admin/abuse?block=blk_") || !strings.HasSuffix(p.location, "&done=blocked") {
		t.Errorf("after blocking: to %q", p.location)
	}
	if c := s.check(tn, map[string]any{"ip": "2001:db8:1:2::99", "path": "/p"}); c["reason"] != "blocked" {
		t.Errorf("check from the blocked /64: %v", c)
	}
	// The notice names who was blocked, where and until when, with an undo.
	if p := op.get(p.location); !p.has("already-blocked") || !p.has("flash-undo") ||
		!strings.Contains(p.text("flash"), "Blocked IP 2001:db8:1:2::/64 in acme until") {
		t.Errorf("the abuse report does not show the block: %q", p.text("flash"))
	}
	// A link naming no block of the operator's says only "Blocked."
	if p := op.get("/ui/admin/abuse?range=1h&done=blocked&block=blk_nope"); p.has("flash-undo") || !strings.HasPrefix(p.text("flash"), "Blocked.") {
		t.Errorf("a made-up block id: %q", p.text("flash"))
	}
	p = want(t, op.get("/ui/admin/blocks"), http.StatusOK, "blocks")
	blockID := p.attr("block-row", "data-block-id")
	if blockID == "" || !strings.Contains(p.text("block-row"), "acme") {
		t.Fatalf("blocks: %q", p.text("block-row"))
	}
	// A manual block with a mistake, then unblock.
	if p := op.post("/ui/admin/blocks", url.Values{"tenant_id": {tenantID}, "kind": {"ip"}, "id": {"not-an-ip"}, "expiry": {"1h"}}); p.status != http.StatusBadRequest || p.text("error-id") == "" {
		t.Errorf("bad block: %d", p.status)
	}
	if p := op.post("/ui/admin/blocks", url.Values{"tenant_id": {"ten_nope"}, "kind": {"ip"}, "id": {"192.0.2.1"}, "expiry": {"never"}}); p.status != http.StatusBadRequest || p.text("error-tenant_id") == "" {
		t.Errorf("block in an unknown tenant: %d", p.status)
	}
	want(t, op.post("/ui/admin/blocks/"+blockID+"/delete", nil), http.StatusSeeOther, "unblock")
	if c := s.check(tn, map[string]any{"ip": "2001:db8:1:2::99", "path": "/p"}); c["reason"] == "blocked" {
		t.Errorf("still blocked after unblocking: %v", c)
	}
	want(t, op.post("/ui/admin/blocks/"+blockID+"/delete", nil), http.StatusNotFound, "unblock twice")
	if p := op.get("/ui/admin/tenants"); p.text("tenant-row") == "" || !strings.Contains(p.text("tenant-row"), "acme") {
		t.Error("tenant list")
	}
}

// A policy form with several mistakes shows every one of them at once, each
// by its input and named by its tier, and a tier whose rows were all left
// empty (as the new form's "default" comes) is ignored, as its hint says.
func TestPolicyFormShowsEveryProblemAtOnce(t *testing.T) {
	s := bootSite(t)
	a := s.agent()
	tn := s.tenant("manyerrors")
	a.signIn(tn.email, tn.password)
	a.get("/ui/policies/new")
	form := policyForm("", 10)
	form.Set("tier.0.limit.0.limit", "abc")
	form.Set("tier.1.limit.0.limit", "0")
	form.Set("tier.1.limit.0.period", "forever")
	p := want(t, a.post("/ui/policies", form), http.StatusBadRequest, "a form with four mistakes")
	for id, wantText := range map[string]string{
		"error-name":                  "required",
		"error-tier.0.limit.0.limit":  "whole number",
		"error-tier.1.limit.0.limit":  "at least 1",
		"error-tier.1.limit.0.period": "duration",
	} {
		if got := p.text(id); !strings.Contains(got, wantText) {
			t.Errorf("%s: %q, want it to say %q", id, got, wantText)
		}
	}
	if summary := p.text("form-errors"); !strings.Contains(summary, "pro › period") || !strings.Contains(summary, "anonymous › limit") {
		t.Errorf("the summary does not name the tiers: %q", summary)
	}

	form = policyForm("with-empty-default", 10)
	form.Set("tiers", "3")
	form.Set("tier.2.name", "default")
	form.Set("tier.2.limits", "1")
	form.Set("tier.2.limit.0.algorithm", "token_bucket")
	want(t, a.post("/ui/policies", form), http.StatusSeeOther, "a policy with an empty default tier")
}

// Four inputs a browser's own validation would stop one at a time (the
// e2e TestPolicyFormFourBadInputs types the same) come back together in one
// answer: each error by its input, the input marked invalid and pointing at
// it, and every value as it was typed, so nothing has to be typed again.
func TestPolicyFormKeepsEveryBadValue(t *testing.T) {
	s := bootSite(t)
	a := s.agent()
	tn := s.tenant("fourbad")
	a.signIn(tn.email, tn.password)
	form := policyForm("ok", 10)
	bad := map[string]string{
		"name":                  "heavy example!",
		"path":                  "api/no-slash",
		"tier.0.limit.0.limit":  "ten",
		"tier.1.limit.0.period": "5 parsecs",
	}
	for k, v := range bad {
		form.Set(k, v)
	}
	p := want(t, a.post("/ui/policies", form), http.StatusBadRequest, "a form with four bad inputs")
	errors := p.all(func(n *html.Node) bool { return strings.HasPrefix(attrOf(n, "data-testid"), "error-") })
	if len(errors) != len(bad) {
		var got []string
		for _, n := range errors {
			got = append(got, attrOf(n, "data-testid"))
		}
		t.Errorf("%d field errors %v, want %d", len(errors), got, len(bad))
	}
	for name, typed := range bad {
		if p.text("error-"+name) == "" {
			t.Errorf("no error by %s", name)
		}
		in := p.all(func(n *html.Node) bool { return n.Data == "input" && attrOf(n, "name") == name })
		if len(in) != 1 {
			t.Fatalf("%d inputs named %s", len(in), name)
		}
		if got := attrOf(in[0], "value"); got != typed {
			t.Errorf("%s: value %q, want %q as typed", name, got, typed)
		}
		if attrOf(in[0], "aria-invalid") != "true" || !strings.Contains(attrOf(in[0], "aria-describedby"), attrOf(p.testID("error-" + name)[0], "id")) {
			t.Errorf("%s: aria-invalid %q, aria-describedby %q", name, attrOf(in[0], "aria-invalid"), attrOf(in[0], "aria-describedby"))
		}
	}
	// The form opts out of the browser's validation, which would have
	// stopped it at the first of these.
	if f := p.testID("policy-form"); len(f) != 1 || !hasAttrNode(f[0], "novalidate") {
		t.Error("the policy form lacks novalidate")
	}
	// A tier name the domain refuses is shown by that tier's name input.
	form = policyForm("badtier", 10)
	form.Set("tier.1.name", "Pro!")
	p = want(t, a.post("/ui/policies", form), http.StatusBadRequest, "a bad tier name")
	if got := p.text("error-tier.1.name"); !strings.Contains(got, "a-z, 0-9") || p.inputValue("tier.1.name") != "Pro!" {
		t.Errorf("tier name error %q, value %q", got, p.inputValue("tier.1.name"))
	}
}

// Every form with several inputs shows every input's problem after one
// submit, not the first the worker finds, and keeps what was typed (but
// never a password).
func TestEveryFormShowsEveryProblemAtOnce(t *testing.T) {
	s := bootSite(t)
	op := s.agent()
	op.signIn(opEmail, opPassword)
	tn := s.tenant("allproblems")
	owner := s.agent()
	owner.signIn(tn.email, tn.password)
	keyID, _ := owner.createKey("edit me", "pro")
	owner.createPolicy("first", 10)
	owner.createPolicy("second", 10)
	for _, c := range []struct {
		name   string
		a      *agent
		path   string
		form   url.Values
		errors []string          // test ids of the errors expected, each by its input
		kept   map[string]string // input name → value shown again
	}{
		{"new tenant", op, "/ui/admin/tenants",
			url.Values{"name": {"Acme!"}, "owner_email": {"not an address"}, "owner_password": {"short"}},
			[]string{"error-name", "error-owner_email", "error-owner_password"},
			map[string]string{"name": "Acme!", "owner_email": "not an address", "owner_password": ""}},
		{"manual block", op, "/ui/admin/blocks",
			url.Values{"tenant_id": {""}, "kind": {"ip"}, "id": {"300.1.2.3"}, "reason": {"r"}, "expiry": {"forever-and-a-day"}},
			[]string{"error-tenant_id", "error-id", "error-expiry"},
			map[string]string{"id": "300.1.2.3", "reason": "r"}},
		{"invite", owner, "/ui/members",
			url.Values{"email": {"nobody"}, "password": {"short"}},
			[]string{"error-email", "error-password"},
			map[string]string{"email": "nobody", "password": ""}},
		{"new key", owner, "/ui/keys",
			url.Values{"name": {" "}, "tier": {"Pro!"}, "expires_at": {"2001-01-01T00:00"}},
			[]string{"error-name", "error-tier", "error-expires_at"},
			map[string]string{"tier": "Pro!", "expires_at": "2001-01-01T00:00"}},
		{"key edit", owner, "/ui/keys/" + keyID,
			url.Values{"name": {""}, "tier": {"Pro!"}, "expires_at": {"yesterday"}},
			[]string{"error-name", "error-tier", "error-expires_at"},
			map[string]string{"tier": "Pro!", "expires_at": "yesterday"}},
		{"password change", owner, "/ui/account/password",
			url.Values{"current_password": {""}, "new_password": {"short"}, "confirm_password": {"other"}},
			[]string{"error-current_password", "error-new_password", "error-confirm_password"},
			map[string]string{"current_password": "", "new_password": "", "confirm_password": ""}},
		{"key overrides", owner, "/ui/keys/" + keyID + "/overrides",
			url.Values{"rows": {"2"}, "do": {"save"},
				"override.0.policy": {"first"}, "override.0.algorithm": {"token_bucket"}, "override.0.limit": {"0"}, "override.0.period": {"1m"},
				"override.1.policy": {"second"}, "override.1.algorithm": {"token_bucket"}, "override.1.limit": {"5"}, "override.1.period": {"whenever"}},
			[]string{"error-override.0.limit", "error-override.1.period"},
			map[string]string{"override.0.limit": "0", "override.1.period": "whenever"}},
		{"email change", owner, "/ui/account/email",
			url.Values{"email": {"nobody"}, "password": {""}},
			[]string{"error-email", "error-password"},
			map[string]string{"email": "nobody"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := want(t, c.a.post(c.path, c.form), http.StatusBadRequest, c.name)
			for _, id := range c.errors {
				if p.text(id) == "" {
					t.Errorf("no %s", id)
				}
			}
			for name, v := range c.kept {
				if got := p.inputValue(name); got != v {
					t.Errorf("input %s shows %q, want %q", name, got, v)
				}
			}
		})
	}
}

func hasAttrNode(n *html.Node, key string) bool {
	for _, a := range n.Attr {
		if a.Key == key {
			return true
		}
	}
	return false
}

// A key in a tier no policy lists is flagged when it is created, and the
// path tester says what it gets: here the policy denies other tiers.
func TestUnlistedTierInTheDashboard(t *testing.T) {
	s := bootSite(t)
	a := s.agent()
	tn := s.tenant("unlisted")
	a.signIn(tn.email, tn.password)
	a.get("/ui/policies/new")
	form := policyForm("closed", 3) // anonymous and pro, no default
	form.Set("unlisted_tiers", "deny")
	want(t, a.post("/ui/policies", form), http.StatusSeeOther, "create a policy denying other tiers")
	polID := a.createPolicy("open", 3) // other tiers unlimited
	if p := want(t, a.get("/ui/policies/"+polID), http.StatusOK, "edit open"); p.selected("unlisted_tiers") != "allow" {
		t.Errorf("unlisted tiers of the open policy: %q", p.selected("unlisted_tiers"))
	}

	p := want(t, a.post("/ui/keys", url.Values{"name": {"big customer"}, "tier": {"enterprise"}}), http.StatusSeeOther, "create key")
	p = want(t, a.get(p.location), http.StatusOK, "after creating a key")
	if !p.has("key-tier-unlisted") {
		t.Error("no warning for a key whose tier no policy lists")
	}
	secret := p.text("key-secret")
	if _, pro := a.createKey("pro customer", "pro"); pro == "" || a.get("/ui/keys").has("key-tier-unlisted") {
		t.Error("a warning without a new key of an unlisted tier")
	}

	for path, want := range map[string]string{"/api/closed": "denied", "/api/open": "not limited"} {
		r := a.post("/ui/policies/test", url.Values{"method": {"GET"}, "path": {path}, "caller": {secret}})
		if r.attr("path-test-result", "data-tier") != "enterprise" || !strings.Contains(r.text("path-test-unlisted"), want) {
			t.Errorf("path test of %s: tier %q, %q", path, r.attr("path-test-result", "data-tier"), r.text("path-test-unlisted"))
		}
	}
}
