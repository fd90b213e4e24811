package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/tenants"
)

// fakeClock is a waitClock moved by hand: Advance fires the timers that
// come due, in the order of their instants.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c       *fakeClock
	at      time.Time
	f       func()
	stopped bool
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) waitTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

// Advance moves the clock on by d, firing each timer due on the way at
// its own instant.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *fakeTimer
		for _, t := range c.timers {
			if !t.stopped && !t.at.After(target) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			c.now = target
			c.timers = slices.DeleteFunc(c.timers, func(t *fakeTimer) bool { return t.stopped })
			c.mu.Unlock()
			return
		}
		if next.at.After(c.now) {
			c.now = next.at
		}
		next.stopped = true
		c.mu.Unlock()
		next.f()
	}
}

// waitSnapshot adds to snapshot's tenants a policy of one request a
// second (/wait/*), one of two per two seconds (/pair/*) and a shadow one
// of one a second (/shadowfast/*), each per IP, and one of 1 a second for
// ten_b.
func waitSnapshot(tb testing.TB) tenants.Snapshot {
	snap, _ := snapshot(tb)
	snap.Policies = append(snap.Policies,
		tenants.Policy{ID: "pol_w", TenantID: "ten_a", Name: "waiting", Method: "*", Path: "/wait/*", Consistency: "exact", CreatedAt: t0,
			Tiers: map[string]tenants.Limits{"anonymous": limit("token_bucket", 1, "1s")}},
		tenants.Policy{ID: "pol_p", TenantID: "ten_a", Name: "pair", Method: "*", Path: "/pair/*", Consistency: "exact", CreatedAt: t0,
			Tiers: map[string]tenants.Limits{"anonymous": limit("token_bucket", 2, "2s")}},
		tenants.Policy{ID: "pol_b", TenantID: "ten_b", Name: "b", Method: "*", Path: "/wait/*", Consistency: "exact", CreatedAt: t0,
			Tiers: map[string]tenants.Limits{"anonymous": limit("token_bucket", 1, "1s")}},
		tenants.Policy{ID: "pol_s", TenantID: "ten_a", Name: "shadowfast", Method: "*", Path: "/shadowfast/*", Shadow: true, CreatedAt: t0,
			Tiers: map[string]tenants.Limits{"anonymous": limit("token_bucket", 1, "1s")}})
	return snap
}

// waitEngine is an engine whose waits run on a clock the test moves.
func waitEngine(t *testing.T, cfg WaitConfig) (*Engine, *fakeClock) {
	t.Helper()
	e := newTestEngine(t, waitSnapshot(t))
	clk := &fakeClock{now: t0}
	w := NewWaits(cfg)
	w.clock, w.eng = clk, e
	e.waits = w
	return e, clk
}

type waitOutcome struct {
	i   int
	a   Answer
	err error
	at  time.Time
}

