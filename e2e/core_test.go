package e2e

import (
	"strings"
	"testing"
	"time"
)

// The seed report's scenario: 100 concurrent requests from one IP against
// 10 per 60 s admit exactly 10, however the path is spelled.
func TestBurstIsExact(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	tn := createTenant(t, s, "burst")
	createPolicy(t, s, tn, heavyPolicy)
	got := burst(t, s, tn, 100, func(int) map[string]any { return ipCheck("203.0.113.7", "/api/example?mode=heavy") })
	if got != 10 {
		t.Fatalf("allowed %d of 100 concurrent checks, want exactly 10", got)
	}
	c, r := check(t, s, tn, ipCheck("203.0.113.7", "/api/example?mode=heavy"))
	if c.Allowed || c.Reason != "rate_limited" || c.Remaining != 0 || c.Limit != 10 {
		t.Fatalf("after the burst: %s", r.Raw)
	}
	if c.RetryAfterMS == nil || *c.RetryAfterMS <= 0 || *c.RetryAfterMS > 6000 {
		t.Fatalf("retry_after_ms = %v, want in (0, 6000]", c.RetryAfterMS)
	}
	if got := r.Header.Get("RateLimit-Policy"); got != `"heavy-example";q=10;w=60` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
	if got := r.Header.Get("RateLimit"); !strings.HasPrefix(got, `"heavy-example";r=0;t=`) {
		t.Errorf("RateLimit = %q", got)
	}
	if r.Header.Get("Retry-After") == "" || r.Header.Get("X-RateLimit-Limit") != "10" || r.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("headers: %v", r.Header)
	}
	// Another IP has its own bucket; an unprotected path is allowed with policy null.
	if c, _ := check(t, s, tn, ipCheck("203.0.113.8", "/api/example?mode=heavy")); !c.Allowed {
		t.Error("a second IP was denied")
	}
	if c, r := check(t, s, tn, ipCheck("203.0.113.7", "/api/example?mode=light")); !c.Allowed || c.Policy != nil {
		t.Errorf("unprotected variant: %s", r.Raw)
	}
}

// Every spelling of the protected endpoint lands in the same bucket.
func TestPathVariantsShareOneBucket(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	tn := createTenant(t, s, "variants")
	createPolicy(t, s, tn, heavyPolicy)
	variants := []string{
		"/api/example?mode=heavy",
		"/api/example.json?mode=heavy",
		"/api/example/?mode=heavy",
		"/api/example%2ejson?mode=heavy",
		"/api//example?mode=heavy",
		"/api/./example?mode=heavy",
		"/api/x/../example?mode=heavy",
		"/%61pi/%65xample?mode=heavy",
		"/api/example?mode=normal&mode=heavy",
		"/API/Example?mode=heavy",
		"/api/example?mode=%68eavy",
		"/api/example;jsessionid=1?mode=heavy",
	}
	for i, v := range variants {
		c, r := check(t, s, tn, ipCheck("198.51.100.1", v))
		if c.Policy != "heavy-example" {
			t.Fatalf("variant %q matched policy %v: %s", v, c.Policy, r.Raw)
		}
		want := i < 10
		if c.Allowed != want {
			t.Fatalf("variant %d %q: allowed=%v, want %v (one shared bucket of 10): %s", i, v, c.Allowed, want, r.Raw)
		}
	}
}

// A drained bucket stays drained across an idle period: 15 s refill 2.5
// tokens at 10 per 60 s, so 2 of 6 are allowed (the seed report saw 6 of 6).
func TestIdleDoesNotReset(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	tn := createTenant(t, s, "idle")
	createPolicy(t, s, tn, heavyPolicy)
	if got := burst(t, s, tn, 10, func(int) map[string]any { return ipCheck("192.0.2.10", "/api/example?mode=heavy") }); got != 10 {
		t.Fatalf("drain: %d allowed, want 10", got)
	}
	time.Sleep(15 * time.Second)
	allowed := 0
	for i := 0; i < 6; i++ {
		if c, _ := check(t, s, tn, ipCheck("192.0.2.10", "/api/example?mode=heavy")); c.Allowed {
			allowed++
		}
	}
	if allowed != 2 {
		t.Fatalf("after 15 s idle: %d of 6 allowed, want 2", allowed)
	}
}

