package ui_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The key page shows each calendar quota of the key as a meter with what
// it has used this period and when the period resets.
func TestKeyPageQuotaMeters(t *testing.T) {
	s := bootSite(t)
	tn := s.tenant("metered")
	a := s.agent()
	a.signIn(tn.email, tn.password)
	s.api("POST", "/v1/policies", tn.key, map[string]any{"name": "plan", "path": "/api/*",
		"tiers": map[string]any{"pro": []any{
			map[string]any{"name": "burst", "algorithm": "token_bucket", "limit": 100, "period": "1s"},
			map[string]any{"name": "monthly", "algorithm": "fixed_window", "limit": 10, "calendar": "month"},
		}}})
	keyID, secret := a.createKey("customer", "pro")
	deadline := time.Now().Add(2 * time.Second)
	used := 0
	for used < 2 && time.Now().Before(deadline) {
		r := s.api("POST", "/v1/check", tn.key, map[string]any{"api_key": secret, "path": "/api/x"})
		if r["policy"] == "plan" && r["allowed"] == true {
			used++
		}
	}
	p := want(t, a.get("/ui/keys/"+keyID), http.StatusOK, "key page")
	if !p.has("key-quotas") {
		t.Fatalf("the key page shows no quota:\n%s", p.body)
	}
	q := p.text("key-quota")
	if !strings.Contains(q, "2 of 10") || !strings.Contains(p.body, `<meter min="0" max="10" value="2"`) {
		t.Errorf("quota meter: %q", q)
	}
	if n := strings.Count(p.body, `data-testid="key-quota"`); n != 1 {
		t.Errorf("%d quotas shown, want 1: the periodic limit is not a quota", n)
	}
}

// The policy form makes a calendar quota from "month" in the period input,
// and its edit page shows it so again.
func TestPolicyFormMakesCalendarQuota(t *testing.T) {
	s := bootSite(t)
	tn := s.tenant("plans")
	a := s.agent()
	a.signIn(tn.email, tn.password)
	form := policyForm("plans", 10)
	form.Set("tier.1.limit.0.algorithm", "fixed_window")
	form.Set("tier.1.limit.0.limit", "10000")
	form.Set("tier.1.limit.0.period", "month")
	want(t, a.post("/ui/policies", form), http.StatusSeeOther, "create a policy with a month quota")
	var id string
	for _, p := range s.api("GET", "/v1/policies", tn.key, nil)["policies"].([]any) {
		p := p.(map[string]any)
		if p["name"] == "plans" {
			id = p["id"].(string)
			pro := p["tiers"].(map[string]any)["pro"].(map[string]any)
			if pro["calendar"] != "month" || pro["period"] != nil && pro["period"] != "" {
				t.Fatalf("pro tier %v, want a month calendar quota", pro)
			}
		}
	}
	if id == "" {
		t.Fatal("the policy is not listed")
	}
	page := want(t, a.get("/ui/policies/"+id), http.StatusOK, "edit page")
	if !strings.Contains(page.body, `name="tier.1.limit.0.period" type="text" value="month"`) {
		t.Errorf("the edit page does not show the month period:\n%s", page.body)
	}
	// A calendar on a token bucket is refused, on its algorithm input.
	form.Set("name", "plans2")
	form.Set("path", "/api/plans2")
	form.Set("tier.1.limit.0.algorithm", "token_bucket")
	if p := a.post("/ui/policies", form); p.status != http.StatusUnprocessableEntity && p.status != http.StatusBadRequest && p.status != http.StatusOK {
		t.Fatalf("a calendar token bucket: status %d", p.status)
	} else if !strings.Contains(p.body, "must be fixed_window for a calendar limit") {
		t.Errorf("a calendar token bucket: the error is not shown:\n%s", p.body)
	}
}
