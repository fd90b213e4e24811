package quota

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func conc(n int64) []Limit { return []Limit{{Algorithm: Concurrency, Limit: n}} }

const s1 = int64(time.Second)

// Steps at fixed instants: slots are taken by acquires, given back by
// releases and by expiry, and a denial says when the first lease expires.
func TestConcurrencySteps(t *testing.T) {
	c := NewCache()
	limits := conc(2)
	key := []byte("t/p/key:a")
	out := make([]Outcome, 1)
	type step struct {
		at      int64
		op      string // "acquire" or "release"
		token   int64
		ttl     int64
		allowed bool
		remain  int64
		retry   time.Duration
	}
	steps := []step{
		{at: 100 * s1, op: "acquire", token: 1, ttl: 10 * s1, allowed: true, remain: 1},
		{at: 101 * s1, op: "acquire", token: 2, ttl: 20 * s1, allowed: true, remain: 0},
		{at: 102 * s1, op: "acquire", token: 3, ttl: 10 * s1, allowed: false, retry: 8 * time.Second},
		{at: 103 * s1, op: "release", token: 2, allowed: true},
		{at: 103 * s1, op: "release", token: 2, allowed: false}, // twice: no longer held
		{at: 104 * s1, op: "acquire", token: 4, ttl: 60 * s1, allowed: true, remain: 0},
		{at: 105 * s1, op: "acquire", token: 5, ttl: 60 * s1, allowed: false, retry: 5 * time.Second},
		{at: 110 * s1, op: "release", token: 1, allowed: false}, // expired at 110
		{at: 110 * s1, op: "acquire", token: 6, ttl: 60 * s1, allowed: true, remain: 0},
		{at: 111 * s1, op: "release", token: 99, allowed: false}, // never held
	}
	for i, st := range steps {
		switch st.op {
		case "acquire":
			allowed, _, ok := c.AcquireBytesBound(key, -1, limits, st.at, 1, Lease{Token: st.token, Expires: st.at + st.ttl}, out)
			if !ok || allowed != st.allowed {
				t.Fatalf("step %d: allowed %v ok %v, want %v", i, allowed, ok, st.allowed)
			}
			if allowed && out[0].Remaining != st.remain {
				t.Errorf("step %d: remaining %d, want %d", i, out[0].Remaining, st.remain)
			}
			if !allowed && out[0].RetryAfter != st.retry {
				t.Errorf("step %d: retry after %v, want %v", i, out[0].RetryAfter, st.retry)
			}
		case "release":
			if got := c.Release(key, st.token, st.at); got != st.allowed {
				t.Fatalf("step %d: release %v, want %v", i, got, st.allowed)
			}
		}
	}
	n := make([]int64, 1)
	if !c.InFlight(key, 111*s1, n) || n[0] != 2 {
		t.Fatalf("in flight %v, want 2", n)
	}
	if !c.InFlight(key, 200*s1, n) || n[0] != 0 {
		t.Fatalf("in flight after every TTL %v, want 0", n)
	}
}

// A tier's limits are all or nothing: a rate limit's denial takes no slot,
// and a concurrency denial takes no tokens.
func TestConcurrencyBesideRateLimit(t *testing.T) {
	c := NewCache()
	limits := []Limit{
		{Name: "rate", Algorithm: FixedWindow, Limit: 3, Period: time.Hour},
		{Name: "slots", Algorithm: Concurrency, Limit: 2},
	}
	key := []byte("t/p/key:a")
	now := 3600 * s1
	out := make([]Outcome, 2)
	acq := func(tok int64) bool {
		a, _, _ := c.AcquireBytesBound(key, -1, limits, now, 1, Lease{Token: tok, Expires: now + 60*s1}, out)
		return a
	}
	if !acq(1) || !acq(2) {
		t.Fatal("the first two acquires must be allowed")
	}
	if acq(3) {
		t.Fatal("a third in flight must be denied")
	}
	if out[0].Remaining != 1 {
		t.Fatalf("the concurrency denial took a token: fixed window remaining %d, want 1", out[0].Remaining)
	}
	c.Release(key, 1, now)
	if !acq(4) {
		t.Fatal("a released slot must admit")
	}
	c.Release(key, 4, now)
	if acq(5) { // the window's 3 units are spent
		t.Fatal("the rate limit must deny")
	}
	n := make([]int64, 2)
	c.InFlight(key, now, n)
	if n[1] != 1 {
		t.Fatalf("a rate-limit denial took a slot: %d in flight, want 1", n[1])
	}
}

// N goroutines race for one key's slots: exactly the limit win.
func TestConcurrencyExactUnderRace(t *testing.T) {
	c := NewCache()
	limits := conc(10)
	var won atomic.Int64
	var wg sync.WaitGroup
	for g := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]Outcome, 1)
			if a, _, _ := c.AcquireBytesBound([]byte("t/p/k"), -1, limits, 10*s1, 1, Lease{Token: int64(g + 1), Expires: 70 * s1}, out); a {
				won.Add(1)
			}
		}()
	}
	wg.Wait()
	if won.Load() != 10 {
		t.Fatalf("%d acquired, want 10", won.Load())
	}
}