// drainThenCount drains one IP's bucket, runs between (a restart), and then
// counts how many of 6 checks pass; refill over the elapsed time bounds it.
func drainThenCount(t testing.TB, s *server, tn tenant, ip string, between func()) (allowed int, elapsed time.Duration) {
	t.Helper()
	start := time.Now()
	if got := burst(t, s, tn, 20, func(int) map[string]any { return ipCheck(ip, "/api/example?mode=heavy") }); got != 10 {
		t.Fatalf("drain: %d allowed, want 10", got)
	}
	between()
	for i := 0; i < 6; i++ {
		if c, _ := check(t, s, tn, ipCheck(ip, "/api/example?mode=heavy")); c.Allowed {
			allowed++
		}
	}
	return allowed, time.Since(start)
}

// refillBound is how many whole tokens 10 per 60 s can refill in d.
func refillBound(d time.Duration) int { return int(d / (6 * time.Second)) }

func TestRestartKeepsQuota(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	tn := createTenant(t, s, "restart")
	createPolicy(t, s, tn, heavyPolicy)

	allowed, elapsed := drainThenCount(t, s, tn, "192.0.2.20", func() {
		s.stop() // SIGTERM: drain, flush, wait for commit
		s.restart(t)
	})
	if allowed > refillBound(elapsed) {
		t.Fatalf("after SIGTERM restart: %d of 6 allowed, but only %d tokens can refill in %s", allowed, refillBound(elapsed), elapsed)
	}

	allowed, elapsed = drainThenCount(t, s, tn, "192.0.2.21", func() {
		time.Sleep(time.Second) // the flush interval is 200ms
		s.kill()                // kill -9
		s.restart(t)
	})
	if allowed > refillBound(elapsed) {
		t.Fatalf("after kill -9 restart: %d of 6 allowed, but only %d tokens can refill in %s", allowed, refillBound(elapsed), elapsed)
	}
}

