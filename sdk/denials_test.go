package sdk

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestDenialCacheSteps(t *testing.T) {
	c := newDenialCache(100)
	req := CheckRequest{IP: "192.0.2.1", Method: "GET", Path: "/api/x", Cost: 2}
	key := appendDenialKey(nil, &req)
	d := Decision{
		Reason: ReasonRateLimited, Policy: "p", Limit: 10, Remaining: 1,
		Reset: 9 * time.Second, RetryAfter: 6 * time.Second,
		Header: http.Header{
			hdrPolicy:     {`"p";q=10;w=60`},
			hdrRateLimit:  {`"p";r=1;t=9`},
			hdrXLimit:     {"10"},
			hdrXRemaining: {"1"},
			hdrXReset:     {"9"},
			hdrRetryAfter: {"6"},
		},
	}
	c.insert(key, req.cost(), d, t0)

	for _, step := range []struct {
		at         time.Duration
		req        CheckRequest
		hit        bool
		retryAfter time.Duration
		limit      string
		retryHdr   string
	}{
		{0, req, true, 6 * time.Second, `"p";r=1;t=9`, "6"},
		{1500 * time.Millisecond, req, true, 4500 * time.Millisecond, `"p";r=1;t=8`, "5"},
		{2 * time.Second, CheckRequest{IP: "192.0.2.1", Method: "GET", Path: "/api/x", Cost: 5}, true, 4 * time.Second, `"p";r=1;t=7`, "4"},
		{2 * time.Second, CheckRequest{IP: "192.0.2.1", Method: "GET", Path: "/api/x", Cost: 1}, false, 0, "", ""},
		{2 * time.Second, CheckRequest{IP: "192.0.2.1", Method: "POST", Path: "/api/x", Cost: 2}, false, 0, "", ""},
		{2 * time.Second, CheckRequest{IP: "192.0.2.1", Method: "GET", Path: "/api/x?", Cost: 2}, false, 0, "", ""},
		{2 * time.Second, CheckRequest{IP: "192.0.2.2", Method: "GET", Path: "/api/x", Cost: 2}, false, 0, "", ""},
		{2 * time.Second, CheckRequest{APIKey: "192.0.2.1", Method: "GET", Path: "/api/x", Cost: 2}, false, 0, "", ""},
		{5999 * time.Millisecond, req, true, time.Millisecond, `"p";r=1;t=4`, "1"},
		{6 * time.Second, req, false, 0, "", ""},
		{5 * time.Second, req, false, 0, "", ""}, // expired entries are gone
	} {
		got, ok := c.lookup(appendDenialKey(nil, &step.req), step.req.cost(), t0.Add(step.at))
		if ok != step.hit {
			t.Fatalf("+%v %+v: hit = %v, want %v", step.at, step.req, ok, step.hit)
		}
		if !ok {
			continue
		}
		if got.Allowed || !got.Local || got.RetryAfter != step.retryAfter || got.Reason != ReasonRateLimited {
			t.Errorf("+%v: %+v", step.at, got)
		}
		if h := got.Header.Get("RateLimit"); h != step.limit {
			t.Errorf("+%v: RateLimit = %q, want %q", step.at, h, step.limit)
		}
		if h := got.Header.Get("Retry-After"); h != step.retryHdr {
			t.Errorf("+%v: Retry-After = %q, want %q", step.at, h, step.retryHdr)
		}
		if h := got.Header.Get("RateLimit-Policy"); h != `"p";q=10;w=60` {
			t.Errorf("+%v: RateLimit-Policy = %q", step.at, h)
		}
	}
}

func TestDenialCacheLifeIsCapped(t *testing.T) {
	c := newDenialCache(100)
	req := CheckRequest{APIKey: "ck_x", Path: "/daily"}
	key := appendDenialKey(nil, &req)
	c.insert(key, 1, Decision{Reason: ReasonRateLimited, RetryAfter: 5 * time.Hour}, t0)
	if _, ok := c.lookup(key, 1, t0.Add(maxDenialTTL-time.Nanosecond)); !ok {
		t.Error("miss before the cap")
	}
	if _, ok := c.lookup(key, 1, t0.Add(maxDenialTTL)); ok {
		t.Error("hit at the cap")
	}
}

func TestDenialCacheIsBounded(t *testing.T) {
	const size = 160
	c := newDenialCache(size)
	for i := range 10 * size {
		req := CheckRequest{IP: fmt.Sprintf("10.0.%d.%d", i/256, i%256), Path: "/"}
		c.insert(appendDenialKey(nil, &req), 1, Decision{RetryAfter: time.Minute}, t0)
		if n := c.len(); n > size {
			t.Fatalf("after %d inserts the memory holds %d > %d", i+1, n, size)
		}
	}
	// Expired entries make room first.
	req := CheckRequest{IP: "192.0.2.1", Path: "/"}
	c.insert(appendDenialKey(nil, &req), 1, Decision{RetryAfter: time.Minute}, t0.Add(2*time.Minute))
	if n := c.len(); n > size/denialShards*denialShards {
		t.Errorf("holds %d", n)
	}
}

// TestDenialMemoryNeverAdmitsMore drives a client with its denial memory
// and the fake Sluice on one clock, with random callers, paths, costs and
// pauses. Every allowed decision must come from Sluice itself, and every
// local denial must be one Sluice would also have given at that instant
// (checked with a peek that bypasses the memory).
func TestDenialMemoryNeverAdmitsMore(t *testing.T) {
	f := newFakeSluice()
	now := t0
	f.now = func() time.Time { return now }
	ts := f.start(t)
	c := newTestClient(t, ts.URL)
	c.now = f.now
	oracle := newTestClient(t, ts.URL, WithDenialCache(0))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))

	paths := []string{"/api/heavy", "/api/multi", "/api/heavy?x", "/free"}
	var local, allowed int
	for range 3000 {
		now = now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
		req := CheckRequest{
			IP:   fmt.Sprintf("192.0.2.%d", rng.IntN(3)),
			Path: paths[rng.IntN(len(paths))],
			Cost: 1 + rng.IntN(2),
		}
		callsBefore := f.callCount()
		d, err := c.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		asked := f.callCount() > callsBefore
		if d.Allowed {
			allowed++
			if !asked || d.Local {
				t.Fatalf("allowed without asking Sluice: %+v", d)
			}
			continue
		}
		if d.Local {
			local++
			if asked {
				t.Fatal("local denial made a call")
			}
			if o, _ := oracle.Peek(ctx, req); o.Allowed {
				t.Fatalf("at %v the memory denied %+v, which Sluice would allow", now.Sub(t0), req)
			}
		}
	}
	if local == 0 || allowed == 0 {
		t.Errorf("the walk never exercised both sides: %d local denials, %d allowed", local, allowed)
	}
	if s := c.Stats(); s.LocalDenials != uint64(local) {
		t.Errorf("stats count %d local denials, saw %d", s.LocalDenials, local)
	}
}
