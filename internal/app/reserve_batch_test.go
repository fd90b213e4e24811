package app

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/tenants"
)

// A batch with reserve reserves all or nothing. With the tenant's open
// reservations five short of its cap, a batch of ten reserves of 1 000 is
// refused with 409 and keeps nothing: the quota and the daily usage are
// as before it, and the cap's room is untouched (a batch of exactly five
// fits afterwards, and each of its reservations settles).
func TestBatchReservesAllOrNothing(t *testing.T) {
	const cap = 10
	m := bootWith(t, func(c *Config) { c.Caps = tenants.Caps{OpenReservations: cap} })
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "llm", "owner_email": "o@llm.test", "owner_password": "a long passphrase"})
	sk := tn["service_key"].(string)
	do(t, m, "POST", "/v1/policies", sk, map[string]any{"name": "tokens", "path": "/v1/chat",
		"tiers": map[string]any{"pro": map[string]any{"algorithm": "fixed_window", "limit": 100_000, "calendar": "month"}}})
	ck := do(t, m, "POST", "/v1/keys", sk, map[string]any{"name": "customer", "tier": "pro"})["key"].(string)
	check := func(body map[string]any) map[string]any {
		t.Helper()
		body["api_key"], body["path"] = ck, "/v1/chat"
		return do(t, m, "POST", "/v1/check", sk, body)
	}
	remaining := func() float64 {
		t.Helper()
		return check(map[string]any{"peek": true})["remaining"].(float64) + 1
	}
	day := time.Now().UTC().Format(time.DateOnly)
	usage := func() float64 {
		t.Helper()
		return do(t, m, "GET", "/v1/usage?from="+day+"&to="+day, sk, nil)["total"].(float64)
	}
	batch := func(n int) (int, map[string]any) {
		t.Helper()
		checks := make([]string, n)
		for i := range checks {
			checks[i] = fmt.Sprintf(`{"api_key": %q, "path": "/v1/chat", "reserve": 1000}`, ck)
		}
		return call(t, m, "POST", "/v1/check/batch", sk, `{"checks": [`+strings.Join(checks, ",")+`]}`)
	}
	waitUntil(t, 2*time.Second, "the policy on the server", func() bool { return check(map[string]any{"peek": true})["policy"] == "tokens" })

	for range cap - 5 {
		if r := check(map[string]any{"reserve": 1000}); r["reservation"] == nil {
			t.Fatalf("reserve: %v", r)
		}
	}
	if got := remaining(); got != 95_000 {
		t.Fatalf("after five reserves of 1000: %v left", got)
	}
	waitUntil(t, 5*time.Second, "the reserves in the daily usage", func() bool { return usage() == 5000 })

	status, out := batch(10)
	if status != 409 || errorCodeOf(out) != "conflict" || !strings.HasPrefix(errMessage(out), "reserve:") {
		t.Fatalf("ten reserves five short of the cap: %d %v, want 409 naming reserve", status, out)
	}
	if got := remaining(); got != 95_000 {
		t.Fatalf("a refused batch kept %v units", 95_000-got)
	}
	// A check after the batch: once its unit is in the usage, so is
	// whatever the batch counted.
	check(map[string]any{"cost": 1})
	waitUntil(t, 5*time.Second, "the check after the batch in the daily usage", func() bool { return usage() >= 5001 })
	if got := usage(); got != 5001 {
		t.Fatalf("daily usage after a refused batch: %v, want 5001", got)
	}

	// The refused batch holds none of the cap: five more fit, all answered.
	status, out = batch(5)
	if status != 200 {
		t.Fatalf("five reserves at the cap's last room: %d %v", status, out)
	}
	for i, r := range out["results"].([]any) {
		id, _ := r.(map[string]any)["reservation"].(string)
		if !strings.HasPrefix(id, "rsv_") {
			t.Fatalf("result %d: %v", i, r)
		}
		if status, s := call(t, m, "POST", "/v1/settle", sk, fmt.Sprintf(`{"reservation": %q, "actual": 0}`, id)); status != 200 || s["difference"] != -1000.0 {
			t.Fatalf("settle %s: %d %v", id, status, s)
		}
	}
	if got := remaining(); got != 95_000-1 {
		t.Fatalf("after the batch settled at 0: %v left, want %v", got, 95_000-1)
	}
}