// Leases travel in a drained state and come back with Load, as across a
// flush to the worker and a hydration; the bucket is full (expirable) only
// once its last lease has expired.
func TestConcurrencyDrainAndLoad(t *testing.T) {
	c := NewCache()
	limits := conc(3)
	out := make([]Outcome, 1)
	c.AcquireBytesBound([]byte("t/p/k"), -1, limits, 10*s1, 1, Lease{Token: 7, Expires: 40 * s1}, out)
	c.AcquireBytesBound([]byte("t/p/k"), -1, limits, 11*s1, 1, Lease{Token: 8, Expires: 50 * s1}, out)
	got := drainAll(c)["t/p/k"]
	if got.fullAt != 50*s1 || len(got.states[0].Log) != 4 {
		t.Fatalf("drained %+v, want two leases, full at 50 s", got)
	}
	d := NewCache()
	d.Load("t/p/k", limits, got.states, got.fullAt)
	if !d.Release([]byte("t/p/k"), 7, 20*s1) {
		t.Fatal("a loaded lease must be releasable")
	}
	if a, _, _ := d.AcquireBytesBound([]byte("t/p/k"), -1, limits, 20*s1, 1, Lease{Token: 9, Expires: 30 * s1}, out); !a || out[0].Remaining != 1 {
		t.Fatalf("after load: allowed %v remaining %d, want true 1", a, out[0].Remaining)
	}
	if d.Sweep(45*s1) != 0 {
		t.Fatal("a bucket with a live lease was swept")
	}
	drainAll(d)
	if d.Sweep(51*s1) != 1 {
		t.Fatal("a bucket whose leases all expired must be swept")
	}
}

// A plain Decide never takes a slot: only an acquire, which has a lease.
func TestConcurrencyDecideTakesNothing(t *testing.T) {
	l := conc(1)[0]
	var s State
	for range 3 {
		if o := l.Decide(&s, 10*s1, 1, true); !o.Allowed {
			t.Fatal("denied without a lease taken")
		}
	}
	if len(s.Log) != 0 {
		t.Fatalf("Decide took a slot: %v", s.Log)
	}
}

func TestConcurrencyValidate(t *testing.T) {
	cal, _ := NewCalendar(CalendarDay, time.UTC, 0)
	for _, tc := range []struct {
		l     Limit
		field string
	}{
		{Limit{Algorithm: Concurrency, Limit: 10}, ""},
		{Limit{Algorithm: Concurrency, Limit: 10, Period: time.Minute}, "period"},
		{Limit{Algorithm: Concurrency, Limit: 10, Calendar: cal}, "calendar"},
		{Limit{Algorithm: Concurrency, Limit: 10, Burst: 3}, "burst"},
		{Limit{Algorithm: Concurrency, Limit: 0}, "limit"},
		{Limit{Algorithm: Concurrency, Limit: MaxConcurrency + 1}, "limit"},
	} {
		err := tc.l.Validate()
		var fe *FieldError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%+v: %v", tc.l, err)
		case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
			t.Errorf("%+v: error %v, want one naming %s", tc.l, err, tc.field)
		}
	}
	if a, err := ParseAlgorithm("concurrency"); err != nil || a != Concurrency {
		t.Fatalf("ParseAlgorithm: %v %v", a, err)
	}
}

// A policy change keeps the live leases.
func TestConcurrencyRemapKeepsLeases(t *testing.T) {
	c := NewCache()
	out := make([]Outcome, 1)
	c.AcquireBytesBound([]byte("t/p/k"), -1, conc(2), 10*s1, 1, Lease{Token: 1, Expires: 70 * s1}, out)
	c.AcquireBytesBound([]byte("t/p/k"), -1, conc(2), 10*s1, 1, Lease{Token: 2, Expires: 70 * s1}, out)
	if a, _, _ := c.AcquireBytesBound([]byte("t/p/k"), -1, conc(2), 11*s1, 1, Lease{Token: 3, Expires: 70 * s1}, out); a {
		t.Fatal("over the limit")
	}
	if a, _, _ := c.AcquireBytesBound([]byte("t/p/k"), -1, conc(3), 11*s1, 1, Lease{Token: 3, Expires: 70 * s1}, out); !a || out[0].Remaining != 0 {
		t.Fatalf("after raising the limit to 3: allowed %v remaining %d", a, out[0].Remaining)
	}
}

// BenchmarkAcquireRelease is an acquire and its release on one key of 10
// slots with 5 held, against BenchmarkCheckHotKey's plain check.
func BenchmarkAcquireRelease(b *testing.B) {
	c := NewCache()
	limits := conc(10)
	out := make([]Outcome, 1)
	key := []byte(benchKey(1))
	now := t0
	for tok := range int64(5) {
		c.AcquireBytesBound(key, -1, limits, now, 1, Lease{Token: tok + 1, Expires: now + 3600*s1}, out)
	}
	b.ReportAllocs()
	for tok := int64(100); b.Loop(); tok++ {
		now += 1000
		if a, _, _ := c.AcquireBytesBound(key, -1, limits, now, 1, Lease{Token: tok, Expires: now + 60*s1}, out); !a {
			b.Fatal("denied")
		}
		if !c.Release(key, tok, now) {
			b.Fatal("not held")
		}
	}
}
