package app

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// forward asks /v1/forward-auth as a proxy would, with the given headers.
func forward(t *testing.T, m *Main, method string, hdr map[string]string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+m.Addr()+"/v1/forward-auth", nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("body %q: %v", raw, err)
		}
	}
	return resp, out
}

func TestForwardAuth(t *testing.T) {
	m := boot(t)
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "fwd", "owner_email": "o@fwd.test", "owner_password": "a long passphrase"})
	sk := tn["service_key"].(string)
	do(t, m, "POST", "/v1/policies", sk, map[string]any{
		"name": "api", "method": "GET", "path": "/api/items",
		"tiers": map[string]any{
			"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 3, "period": "60s"},
			"pro":       map[string]any{"algorithm": "token_bucket", "limit": 5, "period": "60s"},
		},
	})
	key := do(t, m, "POST", "/v1/keys", sk, map[string]any{"name": "mobile", "tier": "pro"})
	ck := key["key"].(string)

	t.Run("bad input is named", func(t *testing.T) {
		resp, body := forward(t, m, "GET", map[string]string{"X-Forwarded-Uri": "/api/items"})
		if resp.StatusCode != 401 || !strings.Contains(body["error"].(map[string]any)["message"].(string), "X-Sluice-Service-Key") {
			t.Errorf("no service key: %d %v", resp.StatusCode, body)
		}
		resp, body = forward(t, m, "GET", map[string]string{"X-Forwarded-Uri": "/api/items", "X-Sluice-Service-Key": "sk_wrong"})
		if resp.StatusCode != 401 || !strings.Contains(body["error"].(map[string]any)["message"].(string), "unknown or revoked") {
			t.Errorf("wrong service key: %d %v", resp.StatusCode, body)
		}
		resp, body = forward(t, m, "GET", map[string]string{"X-Sluice-Service-Key": sk})
		if resp.StatusCode != 400 || !strings.Contains(body["error"].(map[string]any)["message"].(string), "X-Forwarded-Uri") {
			t.Errorf("no URI: %d %v", resp.StatusCode, body)
		}
	})

	t.Run("anonymous limit then 429", func(t *testing.T) {
		// Traefik's shape: X-Forwarded-Method and X-Forwarded-Uri on a GET.
		h := map[string]string{"X-Sluice-Service-Key": sk, "X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/api/items?page=2"}
		for i := 1; i <= 3; i++ {
			resp, _ := forward(t, m, "GET", h)
			if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"api";q=3;w=60` || resp.Header.Get("X-RateLimit-Remaining") != itoa(int64(3-i)) {
				t.Fatalf("check %d: %d %v", i, resp.StatusCode, resp.Header)
			}
		}
		resp, body := forward(t, m, "GET", h)
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("4th: %d %v", resp.StatusCode, resp.Header)
		}
		if body["status"] != float64(429) || body["type"] != "https://iana.org/assignments/http-problem-types#quota-exceeded" || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"api";r=0;`) {
			t.Errorf("4th body %v headers %v", body, resp.Header)
		}
		if vp, _ := body["violated-policies"].([]any); len(vp) != 1 || vp[0] != "api" {
			t.Errorf("violated-policies = %v", body["violated-policies"])
		}
		// A POST to the path matches no policy (the policy is GET only): nginx's shape.
		resp, _ = forward(t, m, "POST", map[string]string{"X-Sluice-Service-Key": sk, "X-Original-URI": "/api/items"})
		if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != "" {
			t.Errorf("POST through nginx shape: %d %v", resp.StatusCode, resp.Header)
		}
		resp, _ = forward(t, m, "POST", map[string]string{"X-Sluice-Service-Key": sk, "X-Original-URI": "/api/items", "X-Original-Method": "GET"})
		if resp.StatusCode != 429 {
			t.Errorf("GET named by X-Original-Method: %d", resp.StatusCode)
		}
	})

	t.Run("consumer key selects its tier", func(t *testing.T) {
		for _, h := range []map[string]string{
			{"X-Api-Key": ck},
			{"Authorization": "Bearer " + ck},
		} {
			h["X-Sluice-Service-Key"] = sk
			h["X-Forwarded-Uri"] = "/api/items"
			resp, _ := forward(t, m, "GET", h)
			if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"api";q=5;w=60` {
				t.Errorf("%v: %d %v", h, resp.StatusCode, resp.Header)
			}
		}
		resp, body := forward(t, m, "GET", map[string]string{"X-Sluice-Service-Key": sk, "X-Forwarded-Uri": "/api/items", "X-Api-Key": "ck_not_a_key"})
		if resp.StatusCode != 401 || body["type"] != "https://sluice.dev/problems/invalid-key" || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("invalid key: %d %v %v", resp.StatusCode, body, resp.Header)
		}
	})
}
