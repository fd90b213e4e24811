package app

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// errMessage is an error answer's message.
func errMessage(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	s, _ := e["message"].(string)
	return s
}

// A check reserves an estimate and a settle gives back or charges the
// difference, once: the LLM-token case, on a month quota and on a token
// bucket, with every bad input named.
func TestReserveAndSettle(t *testing.T) {
	m := boot(t)
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "llm", "owner_email": "o@llm.test", "owner_password": "a long passphrase"})
	sk := tn["service_key"].(string)
	do(t, m, "POST", "/v1/policies", sk, map[string]any{
		"name": "tokens", "path": "/v1/chat",
		"tiers": map[string]any{
			"pro":       map[string]any{"algorithm": "fixed_window", "limit": 100, "calendar": "month"},
			"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 10, "period": "1h"},
		},
	})
	key := do(t, m, "POST", "/v1/keys", sk, map[string]any{"name": "customer", "tier": "pro"})
	ck := key["key"].(string)
	check := func(body map[string]any) map[string]any {
		t.Helper()
		if _, ok := body["ip"]; !ok {
			body["api_key"] = ck
		}
		body["path"] = "/v1/chat"
		return do(t, m, "POST", "/v1/check", sk, body)
	}
	// remaining is what is left: a peek answers as a check of cost 1
	// would, with what would remain after it.
	remaining := func() float64 {
		t.Helper()
		return check(map[string]any{"peek": true})["remaining"].(float64) + 1
	}
	settle := func(token, id string, actual int) (int, map[string]any) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"reservation": id, "actual": actual})
		return call(t, m, "POST", "/v1/settle", token, string(b))
	}
	waitUntil(t, 2*time.Second, "the policy on the server", func() bool { return check(map[string]any{"peek": true})["policy"] == "tokens" })

	// Reserve 30, use 10: 20 come back.
	r := check(map[string]any{"reserve": 30})
	id, _ := r["reservation"].(string)
	if r["allowed"] != true || r["remaining"] != 70.0 || !strings.HasPrefix(id, "rsv_") {
		t.Fatalf("reserve 30: %v", r)
	}
	exp, err := time.Parse(time.RFC3339Nano, r["reservation_expires_at"].(string))
	if err != nil || exp.Sub(time.Now()) > 15*time.Minute || exp.Sub(time.Now()) < 14*time.Minute {
		t.Fatalf("reservation_expires_at %v (%v): want the default 15 minutes", r["reservation_expires_at"], err)
	}
	status, s := settle(sk, id, 10)
	if status != 200 || s["difference"] != -20.0 || s["replayed"] != false || s["actual"] != 10.0 || s["reserved"] != 30.0 {
		t.Fatalf("settle 10: %d %v", status, s)
	}
	if got := remaining(); got != 90 {
		t.Fatalf("after settling 10 of 30: %v left, want 90", got)
	}
	// The same settle again changes nothing; another amount conflicts.
	if status, s = settle(sk, id, 10); status != 200 || s["replayed"] != true || s["difference"] != -20.0 {
		t.Fatalf("settle repeated: %d %v", status, s)
	}
	if got := remaining(); got != 90 {
		t.Fatalf("after a repeated settle: %v left, want 90", got)
	}
	if status, s = settle(sk, id, 12); status != 409 || !strings.Contains(errMessage(s), "already settled with actual 10") {
		t.Fatalf("settle with another amount: %d %v", status, s)
	}

	// Reserve 20 with a cap of 50 and use 45: 25 more are charged; over the
	// cap is refused and changes nothing.
	r = check(map[string]any{"reserve": 20, "reserve_cap": 50})
	id = r["reservation"].(string)
	if status, s = settle(sk, id, 51); status != 400 || !strings.HasPrefix(errMessage(s), "actual:") || !strings.Contains(errMessage(s), "cap of 50") {
		t.Fatalf("settle over the cap: %d %v", status, s)
	}
	if status, s = settle(sk, id, 45); status != 200 || s["difference"] != 25.0 {
		t.Fatalf("settle 45 of 20: %d %v", status, s)
	}
	if got := remaining(); got != 45 {
		t.Fatalf("after charging 45: %v left, want 45", got)
	}
	// A charge goes past the limit: the request already used it.
	r = check(map[string]any{"reserve": 40, "reserve_cap": 1000})
	if status, s = settle(sk, r["reservation"].(string), 100); status != 200 || s["difference"] != 60.0 {
		t.Fatalf("settle 100 of 40: %d %v", status, s)
	}
	if p := check(map[string]any{"peek": true}); p["remaining"] != 0.0 || p["allowed"] != false {
		t.Fatalf("after charging past the quota: %v", p)
	}
	// A denied check reserves nothing.
	if r = check(map[string]any{"reserve": 1}); r["allowed"] != false || r["reservation"] != nil {
		t.Fatalf("a denied reserve: %v", r)
	}

	// Unknown, foreign and expired reservations.
	if status, s = settle(sk, "rsv_nope", 1); status != 404 || !strings.HasPrefix(errMessage(s), "reservation:") {
		t.Fatalf("an unknown reservation: %d %v", status, s)
	}
	other := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "other", "owner_email": "o@other.test", "owner_password": "a long passphrase"})
	r = check(map[string]any{"ip": "192.0.2.9", "reserve": 4, "reserve_ttl": "1s"})
	id = r["reservation"].(string)
	if r["remaining"] != 6.0 {
		t.Fatalf("reserve 4 of a bucket of 10: %v", r)
	}
	if status, s = settle(other["service_key"].(string), id, 0); status != 404 {
		t.Fatalf("another tenant's reservation: %d %v", status, s)
	}
	time.Sleep(1100 * time.Millisecond)
	if status, s = settle(sk, id, 0); status != 409 || !strings.Contains(errMessage(s), "expired") || !strings.Contains(errMessage(s), "estimate of 4") {
		t.Fatalf("an expired reservation: %d %v", status, s)
	}
	if p := check(map[string]any{"ip": "192.0.2.9", "peek": true}); p["remaining"] != 5.0 {
		t.Fatalf("an expired reservation stands at its estimate: %v", p)
	}

	// A refund never raises a bucket above capacity: the bucket is refilled
	// by a reset, then a settle of 0 gives back the 5 taken before it.
	r = check(map[string]any{"ip": "192.0.2.10", "reserve": 5})
	do(t, m, "POST", "/v1/buckets/reset", sk, map[string]any{"policy": "tokens", "identity": map[string]any{"kind": "ip", "id": "192.0.2.10"}})
	waitUntil(t, 2*time.Second, "the reset", func() bool {
		return check(map[string]any{"ip": "192.0.2.10", "peek": true})["remaining"] == 9.0
	})
	if status, s = settle(sk, r["reservation"].(string), 0); status != 200 || s["difference"] != -5.0 {
		t.Fatalf("settle 0 of 5: %d %v", status, s)
	}
	if p := check(map[string]any{"ip": "192.0.2.10", "peek": true}); p["remaining"] != 9.0 {
		t.Fatalf("a refund into a full bucket: %v left after a peek's 1, want 9", p["remaining"])
	}

	// Bad input: each names its field and takes nothing.
	before := remaining()
	for _, tc := range []struct{ body, field string }{
		{`{"api_key":"` + ck + `","path":"/v1/chat","reserve":0}`, "reserve:"},
		{`{"api_key":"` + ck + `","path":"/v1/chat","reserve":2000000}`, "reserve:"},
		{`{"api_key":"` + ck + `","path":"/v1/chat","reserve":5,"cost":5}`, "cost:"},
		{`{"api_key":"` + ck + `","path":"/v1/chat","reserve":5,"peek":true}`, "peek:"},
		{`{"api_key":"` + ck + `","path":"/v1/chat","reserve":5,"reserve_cap":4}`, "reserve_cap:"},
		{`{"api_key":"` + ck + `","path":"/v1/chat","reserve":5,"reserve_cap":0}`, "reserve_cap:"},
		{`{"api_key":"` + ck + `","path":"/v1/chat","reserve":5,"reserve_ttl":"2d"}`, "reserve_ttl:"},
		{`{"api_key":"` + ck + `","path":"/v1/chat","reserve":5,"reserve_ttl":"48h"}`, "reserve_ttl:"},
		{`{"api_key":"` + ck + `","path":"/v1/chat","reserve_cap":5}`, "reserve:"},
	} {
		if status, s := call(t, m, "POST", "/v1/check", sk, tc.body); status != 400 || !strings.HasPrefix(errMessage(s), tc.field) {
			t.Errorf("%s: %d %v, want 400 naming %s", tc.body, status, s, tc.field)
		}
	}
	for _, tc := range []struct{ body, field string }{
		{`{"actual":1}`, "reservation:"},
		{`{"reservation":"rsv_x"}`, "actual:"},
		{`{"reservation":"rsv_x","actual":-1}`, "actual:"},
	} {
		if status, s := call(t, m, "POST", "/v1/settle", sk, tc.body); status != 400 || !strings.HasPrefix(errMessage(s), tc.field) {
			t.Errorf("settle %s: %d %v, want 400 naming %s", tc.body, status, s, tc.field)
		}
	}
	if got := remaining(); got != before {
		t.Fatalf("bad input took units: %v left, want %v", got, before)
	}

	// A batch reserves per check.
	b := do(t, m, "POST", "/v1/check/batch", sk, map[string]any{"checks": []any{
		map[string]any{"ip": "192.0.2.11", "path": "/v1/chat", "reserve": 2},
		map[string]any{"ip": "192.0.2.11", "path": "/v1/chat", "cost": 1},
	}})
	res := b["results"].([]any)
	if id, _ := res[0].(map[string]any)["reservation"].(string); !strings.HasPrefix(id, "rsv_") || res[1].(map[string]any)["reservation"] != nil {
		t.Fatalf("batch: %v", b)
	}
}
