package app

import (
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Checks through the API to a real HTTPS receiver: a key's checks pass 50 %
// and 100 % of its month quota, the server reports the crossings on the
// quota stream, and the worker delivers one quota.threshold per threshold,
// whatever further checks (denied past the quota) report again.
func TestQuotaThresholdWebhooksFromChecks(t *testing.T) {
	var mu sync.Mutex
	var got []map[string]any
	receiver := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev map[string]any
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("body %s: %v", body, err)
		}
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: receiver.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	m := bootWith(t, func(c *Config) { c.Webhooks.AllowPrivate, c.Webhooks.CAFile = true, ca })
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "hooked", "owner_email": "o@hooked.test", "owner_password": "a long passphrase"})
	sk := tn["service_key"].(string)
	do(t, m, "POST", "/v1/policies", sk, map[string]any{
		"name": "api", "path": "/api/*",
		"tiers": map[string]any{"pro": map[string]any{"algorithm": "fixed_window", "limit": 10, "calendar": "month"}},
	})
	do(t, m, "POST", "/v1/webhooks", sk, map[string]any{"url": receiver.URL + "/hook", "events": []string{"quota.threshold"}, "thresholds": []int{50, 100}})
	key := do(t, m, "POST", "/v1/keys", sk, map[string]any{"name": "customer", "tier": "pro"})
	secret := key["key"].(string)
	waitUntil(t, 2*time.Second, "the policy on the server", func() bool {
		r := do(t, m, "POST", "/v1/check", sk, map[string]any{"api_key": secret, "path": "/api/x", "peek": true})
		return r["policy"] == "api"
	})
	for i := range 12 {
		r := do(t, m, "POST", "/v1/check", sk, map[string]any{"api_key": secret, "path": "/api/x"})
		if (i < 10) != (r["allowed"] == true) {
			t.Fatalf("check %d: %v", i, r)
		}
	}
	waitUntil(t, 15*time.Second, "two threshold events", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 2
	})
	time.Sleep(1500 * time.Millisecond) // another flush of crossings, had there been any
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("%d events, want 2: %v", len(got), got)
	}
	for i, want := range []float64{50, 100} {
		d, _ := got[i]["data"].(map[string]any)
		if got[i]["type"] != "quota.threshold" || d["threshold"] != want || d["key_id"] != key["id"] || d["policy"] != "api" || d["quota"] != 10.0 || d["calendar"] != "month" {
			t.Errorf("event %d: %v", i, got[i])
		}
	}
}
