package quota

import (
	"testing"
	"time"
)

// Consumption forced in from other servers is repaid before this server
// admits again: two servers each admitting from their own bucket and
// exchanging consumption admit, over a long run, about one limit's rate.
func TestForceSharesConsumption(t *testing.T) {
	l := []Limit{{Algorithm: TokenBucket, Limit: 10, Period: time.Second}}
	a, b := NewCache(), NewCache()
	const key = "t/p/ip:192.0.2.1"
	var out [1]Outcome
	start := int64(1e18)
	admitted := 0
	// Every 10ms each server gets one request and then learns the other's.
	for step := int64(0); step < 1000; step++ {
		now := start + step*int64(10*time.Millisecond)
		okA, _ := a.Check(key, l, now, 1, true, out[:])
		okB, _ := b.Check(key, l, now, 1, true, out[:])
		if okA {
			admitted++
			b.Force(key, l, now, 1)
		}
		if okB {
			admitted++
			a.Force(key, l, now, 1)
		}
	}
	// 10 s at 10/s plus the bursts of 10 each server starts with.
	if admitted > 10*10+2*10 {
		t.Fatalf("admitted %d over 10 s; want at most rate*time + one burst per server = 120", admitted)
	}
	if admitted < 90 {
		t.Fatalf("admitted %d over 10 s; the debt should not starve callers", admitted)
	}
}

func TestForceEveryAlgorithm(t *testing.T) {
	now := int64(1e18)
	for _, alg := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow, SlidingLog} {
		l := Limit{Algorithm: alg, Limit: 5, Period: time.Minute}
		var s State
		l.Force(&s, now, 3)
		if o := l.Decide(&s, now, 1, false); o.Remaining != 1 || !o.Allowed {
			t.Errorf("%s after forcing 3 of 5: %+v", alg, o)
		}
		l.Force(&s, now, 10)
		if o := l.Decide(&s, now, 1, false); o.Allowed || o.Remaining != 0 {
			t.Errorf("%s after forcing past the limit: %+v", alg, o)
		}
	}
}

// Forcing consumption on an existing bucket allocates nothing.
func TestForceDoesNotAllocate(t *testing.T) {
	c := NewCache()
	limits := tb(100, time.Hour)
	c.Force("t/p/k", limits, t0, 1)
	if n := testing.AllocsPerRun(100, func() { c.Force("t/p/k", limits, t0, 1) }); n != 0 {
		t.Fatalf("%v allocs per Force", n)
	}
}
