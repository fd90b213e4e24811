package app

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/worker"
)

// callHeader is call that also answers the response's headers.
func callHeader(t testing.TB, m *Main, method, path, token string, body any) (int, http.Header, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, "http://"+m.Addr()+path, strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, resp.Header, out
}

// Tenant A floods settles of reservations that do not exist from eight
// loops and updates a policy in a loop, as fast as it can; meanwhile
// tenant B's config writes and settles stay fast. A is refused with 429
// rate_limited and a Retry-After past its limits; B never is.
func TestNoisyTenantLeavesOthersWritesFast(t *testing.T) {
	m := bootWith(t, func(c *Config) {
		c.WriteLimits = worker.WriteLimits{Settles: 200, ConfigWrites: 20, BurstSeconds: 1}
	})
	tenant := func(name string) string {
		tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": name, "owner_email": "o@" + name + ".test", "owner_password": "a long passphrase"})
		return tn["service_key"].(string)
	}
	a, b := tenant("noisy"), tenant("quiet")
	policy := map[string]any{"name": "tokens", "path": "/v1/chat",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "fixed_window", "limit": 1_000_000, "calendar": "month"}}}
	pa := do(t, m, "POST", "/v1/policies", a, policy)
	do(t, m, "POST", "/v1/policies", b, policy)
	check := func(sk string, body map[string]any) map[string]any {
		body["ip"], body["path"] = "203.0.113.7", "/v1/chat"
		return do(t, m, "POST", "/v1/check", sk, body)
	}
	waitUntil(t, 2*time.Second, "the policy on the server", func() bool { return check(b, map[string]any{"peek": true})["policy"] == "tokens" })
	const quiet = 40
	var held []string
	for range 2 * quiet {
		r := check(b, map[string]any{"reserve": 10})
		held = append(held, r["reservation"].(string))
	}
	// quietWrites is B's traffic: a key created, then a settle, one after
	// the other, n times, settling held[from:]; it answers each latency.
	quietWrites := func(from, n int) []time.Duration {
		var lat []time.Duration
		for i := from; i < from+n; i++ {
			start := time.Now()
			status, _, out := callHeader(t, m, "POST", "/v1/keys", b, map[string]any{"name": fmt.Sprint("key ", i), "tier": "pro"})
			if status != http.StatusCreated {
				t.Errorf("B's key %d: %d %v", i, status, out)
			}
			lat = append(lat, time.Since(start))
			start = time.Now()
			status, _, out = callHeader(t, m, "POST", "/v1/settle", b, map[string]any{"reservation": held[i], "actual": 4})
			if status != http.StatusOK {
				t.Errorf("B's settle %d: %d %v", i, status, out)
			}
			lat = append(lat, time.Since(start))
			time.Sleep(60 * time.Millisecond) // within B's own limit of 20 a second
		}
		slices.Sort(lat)
		return lat
	}
	alone := quietWrites(0, quiet)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var settles, settles429, settlesOther, writes, writes429 atomic.Int64
	var noRetryAfter atomic.Int64
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				status, h, _ := callHeader(t, m, "POST", "/v1/settle", a, map[string]any{"reservation": fmt.Sprintf("rsv_none_%d_%d", g, i), "actual": 1})
				settles.Add(1)
				switch {
				case status == http.StatusTooManyRequests:
					settles429.Add(1)
					if h.Get("Retry-After") == "" {
						noRetryAfter.Add(1)
					}
				case status != http.StatusNotFound:
					settlesOther.Add(1)
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := maps.Clone(policy)
			p["shadow"] = i%2 == 0
			status, h, _ := callHeader(t, m, "PUT", "/v1/policies/"+pa["id"].(string), a, p)
			writes.Add(1)
			if status == http.StatusTooManyRequests {
				writes429.Add(1)
				if h.Get("Retry-After") == "" {
					noRetryAfter.Add(1)
				}
			}
		}
	})

	// B, meanwhile: a key created, then a settle, one after the other.
	time.Sleep(200 * time.Millisecond) // the flood under way
	lat := quietWrites(quiet, quiet)
	close(stop)
	wg.Wait()

	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("A: %d settles (%d refused 429), %d policy updates (%d refused 429); B: %d writes, p50 %s, p99 %s (alone before: p50 %s, p99 %s)",
		settles.Load(), settles429.Load(), writes.Load(), writes429.Load(), len(lat), p50, p99, alone[len(alone)/2], alone[len(alone)*99/100])
	if settles429.Load() == 0 || writes429.Load() == 0 {
		t.Errorf("A was never refused: %d settles refused, %d config writes refused", settles429.Load(), writes429.Load())
	}
	if settlesOther.Load() > 0 {
		t.Errorf("%d of A's settles answered neither 404 nor 429", settlesOther.Load())
	}
	if noRetryAfter.Load() > 0 {
		t.Errorf("%d refusals without Retry-After", noRetryAfter.Load())
	}
	if p99 > time.Second {
		t.Errorf("B's config writes and settles: p99 %s, want under 1s", p99)
	}
}

