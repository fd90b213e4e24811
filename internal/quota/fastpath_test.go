package quota

import (
	"math"
	"math/rand"
	"testing"
	"time"
)

// The cache decides the common token bucket and fixed window checks (periodic
// or calendar) in shard.allow, apart from Limit.Decide. These tests hold the
// two equal bit for bit, over limits, states, instants and costs far wider
// than any service sees.

func randUnits(rng *rand.Rand) int64 {
	switch rng.Intn(4) {
	case 0:
		return 1 + rng.Int63n(10)
	case 1:
		return MaxLimit - rng.Int63n(3)
	default:
		return 1 + rng.Int63n(int64(1)<<rng.Intn(51))
	}
}

func randPeriod(rng *rand.Rand) time.Duration {
	switch rng.Intn(4) {
	case 0:
		return MinPeriod
	case 1:
		return MaxPeriod
	default:
		return MinPeriod + time.Duration(rng.Int63n(int64(MaxPeriod-MinPeriod)>>rng.Intn(40)))
	}
}

func randTokens(rng *rand.Rand, capacity float64) float64 {
	switch rng.Intn(10) {
	case 0:
		return 0
	case 1:
		return capacity
	case 2:
		return capacity * (1 + rng.Float64()) // more than fits: clamped
	case 3:
		return math.Float64frombits(rng.Uint64()) // anything, NaN and negative included
	case 4:
		return float64(rng.Int63n(10)) + rng.Float64()
	default:
		return rng.Float64() * capacity
	}
}

func randElapsed(rng *rand.Rand, period time.Duration) int64 {
	switch rng.Intn(8) {
	case 0:
		return 0
	case 1:
		return -rng.Int63n(int64(time.Hour)) // the clock went back
	case 2:
		return 1 + rng.Int63n(1000)
	case 3:
		return math.MaxInt64 - rng.Int63n(10) // overflows now - At
	default:
		return 1 + rng.Int63n(2*int64(period))
	}
}

func TestAllowMatchesDecide(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) { testAllowMatchesDecide(t, alg, nil) })
	}
	t.Run("calendar", func(t *testing.T) { testAllowMatchesDecide(t, FixedWindow, testCalendars(t)) })
}

// testCalendars returns calendars of every unit, in UTC and zones with DST,
// with anchors that clamp.
func testCalendars(t testing.TB) []*Calendar {
	var cals []*Calendar
	for _, zone := range []string{"UTC", "America/New_York", "Europe/London", "America/Sao_Paulo", "Asia/Kolkata"} {
		for u := CalendarDay; u <= CalendarYear; u++ {
			cals = append(cals, newCal(t, u, zone, 0))
		}
		for _, anchor := range []int{15, 29, 30, 31} {
			cals = append(cals, newCal(t, CalendarMonth, zone, anchor))
		}
	}
	return cals
}

// randState returns a state of l to decide at now: used or not, counted in
// this window, an earlier or a later one (the clock went back), or anywhere.
func randState(rng *rand.Rand, l Limit, now int64) State {
	st := State{Tokens: randTokens(rng, float64(l.Capacity()))}
	if rng.Intn(20) == 0 {
		return st // never used
	}
	p := int64(l.Period)
	if c := l.Calendar; c != nil {
		start, end := c.Window(now)
		n := end - start
		if n <= 0 || n > 1<<60 { // capped at the end of int64
			n = 1 << 40
		}
		switch rng.Intn(4) {
		case 0:
			st.At = start
		case 1:
			st.At, _ = c.Window(start - 1) // the window before
		case 2:
			st.At = end // a clock step back
		default:
			st.At = start - rng.Int63n(4*n) + rng.Int63n(2*n) // anywhere, mid-window included
		}
	} else if l.Algorithm == TokenBucket {
		st.At = now - randElapsed(rng, l.Period)
	} else {
		switch start := windowStart(now, p); rng.Intn(4) {
		case 0:
			st.At = start
		case 1:
			st.At = start - p*(1+rng.Int63n(3))
		case 2:
			st.At = start + p // a clock step back
		default:
			st.At = now - rng.Int63n(4*p) + rng.Int63n(p)
		}
	}
	if st.At == 0 || rng.Intn(50) == 0 {
		st.At = math.MinInt64 + rng.Int63n(10) // absurdly old
	}
	return st
}

