package ui_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// bucketRemaining reads the Remaining cell of a policy's first limit on a
// caller's page.
func bucketRemaining(t *testing.T, p page, policy string) string {
	t.Helper()
	for _, row := range p.testID("caller-bucket") {
		if attrOf(row, "data-policy") == policy {
			return attrOf(row, "data-remaining")
		}
	}
	t.Fatalf("no bucket row for %s: %q", policy, p.text("caller-buckets"))
	return ""
}

// TestCallerLookup: a tenant looks a caller up by IP, key id or key
// prefix, sees its buckets (looking takes nothing) and recent decisions by
// outcome, and resets, blocks and unblocks it from there.
func TestCallerLookup(t *testing.T) {
	s := bootSite(t)
	tn := s.tenant("acme")
	a := s.agent()
	a.signIn(tn.email, tn.password)
	a.createPolicy("heavy", 3)
	keyID, secret := a.createKey("partner", "pro")

	const noisy, quiet = "203.0.113.60", "203.0.113.61"
	for i := range 5 {
		c := s.check(tn, map[string]any{"ip": noisy, "path": "/api/heavy"})
		if c["allowed"].(bool) != (i < 3) {
			t.Fatalf("check %d: %v", i, c)
		}
	}
	s.check(tn, map[string]any{"ip": quiet, "path": "/api/heavy"})

	// Looking up takes nothing, however often.
	for range 3 {
		p := want(t, a.get("/ui/callers?q="+quiet), http.StatusOK, "look up "+quiet)
		if got := bucketRemaining(t, p, "heavy"); got != "2" {
			t.Fatalf("%s has %s left, want 2", quiet, got)
		}
	}
	if c := s.check(tn, map[string]any{"ip": quiet, "path": "/api/heavy"}); !c["allowed"].(bool) || c["remaining"].(float64) != 1 {
		t.Fatalf("after three lookups: %v", c)
	}

	// The noisy caller: drained, its next check denied, and its recent
	// decisions by outcome (counters reach SQLite within about 2 s).
	var p page
	waitFor(t, 15*time.Second, "recent decisions on the caller page", func() bool {
		p = want(t, a.get("/ui/callers?q="+noisy), http.StatusOK, "look up "+noisy)
		return p.text("caller-recent-rate-limited") == "2"
	})
	if p.text("caller-recent-allowed") != "3" || p.text("caller-recent-blocked") != "0" || p.text("caller-recent-invalid-key") != "0" {
		t.Errorf("recent: %q", p.text("caller-recent-totals"))
	}
	if got := bucketRemaining(t, p, "heavy"); got != "0" || !strings.Contains(p.text("caller-buckets"), "denied") {
		t.Errorf("drained bucket: %s left, %q", got, p.text("caller-buckets"))
	}
	// Reset: the row's link opens the form with its policy chosen.
	reset := p.attr("caller-reset-link", "href")
	p = want(t, a.get(reset), http.StatusOK, "reset link")
	if got := p.selected("policy"); got != "heavy" {
		t.Errorf("the reset form chose %q, want heavy", got)
	}
	if r := want(t, a.post("/ui/callers/reset", url.Values{"kind": {"ip"}, "id": {noisy}, "policy": {"heavy"}}), http.StatusSeeOther, "reset"); !strings.HasPrefix(r.location, "/ui/callers?") {
		t.Errorf("reset: to %q", r.location)
	}
	if got := bucketRemaining(t, a.get("/ui/callers?kind=ip&id="+noisy), "heavy"); got != "3" {
		t.Errorf("after the reset: %s left, want 3", got)
	}
	if r := a.post("/ui/callers/reset", url.Values{"kind": {"ip"}, "id": {noisy}, "policy": {""}}); r.status != http.StatusBadRequest || r.text("error-policy") == "" {
		t.Errorf("reset without a policy: %d %q", r.status, r.text("error-policy"))
	}

	// Block, then unblock.
	want(t, a.post("/ui/callers/block", url.Values{"kind": {"ip"}, "id": {noisy}, "reason": {"scraping"}, "expiry": {"1h"}}), http.StatusSeeOther, "block")
	if c := s.check(tn, map[string]any{"ip": noisy, "path": "/api/heavy"}); c["reason"] != "blocked" {
		t.Fatalf("after the block: %v", c)
	}
	p = want(t, a.get("/ui/callers?kind=ip&id="+noisy), http.StatusOK, "blocked caller")
	if !strings.Contains(p.text("caller-blocked"), "scraping") || !p.has("unblock-form") || p.has("caller-block-form") {
		t.Fatalf("blocked caller page: %q", p.text("caller-blocked"))
	}
	blockID := p.inputValue("block_id")
	// The block id goes with its caller: another caller's page cannot lift it.
	if r := a.post("/ui/callers/unblock", url.Values{"kind": {"ip"}, "id": {quiet}, "block_id": {blockID}}); r.status != http.StatusNotFound {
		t.Errorf("unblock through another caller: %d", r.status)
	}
	want(t, a.post("/ui/callers/unblock", url.Values{"kind": {"ip"}, "id": {noisy}, "block_id": {blockID}}), http.StatusSeeOther, "unblock")
	if c := s.check(tn, map[string]any{"ip": noisy, "path": "/api/heavy"}); !c["allowed"].(bool) {
		t.Fatalf("after the unblock: %v", c)
	}

	// An IPv6 caller is its /64: blocked from one address, shown and
	// unblocked as the /64.
	want(t, a.post("/ui/callers/block", url.Values{"kind": {"ip"}, "id": {"2001:db8:7:7::1"}, "reason": {"v6"}, "expiry": {"never"}}), http.StatusSeeOther, "block an IPv6 caller")
	if c := s.check(tn, map[string]any{"ip": "2001:db8:7:7::abcd", "path": "/api/heavy"}); c["reason"] != "blocked" {
		t.Fatalf("another address of the /64: %v", c)
	}
	p = want(t, a.get("/ui/callers?q="+url.QueryEscape("2001:db8:7:7::99")), http.StatusOK, "look up the /64")
	if attrOf(p.testID("caller")[0], "data-identity") != "2001:db8:7:7::/64" || !p.has("unblock-form") {
		t.Fatalf("IPv6 caller: %q", p.text("caller"))
	}
	want(t, a.post("/ui/callers/unblock", url.Values{"kind": {"ip"}, "id": {"2001:db8:7:7::/64"}, "block_id": {p.inputValue("block_id")}}), http.StatusSeeOther, "unblock the /64")
	if c := s.check(tn, map[string]any{"ip": "2001:db8:7:7::1", "path": "/api/heavy"}); c["reason"] == "blocked" {
		t.Fatalf("the /64 is still blocked: %v", c)
	}

	// Keys: by id, by prefix, or by the whole secret (matched by prefix).
	s.check(tn, map[string]any{"api_key": secret, "path": "/api/heavy"})
	if r := want(t, a.get("/ui/callers?q="+secret), http.StatusSeeOther, "look up the whole secret"); r.location != "/ui/callers?q="+secret[:8] {
		t.Errorf("a pasted secret goes to %q, want its prefix", r.location)
	}
	for _, q := range []string{keyID, secret[:8]} {
		p := want(t, a.get("/ui/callers?q="+url.QueryEscape(q)), http.StatusOK, "look up "+q)
		if attrOf(p.testID("caller")[0], "data-identity") != keyID || p.text("caller-tier") != "pro" || p.text("caller-key-status") != "active" {
			t.Errorf("look up %q: %q", q, p.text("caller"))
		}
		if strings.Contains(p.body, secret) {
			t.Errorf("look up %q: the page shows the secret", q)
		}
	}
	if p := a.get("/ui/callers?q=nonsense"); !strings.Contains(p.text("caller-message"), "IP address") {
		t.Errorf("nonsense: %q", p.text("caller-message"))
	}
}