// Past its tenant's reservation limit across the cluster, a check with
// reserve answers 429 with Retry-After and holds nothing: the first
// refusal gives back the estimate it took, and the server refuses the
// next ones before taking anything.
func TestReserveLimitTakesNothing(t *testing.T) {
	m := bootWith(t, func(c *Config) {
		c.WriteLimits = worker.WriteLimits{Reserves: 3, BurstSeconds: 1}
	})
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "res", "owner_email": "o@res.test", "owner_password": "a long passphrase"})
	sk := tn["service_key"].(string)
	do(t, m, "POST", "/v1/policies", sk, map[string]any{"name": "tokens", "path": "/v1/chat",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "fixed_window", "limit": 1000, "calendar": "month"}}})
	body := func(extra map[string]any) map[string]any {
		extra["ip"], extra["path"] = "203.0.113.7", "/v1/chat"
		return extra
	}
	waitUntil(t, 2*time.Second, "the policy on the server", func() bool {
		return do(t, m, "POST", "/v1/check", sk, body(map[string]any{"peek": true}))["policy"] == "tokens"
	})
	admitted, refused := 0, 0
	for range 10 {
		status, h, out := callHeader(t, m, "POST", "/v1/check", sk, body(map[string]any{"reserve": 10}))
		switch {
		case status == http.StatusOK && out["reservation"] != nil:
			admitted++
		case status == http.StatusTooManyRequests && h.Get("Retry-After") != "" && strings.Contains(errMessage(out), "reserve"):
			refused++
		default:
			t.Fatalf("reserve: %d %v", status, out)
		}
	}
	if admitted != 3 || refused != 7 {
		t.Fatalf("%d admitted, %d refused; want the burst of 3 and 7 refused", admitted, refused)
	}
	left := do(t, m, "POST", "/v1/check", sk, body(map[string]any{"peek": true}))["remaining"].(float64) + 1
	if left != 1000-3*10 {
		t.Fatalf("%v left, want %d: a refused reservation held units", left, 1000-3*10)
	}
}

// A tenant that keeps asking past its limit, without waiting for
// Retry-After, has its first few refusals a second answered at once and
// the next ones held until it could have retried; another tenant's
// answers are not held. The held refusals are still 429 with Retry-After,
// and /metrics counts them.
func TestRefusalsOfAFloodAreHeld(t *testing.T) {
	m := bootWith(t, func(c *Config) {
		c.WriteLimits = worker.WriteLimits{Settles: 1, BurstSeconds: 1}
	})
	tenant := func(name string) string {
		tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": name, "owner_email": "o@" + name + ".test", "owner_password": "a long passphrase"})
		return tn["service_key"].(string)
	}
	a, b := tenant("flood"), tenant("calm")
	settle := func(sk string, i int) (int, http.Header, time.Duration) {
		start := time.Now()
		status, h, _ := callHeader(t, m, "POST", "/v1/settle", sk, map[string]any{"reservation": fmt.Sprint("rsv_none_", i), "actual": 1})
		return status, h, time.Since(start)
	}
	// A: one settle admitted (the burst), ten refusals at once, then one
	// held a second; after it a new second's ten, and one held again.
	var fast, held int
	start := time.Now()
	for i := range 25 {
		status, h, took := settle(a, i)
		if i == 0 {
			if status != http.StatusNotFound {
				t.Fatalf("A's first settle: %d, want 404 (read by the worker)", status)
			}
			continue
		}
		// A held answer may find the bucket refilled: 404.
		if status != http.StatusNotFound && (status != http.StatusTooManyRequests || h.Get("Retry-After") == "") {
			t.Fatalf("A's settle %d: %d, Retry-After %q; want 429 with Retry-After, or 404", i, status, h.Get("Retry-After"))
		}
		if took >= 500*time.Millisecond {
			held++
		} else {
			fast++
		}
	}
	t.Logf("A: %d refusals answered at once, %d held, in %s", fast, held, time.Since(start).Round(time.Millisecond))
	if held < 2 {
		t.Errorf("A's refusals past the first ten a second: %d held, want the last ones held until A could retry", held)
	}
	// B is not slowed by A's tarpit: its own settles are answered at once.
	for i := range 3 {
		if status, _, took := settle(b, i); took >= 500*time.Millisecond {
			t.Errorf("B's settle %d: %d after %s, held for A's flood", i, status, took)
		}
	}
	metrics := get(t, "http://"+m.Addr(), "/metrics", "Authorization", "Bearer "+testToken).body
	if !strings.Contains(metrics, "sluice_http_refusals_held_total ") || strings.Contains(metrics, "sluice_http_refusals_held_total 0\n") {
		t.Errorf("/metrics does not count the held refusals")
	}
}