// startWaiting starts a check that waits up to wait and returns once it
// is queued (or answered at once, then on the channel).
func startWaiting(t *testing.T, ctx context.Context, e *Engine, clk *fakeClock, i int, tenant string, req CheckRequest, out chan<- waitOutcome) {
	t.Helper()
	before := e.waits.Len()
	answered := make(chan struct{})
	go func() {
		a, err := e.Check(ctx, tenant, &req, clk.Now())
		out <- waitOutcome{i: i, a: a, err: err, at: clk.Now()}
		close(answered)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for e.waits.Len() == before {
		select {
		case <-answered:
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("check %d neither queued nor answered", i)
		}
		time.Sleep(time.Millisecond)
	}
}

func take(t *testing.T, e *Engine, clk *fakeClock, tenant, ip, path string) Answer {
	t.Helper()
	a, err := e.Check(t.Context(), tenant, &CheckRequest{IP: ip, Path: path}, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func recv(t *testing.T, ch <-chan waitOutcome) waitOutcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(5 * time.Second):
		t.Fatal("no answer")
		return waitOutcome{}
	}
}

func noAnswer(t *testing.T, ch <-chan waitOutcome) {
	t.Helper()
	select {
	case o := <-ch:
		t.Fatalf("unexpected answer: %d %+v %v", o.i, o.a, o.err)
	case <-time.After(20 * time.Millisecond):
	}
}

// Waiters of one bucket are admitted one per refill, in the order they
// came, each as soon as the bucket allows it, and say how long they waited.
func TestWaitAdmitsInArrivalOrder(t *testing.T) {
	e, clk := waitEngine(t, WaitConfig{})
	if a := take(t, e, clk, "ten_a", "192.0.2.1", "/wait/x"); !a.Allowed {
		t.Fatalf("first: %+v", a)
	}
	out := make(chan waitOutcome, 8)
	for i := range 5 {
		startWaiting(t, t.Context(), e, clk, i, "ten_a", CheckRequest{IP: "192.0.2.1", Path: "/wait/x", Wait: 10 * time.Second}, out)
	}
	if e.waits.Len() != 5 {
		t.Fatalf("waiters %d, want 5", e.waits.Len())
	}
	for i := range 5 {
		clk.Advance(999 * time.Millisecond)
		noAnswer(t, out)
		clk.Advance(time.Millisecond)
		o := recv(t, out)
		if o.err != nil || !o.a.Allowed || o.i != i || o.a.Waited != time.Duration(i+1)*time.Second {
			t.Fatalf("refill %d: waiter %d %+v %v", i+1, o.i, o.a, o.err)
		}
	}
	if e.waits.Len() != 0 {
		t.Fatalf("waiters left: %d", e.waits.Len())
	}
}

// A waiter whose turn would come after its deadline is denied at the
// deadline, with the bucket's Retry-After; one whose retry-after already
// passes its wait is denied at once, saying waiting cannot help.
func TestWaitDeniedAtDeadline(t *testing.T) {
	e, clk := waitEngine(t, WaitConfig{})
	take(t, e, clk, "ten_a", "192.0.2.1", "/wait/x")
	out := make(chan waitOutcome, 4)
	startWaiting(t, t.Context(), e, clk, 0, "ten_a", CheckRequest{IP: "192.0.2.1", Path: "/wait/x", Wait: 10 * time.Second}, out)
	startWaiting(t, t.Context(), e, clk, 1, "ten_a", CheckRequest{IP: "192.0.2.1", Path: "/wait/x", Wait: 1500 * time.Millisecond}, out)
	clk.Advance(time.Second)
	if o := recv(t, out); o.i != 0 || !o.a.Allowed {
		t.Fatalf("head: %+v", o)
	}
	clk.Advance(499 * time.Millisecond)
	noAnswer(t, out)
	clk.Advance(time.Millisecond)
	o := recv(t, out)
	if o.i != 1 || o.a.Allowed || o.a.Reason != ReasonRateLimited || o.a.RetryAfter <= 0 || o.a.Waited != 1500*time.Millisecond || !o.at.Equal(t0.Add(1500*time.Millisecond)) {
		t.Fatalf("second at its deadline: %+v at %v", o.a, o.at)
	}

	// Empty queue, a bucket a second from its next token, a wait of half
	// a second: denied at once.
	a, err := e.Check(t.Context(), "ten_a", &CheckRequest{IP: "192.0.2.9", Path: "/wait/x"}, clk.Now())
	if err != nil || !a.Allowed {
		t.Fatal(a, err)
	}
	a, err = e.Check(t.Context(), "ten_a", &CheckRequest{IP: "192.0.2.9", Path: "/wait/x", Wait: 500 * time.Millisecond}, clk.Now())
	if err != nil || a.Allowed || a.WaitRefused != WaitRefusedBeyond || a.Waited != 0 || e.waits.Len() != 0 {
		t.Fatalf("beyond the wait: %+v %v", a, err)
	}
}

// No check overtakes a waiter: a check without a wait is denied while
// the bucket has waiters, even when the bucket holds what it asks, and a
// later waiter goes behind.
func TestWaitNoOvertaking(t *testing.T) {
	e, clk := waitEngine(t, WaitConfig{})
	ip, path := "192.0.2.1", "/pair/x"
	take(t, e, clk, "ten_a", ip, path)
	take(t, e, clk, "ten_a", ip, path)
	out := make(chan waitOutcome, 4)
	// The head needs both tokens (2 s); one comes back after 1 s.
	startWaiting(t, t.Context(), e, clk, 0, "ten_a", CheckRequest{IP: ip, Path: path, Cost: 2, Wait: 10 * time.Second}, out)
	clk.Advance(time.Second)
	noAnswer(t, out)
	if a := take(t, e, clk, "ten_a", ip, path); a.Allowed || a.RetryAfter <= 0 {
		t.Fatalf("a check without a wait passed the waiter: %+v", a)
	}
	startWaiting(t, t.Context(), e, clk, 1, "ten_a", CheckRequest{IP: ip, Path: path, Wait: 10 * time.Second}, out)
	noAnswer(t, out)
	clk.Advance(time.Second)
	if o := recv(t, out); o.i != 0 || !o.a.Allowed {
		t.Fatalf("head: %+v", o)
	}
	clk.Advance(time.Second)
	if o := recv(t, out); o.i != 1 || !o.a.Allowed || o.a.Waited != 2*time.Second {
		t.Fatalf("second: %+v", o)
	}
}

// A waiter whose client leaves is out of the queue, takes nothing, and
// the one behind it is admitted at the next refill.
func TestWaitCancelLeavesTheQueue(t *testing.T) {
	e, clk := waitEngine(t, WaitConfig{})
	ip, path := "192.0.2.1", "/wait/x"
	take(t, e, clk, "ten_a", ip, path)
	out := make(chan waitOutcome, 4)
	ctx, cancel := context.WithCancel(t.Context())
	startWaiting(t, ctx, e, clk, 0, "ten_a", CheckRequest{IP: ip, Path: path, Wait: 10 * time.Second}, out)
	startWaiting(t, t.Context(), e, clk, 1, "ten_a", CheckRequest{IP: ip, Path: path, Wait: 10 * time.Second}, out)
	cancel()
	if o := recv(t, out); o.i != 0 || o.err == nil || !errors.Is(o.err, context.Canceled) {
		t.Fatalf("cancelled: %+v", o)
	}
	if e.waits.Len() != 1 {
		t.Fatalf("waiters %d, want 1", e.waits.Len())
	}
	clk.Advance(time.Second)
	if o := recv(t, out); o.i != 1 || !o.a.Allowed || o.a.Waited != time.Second {
		t.Fatalf("second: %+v", o)
	}
	// The cancelled one took nothing: one token a second, all accounted.
	clk.Advance(time.Second)
	if a := take(t, e, clk, "ten_a", ip, path); !a.Allowed {
		t.Fatalf("the token of the second after: %+v", a)
	}
}

// Past a bound a waiting check is denied at once and says which bound;
// a tenant at its bound does not hold another tenant's room.
func TestWaitRefusedPastBounds(t *testing.T) {
	e, clk := waitEngine(t, WaitConfig{PerBucket: 2, PerTenant: 3, Total: 5})
	out := make(chan waitOutcome, 16)
	wait := 10 * time.Second
	ask := func(tenant, ip string) CheckRequest { return CheckRequest{IP: ip, Path: "/wait/x", Wait: wait} }
	take(t, e, clk, "ten_a", "192.0.2.1", "/wait/x")
	take(t, e, clk, "ten_a", "192.0.2.2", "/wait/x")
	take(t, e, clk, "ten_b", "192.0.2.3", "/wait/x")
	take(t, e, clk, "ten_b", "192.0.2.4", "/wait/x")
	startWaiting(t, t.Context(), e, clk, 0, "ten_a", ask("ten_a", "192.0.2.1"), out)
	startWaiting(t, t.Context(), e, clk, 1, "ten_a", ask("ten_a", "192.0.2.1"), out)
	a, _ := e.Check(t.Context(), "ten_a", ptr(ask("ten_a", "192.0.2.1")), clk.Now())
	if a.Allowed || a.WaitRefused != WaitRefusedBucketFull {
		t.Fatalf("bucket bound: %+v", a)
	}
	startWaiting(t, t.Context(), e, clk, 2, "ten_a", ask("ten_a", "192.0.2.2"), out)
	a, _ = e.Check(t.Context(), "ten_a", ptr(ask("ten_a", "192.0.2.2")), clk.Now())
	if a.Allowed || a.WaitRefused != WaitRefusedTenantFull {
		t.Fatalf("tenant bound: %+v", a)
	}
	// ten_a holds its 3; ten_b still has room for 2 of the server's 5.
	startWaiting(t, t.Context(), e, clk, 3, "ten_b", ask("ten_b", "192.0.2.3"), out)
	startWaiting(t, t.Context(), e, clk, 4, "ten_b", ask("ten_b", "192.0.2.4"), out)
	a, _ = e.Check(t.Context(), "ten_b", ptr(ask("ten_b", "192.0.2.4")), clk.Now())
	if a.Allowed || a.WaitRefused != WaitRefusedServerFull {
		t.Fatalf("server bound: %+v", a)
	}
	if e.waits.Len() != 5 {
		t.Fatalf("waiters %d", e.waits.Len())
	}
	noAnswer(t, out)
	clk.Advance(time.Second)
	got := map[int]bool{}
	for range 4 { // one of each bucket's queue
		o := recv(t, out)
		if !o.a.Allowed {
			t.Fatalf("after a refill: %+v", o)
		}
		got[o.i] = true
	}
	if !got[0] || !got[2] || !got[3] || !got[4] || got[1] {
		t.Fatalf("admitted %v, want the heads 0, 2, 3, 4", got)
	}
}

func ptr[T any](v T) *T { return &v }

// Shutdown answers every waiter with its denial, and a wait after it is
// refused at once.
func TestWaitShutdownAnswersEveryWaiter(t *testing.T) {
	e, clk := waitEngine(t, WaitConfig{})
	take(t, e, clk, "ten_a", "192.0.2.1", "/wait/x")
	take(t, e, clk, "ten_b", "192.0.2.1", "/wait/x")
	out := make(chan waitOutcome, 8)
	startWaiting(t, t.Context(), e, clk, 0, "ten_a", CheckRequest{IP: "192.0.2.1", Path: "/wait/x", Wait: 10 * time.Second}, out)
	startWaiting(t, t.Context(), e, clk, 1, "ten_a", CheckRequest{IP: "192.0.2.1", Path: "/wait/x", Wait: 10 * time.Second}, out)
	startWaiting(t, t.Context(), e, clk, 2, "ten_b", CheckRequest{IP: "192.0.2.1", Path: "/wait/x", Wait: 10 * time.Second}, out)
	e.waits.Close()
	for range 3 {
		o := recv(t, out)
		if o.err != nil || o.a.Allowed || o.a.WaitRefused != WaitRefusedShuttingDown || o.a.RetryAfter <= 0 {
			t.Fatalf("at shutdown: %+v %v", o.a, o.err)
		}
	}
	if e.waits.Len() != 0 {
		t.Fatalf("waiters left: %d", e.waits.Len())
	}
	a, _ := e.Check(t.Context(), "ten_a", &CheckRequest{IP: "192.0.2.1", Path: "/wait/x", Wait: 10 * time.Second}, clk.Now())
	if a.Allowed || a.WaitRefused != WaitRefusedShuttingDown || e.waits.Len() != 0 {
		t.Fatalf("after shutdown: %+v", a)
	}
}

// Bad waits are refused naming the field: above the maximum, negative, on
// a peek, in a batch.
func TestWaitRejectsBadInput(t *testing.T) {
	e, clk := waitEngine(t, WaitConfig{})
	for _, r := range []CheckRequest{
		{IP: "192.0.2.1", Path: "/wait/x", Wait: MaxWait + time.Millisecond},
		{IP: "192.0.2.1", Path: "/wait/x", Wait: -time.Second},
		{IP: "192.0.2.1", Path: "/wait/x", Wait: time.Second, Peek: true},
	} {
		if _, err := e.Check(t.Context(), "ten_a", &r, clk.Now()); err == nil || !contains(err.Error(), "wait") {
			t.Errorf("%+v: %v", r, err)
		}
	}
	_, err := e.CheckBatch(t.Context(), "ten_a", []CheckRequest{{IP: "192.0.2.1", Path: "/wait/x", Wait: time.Second}}, clk.Now())
	if err == nil || !contains(err.Error(), "checks[0].wait") {
		t.Errorf("batch: %v", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// A shadow policy answers its denials allowed: a check with a wait is
// answered at once, as any, and never queues.
func TestWaitShadowAnswersAtOnce(t *testing.T) {
	e, clk := waitEngine(t, WaitConfig{})
	take(t, e, clk, "ten_a", "192.0.2.2", "/shadowfast/a")
	out := make(chan waitOutcome, 1)
	startWaiting(t, t.Context(), e, clk, 0, "ten_a", CheckRequest{IP: "192.0.2.2", Path: "/shadowfast/b", Wait: 10 * time.Second}, out)
	if e.waits.Len() != 0 {
		t.Fatal("a shadow policy's check queued")
	}
	if o := recv(t, out); o.err != nil || !o.a.Allowed || !o.a.ShadowDenied || o.a.Waited != 0 {
		t.Fatalf("%+v %v", o.a, o.err)
	}
}

// Analytics count a waited check once, as it ended: admitted as allowed,
// timed out as denied; a waiter whose client left is not counted.
func TestWaitCountedOnce(t *testing.T) {
	e, clk := waitEngine(t, WaitConfig{})
	ip, path := "192.0.2.1", "/wait/x"
	take(t, e, clk, "ten_a", ip, path)
	e.counters.drain()
	out := make(chan waitOutcome, 4)
	ctx, cancel := context.WithCancel(t.Context())
	startWaiting(t, t.Context(), e, clk, 0, "ten_a", CheckRequest{IP: ip, Path: path, Wait: 5 * time.Second}, out)
	startWaiting(t, ctx, e, clk, 1, "ten_a", CheckRequest{IP: ip, Path: path, Wait: 5 * time.Second}, out)
	startWaiting(t, t.Context(), e, clk, 2, "ten_a", CheckRequest{IP: ip, Path: path, Wait: 1500 * time.Millisecond}, out)
	cancel()
	recv(t, out)
	clk.Advance(time.Second)
	recv(t, out)
	clk.Advance(time.Second)
	recv(t, out)
	var allowed, denied, units int64
	for _, r := range e.counters.drain() {
		allowed, denied, units = allowed+r.Allowed, denied+r.Denied, units+r.Units
	}
	if allowed != 1 || denied != 1 || units != 1 {
		t.Fatalf("counted %d allowed, %d denied, %d units; want 1, 1, 1", allowed, denied, units)
	}
}

// A check that waits for a slot of a concurrency limit is admitted as soon
// as a release gives one back, not only at the earliest lease's expiry;
// its wait is not refused because that expiry lies beyond it; and with
// no release it is denied at its deadline.
func TestWaitForAConcurrencySlot(t *testing.T) {
	snap := waitSnapshot(t)
	snap.Policies = append(snap.Policies, tenants.Policy{ID: "pol_c", TenantID: "ten_a", Name: "slots", Method: "*", Path: "/slots/*", Consistency: "exact", CreatedAt: t0,
		Tiers: map[string]tenants.Limits{"anonymous": {{Algorithm: "concurrency", Limit: 1}}}})
	e := newTestEngine(t, snap)
	clk := &fakeClock{now: t0}
	w := NewWaits(WaitConfig{})
	w.clock, w.eng = clk, e
	e.waits = w

	req := CheckRequest{IP: "192.0.2.1", Path: "/slots/x", LeaseTTL: time.Minute}
	first, err := e.Check(t.Context(), "ten_a", &req, clk.Now())
	if err != nil || !first.Allowed || first.Lease == "" {
		t.Fatalf("first: %+v %v", first, err)
	}
	out := make(chan waitOutcome, 2)
	waiting := req
	waiting.Wait = 5 * time.Second
	startWaiting(t, t.Context(), e, clk, 0, "ten_a", waiting, out)
	if e.waits.Len() != 1 {
		t.Fatalf("waiters %d, want 1: a lease expiring after the wait must not refuse it", e.waits.Len())
	}
	clk.Advance(2 * time.Second)
	noAnswer(t, out)
	if r, err := e.Release(t.Context(), "ten_a", first.Lease, clk.Now()); err != nil || r.Status != LeaseReleased {
		t.Fatalf("release: %+v %v", r, err)
	}
	o := recv(t, out)
	if o.err != nil || !o.a.Allowed || o.a.Lease == "" || o.a.Waited != 2*time.Second {
		t.Fatalf("the waiter after the release: %+v %v", o.a, o.err)
	}

	// Nobody releases: denied at the deadline, as concurrency_limited.
	startWaiting(t, t.Context(), e, clk, 1, "ten_a", waiting, out)
	clk.Advance(5 * time.Second)
	if o = recv(t, out); o.a.Allowed || o.a.Reason != ReasonConcurrencyLimited || o.a.Waited != 5*time.Second {
		t.Fatalf("the waiter nobody released for: %+v %v", o.a, o.err)
	}
}

// A sender that asks its bucket's owner again for a waiter the owner has
// queued already (its first request failed on the way back, the waiter
// still queued) gets the one waiter's answer: the bucket is taken once,
// and the answer goes to the request that asked last.
func TestWaitRepeatedForwardQueuesOnce(t *testing.T) {
	e, clk := waitEngine(t, WaitConfig{})
	take(t, e, clk, "ten_a", "192.0.2.1", "/wait/x") // the bucket's one token
	limits := e.view.Load().limitsFor("ten_a", "pol_w", "anonymous", "")
	key := []byte(BucketKey("ten_a", "pol_w", KindIP, "192.0.2.1"))
	var first, second atomic.Int32
	for i, done := range []func(*waitResult){
		func(r *waitResult) { first.Add(1) },
		func(r *waitResult) {
			if r.allowed {
				second.Add(1)
			}
		},
	} {
		d := decision{key: key, tenantID: "ten_a", limits: limits, cost: 1, consume: true, wait: 10 * time.Second}
		var out [MaxLimits]quota.Outcome
		if _, _, queued := e.waits.enter(&d, out[:1], 10*time.Second, 42, done); !queued {
			t.Fatalf("request %d was not queued", i)
		}
	}
	if e.waits.Len() != 1 {
		t.Fatalf("%d waiters for one forwarded check asked twice", e.waits.Len())
	}
	clk.Advance(time.Second)
	if first.Load() != 0 || second.Load() != 1 || e.waits.Len() != 0 {
		t.Fatalf("answers: first request %d, second %d allowed; %d waiting", first.Load(), second.Load(), e.waits.Len())
	}
	// The refill admitted one check: the next token is a second away.
	if a := take(t, e, clk, "ten_a", "192.0.2.1", "/wait/x"); a.Allowed {
		t.Fatalf("the bucket was taken once only? %+v", a)
	}
}
