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