// testAllowMatchesDecide compares the two over random limits of alg, with a
// calendar from cals when there are any.
func testAllowMatchesDecide(t *testing.T, alg Algorithm, cals []*Calendar) {
	rng := rand.New(rand.NewSource(11))
	const runs = 200_000
	decided := 0
	for range runs {
		l := Limit{Algorithm: alg, Limit: randUnits(rng), Period: randPeriod(rng)}
		if alg == TokenBucket && rng.Intn(2) == 0 {
			l.Burst = randUnits(rng)
		}
		limits := []Limit{l}
		now := t0 + rng.Int63n(int64(time.Hour))
		if cals != nil {
			l.Calendar = cals[rng.Intn(len(cals))]
			limits[0] = l
			now = t0 + rng.Int63n(int64(3*365*24*time.Hour)) - int64(365*24*time.Hour)
		}
		if rng.Intn(50) == 0 {
			now = math.MaxInt64 - rng.Int63n(int64(time.Hour))
		}
		capacity := l.Capacity()
		cost := 1 + rng.Int63n(min(capacity, 1<<20))
		switch rng.Intn(10) {
		case 0:
			cost = capacity + rng.Int63n(3) // at or over the capacity
		case 1:
			cost = -rng.Int63n(2) // counts as 1
		}
		st := randState(rng, l, now)

		var sh shard
		i := sh.newBucket(1<<shardBits, 1<<32, "k", limits)
		sh.ents[i].a, sh.ents[i].at = st.Tokens, st.At
		before, beforeNext := sh.ents[i], sh.ents[i+1]

		in := st
		want := l.Decide(&st, now, cost, true)
		var got Outcome
		if !sh.allow(i, limits, now, cost, &got) {
			if !sameEntry(sh.ents[i], before) || !sameEntry(sh.ents[i+1], beforeNext) {
				t.Fatalf("allow declined but changed the entries: %+v %+v -> %+v %+v", before, beforeNext, sh.ents[i], sh.ents[i+1])
			}
			continue
		}
		decided++
		e := sh.ents[i]
		if got != want || !sameFloat(e.a, st.Tokens) || e.at != st.At || e.tag&fDirty == 0 || !sameEntry(sh.ents[i+1], beforeNext) {
			t.Fatalf("limit %+v, state %v at %d, now %d, cost %d:\nallow  %+v, state %v at %d, tag %x\nDecide %+v, state %v at %d",
				l, in.Tokens, in.At, now, cost, got, e.a, e.at, e.tag, want, st.Tokens, st.At)
		}
	}
	// The inputs are meant to reach the fast path often: a test that never
	// took it would prove nothing.
	if decided < runs/3 {
		t.Fatalf("allow decided only %d of %d checks", decided, runs)
	}
	t.Logf("allow decided %d of %d checks", decided, runs)
}

func sameFloat(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }

func sameEntry(a, b entry) bool {
	return a.tag == b.tag && a.id == b.id && a.at == b.at && sameFloat(a.a, b.a)
}

// A check the fast path leaves alone still gets its answer: another limits
// slice equal by value, a peek, a denial, a first use and another algorithm
// all go through the general path.
func TestAllowLeavesTheRestToCheck(t *testing.T) {
	c := NewCache()
	limits := tb(2, time.Minute)
	out := make([]Outcome, 1)
	now := t0
	c.Check("k", limits, now, 1, true, out) // first use: general path
	now += int64(time.Millisecond)
	if ok, _ := c.Check("k", limits, now, 1, false, out); !ok || out[0].Remaining != 0 {
		t.Fatalf("peek: %v %+v", ok, out[0])
	}
	if ok, _ := c.Check("k", tb(2, time.Minute), now, 1, true, out); !ok || out[0].Remaining != 0 {
		t.Fatalf("equal limits in another slice: %v %+v", ok, out[0])
	}
	if ok, _ := c.Check("k", limits, now, 1, true, out); ok || out[0].RetryAfter <= 0 {
		t.Fatalf("empty bucket: %v %+v", ok, out[0])
	}
	fw := []Limit{{Algorithm: FixedWindow, Limit: 1, Period: time.Minute}}
	if ok, _ := c.Check("f", fw, now, 1, true, out); !ok {
		t.Fatalf("fixed window: %+v", out[0])
	}
	if ok, _ := c.Check("f", fw, now+1, 1, true, out); ok {
		t.Fatalf("fixed window over its limit: %+v", out[0])
	}
}
