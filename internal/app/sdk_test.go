package app

// The Go SDK against the real product: a whole server started in-process
// (embedded NATS, worker, SQLite in a temp dir), driven only through the
// SDK's calls and middleware.

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sdk"
)

// sdkTenant creates a tenant and returns an SDK client holding its service
// key, with opts applied.
func sdkTenant(t testing.TB, m *Main, name string, opts ...sdk.Option) (c *sdk.Client, tenantID, serviceKey string) {
	t.Helper()
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{
		"name": name, "owner_email": "owner@" + name + ".test", "owner_password": "a long passphrase",
	})
	serviceKey = tn["service_key"].(string)
	c = sdk.New("http://"+m.Addr(), serviceKey, opts...)
	t.Cleanup(c.CloseIdleConnections)
	return c, tn["id"].(string), serviceKey
}

// serveVia runs r through the middleware and returns the recorded answer.
func serveVia(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Write([]byte("ok"))
})

func TestSDKAgainstServer(t *testing.T) {
	m := boot(t)
	ctx := context.Background()
	c, tenantID, sk := sdkTenant(t, m, "sdkco", sdk.WithTimeout(2*time.Second))

	// Management calls: nobody hand-writes JSON.
	pol, err := c.CreatePolicy(ctx, sdk.Policy{
		Name: "heavy", Method: "GET", Path: "/api/heavy",
		Tiers: map[string]sdk.Limits{
			"anonymous": {{Algorithm: "token_bucket", Limit: 3, Period: "60s"}},
			"pro": {
				{Name: "burst", Algorithm: "token_bucket", Limit: 5, Period: "1s"},
				{Name: "daily", Algorithm: "fixed_window", Limit: 1000, Period: "24h"},
			},
		},
	})
	if err != nil || pol.ID == "" || len(pol.Tiers["pro"]) != 2 {
		t.Fatalf("CreatePolicy = %+v, %v", pol, err)
	}
	if _, err := c.CreatePolicy(ctx, sdk.Policy{Name: "bad", Path: "no-slash"}); err == nil {
		t.Fatal("CreatePolicy accepted an invalid policy")
	} else if e := (*sdk.Error)(nil); !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code == "" {
		t.Fatalf("invalid policy error = %#v", err)
	}
	pols, err := c.ListPolicies(ctx)
	if err != nil || len(pols) != 1 || pols[0].Name != "heavy" {
		t.Fatalf("ListPolicies = %+v, %v", pols, err)
	}
	key, err := c.CreateKey(ctx, sdk.NewKey{Name: "mobile", Tier: "pro"})
	if err != nil || !strings.HasPrefix(key.Secret, "ck_") || key.Tier != "pro" {
		t.Fatalf("CreateKey = %+v, %v", key, err)
	}
	keys, err := c.ListKeys(ctx)
	if err != nil || len(keys) != 1 || keys[0].Secret != "" || keys[0].ID != key.ID {
		t.Fatalf("ListKeys = %+v, %v (secrets must not be listed)", keys, err)
	}

	mw := c.Middleware(okHandler)

	t.Run("headers and 429 body", func(t *testing.T) {
		for i := 1; i <= 4; i++ {
			r := httptest.NewRequest("GET", "/api/heavy", nil)
			r.RemoteAddr = "203.0.113.7:41000"
			w := serveVia(mw, r)
			h := w.Header()
			if got := h.Get("RateLimit-Policy"); got != `"heavy";q=3;w=60` {
				t.Errorf("check %d: RateLimit-Policy = %q", i, got)
			}
			items, err := sdk.ParseRateLimitHeader(h.Get("RateLimit"))
			if err != nil || len(items) != 1 || items[0].Name != "heavy" {
				t.Fatalf("check %d: RateLimit = %q: %+v, %v", i, h.Get("RateLimit"), items, err)
			}
			wantRemaining := int64(max(3-i, 0))
			if r, _ := items[0].Int("r"); r != wantRemaining {
				t.Errorf("check %d: RateLimit r = %d, want %d", i, r, wantRemaining)
			}
			if h.Get("X-RateLimit-Limit") != "3" || h.Get("X-RateLimit-Remaining") != itoa(wantRemaining) {
				t.Errorf("check %d: X-RateLimit-* = %q/%q", i, h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"))
			}
			if i <= 3 {
				if w.Code != 200 || w.Body.String() != "ok" || h.Get("Retry-After") != "" {
					t.Errorf("check %d: %d %q Retry-After=%q, want 200 ok", i, w.Code, w.Body, h.Get("Retry-After"))
				}
				continue
			}
			if w.Code != http.StatusTooManyRequests || h.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("check 4: %d %s, want 429 problem", w.Code, h.Get("Content-Type"))
			}
			// 1 token per 20 s refills: the next one is due in (0, 20] s.
			if ra := h.Get("Retry-After"); ra == "" || ra == "0" || len(ra) > 2 {
				t.Errorf("Retry-After = %q", ra)
			}
			var p struct {
				Type     string   `json:"type"`
				Status   int      `json:"status"`
				Violated []string `json:"violated-policies"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				t.Fatalf("429 body %q: %v", w.Body, err)
			}
			if p.Type != sdk.ProblemQuotaExceeded || p.Status != 429 || len(p.Violated) != 1 || p.Violated[0] != "heavy" {
				t.Errorf("429 body = %+v", p)
			}
		}
	})

	t.Run("key tier with two limits", func(t *testing.T) {
		r := httptest.NewRequest("GET", "/api/heavy", nil)
		r.Header.Set("Authorization", "Bearer "+key.Secret)
		w := serveVia(mw, r)
		if w.Code != 200 {
			t.Fatalf("key check: %d %s", w.Code, w.Body)
		}
		items, err := sdk.ParseRateLimitHeader(w.Header().Get("RateLimit-Policy"))
		if err != nil || len(items) != 2 || items[0].Name != "heavy.burst" || items[1].Name != "heavy.daily" {
			t.Fatalf("RateLimit-Policy = %q: %+v, %v", w.Header().Get("RateLimit-Policy"), items, err)
		}
		if q, _ := items[1].Int("q"); q != 1000 {
			t.Errorf("daily q = %d", q)
		}
	})

	t.Run("invalid key answers 401", func(t *testing.T) {
		r := httptest.NewRequest("GET", "/api/heavy", nil)
		r.Header.Set("X-API-Key", "ck_"+strings.Repeat("x", 40))
		w := serveVia(mw, r)
		if w.Code != http.StatusUnauthorized || w.Header().Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(w.Body.String(), sdk.ProblemInvalidKey) {
			t.Fatalf("invalid key: %d %s %s", w.Code, w.Header().Get("Content-Type"), w.Body)
		}
	})

	t.Run("blocked caller answers 403", func(t *testing.T) {
		do(t, m, "POST", "/v1/admin/blocks", testToken, map[string]any{
			"tenant_id": tenantID, "identity": map[string]string{"kind": "ip", "id": "198.51.100.66"}, "reason": "sdk test",
		})
		waitUntil(t, 2*time.Second, "block applied", func() bool {
			d, _ := c.Peek(ctx, sdk.CheckRequest{IP: "198.51.100.66", Path: "/api/heavy"})
			return d.Reason == sdk.ReasonBlocked
		})
		r := httptest.NewRequest("GET", "/api/heavy", nil)
		r.RemoteAddr = "198.51.100.66:5000"
		w := serveVia(mw, r)
		if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), sdk.ProblemBlocked) {
			t.Fatalf("blocked: %d %s", w.Code, w.Body)
		}
	})

	t.Run("raw target defeats path variants", func(t *testing.T) {
		// Each variant is sent verbatim; Sluice normalizes them into one
		// bucket, so the fourth request is denied whatever its spelling.
		variants := []string{"/api/heavy", "/api//heavy/", "/api/%68eavy", "/api/./heavy.json"}
		for i, target := range variants {
			r := httptest.NewRequest("GET", target, nil)
			r.RemoteAddr = "203.0.113.99:1"
			w := serveVia(mw, r)
			want := 200
			if i == 3 {
				want = 429
			}
			if w.Code != want {
				t.Errorf("%s: %d, want %d", target, w.Code, want)
			}
		}
	})

	t.Run("peek consumes nothing", func(t *testing.T) {
		req := sdk.CheckRequest{IP: "192.0.2.44", Path: "/api/heavy"}
		for range 3 {
			d, err := c.Peek(ctx, req)
			if err != nil || !d.Allowed || d.Remaining != 2 || d.Local {
				t.Fatalf("Peek = %+v, %v", d, err)
			}
		}
		d, err := c.Check(ctx, req)
		if err != nil || !d.Allowed || d.Remaining != 2 {
			t.Fatalf("Check after peeks = %+v, %v", d, err)
		}
		d, _ = c.Peek(ctx, req)
		if d.Remaining != 1 {
			t.Fatalf("Peek after check: remaining %d, want 1", d.Remaining)
		}
	})

	t.Run("batch answers in order", func(t *testing.T) {
		reqs := []sdk.CheckRequest{
			{IP: "192.0.2.1", Path: "/api/heavy"},
			{APIKey: key.Secret, Path: "/api/heavy"},
			{APIKey: "ck_" + strings.Repeat("z", 40), Path: "/api/heavy"},
			{IP: "2001:db8::1", Path: "/api/heavy", Cost: 3},
			{IP: "2001:db8::1", Path: "/api/heavy"},
			{IP: "192.0.2.2", Path: "/not/limited"},
		}
		ds, err := c.CheckBatch(ctx, reqs)
		if err != nil || len(ds) != len(reqs) {
			t.Fatalf("CheckBatch = %d decisions, %v", len(ds), err)
		}
		want := []struct {
			allowed bool
			reason  string
			kind    string
		}{
			{true, "ok", "ip"}, {true, "ok", "key"}, {false, "invalid_key", "key"},
			{true, "ok", "ip"}, {false, "rate_limited", "ip"}, {true, "ok", "ip"},
		}
		for i, w := range want {
			d := ds[i]
			if d.Allowed != w.allowed || d.Reason != w.reason || (w.reason != "invalid_key" && d.Identity.Kind != w.kind) {
				t.Errorf("result %d = %+v, want allowed=%v reason=%s kind=%s", i, d, w.allowed, w.reason, w.kind)
			}
		}
		if ds[1].Tier != "pro" || ds[0].Tier != "anonymous" || ds[5].Policy != "" {
			t.Errorf("tiers/policies: %q %q %q", ds[0].Tier, ds[1].Tier, ds[5].Policy)
		}
		if _, err := c.CheckBatch(ctx, make([]sdk.CheckRequest, sdk.MaxBatch+1)); err == nil {
			t.Error("an oversized batch was sent")
		}
	})

	t.Run("forwarded headers only from trusted proxies", func(t *testing.T) {
		// No proxies trusted: X-Forwarded-For is the caller's own claim.
		req := func(peer, xff string) *http.Request {
			r := httptest.NewRequest("GET", "/api/heavy", nil)
			r.RemoteAddr = peer
			if xff != "" {
				r.Header.Set("X-Forwarded-For", xff)
			}
			return r
		}
		for i := range 4 {
			// A fresh spoofed address each time must not buy fresh quota.
			w := serveVia(mw, req("198.51.100.20:999", "203.0.113."+itoa(int64(100+i))))
			if want := map[bool]int{true: 200, false: 429}[i < 3]; w.Code != want {
				t.Errorf("spoofed XFF %d: %d, want %d", i, w.Code, want)
			}
		}
		d, _ := c.Decide(req("198.51.100.20:999", "203.0.113.200"))
		if d.Identity.ID != "198.51.100.20" {
			t.Errorf("untrusted peer counted as %q", d.Identity.ID)
		}

		// A client that trusts 10.0.0.0/8 takes the client from the header
		// when the peer is a proxy, and ignores it otherwise.
		pc := sdk.New("http://"+m.Addr(), sk, sdk.WithTrustedProxies("10.0.0.0/8"))
		defer pc.CloseIdleConnections()
		d, _ = pc.Decide(req("10.1.2.3:80", "192.0.2.250, 10.9.9.9"))
		if d.Identity.ID != "192.0.2.250" {
			t.Errorf("via trusted proxies counted as %q, want 192.0.2.250", d.Identity.ID)
		}
		d, _ = pc.Decide(req("198.51.100.21:80", "192.0.2.251"))
		if d.Identity.ID != "198.51.100.21" {
			t.Errorf("untrusted peer with XFF counted as %q", d.Identity.ID)
		}
	})

	t.Run("analytics through the SDK and the abuse report", func(t *testing.T) {
		// "headers and 429 body" made 3 allowed and 1 denied checks for
		// 203.0.113.7; counts reach SQLite within about 2 s.
		from, to := time.Now().Add(-time.Hour), time.Now().Add(time.Minute)
		var top []sdk.TopEntry
		waitUntil(t, 10*time.Second, "analytics caught up", func() bool {
			var err error
			top, err = c.Top(ctx, sdk.TopQuery{From: from, To: to, Limit: 50})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range top {
				if e.Identity.ID == "203.0.113.7" && e.Allowed == 3 && e.Denied == 1 {
					return true
				}
			}
			return false
		})
		for _, e := range top {
			if e.Identity.ID == "203.0.113.7" && (e.DenialRatio != 0.25 || e.RateLimited != 1 || e.InvalidKey != 0 || e.Blocked != 0 || e.FirstSeen.IsZero() || e.LastSeen.Before(e.FirstSeen)) {
				t.Errorf("top entry %+v", e)
			}
		}
		pts, err := c.Timeseries(ctx, sdk.TimeseriesQuery{From: from, To: to, Step: time.Minute, Policy: "heavy"})
		if err != nil {
			t.Fatal(err)
		}
		var denied, byReason int64
		for _, p := range pts {
			denied += p.Denied
			byReason += p.RateLimited + p.InvalidKey + p.Blocked
		}
		if denied == 0 || byReason != denied {
			t.Errorf("timeseries for heavy shows %d denials, %d by reason: %+v", denied, byReason, pts)
		}
		abuse := do(t, m, "GET", "/v1/admin/abuse?from="+from.UTC().Format(time.RFC3339)+"&to="+to.UTC().Format(time.RFC3339), testToken, nil)
		ids, _ := abuse["identities"].([]any)
		found := false
		for _, e := range ids {
			e := e.(map[string]any)
			if e["tenant_id"] == tenantID && e["identity"].(map[string]any)["id"] == "203.0.113.7" {
				found = true
			}
		}
		if !found {
			t.Errorf("abuse report lacks the denied caller: %v", abuse)
		}
	})
}

// The denial memory answers a hammering caller locally, and never admits
// what Sluice would deny: over a run, the SDK's admissions stay within the
// bucket's bound and equal what Sluice itself counted as allowed.
func TestSDKDenialMemoryAgainstServer(t *testing.T) {
	m := boot(t)
	ctx := context.Background()
	c, _, _ := sdkTenant(t, m, "hammer", sdk.WithDenialCache(1024))
	if _, err := c.CreatePolicy(ctx, sdk.Policy{
		Name: "fast", Path: "/api/fast",
		Tiers: map[string]sdk.Limits{"anonymous": {{Algorithm: "token_bucket", Limit: 4, Period: "1s", Burst: 2}}},
	}); err != nil {
		t.Fatal(err)
	}
	req := sdk.CheckRequest{IP: "203.0.113.5", Path: "/api/fast"}
	start := time.Now()
	var allowed, denied int
	for time.Since(start) < 1500*time.Millisecond {
		d, err := c.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		} else {
			denied++
		}
	}
	elapsed := time.Since(start).Seconds()
	st := c.Stats()
	t.Logf("allowed %d, denied %d (%d locally) in %.2fs", allowed, denied, st.LocalDenials, elapsed)
	if bound := 2 + int(4*elapsed) + 1; allowed > bound {
		t.Errorf("allowed %d > burst + rate×elapsed = %d", allowed, bound)
	}
	if st.LocalDenials == 0 || st.LocalDenials > uint64(denied) {
		t.Errorf("local denials %d of %d: the memory did not answer", st.LocalDenials, denied)
	}
	// The memory must not starve the caller either: a token refills every
	// 250 ms, so a 1.5 s run admits burst + 6 at best; 5 leaves room for a slow machine.
	if allowed < 5 {
		t.Errorf("allowed %d: the denial memory held the caller back past its retry-after", allowed)
	}
}

// Failure behaviour with the real server stopped: fail-open admits and
// counts, fail-closed denies with 503, and neither waits past the timeout.
func TestSDKServerStopped(t *testing.T) {
	m := boot(t)
	ctx := context.Background()
	open, _, sk := sdkTenant(t, m, "failer", sdk.WithTimeout(100*time.Millisecond), sdk.FailOpen())
	if _, err := open.CreatePolicy(ctx, sdk.Policy{
		Name: "p", Path: "/api/p",
		Tiers: map[string]sdk.Limits{"anonymous": {{Algorithm: "token_bucket", Limit: 1, Period: "60s"}}},
	}); err != nil {
		t.Fatal(err)
	}
	closed := sdk.New("http://"+m.Addr(), sk, sdk.WithTimeout(100*time.Millisecond), sdk.FailClosed())
	defer closed.CloseIdleConnections()
	if d, err := closed.Check(ctx, sdk.CheckRequest{IP: "192.0.2.9", Path: "/api/p"}); err != nil || !d.Allowed || d.Local {
		t.Fatalf("before stop: %+v, %v", d, err)
	}

	stop(t, m)

	req := sdk.CheckRequest{IP: "192.0.2.9", Path: "/api/p"}
	d, err := open.Check(ctx, req)
	if err == nil || !d.Allowed || d.Reason != sdk.ReasonUnavailable || !d.Local {
		t.Errorf("fail-open with server stopped = %+v, %v", d, err)
	}
	d, err = closed.Check(ctx, req)
	if err == nil || d.Allowed || d.Reason != sdk.ReasonUnavailable {
		t.Errorf("fail-closed with server stopped = %+v, %v", d, err)
	}
	w := serveVia(closed.Middleware(okHandler), httptest.NewRequest("GET", "/api/p", nil))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("fail-closed middleware: %d Retry-After=%q", w.Code, w.Header().Get("Retry-After"))
	}
	w = serveVia(open.Middleware(okHandler), httptest.NewRequest("GET", "/api/p", nil))
	if w.Code != 200 || w.Body.String() != "ok" {
		t.Errorf("fail-open middleware: %d %q", w.Code, w.Body)
	}
	if s := open.Stats(); s.Failures < 2 {
		t.Errorf("fail-open failures counted = %d, want ≥ 2", s.Failures)
	}
}

// A Sluice address that accepts connections and never answers (a hung
// server) costs a check no more than the configured timeout.
func TestSDKTimeoutHonoured(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // read nothing, answer nothing
		}
	}()
	c := sdk.New("http://"+ln.Addr().String(), "sk_unused", sdk.WithTimeout(80*time.Millisecond))
	defer c.CloseIdleConnections()
	for _, name := range []string{"check", "batch"} {
		start := time.Now()
		var err error
		var d sdk.Decision
		if name == "check" {
			d, err = c.Check(context.Background(), sdk.CheckRequest{IP: "192.0.2.1", Path: "/"})
		} else {
			var ds []sdk.Decision
			ds, err = c.CheckBatch(context.Background(), []sdk.CheckRequest{{IP: "192.0.2.1", Path: "/"}})
			d = ds[0]
		}
		took := time.Since(start)
		if err == nil || !d.Allowed || d.Reason != sdk.ReasonUnavailable {
			t.Errorf("%s against a hung server = %+v, %v", name, d, err)
		}
		if took < 70*time.Millisecond || took > 600*time.Millisecond {
			t.Errorf("%s took %v with an 80ms timeout", name, took)
		}
	}
	// A shorter deadline on the caller's context wins.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Check(ctx, sdk.CheckRequest{IP: "192.0.2.1", Path: "/"}); err == nil {
		t.Error("check succeeded against a hung server")
	}
	if took := time.Since(start); took > 300*time.Millisecond {
		t.Errorf("context deadline 20ms: took %v", took)
	}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// With request sharing, 100 concurrent checks for one caller at limit 10
// still admit exactly 10, each caller gets its own decision, and an idle
// check still carries Sluice's header fields.
func TestSDKBatchingAgainstServer(t *testing.T) {
	m := boot(t)
	ctx := context.Background()
	c, _, _ := sdkTenant(t, m, "sharing", sdk.WithBatching(), sdk.WithDenialCache(0), sdk.WithTimeout(5*time.Second))
	if _, err := c.CreatePolicy(ctx, sdk.Policy{
		Name: "ten", Path: "/api/ten",
		Tiers: map[string]sdk.Limits{"anonymous": {{Algorithm: "token_bucket", Limit: 10, Period: "60s"}}},
	}); err != nil {
		t.Fatal(err)
	}
	d, err := c.Check(ctx, sdk.CheckRequest{IP: "192.0.2.200", Path: "/api/ten"})
	if err != nil || !d.Allowed || d.Header.Get("RateLimit-Policy") != `"ten";q=10;w=60` {
		t.Fatalf("idle check = %+v, %v", d, err)
	}

	const n = 100
	var wg sync.WaitGroup
	results := make([]sdk.Decision, n)
	errsSeen := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			ip := "203.0.113.1"
			if i%2 == 1 {
				ip = "203.0.113.2" // a second caller in the same batches
			}
			results[i], errsSeen[i] = c.Check(ctx, sdk.CheckRequest{IP: ip, Path: "/api/ten"})
		})
	}
	close(start)
	wg.Wait()
	allowed := map[string]int{}
	for i, d := range results {
		if errsSeen[i] != nil {
			t.Fatalf("check %d: %v", i, errsSeen[i])
		}
		if d.Identity.ID != map[bool]string{true: "203.0.113.1", false: "203.0.113.2"}[i%2 == 0] {
			t.Fatalf("check %d answered for %q", i, d.Identity.ID)
		}
		if d.Allowed {
			allowed[d.Identity.ID]++
		}
	}
	if allowed["203.0.113.1"] != 10 || allowed["203.0.113.2"] != 10 {
		t.Fatalf("allowed per caller = %v, want exactly 10 each", allowed)
	}
}

// The SDK's Reserve and Settle against the server: the LLM-token case.
func TestSDKReserveAndSettle(t *testing.T) {
	m := boot(t)
	ctx := context.Background()
	c, _, _ := sdkTenant(t, m, "sdkllm", sdk.WithTimeout(2*time.Second))
	if _, err := c.CreatePolicy(ctx, sdk.Policy{Name: "tokens", Path: "/v1/chat",
		Tiers: map[string]sdk.Limits{"anonymous": {{Algorithm: "fixed_window", Limit: 1000, Period: "1h"}}}}); err != nil {
		t.Fatal(err)
	}
	req := sdk.CheckRequest{IP: "192.0.2.44", Path: "/v1/chat"}
	waitUntil(t, 2*time.Second, "the policy on the server", func() bool {
		d, _ := c.Peek(ctx, req)
		return d.Policy == "tokens"
	})
	d, r, err := c.Reserve(ctx, req, 500, sdk.ReserveOptions{Cap: 800, TTL: time.Minute})
	if err != nil || !d.Allowed || d.Remaining != 500 || !strings.HasPrefix(r.ID, "rsv_") || time.Until(r.ExpiresAt) > time.Minute {
		t.Fatalf("Reserve = %+v, %+v, %v", d, r, err)
	}
	s, err := c.Settle(ctx, r, 120)
	if err != nil || s.Difference != -380 || s.Replayed {
		t.Fatalf("Settle = %+v, %v", s, err)
	}
	if s, err = c.Settle(ctx, r, 120); err != nil || !s.Replayed {
		t.Fatalf("Settle again = %+v, %v", s, err)
	}
	if d, _ := c.Peek(ctx, req); d.Remaining != 1000-120-1 {
		t.Fatalf("after settling 120: %d left after a peek's 1, want %d", d.Remaining, 1000-120-1)
	}
	if _, err = c.Settle(ctx, r, 900); err == nil {
		t.Fatal("a settle with another amount succeeded")
	} else if e := (*sdk.Error)(nil); !errors.As(err, &e) || e.Status != http.StatusConflict {
		t.Fatalf("a settle with another amount: %v", err)
	}
	if _, _, err := c.Reserve(ctx, req, 0, sdk.ReserveOptions{}); err == nil {
		t.Fatal("a reserve of 0 succeeded")
	}
	if s, err := c.Settle(ctx, sdk.Reservation{}, 5); err != nil || s.Reservation != "" {
		t.Fatalf("settling no reservation = %+v, %v", s, err)
	}
}

// The SDK's usage and webhook calls against the real product: Usage
// answers every key's units of the day (a key whose day adds up to 0 has
// no row), per key and per policy, with the range's total; ListWebhooks
// lists the tenant's endpoints without their secrets.
func TestSDKUsageAndWebhooks(t *testing.T) {
	m := bootWith(t, func(c *Config) { c.Webhooks.AllowPrivate = true })
	ctx := context.Background()
	c, _, sk := sdkTenant(t, m, "sdkbill", sdk.WithTimeout(2*time.Second))
	if _, err := c.CreatePolicy(ctx, sdk.Policy{Name: "api", Path: "/api/*",
		Tiers: map[string]sdk.Limits{"pro": {{Algorithm: "fixed_window", Limit: 1000, Calendar: "month"}}}}); err != nil {
		t.Fatal(err)
	}
	var keys []sdk.Key
	for _, name := range []string{"zero", "one", "two"} {
		k, err := c.CreateKey(ctx, sdk.NewKey{Name: name, Tier: "pro"})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	waitUntil(t, 2*time.Second, "the policy on the server", func() bool {
		d, _ := c.Peek(ctx, sdk.CheckRequest{APIKey: keys[0].Secret, Path: "/api/x"})
		return d.Policy == "api"
	})
	_, r, err := c.Reserve(ctx, sdk.CheckRequest{APIKey: keys[0].Secret, Path: "/api/x"}, 7, sdk.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Settle(ctx, r, 0); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys[1:] {
		if d, err := c.Check(ctx, sdk.CheckRequest{APIKey: k.Secret, Path: "/api/x", Cost: 3 + i}); err != nil || !d.Allowed {
			t.Fatalf("check: %+v, %v", d, err)
		}
	}
	day := time.Now().UTC().Format(time.DateOnly)
	var u sdk.Usage
	waitUntil(t, 5*time.Second, "the units in the daily usage", func() bool {
		u, err = c.Usage(ctx, day, day, "")
		return err == nil && u.Total == 7
	})
	if len(u.Rows) != 2 || u.Group != sdk.UsageByKey || u.TimeZone != "UTC" ||
		u.Rows[0].Units+u.Rows[1].Units != 7 || u.Rows[0].KeyID == keys[0].ID || u.Rows[1].KeyID == keys[0].ID {
		t.Fatalf("Usage by key = %+v", u)
	}
	if p, err := c.Usage(ctx, day, day, sdk.UsageByPolicy); err != nil || len(p.Rows) != 1 || p.Rows[0] != (sdk.UsageRow{Day: day, Policy: "api", Units: 7}) {
		t.Fatalf("Usage by policy = %+v, %v", p, err)
	}
	if _, err := c.Usage(ctx, day, "yesterday", ""); err == nil {
		t.Fatal("a bad range answered")
	}

	if ws, err := c.ListWebhooks(ctx); err != nil || len(ws) != 0 {
		t.Fatalf("ListWebhooks before any = %+v, %v", ws, err)
	}
	do(t, m, "POST", "/v1/webhooks", sk, map[string]any{"url": "https://127.0.0.1:9/hook", "events": []string{"quota.threshold"}})
	ws, err := c.ListWebhooks(ctx)
	if err != nil || len(ws) != 1 || ws[0].URL != "https://127.0.0.1:9/hook" || len(ws[0].Events) != 1 || len(ws[0].Thresholds) != 2 ||
		!strings.HasPrefix(ws[0].SecretPrefix, "whsec_") || !strings.HasPrefix(ws[0].ID, "wh") {
		t.Fatalf("ListWebhooks = %+v, %v", ws, err)
	}
}