// TestCallerLookupIsolation: a tenant finds only its own callers. Another
// tenant's key is no caller (by id, by prefix, by URL), its block cannot
// be lifted, and an IP both tenants see shows only the tenant's own state.
func TestCallerLookupIsolation(t *testing.T) {
	s := bootSite(t)
	ta, tb := s.tenant("alpha"), s.tenant("beta")
	bKey := s.api("POST", "/v1/keys", tb.key, map[string]any{"name": "beta customer", "tier": "pro"})
	bKeyID, bSecret := bKey["id"].(string), bKey["key"].(string)
	s.api("POST", "/v1/policies", tb.key, map[string]any{"name": "secret-endpoint", "path": "/b", "tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 1, "period": "1h"}}})
	const shared = "198.51.100.70"
	s.check(tb, map[string]any{"ip": shared, "path": "/b"})
	s.check(tb, map[string]any{"ip": shared, "path": "/b"})
	s.check(tb, map[string]any{"api_key": bSecret, "path": "/b"})
	bBlock := s.api("POST", "/v1/admin/blocks", opToken, map[string]any{"tenant_id": tb.id, "identity": map[string]any{"kind": "ip", "id": "198.51.100.71"}, "reason": "beta's block"})["id"].(string)

	a := s.agent()
	a.signIn(ta.email, ta.password)
	leaks := []string{"beta customer", "secret-endpoint", "beta's block"}
	noLeak := func(what string, p page) {
		t.Helper()
		for _, l := range leaks {
			if strings.Contains(p.body, l) {
				t.Errorf("%s shows %q", what, l)
			}
		}
	}
	for _, q := range []string{bKeyID, bSecret[:8]} {
		p := want(t, a.get("/ui/callers?q="+url.QueryEscape(q)), http.StatusOK, "look up B's key "+q)
		if p.has("caller") || !strings.Contains(p.text("caller-message"), "No key of yours") {
			t.Errorf("B's key %q found by A: %q", q, p.text("caller-message"))
		}
		noLeak("look up "+q, p)
		if strings.Contains(p.body, bSecret) {
			t.Errorf("look up %q: the page shows the whole secret", q)
		}
	}
	noLeak("B's key by URL", want(t, a.get("/ui/callers?kind=key&id="+bKeyID), http.StatusNotFound, "B's key by URL"))
	// The IP B drained is untouched in A, and shows none of B's decisions.
	b := s.agent()
	b.signIn(tb.email, tb.password)
	waitFor(t, 15*time.Second, "B's decisions counted", func() bool {
		return b.get("/ui/callers?q="+shared).text("caller-recent-rate-limited") == "1"
	})
	p := want(t, a.get("/ui/callers?q="+shared), http.StatusOK, "A looks up the shared IP")
	if !p.has("caller-no-policies") || p.text("caller-recent-allowed") != "0" || p.text("caller-recent-rate-limited") != "0" {
		t.Errorf("A sees B's state for %s: %q %q", shared, p.text("caller-buckets"), p.text("caller-recent-totals"))
	}
	noLeak("the shared IP", p)
	// Actions on B's callers answer 404 and change nothing.
	for path, form := range map[string]url.Values{
		"/ui/callers/block":   {"kind": {"key"}, "id": {bKeyID}, "reason": {"x"}, "expiry": {"1h"}},
		"/ui/callers/reset":   {"kind": {"key"}, "id": {bKeyID}, "policy": {"secret-endpoint"}},
		"/ui/callers/unblock": {"kind": {"ip"}, "id": {"198.51.100.71"}, "block_id": {bBlock}},
	} {
		if p := a.post(path, form); p.status != http.StatusNotFound {
			t.Errorf("POST %s with B's caller: %d", path, p.status)
		}
	}
	if c := s.check(tb, map[string]any{"ip": "198.51.100.71", "path": "/b"}); c["reason"] != "blocked" {
		t.Errorf("B's block was lifted by A: %v", c)
	}
	if c := s.check(tb, map[string]any{"api_key": bSecret, "path": "/x"}); c["reason"] != "ok" {
		t.Errorf("B's key was blocked by A: %v", c)
	}
}
