package app

import (
	"strings"
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

// Bad calendar input answers 400 naming the field and changes nothing: an
// unknown time zone (tenant create, operator and tenant PATCH), an anchor
// day of 0 or 32 (key create and PATCH); null removes an anchor.
func TestCalendarBadInput(t *testing.T) {
	m := boot(t)
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "cal", "owner_email": "o@cal.test", "owner_password": "a long passphrase", "time_zone": "Asia/Kolkata"})
	sk, id := tn["service_key"].(string), tn["id"].(string)
	bad := func(method, path, token, body, field string) {
		t.Helper()
		status, out := call(t, m, method, path, token, body)
		if status != 400 || !strings.HasPrefix(errMessage(out), field+":") {
			t.Errorf("%s %s %s: %d %v, want 400 naming %s", method, path, body, status, out, field)
		}
	}
	bad("POST", "/v1/admin/tenants", testToken, `{"name":"mars","owner_email":"o@mars.test","owner_password":"a long passphrase","time_zone":"Mars/Olympus"}`, "time_zone")
	bad("PATCH", "/v1/admin/tenants/"+id, testToken, `{"time_zone":"Nowhere/Special"}`, "time_zone")
	bad("PATCH", "/v1/tenant", sk, `{"time_zone":"UTC+25"}`, "time_zone")
	if got := do(t, m, "GET", "/v1/tenant", sk, nil); got["time_zone"] != "Asia/Kolkata" {
		t.Errorf("the zone changed: %v", got)
	}
	for _, day := range []string{"0", "32", "-1", `"17"`} {
		bad("POST", "/v1/keys", sk, `{"name":"k","tier":"pro","billing_anchor":`+day+`}`, "billing_anchor")
	}
	if keys := do(t, m, "GET", "/v1/keys", sk, nil); len(keys["keys"].([]any)) != 0 {
		t.Errorf("a bad key was created: %v", keys)
	}
	k := do(t, m, "POST", "/v1/keys", sk, map[string]any{"name": "k", "tier": "pro", "billing_anchor": 31})
	kid := k["id"].(string)
	for _, day := range []string{"0", "32"} {
		bad("PATCH", "/v1/keys/"+kid, sk, `{"billing_anchor":`+day+`}`, "billing_anchor")
	}
	if got := do(t, m, "GET", "/v1/keys/"+kid, sk, nil); got["billing_anchor"] != 31.0 {
		t.Errorf("the anchor changed: %v", got)
	}
	if got := do(t, m, "PATCH", "/v1/keys/"+kid, sk, map[string]any{"billing_anchor": nil}); got["billing_anchor"] != nil {
		t.Errorf("null did not remove the anchor: %v", got)
	}
}
