package app

import (
	"testing"
	"time"
)

// A key's usage through the API: what each limit has used in its current
// period, and when that period resets: a month quota on the key's anchor
// day in the tenant's zone, a periodic window at its window's end.
func TestKeyUsage(t *testing.T) {
	m := boot(t)
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "billing", "owner_email": "o@billing.test", "owner_password": "a long passphrase", "time_zone": "Europe/Paris"})
	sk := tn["service_key"].(string)
	if tn["time_zone"] != "Europe/Paris" {
		t.Fatalf("tenant: %v", tn)
	}
	do(t, m, "POST", "/v1/policies", sk, map[string]any{
		"name": "api", "path": "/api/*",
		"tiers": map[string]any{"pro": []any{
			map[string]any{"name": "minute", "algorithm": "fixed_window", "limit": 100, "period": "1m"},
			map[string]any{"name": "monthly", "algorithm": "fixed_window", "limit": 10000, "calendar": "month"},
		}},
	})
	key := do(t, m, "POST", "/v1/keys", sk, map[string]any{"name": "customer", "tier": "pro", "billing_anchor": 17})
	if key["billing_anchor"] != 17.0 {
		t.Fatalf("key: %v", key)
	}
	secret := key["key"].(string)
	waitUntil(t, 2*time.Second, "the policy on the server", func() bool {
		r := do(t, m, "POST", "/v1/check", sk, map[string]any{"api_key": secret, "path": "/api/x", "peek": true})
		return r["policy"] == "api"
	})
	for i := 0; i < 3; i++ {
		if r := do(t, m, "POST", "/v1/check", sk, map[string]any{"api_key": secret, "path": "/api/x"}); r["allowed"] != true {
			t.Fatalf("check %d: %v", i, r)
		}
	}
	before := time.Now()
	u := do(t, m, "GET", "/v1/keys/"+key["id"].(string)+"/usage", sk, nil)
	usage := u["usage"].([]any)
	if len(usage) != 2 || u["key_status"] != "active" {
		t.Fatalf("usage: %v", u)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	now := before.In(paris)
	anchor := time.Date(now.Year(), now.Month(), 17, 0, 0, 0, 0, paris)
	if !anchor.After(now) {
		anchor = time.Date(now.Year(), now.Month()+1, 17, 0, 0, 0, 0, paris)
	}
	for _, e := range usage {
		e := e.(map[string]any)
		if e["used"] != 3.0 || e["policy"] != "api" {
			t.Errorf("limit %v: want 3 used of policy api", e)
		}
		at, err := time.Parse(time.RFC3339, e["resets_at"].(string))
		if err != nil {
			t.Fatal(err)
		}
		switch e["limit"] {
		case "monthly":
			if e["calendar"] != "month" || e["remaining"] != 9997.0 || !at.Equal(anchor) {
				t.Errorf("monthly: %v, want 9997 left, resetting at %s (the 17th, Paris)", e, anchor.UTC())
			}
		case "minute":
			if e["period"] != "1m0s" || at.Sub(before) > time.Minute+time.Second || at.Before(before) {
				t.Errorf("minute: %v, want a reset within the minute", e)
			}
		default:
			t.Errorf("unknown limit %v", e)
		}
	}
	if status, _ := call(t, m, "GET", "/v1/keys/ckey_missing/usage", sk, ""); status != 404 {
		t.Errorf("a missing key's usage: %d", status)
	}
}
