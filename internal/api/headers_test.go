package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
)

func TestRateLimitHeaders(t *testing.T) {
	a := engine.Answer{
		Allowed: false, Limit: 100, Remaining: 0, Reset: 1500 * time.Millisecond, RetryAfter: 600 * time.Millisecond,
		Limits: []engine.LimitStatus{
			{Name: "pro.burst", Limit: 100, Period: time.Minute, Remaining: 0, Reset: 1500 * time.Millisecond},
			{Name: "pro.daily", Limit: 1000, Period: 24 * time.Hour, Remaining: 950, Reset: 3 * time.Hour},
		},
	}
	h := http.Header{}
	setRateLimitHeaders(h, &a)
	want := map[string]string{
		"Ratelimit-Policy":      `"pro.burst";q=100;w=60, "pro.daily";q=1000;w=86400`,
		"Ratelimit":             `"pro.burst";r=0;t=2, "pro.daily";r=950;t=10800`,
		"X-Ratelimit-Limit":     "100",
		"X-Ratelimit-Remaining": "0",
		"X-Ratelimit-Reset":     "2",
		"Retry-After":           "1",
	}
	for k, v := range want {
		if got := h[k]; len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if len(h) != len(want) {
		t.Errorf("headers %v, want exactly %d", h, len(want))
	}
	// A header set later by Add must not write into a shared slice.
	h.Add("X-Ratelimit-Limit", "extra")
	if h["Ratelimit-Policy"][0] != want["Ratelimit-Policy"] || len(h["X-Ratelimit-Limit"]) != 2 {
		t.Errorf("Add changed another header: %v", h)
	}

	allowed := engine.Answer{Allowed: true, Limit: 10, Remaining: 9, Reset: time.Second,
		Limits: []engine.LimitStatus{{Name: "heavy", Limit: 10, Period: time.Minute, Remaining: 9, Reset: time.Second}}}
	h = http.Header{}
	setRateLimitHeaders(h, &allowed)
	if _, ok := h["Retry-After"]; ok || h.Get("Ratelimit") != `"heavy";r=9;t=1` {
		t.Errorf("allowed headers: %v", h)
	}
	none := engine.Answer{Allowed: true}
	h = http.Header{}
	setRateLimitHeaders(h, &none)
	if len(h) != 0 {
		t.Errorf("no policy matched, headers %v", h)
	}

	h = make(http.Header, 8)
	if n := testing.AllocsPerRun(100, func() {
		clear(h)
		setRateLimitHeaders(h, &allowed)
	}); n > 2 {
		t.Errorf("setRateLimitHeaders allocates %.0f times, want ≤ 2", n)
	}
}