func TestRevokedKeyIsInvalidWithinASecond(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	tn := createTenant(t, s, "revoke")
	createPolicy(t, s, tn, heavyPolicy)
	k := mustStatus(t, call(t, "POST", s.base+"/v1/keys", tn.Key, map[string]any{"name": "mobile app", "tier": "pro"}), 201)
	secret, id := k.str("key"), k.str("id")
	if !strings.HasPrefix(secret, "ck_") || len(secret) < 35 || k.str("prefix") == "" {
		t.Fatalf("created key: %s", k.Raw)
	}
	c, r := check(t, s, tn, map[string]any{"api_key": secret, "path": "/api/example?mode=heavy"})
	if !c.Allowed || c.Tier != "pro" || c.Limit != 1000 {
		t.Fatalf("pro key check: %s", r.Raw)
	}
	revokedAt := time.Now()
	mustStatus(t, call(t, "DELETE", s.base+"/v1/keys/"+id, tn.Key, nil), 200)
	took := waitFor(t, time.Second, "revoked key answers invalid_key", func() bool {
		c, _ := check(t, s, tn, map[string]any{"api_key": secret, "path": "/api/example?mode=heavy"})
		return !c.Allowed && c.Reason == "invalid_key"
	})
	t.Logf("revocation effective %s after the DELETE (%s after it was sent)", took, time.Since(revokedAt))
	// An unknown key is never silently downgraded to the IP.
	c, r = check(t, s, tn, map[string]any{"api_key": "ck_doesnotexist0000000000000000000000", "ip": "192.0.2.1", "path": "/api/example?mode=heavy"})
	if c.Allowed || c.Reason != "invalid_key" {
		t.Fatalf("unknown key: %s", r.Raw)
	}
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	a := createTenant(t, s, "tenant-a")
	b := createTenant(t, s, "tenant-b")
	pol := createPolicy(t, s, a, heavyPolicy)
	key := mustStatus(t, call(t, "POST", s.base+"/v1/keys", a.Key, map[string]any{"name": "a key", "tier": "pro"}), 201)
	for _, req := range []struct{ method, path string }{
		{"GET", "/v1/policies/" + pol},
		{"PUT", "/v1/policies/" + pol},
		{"DELETE", "/v1/policies/" + pol},
		{"GET", "/v1/keys/" + key.str("id")},
		{"PATCH", "/v1/keys/" + key.str("id")},
		{"DELETE", "/v1/keys/" + key.str("id")},
	} {
		var body any
		if req.method == "PUT" {
			body = heavyPolicy
		}
		if req.method == "PATCH" {
			body = map[string]any{"tier": "free"}
		}
		r := call(t, req.method, s.base+req.path, b.Key, body)
		if r.Status != 404 || r.errCode() != "not_found" {
			t.Errorf("tenant B %s %s: %d %s, want 404 not_found", req.method, req.path, r.Status, r.Raw)
		}
	}
	// B's lists do not show A's objects; A's key is invalid in B's checks.
	if r := call(t, "GET", s.base+"/v1/policies", b.Key, nil); strings.Contains(string(r.Raw), pol) {
		t.Errorf("tenant B lists A's policy: %s", r.Raw)
	}
	if r := call(t, "GET", s.base+"/v1/keys", b.Key, nil); strings.Contains(string(r.Raw), key.str("id")) {
		t.Errorf("tenant B lists A's key: %s", r.Raw)
	}
	c, r := check(t, s, b, map[string]any{"api_key": key.str("key"), "path": "/api/example?mode=heavy"})
	if c.Allowed || c.Reason != "invalid_key" || strings.Contains(string(r.Raw), key.str("id")) {
		t.Errorf("A's key in B's check: %s", r.Raw)
	}
	// And A's objects are untouched.
	mustStatus(t, call(t, "GET", s.base+"/v1/policies/"+pol, a.Key, nil), 200)
}

