package app

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// concurrencyTenant creates a tenant with a policy of 3 slots per IP on
// /export and answers its service key.
func concurrencyTenant(t *testing.T, m *Main, name string) string {
	t.Helper()
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": name, "owner_email": "o@" + name + ".test", "owner_password": "a long passphrase"})
	sk := tn["service_key"].(string)
	do(t, m, "POST", "/v1/policies", sk, map[string]any{
		"name": "export", "path": "/export",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "concurrency", "limit": 3}},
	})
	return sk
}

// Slots through the HTTP API: leases in the answers, a release, the bad
// inputs (each naming its field, nothing taken), another tenant's lease.
func TestConcurrencyThroughTheAPI(t *testing.T) {
	m := boot(t)
	sk := concurrencyTenant(t, m, "conc")
	other := concurrencyTenant(t, m, "other")
	check := `{"ip": "192.0.2.1", "path": "/export", "lease_ttl": "30s"}`
	var leases []string
	for i := range 3 {
		st, a := call(t, m, "POST", "/v1/check", sk, check)
		lease, _ := a["lease"].(string)
		if st != 200 || a["allowed"] != true || !strings.HasPrefix(lease, "lse_") || a["lease_expires_at"] == nil {
			t.Fatalf("check %d: %d %v", i, st, a)
		}
		leases = append(leases, lease)
	}
	if _, a := call(t, m, "POST", "/v1/check", sk, check); a["allowed"] != false || a["reason"] != "concurrency_limited" || a["lease"] != nil {
		t.Fatalf("fourth: %v", a)
	}

	for _, tc := range []struct{ body, field string }{
		{`{"ip": "192.0.2.1", "path": "/export", "lease_ttl": "500ms"}`, "lease_ttl"},
		{`{"ip": "192.0.2.1", "path": "/export", "lease_ttl": "25h"}`, "lease_ttl"},
		{`{"ip": "192.0.2.1", "path": "/export", "lease_ttl": "soon"}`, "lease_ttl"},
	} {
		if st, a := call(t, m, "POST", "/v1/check", sk, tc.body); st != 400 || !strings.HasPrefix(errMessage(a), tc.field+":") {
			t.Fatalf("%s: %d %v", tc.body, st, a)
		}
	}
	for _, tc := range []struct{ limit, field string }{
		{`{"algorithm": "concurrency", "limit": 3, "period": "1m"}`, "tiers.anonymous.period"},
		{`{"algorithm": "concurrency", "limit": 3, "calendar": "day"}`, "tiers.anonymous.calendar"},
		{`{"algorithm": "concurrency", "limit": 1001}`, "tiers.anonymous.limit"},
	} {
		body := `{"name": "bad", "path": "/bad", "tiers": {"anonymous": ` + tc.limit + `}}`
		if st, a := call(t, m, "POST", "/v1/policies", sk, body); st != 400 || !strings.HasPrefix(errMessage(a), tc.field+":") {
			t.Fatalf("%s: %d %v", tc.limit, st, a)
		}
	}
	if st, a := call(t, m, "GET", "/v1/policies", sk, ""); st != 200 || fmt.Sprint(a) != "" && strings.Contains(fmt.Sprint(a), "/bad") {
		t.Fatalf("a refused policy was stored: %v", a)
	}

	// Another tenant, a malformed id, a missing field: nothing released.
	for _, tc := range []struct {
		key, body string
		status    int
	}{
		{other, `{"lease": "` + leases[0] + `"}`, 404},
		{sk, `{"lease": "lse_nope"}`, 404},
		{sk, `{"lease": "` + strings.Repeat("a", 3000) + `"}`, 404},
		{sk, `{}`, 400},
	} {
		if st, a := call(t, m, "POST", "/v1/release", tc.key, tc.body); st != tc.status {
			t.Fatalf("release %.60s: %d %v, want %d", tc.body, st, a, tc.status)
		}
	}
	if _, a := call(t, m, "POST", "/v1/check", sk, check); a["allowed"] != false {
		t.Fatalf("a refused release freed a slot: %v", a)
	}

	st, a := call(t, m, "POST", "/v1/release", sk, `{"lease": "`+leases[0]+`"}`)
	if st != 200 || a["released"] != true || a["status"] != "released" {
		t.Fatalf("release: %d %v", st, a)
	}
	st, a = call(t, m, "POST", "/v1/release", sk, `{"lease": "`+leases[0]+`"}`)
	if st != 200 || a["released"] != false || a["status"] != "already_released" || !strings.HasPrefix(a["message"].(string), "lease:") {
		t.Fatalf("release twice: %d %v", st, a)
	}
	if _, a := call(t, m, "POST", "/v1/check", sk, check); a["allowed"] != true {
		t.Fatalf("after a release: %v", a)
	}
}

