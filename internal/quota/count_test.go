package quota

import (
	"testing"
	"time"
)

// TestCountAsTheReference holds Count to the reference server's fixed
// window (INCRBY, then compare with the limit): every call counts, over
// the limit or not, and a look (cost 0) is over only past the limit.
func TestCountAsTheReference(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Limit: 3, Period: time.Second}
	sec := int64(time.Second)
	base := 1_700_000_000 * sec // window starts are never 0, which a State reads as unused
	steps := []struct {
		at        int64
		cost      int64
		allowed   bool
		remaining int64
		reset     time.Duration
	}{
		{0, 0, true, 3, time.Second}, // a look at an empty bucket: the whole window to go
		{sec / 4, 2, true, 1, 750 * time.Millisecond},
		{sec / 2, 2, false, 1, 500 * time.Millisecond}, // 4 > 3: over (1 was left before it), and counted
		{sec / 2, 0, false, 0, 500 * time.Millisecond}, // the look sees the 4
		{sec / 2, 5, false, 0, 500 * time.Millisecond}, // more than the limit at once: over, with the reset
		{sec, 0, true, 3, time.Second},                 // a new window
		{sec, 3, true, 0, time.Second},
		{sec, 0, true, 0, time.Second}, // at the limit, not past it
		{sec, 1, false, 0, time.Second},
		{2 * sec, 4294967295, false, 3, time.Second}, // all 3 were left before it
	}
	var s State
	for i, st := range steps {
		o := l.Count(&s, base+st.at, st.cost)
		if o.Allowed != st.allowed || o.Remaining != st.remaining || o.Reset != st.reset {
			t.Fatalf("step %d (cost %d at %v): got allowed %v remaining %d reset %v, want %v %d %v",
				i, st.cost, time.Duration(st.at), o.Allowed, o.Remaining, o.Reset, st.allowed, st.remaining, st.reset)
		}
	}
}

// TestCountBanned: a fixed window of limit 0 counts and admits nothing,
// and a look is allowed only while nothing was counted, as the
// reference's requests_per_unit: 0.
func TestCountBanned(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Limit: 0, Period: time.Minute}
	if err := l.Validate(); err != nil {
		t.Fatalf("a banned fixed window should be valid: %v", err)
	}
	var s State
	base := int64(1_700_000_000 * time.Second)
	if o := l.Count(&s, base+1, 0); !o.Allowed || o.Remaining != 0 {
		t.Fatalf("look at an unused banned rule: %+v", o)
	}
	if o := l.Count(&s, base+2, 1); o.Allowed || o.Reset <= 0 {
		t.Fatalf("a hit on a banned rule: %+v", o)
	}
	if o := l.Count(&s, base+3, 0); o.Allowed {
		t.Fatalf("look after a counted hit: %+v", o)
	}
	if o := l.Decide(&s, base+4, 1, true); o.Allowed {
		t.Fatalf("Decide on a banned rule: %+v", o)
	}
	if err := (Limit{Algorithm: TokenBucket, Limit: 0, Period: time.Minute}).Validate(); err == nil {
		t.Fatal("a token bucket of limit 0 should be refused")
	}
}

// TestCountBytesCountsDenials: the cache counts a denied cost, so that a
// later small request is over, where Check would have admitted it.
func TestCountBytesCountsDenials(t *testing.T) {
	c := NewCache()
	ls := []Limit{{Algorithm: FixedWindow, Limit: 10, Period: time.Minute}}
	out := make([]Outcome, 1)
	key := []byte("k")
	const t0 = int64(1_700_000_000 * time.Second)
	if ok, _ := c.CountBytes(key, ls, t0+1, 15, out); ok {
		t.Fatal("15 of 10 allowed")
	}
	if ok, _ := c.CountBytes(key, ls, t0+2, 1, out); ok {
		t.Fatalf("a small request after a counted denial was allowed: %+v", out[0])
	}
	if ok, _ := c.CheckBytes(key, ls, t0+3, 1, false, out); ok {
		t.Fatal("Check sees the denied cost too")
	}
	// Check on its own counts nothing when it denies.
	key2 := []byte("k2")
	c.CheckBytes(key2, ls, t0+1, 15, true, out)
	if ok, _ := c.CheckBytes(key2, ls, t0+2, 1, true, out); !ok {
		t.Fatal("Check counted a denial")
	}
	// Other algorithms force the cost in.
	tb := []Limit{{Algorithm: TokenBucket, Limit: 10, Period: time.Minute}}
	if ok, _ := c.CountBytes([]byte("tb"), tb, t0+1, 15, out); ok {
		t.Fatal("token bucket: 15 of 10 allowed")
	}
	if ok, _ := c.CountBytes([]byte("tb"), tb, t0+2, 1, out); ok {
		t.Fatal("token bucket: the forced cost did not count")
	}
}

// CountBytes (its fast path for a cost that fits included) answers and
// counts as Limit.Count on a lone State, call for call.
func TestCountBytesMatchesCount(t *testing.T) {
	base := int64(1_700_000_000 * time.Second)
	for _, l := range []Limit{
		{Algorithm: FixedWindow, Limit: 10, Period: time.Second},
		{Algorithm: TokenBucket, Limit: 10, Period: time.Second},
		{Algorithm: FixedWindow, Limit: 0, Period: time.Second},
	} {
		c := NewCache()
		ls := []Limit{l}
		var s State
		out := make([]Outcome, 1)
		now := base
		for i := range 2000 {
			now += int64(i%7) * int64(time.Millisecond) * 37
			cost := int64((i * 7919) % 13)
			want := l.Count(&s, now, cost)
			ok, _ := c.CountBytes([]byte("k"), ls, now, cost, out)
			if ok != want.Allowed || out[0].Remaining != want.Remaining || out[0].Reset != want.Reset {
				t.Fatalf("%v, call %d (cost %d): cache %v %+v, Count %+v", l.Algorithm, i, cost, ok, out[0], want)
			}
		}
	}
}
