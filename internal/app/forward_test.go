package app

import (
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/api"
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

	t.Run("the other family's headers do not steer the check", func(t *testing.T) {
		// nginx sets X-Original-* and passes every client header on: a
		// client's X-Forwarded-Uri or -Method must not pick what is
		// checked. Traefik and Caddy set X-Forwarded-*: a client's
		// X-Original-* must not either. Both families at once are refused.
		for _, h := range []map[string]string{
			{"X-Original-URI": "/api/items", "X-Original-Method": "GET", "X-Forwarded-Uri": "/public/free"},
			{"X-Original-URI": "/api/items", "X-Original-Method": "GET", "X-Forwarded-Method": "POST"},
			{"X-Forwarded-Uri": "/api/items", "X-Forwarded-Method": "GET", "X-Original-URI": "/public/free"},
			{"X-Forwarded-Uri": "/api/items", "X-Forwarded-Method": "GET", "X-Original-Method": "POST"},
		} {
			h["X-Sluice-Service-Key"] = sk
			resp, body := forward(t, m, "GET", h)
			if resp.StatusCode != 400 || !strings.Contains(body["error"].(map[string]any)["message"].(string), "both X-Forwarded-Uri/-Method and X-Original-URI/-Method") {
				t.Errorf("%v: %d %v, want 400 naming both families", h, resp.StatusCode, body)
			}
		}
		// A target given twice: the proxy added its header to the client's.
		req, _ := http.NewRequest("GET", "http://"+m.Addr()+"/v1/forward-auth", nil)
		req.Header.Set("X-Sluice-Service-Key", sk)
		req.Header.Add("X-Original-URI", "/public/free")
		req.Header.Add("X-Original-URI", "/api/items")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("X-Original-URI twice: %d, want 400", resp.StatusCode)
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

// Traefik's ForwardAuth sends a GET with exactly these headers (its
// documentation's list) plus the client's own and those of earlier
// middlewares (here the service key). Traefik itself is not run in tests:
// this pins the names its documented config relies on.
func TestForwardAuthTraefikHeaders(t *testing.T) {
	m := bootWith(t, func(c *Config) { c.TrustedProxies = mustTrusted(t, "127.0.0.1") })
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "traefik", "owner_email": "o@traefik.test", "owner_password": "a long passphrase"})
	sk := tn["service_key"].(string)
	do(t, m, "POST", "/v1/policies", sk, map[string]any{
		"name": "upload", "method": "POST", "path": "/api/upload",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 1, "period": "60s"}},
	})
	traefik := func(client string) map[string]string {
		return map[string]string{
			"X-Sluice-Service-Key": sk, // the headers middleware before forwardAuth
			"X-Forwarded-Method":   "POST",
			"X-Forwarded-Proto":    "https",
			"X-Forwarded-Host":     "api.example.com",
			"X-Forwarded-Uri":      "/api/upload?draft=1",
			"X-Forwarded-For":      client,
			"User-Agent":           "client/1.0", // the client's own headers come along
		}
	}
	resp, _ := forward(t, m, "GET", traefik("198.51.100.1"))
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"upload";q=1;w=60` {
		t.Fatalf("first POST /api/upload: %d %v", resp.StatusCode, resp.Header)
	}
	resp, body := forward(t, m, "GET", traefik("198.51.100.1"))
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || body["status"] != float64(429) {
		t.Fatalf("second from the same client: %d %v %v", resp.StatusCode, resp.Header, body)
	}
	if resp.Header.Get("X-Sluice-Problem") != "" {
		t.Errorf("problem header sent unasked: %q", resp.Header.Get("X-Sluice-Problem"))
	}
	// X-Forwarded-For names the client: another client has its own bucket.
	if resp, _ := forward(t, m, "GET", traefik("198.51.100.2")); resp.StatusCode != 200 {
		t.Errorf("another client: %d", resp.StatusCode)
	}
}

// A proxy that drops the subrequest's body (nginx) asks for it in a header:
// the header holds the body byte for byte.
func TestForwardAuthProblemHeader(t *testing.T) {
	m := boot(t)
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "nginx", "owner_email": "o@nginx.test", "owner_password": "a long passphrase"})
	sk := tn["service_key"].(string)
	do(t, m, "POST", "/v1/policies", sk, map[string]any{
		"name": "items", "path": "/api/items",
		"tiers": map[string]any{"anonymous": []any{
			map[string]any{"name": "burst", "algorithm": "token_bucket", "limit": 1, "period": "60s"},
			map[string]any{"name": "daily", "algorithm": "fixed_window", "limit": 100, "period": "1d"},
		}},
	})
	h := map[string]string{"X-Sluice-Service-Key": sk, "X-Original-URI": "/api/items", "X-Original-Method": "GET", "X-Sluice-Problem-Header": "on"}
	if resp, _ := forward(t, m, "GET", h); resp.StatusCode != 200 || resp.Header.Get("X-Sluice-Problem") != "" {
		t.Fatalf("allowed: %d %v", resp.StatusCode, resp.Header)
	}
	for _, tc := range []struct {
		status int
		extra  map[string]string
	}{
		{429, nil},
		{401, map[string]string{"X-Api-Key": "ck_not_a_key"}},
	} {
		req, _ := http.NewRequest("GET", "http://"+m.Addr()+"/v1/forward-auth", nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		for k, v := range tc.extra {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("X-Sluice-Problem") != string(raw) {
			t.Errorf("%d: header %q, body %q", resp.StatusCode, resp.Header.Get("X-Sluice-Problem"), raw)
		}
		if tc.status == 429 && !strings.Contains(string(raw), `"violated-policies":["items.burst"]`) {
			t.Errorf("429 body: %s", raw)
		}
	}
}

func mustTrusted(t *testing.T, s string) []netip.Prefix {
	t.Helper()
	ps, err := api.ParseTrustedProxies(s)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}
