package ui_test

import (
	"net/http"
	"testing"
	"time"
)

// Denials by a concurrency limit show on the overview as their own series
// of the chart (not as denials without a reason) and in the most denied
// policies, split from the policy's rate limited denials.
func TestOverviewShowsConcurrencyDenials(t *testing.T) {
	s := bootSite(t)
	a := s.agent()
	tn := s.tenant("slots")
	a.signIn(tn.email, tn.password)
	s.api("POST", "/v1/policies", tn.key, map[string]any{"name": "llm", "path": "/llm", "tiers": map[string]any{
		"anonymous": []map[string]any{
			{"name": "rate", "algorithm": "token_bucket", "limit": 5, "period": "1h"},
			{"name": "slots", "algorithm": "concurrency", "limit": 2},
		}}})
	// Two slots taken and held, two checks denied for them; then, with
	// slots released, a rate limit's denial of the same policy.
	var leases []string
	for i := range 4 {
		c := s.check(tn, map[string]any{"ip": "203.0.113.60", "path": "/llm"})
		if allowed := c["allowed"].(bool); allowed != (i < 2) {
			t.Fatalf("check %d: %v", i, c)
		}
		if i < 2 {
			leases = append(leases, c["lease"].(string))
		} else if c["reason"] != "concurrency_limited" {
			t.Fatalf("check %d denied for %v", i, c["reason"])
		}
	}
	for _, l := range leases {
		s.api("POST", "/v1/release", tn.key, map[string]any{"lease": l})
	}
	for range 4 { // 3 more allowed (5 in all), then rate limited
		c := s.check(tn, map[string]any{"ip": "203.0.113.60", "path": "/llm"})
		if l, ok := c["lease"].(string); ok {
			s.api("POST", "/v1/release", tn.key, map[string]any{"lease": l})
		}
	}
	var p page
	waitFor(t, 15*time.Second, "the denials on the overview", func() bool {
		p = want(t, a.get("/ui/?range=1h"), http.StatusOK, "overview")
		return p.attr("chart", "data-denied") == "3"
	})
	if got := p.attr("chart", "data-concurrency-limited"); got != "2" {
		t.Errorf("chart's concurrency limited %q, want 2", got)
	}
	if got := p.text("chart-concurrency-limited"); got != "2" {
		t.Errorf("legend's concurrency limited %q, want 2", got)
	}
	if p.has("legend-no-reason") {
		t.Error("concurrency denials are shown as denials without a reason")
	}
	if got := p.text("stat-concurrency-limited"); got != "2" {
		t.Errorf("concurrency limited stat %q, want 2", got)
	}
	if p.text("top-policy-link") != "llm" || p.text("top-policy-concurrency-limited") != "2" || p.text("top-policy-rate-limited") != "1" {
		t.Errorf("most denied policy %q: %q concurrency limited, %q rate limited; want llm, 2 and 1",
			p.text("top-policy-link"), p.text("top-policy-concurrency-limited"), p.text("top-policy-rate-limited"))
	}
	// The caller's page counts them apart as well.
	p = want(t, a.get("/ui/callers?q=203.0.113.60"), http.StatusOK, "caller")
	if p.text("caller-recent-concurrency-limited") != "2" || p.text("caller-recent-rate-limited") != "1" || p.attr("chart", "data-concurrency-limited") != "2" {
		t.Errorf("the caller's recent decisions: %q", p.text("caller-recent-totals"))
	}
}
