package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sdk"
)

// 200 concurrent requests of one second each, through the SDK's net/http
// middleware in front of three upstreams, one per Sluice server, for one
// consumer key with a concurrency limit of 10: the upstream handler never
// has more than 10 in flight, and serves about 10 a second. Each check
// waits for a slot (sdk.WithWait) at the bucket's owner, which admits the
// next waiter as soon as a release frees one, so hardly any is refused;
// one that is pauses briefly and asks again until all 200 are served. The
// middleware fails closed: a check Sluice could not answer in time must
// not admit a request without a slot.
func TestConcurrencyMiddlewareHoldsTenInFlight(t *testing.T) {
	const (
		requests = 200
		slots    = 10
		work     = time.Second
		bound    = 35 * time.Second
		// slotWait is how long a request waits for a slot: the last of
		// the 200 waits about 19 s.
		slotWait = 28 * time.Second
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
		// A request past the slots waits for one at the bucket's owner,
		// admitted when a release frees it, rather than answering 429.
		c := sdk.New(s.base, tn.Key, sdk.FailClosed(), sdk.WithTimeout(2*time.Second), sdk.WithWait(slotWait))
		u := httptest.NewServer(c.Middleware(handler))
		t.Cleanup(u.Close)
		upstreams = append(upstreams, u)
	}

	client := &http.Client{Timeout: slotWait + 5*time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: requests, MaxConnsPerHost: requests}}
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
	if n := refused.Load(); n > 5 {
		t.Errorf("%d requests refused although each waited up to %v for a slot", n, slotWait)
	}
	if maxInFlight.Load() < slots {
		t.Errorf("at most %d in flight: the limit of %d was never reached", maxInFlight.Load(), slots)
	}
}

// slotHolderEnv carries a slotHolderPlan, as JSON, to the test binary run
// as a client process that takes slots and holds them (slotHolderMain).
const slotHolderEnv = "SLUICE_E2E_SLOT_HOLDER"

type slotHolderPlan struct {
	Base, ServiceKey, APIKey, Path string
	Slots                          int
	TTL                            time.Duration
}

// slotHolderMain is a client that takes plan.Slots slots through the SDK's
// Acquire, prints their leases' expiries, and then waits, holding them,
// until it is killed (or a minute has passed).
func slotHolderMain(raw string) {
	var plan slotHolderPlan
	if err := json.Unmarshal([]byte(raw), &plan); err != nil {
		fmt.Fprintln(os.Stderr, "slot holder's plan:", err)
		os.Exit(2)
	}
	c := sdk.New(plan.Base, plan.ServiceKey, sdk.FailClosed(), sdk.WithTimeout(5*time.Second))
	var expiries []time.Time
	for i := range plan.Slots {
		d, l, err := c.Acquire(context.Background(), sdk.CheckRequest{APIKey: plan.APIKey, Path: plan.Path}, plan.TTL)
		if err != nil || !d.Allowed || l.ID == "" {
			fmt.Fprintf(os.Stderr, "slot %d: allowed %v, reason %q, lease %q: %v\n", i, d.Allowed, d.Reason, l.ID, err)
			os.Exit(2)
		}
		expiries = append(expiries, l.ExpiresAt)
	}
	out, _ := json.Marshal(expiries)
	fmt.Printf("holding: %s\n", out)
	time.Sleep(time.Minute)
	os.Exit(3)
}

// kill -9 of a client process that holds slots leaks them for at most
// their TTL: a client (this test binary run again) takes every slot of a
// key's concurrency limit with a 3 s lease_ttl and is killed; a fresh
// acquire is refused until the leases expire and admitted right after,
// and then all the slots are free again.
func TestConcurrencyKilledClientSlotsComeBack(t *testing.T) {
	const slots, ttl = 4, 3 * time.Second
	s := startServer(t, serverOpts{})
	tn := createTenant(t, s, "holder")
	createPolicy(t, s, tn, map[string]any{
		"name": "export", "path": "/export",
		"tiers": map[string]any{"default": map[string]any{"algorithm": "concurrency", "limit": slots}},
	})
	key := mustStatus(t, call(t, "POST", s.base+"/v1/keys", tn.Key, map[string]any{"name": "reports", "tier": "default"}), 201).str("key")
	waitFor(t, 5*time.Second, "policy and key on the server", func() bool {
		c, err := tryCheck(s, tn, map[string]any{"api_key": key, "path": "/export", "peek": true})
		return err == nil && c.Policy == "export"
	})

	raw, _ := json.Marshal(slotHolderPlan{Base: s.base, ServiceKey: tn.Key, APIKey: key, Path: "/export", Slots: slots, TTL: ttl})
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), slotHolderEnv+"="+string(raw))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut strings.Builder
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	held := make(chan []time.Time, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "holding: "); ok {
				var exp []time.Time
				if json.Unmarshal([]byte(v), &exp) == nil {
					held <- exp
				}
			}
		}
		close(held)
	}()
	var expiries []time.Time
	select {
	case expiries = <-held:
	case <-time.After(20 * time.Second):
		t.Fatalf("the client process took no slots:\n%s", errOut.String())
	}
	if len(expiries) != slots {
		t.Fatalf("the client process printed %d leases:\n%s", len(expiries), errOut.String())
	}
	first, last := expiries[0], expiries[0]
	for _, e := range expiries {
		first, last = minTime(first, e), maxTime(last, e)
	}

	fresh := map[string]any{"api_key": key, "path": "/export", "lease_ttl": "1s"}
	if a, err := tryAcquire(s, tn, fresh); err != nil || a.Allowed || a.Reason != "concurrency_limited" {
		t.Fatalf("an acquire while the client holds every slot: %+v, %v", a, err)
	}
	if err := cmd.Process.Kill(); err != nil { // kill -9: nothing is released
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()
	if !killed.Before(first) {
		t.Fatalf("the client was killed at %v, after its first lease expired (%v): the test proves nothing", killed, first)
	}

	var admitted time.Time
	var lease string
	waitFor(t, ttl+5*time.Second, "a fresh acquire admitted after the client's kill", func() bool {
		a, err := tryAcquire(s, tn, fresh)
		if err == nil && a.Allowed {
			admitted, lease = time.Now(), a.Lease
			return true
		}
		if err == nil && a.Reason != "concurrency_limited" {
			t.Errorf("an acquire denied with reason %q", a.Reason)
		}
		time.Sleep(50 * time.Millisecond)
		return false
	})
	t.Logf("client killed %v before its leases expired; a fresh acquire was admitted %v after the first expiry",
		first.Sub(killed).Round(time.Millisecond), admitted.Sub(first).Round(time.Millisecond))
	// Expiries are stated to the millisecond; allow that much early.
	if admitted.Before(first.Add(-time.Millisecond)) {
		t.Fatalf("admitted at %v, before the first held lease expired at %v", admitted, first)
	}
	if admitted.After(last.Add(2 * time.Second)) {
		t.Fatalf("admitted at %v, well after the last held lease expired at %v", admitted, last)
	}
	mustStatus(t, call(t, "POST", s.base+"/v1/release", tn.Key, map[string]any{"lease": lease}), 200)
	// Every slot is back once the last lease has expired.
	time.Sleep(time.Until(last.Add(100 * time.Millisecond)))
	leases, failed := acquireAll(t, []*server{s}, tn, slots+2, fresh)
	if len(leases) != slots || failed != 0 {
		t.Fatalf("after the TTL: %d of %d acquires admitted, %d failed; want all %d slots back", len(leases), slots+2, failed, slots)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
