package e2e

import (
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sdk"
)

// 200 concurrent requests of one second each, through the SDK's net/http
// middleware in front of three upstreams, one per Sluice server, for one
// consumer key with a concurrency limit of 10: the upstream handler never
// has more than 10 in flight, and serves about 10 a second. Clients that
// are refused pause briefly and ask again until all 200 are served. The
// middleware fails closed: a check Sluice could not answer in time must
// not admit a request without a slot.
func TestConcurrencyMiddlewareHoldsTenInFlight(t *testing.T) {
	const (
		requests = 200
		slots    = 10
		work     = time.Second
		bound    = 35 * time.Second
	)
	tp := startTopology(t, 3, nil)
	s1 := tp.servers[0]
	tn := createTenant(t, s1, "streams")
	createPolicy(t, s1, tn, map[string]any{
		"name": "stream", "path": "/stream",
		"tiers": map[string]any{"default": map[string]any{"algorithm": "concurrency", "limit": slots}},
	})
	key := mustStatus(t, call(t, "POST", s1.base+"/v1/keys", tn.Key, map[string]any{"name": "llm", "tier": "default"}), 201).str("key")
	waitFor(t, 5*time.Second, "policy and key on every server", func() bool {
		for _, s := range tp.servers {
			if c, err := tryCheck(s, tn, map[string]any{"api_key": key, "path": "/stream", "peek": true}); err != nil || c.Policy != "stream" {
				return false
			}
		}
		return true
	})

	// The upstream: one second of work, counting what is in flight.
	var inFlight, maxInFlight, served atomic.Int64
	var mu sync.Mutex
	var firstStart, lastEnd time.Time
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		n := inFlight.Add(1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		mu.Lock()
		if firstStart.IsZero() {
			firstStart = now
		}
		mu.Unlock()
		time.Sleep(work)
		inFlight.Add(-1)
		served.Add(1)
		mu.Lock()
		lastEnd = time.Now()
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	var upstreams []*httptest.Server
	for _, s := range tp.servers {
		c := sdk.New(s.base, tn.Key, sdk.FailClosed(), sdk.WithTimeout(2*time.Second))
		u := httptest.NewServer(c.Middleware(handler))
		t.Cleanup(u.Close)
		upstreams = append(upstreams, u)
	}

	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: requests, MaxConnsPerHost: requests}}
	deadline := time.Now().Add(bound)
	var refused, failed atomic.Int64
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			u := upstreams[i%len(upstreams)].URL + "/stream"
			for time.Now().Before(deadline) {
				req, _ := http.NewRequest("GET", u, nil)
				req.Header.Set("X-API-Key", key)
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
				} else {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusOK:
						return
					case http.StatusTooManyRequests, http.StatusServiceUnavailable:
						refused.Add(1)
					default:
						t.Errorf("request %d: status %d", i, resp.StatusCode)
						return
					}
				}
				time.Sleep(50*time.Millisecond + rand.N(100*time.Millisecond))
			}
		})
	}
	wg.Wait()

	mu.Lock()
	span := lastEnd.Sub(firstStart)
	mu.Unlock()
	rate := float64(served.Load()) / span.Seconds()
	t.Logf("%d served in %v (%.1f a second), at most %d in flight, %d refusals, %d transport errors",
		served.Load(), span.Round(time.Millisecond), rate, maxInFlight.Load(), refused.Load(), failed.Load())
	if m := maxInFlight.Load(); m > slots {
		t.Fatalf("%d requests in flight at once at the upstream, limit %d", m, slots)
	}
	if served.Load() != requests {
		t.Fatalf("%d of %d requests served within %v", served.Load(), requests, bound)
	}
	// Ten slots of one second each serve at most 10 a second; the slots
	// are idle only between a release and the next client's check.
	if rate > slots*1.02 || rate < slots*0.6 {
		t.Fatalf("%.1f requests a second, want about %d", rate, slots)
	}
	if maxInFlight.Load() < slots {
		t.Errorf("at most %d in flight: the limit of %d was never reached", maxInFlight.Load(), slots)
	}
}