func TestBadInputAnswersDocumentedErrors(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	tn := createTenant(t, s, "badinput")
	createPolicy(t, s, tn, heavyPolicy)
	big := `{"path":"/` + strings.Repeat("a", 2<<20) + `","ip":"192.0.2.1"}`
	cases := []struct {
		name, method, path, token, body string
		headers                         []string
		status                          int
		code                            string
		field                           string
	}{
		{"no auth", "POST", "/v1/check", "", `{"path":"/","ip":"192.0.2.1"}`, nil, 401, "unauthenticated", ""},
		{"wrong key", "POST", "/v1/check", "sk_wrong", `{"path":"/","ip":"192.0.2.1"}`, nil, 401, "unauthenticated", ""},
		{"operator token on tenant API", "POST", "/v1/check", operatorToken, `{"path":"/","ip":"192.0.2.1"}`, nil, 401, "unauthenticated", ""},
		{"service key on admin API", "GET", "/v1/admin/tenants", tn.Key, "", nil, 401, "unauthenticated", ""},
		{"malformed json", "POST", "/v1/check", tn.Key, `{"path":`, nil, 400, "invalid_request", ""},
		{"not an object", "POST", "/v1/check", tn.Key, `[1,2]`, nil, 400, "invalid_request", ""},
		{"missing path", "POST", "/v1/check", tn.Key, `{"ip":"192.0.2.1"}`, nil, 400, "invalid_request", "path"},
		{"missing ip and key", "POST", "/v1/check", tn.Key, `{"path":"/x"}`, nil, 400, "invalid_request", "ip"},
		{"bad ip", "POST", "/v1/check", tn.Key, `{"path":"/x","ip":"999.1.1.1"}`, nil, 400, "invalid_request", "ip"},
		{"zero cost", "POST", "/v1/check", tn.Key, `{"path":"/x","ip":"192.0.2.1","cost":0}`, nil, 400, "invalid_request", "cost"},
		{"fractional cost", "POST", "/v1/check", tn.Key, `{"path":"/x","ip":"192.0.2.1","cost":1.5}`, nil, 400, "invalid_request", "cost"},
		{"string cost", "POST", "/v1/check", tn.Key, `{"path":"/x","ip":"192.0.2.1","cost":"1"}`, nil, 400, "invalid_request", "cost"},
		{"unknown field", "POST", "/v1/check", tn.Key, `{"path":"/x","ip":"192.0.2.1","bogus":1}`, nil, 400, "invalid_request", "bogus"},
		{"empty batch", "POST", "/v1/check/batch", tn.Key, `{"checks":[]}`, nil, 400, "invalid_request", "checks"},
		{"bad check in batch", "POST", "/v1/check/batch", tn.Key, `{"checks":[{"path":"/x","ip":"192.0.2.1"},{"path":"/x"}]}`, nil, 400, "invalid_request", "checks[1].ip"},
		{"wrong content type", "POST", "/v1/check", tn.Key, `{"path":"/x","ip":"192.0.2.1"}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type", ""},
		{"no content type", "POST", "/v1/check", tn.Key, `{"path":"/x","ip":"192.0.2.1"}`, []string{"Content-Type", ""}, 415, "unsupported_media_type", ""},
		{"too large", "POST", "/v1/check", tn.Key, big, nil, 413, "payload_too_large", ""},
		{"unknown route", "GET", "/v1/nope", tn.Key, "", nil, 404, "not_found", ""},
		{"wrong method", "PUT", "/v1/check", tn.Key, `{}`, nil, 405, "method_not_allowed", ""},
		{"unknown policy", "GET", "/v1/policies/pol_doesnotexist", tn.Key, "", nil, 404, "not_found", ""},
		{"bad algorithm", "POST", "/v1/policies", tn.Key, `{"name":"x","path":"/x","tiers":{"default":{"algorithm":"leaky","limit":1,"period":"1s"}}}`, nil, 400, "invalid_request", "algorithm"},
		{"bad period", "POST", "/v1/policies", tn.Key, `{"name":"x","path":"/x","tiers":{"default":{"algorithm":"token_bucket","limit":1,"period":"soon"}}}`, nil, 400, "invalid_request", "period"},
		{"duplicate policy", "POST", "/v1/policies", tn.Key, mustJSON(heavyPolicy), nil, 409, "conflict", ""},
		{"bad tenant", "POST", "/v1/admin/tenants", operatorToken, `{"name":"","owner_email":"x","owner_password":"y"}`, nil, 400, "invalid_request", "name"},
		{"bad analytics time", "GET", "/v1/analytics/timeseries?from=yesterday&to=now", tn.Key, "", nil, 400, "invalid_request", "from"},
		{"block for unknown tenant", "POST", "/v1/admin/blocks", operatorToken, `{"tenant_id":"ten_nope","identity":{"kind":"ip","id":"192.0.2.1"},"reason":"x"}`, nil, 404, "not_found", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body any
			if c.body != "" {
				body = c.body
			}
			r := call(t, c.method, s.base+c.path, c.token, body, c.headers...)
			if r.Status != c.status || r.errCode() != c.code {
				t.Fatalf("%d %s, want %d %s", r.Status, r.Raw, c.status, c.code)
			}
			msg := r.str("error", "message")
			if msg == "" || strings.Contains(msg, "goroutine") || strings.Contains(strings.ToUpper(msg), "SELECT ") || strings.Contains(msg, "sqlite") {
				t.Fatalf("message %q", msg)
			}
			if c.field != "" && !strings.Contains(msg, c.field) {
				t.Fatalf("message %q does not name %q", msg, c.field)
			}
		})
	}
	// Still serving.
	if c, _ := check(t, s, tn, ipCheck("192.0.2.99", "/api/example?mode=heavy")); !c.Allowed {
		t.Fatal("server stopped answering after bad input")
	}
}

func mustJSON(v any) string {
	b, err := jsonMarshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