// Live leases are flushed with the bucket's state and come back after a
// restart from the worker's SQLite file: the slots stay held, and a lease
// taken before the restart is released after it.
func TestConcurrencyLeasesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	start := func() (*Main, func()) {
		cfg := DefaultConfig()
		cfg.Addr, cfg.Data, cfg.Node, cfg.OperatorToken = "127.0.0.1:0", dir, "restart", testToken
		return runMain(t, cfg, nil)
	}
	m, closeM := start()
	sk := concurrencyTenant(t, m, "restart")
	check := `{"ip": "192.0.2.1", "path": "/export", "lease_ttl": "1h"}`
	var leases []string
	for range 3 {
		_, a := call(t, m, "POST", "/v1/check", sk, check)
		leases = append(leases, a["lease"].(string))
	}
	if _, a := call(t, m, "POST", "/v1/release", sk, `{"lease": "`+leases[2]+`"}`); a["released"] != true {
		t.Fatalf("release: %v", a)
	}
	closeM()

	m, _ = start()
	if _, a := call(t, m, "POST", "/v1/check", sk, check); a["allowed"] != true {
		t.Fatalf("the released slot is held again after the restart: %v", a)
	}
	if _, a := call(t, m, "POST", "/v1/check", sk, check); a["allowed"] != false || a["reason"] != "concurrency_limited" {
		t.Fatalf("the slots held before the restart were lost: %v", a)
	}
	if _, a := call(t, m, "POST", "/v1/release", sk, `{"lease": "`+leases[0]+`"}`); a["released"] != true {
		t.Fatalf("a lease from before the restart: %v", a)
	}
	if _, a := call(t, m, "POST", "/v1/check", sk, check); a["allowed"] != true {
		t.Fatalf("after releasing a lease from before the restart: %v", a)
	}
}

// Forward-auth cannot release: an allowed request takes a slot for the
// URL's lease_ttl and names its lease in X-Sluice-Lease, which the
// upstream may release; a client cannot choose the TTL.
func TestConcurrencyThroughForwardAuth(t *testing.T) {
	m := boot(t)
	sk := concurrencyTenant(t, m, "fwdconc")
	ask := func(query string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+m.Addr()+"/v1/forward-auth"+query, nil)
		req.Header.Set("X-Sluice-Service-Key", sk)
		req.Header.Set("X-Forwarded-Uri", "/export")
		req.Header.Set("X-Forwarded-For", "192.0.2.1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(raw)
	}
	if resp, body := ask("?lease_ttl=1ms"); resp.StatusCode != 400 || !strings.Contains(body, "lease_ttl:") {
		t.Fatalf("a bad lease_ttl: %d %s", resp.StatusCode, body)
	}
	var leases []string
	for i := range 3 {
		resp, _ := ask("?lease_ttl=30s")
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("X-Sluice-Lease"), "lse_") || resp.Header.Get("X-Sluice-Lease-Expires") == "" {
			t.Fatalf("request %d: %d %v", i, resp.StatusCode, resp.Header)
		}
		leases = append(leases, resp.Header.Get("X-Sluice-Lease"))
	}
	if resp, body := ask("?lease_ttl=30s"); resp.StatusCode != 429 || resp.Header.Get("X-Sluice-Lease") != "" {
		t.Fatalf("fourth: %d %s", resp.StatusCode, body)
	}
	if _, a := call(t, m, "POST", "/v1/release", sk, `{"lease": "`+leases[1]+`"}`); a["released"] != true {
		t.Fatalf("the upstream's release: %v", a)
	}
	if resp, _ := ask(""); resp.StatusCode != 200 {
		t.Fatalf("after a release: %d", resp.StatusCode)
	}
}
