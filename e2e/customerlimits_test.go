package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// A customer's limit over three real servers: 300 concurrent checks
// through five keys of one customer whose per-customer limit is 50 admit
// exactly 50, and the keys' own (per-key) windows together counted exactly
// the 50 admitted checks: none was charged for a check its customer's
// limit denied.
func TestClusterCustomerLimitExact(t *testing.T) {
	tp := startTopology(t, 3, nil)
	s1 := tp.servers[0]
	tn := createTenant(t, s1, "customers")
	createPolicy(t, s1, tn, map[string]any{
		"name": "metered", "path": "/metered", "consistency": "exact",
		"tiers": map[string]any{"pro": []any{
			map[string]any{"name": "key", "algorithm": "fixed_window", "limit": 1000, "period": "24h"},
			map[string]any{"name": "org", "algorithm": "fixed_window", "limit": 50, "period": "24h", "per": "customer"},
		}},
	})
	cus := mustStatus(t, call(t, "POST", s1.base+"/v1/customers", tn.Key, map[string]any{"external_id": "org_42", "name": "Org 42", "tier": "pro"}), 201).str("id")
	keys := make([]string, 5)
	for i := range keys {
		keys[i] = mustStatus(t, call(t, "POST", s1.base+"/v1/keys", tn.Key, map[string]any{"name": fmt.Sprintf("app %d", i), "tier": "pro", "customer_id": cus}), 201).str("key")
	}
	waitFor(t, 10*time.Second, "the keys and the policy on every server, customer placement on", func() bool {
		for _, s := range tp.servers {
			for _, k := range keys {
				r := call(t, "POST", s.base+"/v1/check", tn.Key, map[string]any{"api_key": k, "path": "/metered", "peek": true})
				if r.Status != 200 || len(r.Header.Values("Ratelimit")) == 0 || r.Body["customer"] == nil {
					return false
				}
			}
		}
		return true
	})
	got, failed := spread(t, tp.servers, tn, 300, 60, func(i int) map[string]any {
		return map[string]any{"api_key": keys[i%5], "path": "/metered"}
	})
	if got != 50 || failed != 0 {
		t.Fatalf("%d allowed (%d failed) of 300 through five keys of one customer, want exactly 50", got, failed)
	}
	// Each key's own window, read by a peek on any server: what it took.
	keyLeft := regexp.MustCompile(`"metered\.key";r=(\d+)`)
	taken := 0
	for i, k := range keys {
		r := call(t, "POST", tp.servers[i%3].base+"/v1/check", tn.Key, map[string]any{"api_key": k, "path": "/metered", "peek": true})
		m := keyLeft.FindStringSubmatch(r.Header.Get("Ratelimit"))
		if r.Status != 200 || m == nil {
			t.Fatalf("peek of key %d: %d %s %q", i, r.Status, r.Raw, r.Header.Get("Ratelimit"))
		}
		left, _ := strconv.Atoi(m[1])
		taken += 1000 - left
	}
	if taken != 50 {
		t.Fatalf("the keys' own windows took %d in all, want the 50 admitted", taken)
	}
}
