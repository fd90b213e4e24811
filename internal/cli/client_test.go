package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// A 429 rate_limited answer is Sluice's own limit refusing before doing
// anything: the client waits its Retry-After and sends again, a few times
// at most, and never for a wait longer than maxRetryWait or another
// error.
func TestClientRetriesRateLimited(t *testing.T) {
	var n atomic.Int32
	var retryAfter, code = "1", "rate_limited"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 2 {
			w.Header().Set("Retry-After", retryAfter)
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":{"code":"` + code + `","message":"config write: more than 20 a second"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"id":"pol_1"}`))
	}))
	defer srv.Close()
	c := newClient(srv.URL, "sk_x", "the service key", 5*time.Second)
	var waits []time.Duration
	c.sleep = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }
	var out struct{ ID string }
	if _, err := c.do(context.Background(), "POST", "/v1/policies", map[string]any{"name": "p"}, &out); err != nil || out.ID != "pol_1" {
		t.Fatalf("after two refusals: %v %+v", err, out)
	}
	if n.Load() != 3 || !slices.Equal(waits, []time.Duration{time.Second, time.Second}) {
		t.Fatalf("%d requests, waits %v", n.Load(), waits)
	}
	// Refused every time: sent maxRetries times more, then the refusal.
	n.Store(-100)
	waits = nil
	if _, err := c.do(context.Background(), "POST", "/v1/policies", map[string]any{"name": "p"}, &out); err == nil {
		t.Fatal("refused every time, yet answered")
	}
	if n.Load() != -100+maxRetries+1 || len(waits) != maxRetries {
		t.Fatalf("%d requests, %d waits; want %d and %d", n.Load()+100, len(waits), maxRetries+1, maxRetries)
	}
	for _, tc := range []struct{ retryAfter, code string }{{"60", "rate_limited"}, {"1", "unavailable"}, {"", "rate_limited"}} {
		n.Store(0)
		waits = nil
		retryAfter, code = tc.retryAfter, tc.code
		if _, err := c.do(context.Background(), "POST", "/v1/policies", map[string]any{"name": "p"}, &out); err == nil {
			t.Fatalf("%+v: retried", tc)
		}
		if n.Load() != 1 || len(waits) != 0 {
			t.Fatalf("%+v: %d requests, waits %v", tc, n.Load(), waits)
		}
	}
}
