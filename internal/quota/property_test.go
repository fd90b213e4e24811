package quota

import (
	"math"
	"math/rand"
	"testing"
	"time"
)

// admission is one admitted request.
type admission struct {
	at   int64
	cost int64
}

// schedule returns n instants from t0 with random gaps (bursts at one instant,
// short gaps, and occasional idles longer than the period), and costs.
func schedule(r *rand.Rand, n int, period time.Duration, maxCost int64) (instants []int64, costs []int64) {
	now := t0 + r.Int63n(int64(period))
	for range n {
		switch r.Intn(10) {
		case 0: // same instant
		case 1:
			now += r.Int63n(3 * int64(period))
		default:
			now += r.Int63n(int64(period) / 8)
		}
		instants = append(instants, now)
		costs = append(costs, 1+r.Int63n(maxCost))
	}
	return instants, costs
}

func randomLimit(r *rand.Rand, a Algorithm) Limit {
	periods := []time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second, 3 * time.Second, time.Minute, 7 * time.Hour}
	l := Limit{Algorithm: a, Limit: 1 + r.Int63n(20), Period: periods[r.Intn(len(periods))]}
	if a == TokenBucket && r.Intn(2) == 0 {
		l.Burst = 1 + r.Int63n(30)
	}
	return l
}

// checkOutcome asserts the contract every outcome satisfies, and that
// RetryAfter and Reset are exact: a peek at now+RetryAfter is allowed and one
// a nanosecond earlier is not; at now+Reset the bucket is full (a request for
// the whole capacity fits) and a nanosecond earlier it is not.
func checkOutcome(t *testing.T, l Limit, s *State, now, cost int64, o Outcome) {
	t.Helper()
	if o.Remaining < 0 || o.Reset < 0 || o.Limit != l.Limit {
		t.Fatalf("%+v at %d cost %d: bad outcome %+v", l, now, cost, o)
	}
	if o.Allowed {
		if o.RetryAfter != 0 {
			t.Fatalf("%+v: allowed with retry %v", l, o.RetryAfter)
		}
	} else {
		switch {
		case cost > l.Capacity():
			if o.RetryAfter != Never {
				t.Fatalf("%+v cost %d: retry %v, want Never", l, cost, o.RetryAfter)
			}
		case o.RetryAfter <= 0:
			t.Fatalf("%+v: denied with retry %v", l, o.RetryAfter)
		default:
			when := now + int64(o.RetryAfter)
			peek := s.Clone()
			if !l.Decide(&peek, when, cost, false).Allowed {
				t.Fatalf("%+v state %+v: denied at now+retry (%v)", l, *s, o.RetryAfter)
			}
			if when-1 > now && l.Decide(&peek, when-1, cost, false).Allowed {
				t.Fatalf("%+v state %+v: allowed a nanosecond before retry (%v)", l, *s, o.RetryAfter)
			}
		}
	}
	full := s.Clone()
	if o.Reset > 0 {
		// A token bucket's Reset is a rounded float quotient: it may miss the
		// exact instant by a nanosecond. The window algorithms' are exact.
		slack := int64(0)
		if l.Algorithm == TokenBucket {
			slack = 1
		}
		if !l.Decide(&full, now+int64(o.Reset)+slack, l.Capacity(), false).Allowed {
			t.Fatalf("%+v state %+v: not full at now+reset (%v)", l, *s, o.Reset)
		}
		if l.Decide(&full, now+int64(o.Reset)-1-slack, l.Capacity(), false).Allowed {
			t.Fatalf("%+v state %+v: full a nanosecond before reset (%v)", l, *s, o.Reset)
		}
	}
	// FullAt, which the cache expires buckets by, is exact.
	if f := l.FullAt(s); f > 0 {
		if !l.Decide(&full, max(f, now), l.Capacity(), false).Allowed {
			t.Fatalf("%+v state %+v: not full at FullAt %d (now %d)", l, *s, f, now)
		}
		if f-1 > now && l.Decide(&full, f-1, l.Capacity(), false).Allowed {
			t.Fatalf("%+v state %+v: full before FullAt %d", l, *s, f)
		}
	} else if !l.Decide(&full, now, l.Capacity(), false).Allowed {
		t.Fatalf("%+v state %+v: FullAt 0 but not full", l, *s)
	}
}

// run decides the schedule on a fresh state, checking every outcome, and
// returns what was admitted.
func run(t *testing.T, l Limit, instants, costs []int64) []admission {
	t.Helper()
	var s State
	var admitted []admission
	for i, now := range instants {
		peek := s.Clone()
		p := l.Decide(&peek, now, costs[i], false)
		o := l.Decide(&s, now, costs[i], true)
		if o != p {
			t.Fatalf("%+v: peek %+v differs from check %+v", l, p, o)
		}
		checkOutcome(t, l, &s, now, costs[i], o)
		if o.Allowed {
			admitted = append(admitted, admission{now, costs[i]})
		}
	}
	return admitted
}

func TestPropertyTokenBucketNeverExceedsBurstPlusRate(t *testing.T) {
	for seed := int64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewSource(seed))
		l := randomLimit(r, TokenBucket)
		instants, costs := schedule(r, 200, l.Period, 1+l.Capacity()/2)
		adm := run(t, l, instants, costs)
		// Over every interval [a, b] between admissions: admitted <= capacity + rate×(b−a).
		for i := range adm {
			var sum int64
			for j := i; j < len(adm); j++ {
				sum += adm[j].cost
				bound := float64(l.Capacity()) + float64(adm[j].at-adm[i].at)*float64(l.Limit)/float64(l.Period)
				if float64(sum) > bound+1e-6 {
					t.Fatalf("seed %d %+v: %d admitted in [%d, %d], bound %.3f", seed, l, sum, adm[i].at, adm[j].at, bound)
				}
			}
		}
		if len(adm) == 0 {
			t.Fatalf("seed %d: nothing admitted", seed)
		}
	}
}

func TestPropertySlidingLogNeverExceedsLimitPerPeriod(t *testing.T) {
	for seed := int64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewSource(seed))
		l := randomLimit(r, SlidingLog)
		instants, costs := schedule(r, 200, l.Period, 1+l.Limit/3)
		adm := run(t, l, instants, costs)
		// Every window (x−Period, x] ending at an admission holds <= Limit.
		for j := range adm {
			var sum int64
			for i := j; i >= 0 && adm[i].at > adm[j].at-int64(l.Period); i-- {
				sum += adm[i].cost
			}
			if sum > l.Limit {
				t.Fatalf("seed %d %+v: %d admitted in the period ending %d", seed, l, sum, adm[j].at)
			}
		}
	}
}

func TestPropertyFixedWindowNeverExceedsLimitPerWindow(t *testing.T) {
	for seed := int64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewSource(seed))
		l := randomLimit(r, FixedWindow)
		instants, costs := schedule(r, 200, l.Period, 1+l.Limit/3)
		adm := run(t, l, instants, costs)
		per := map[int64]int64{}
		for _, a := range adm {
			per[windowStart(a.at, int64(l.Period))] += a.cost
		}
		for w, n := range per {
			if n > l.Limit {
				t.Fatalf("seed %d %+v: %d admitted in window %d", seed, l, n, w)
			}
		}
	}
}

// A fixed window counting in calendar windows (every unit, zones with DST,
// clamping anchors) never admits more than Limit in one window, and keeps
// the outcome contract, with exact retry, reset and FullAt, also when the
// clock goes back a little (then a request is counted in the bucket's later
// window, and the per-window sums are not checked).
func TestPropertyCalendarNeverExceedsLimitPerWindow(t *testing.T) {
	cals := testCalendars(t)
	lengths := map[CalendarUnit]time.Duration{CalendarDay: 24 * time.Hour, CalendarWeek: 7 * 24 * time.Hour, CalendarMonth: 30 * 24 * time.Hour, CalendarYear: 365 * 24 * time.Hour}
	for seed := int64(1); seed <= 400; seed++ {
		r := rand.New(rand.NewSource(seed))
		c := cals[r.Intn(len(cals))]
		l := Limit{Algorithm: FixedWindow, Limit: 1 + r.Int63n(20), Period: time.Hour, Calendar: c}
		instants, costs := schedule(r, 200, lengths[c.Unit()], 1+l.Limit/3)
		skew := seed%2 == 0
		if skew {
			for i := range instants {
				if r.Intn(4) == 0 {
					instants[i] -= r.Int63n(int64(lengths[c.Unit()])/4 + 1)
				}
			}
		}
		adm := run(t, l, instants, costs)
		if skew {
			continue
		}
		per := map[int64]int64{}
		for _, a := range adm {
			start, _ := c.Window(a.at)
			per[start] += a.cost
		}
		for w, n := range per {
			if n > l.Limit {
				t.Fatalf("seed %d %+v: %d admitted in the window from %s", seed, l, n, fmtNanos(w))
			}
		}
		if len(per) < 2 {
			t.Fatalf("seed %d %+v: the schedule stayed in one window", seed, l)
		}
	}
}

// The weighted window is an approximation over sliding periods, but it
// never admits more than Limit in one aligned window, and the weighted count
// it enforces never exceeds Limit right after an admission.
func TestPropertySlidingWindow(t *testing.T) {
	for seed := int64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewSource(seed))
		l := randomLimit(r, SlidingWindow)
		instants, costs := schedule(r, 200, l.Period, 1+l.Limit/3)
		var s State
		per := map[int64]int64{}
		for i, now := range instants {
			o := l.Decide(&s, now, costs[i], true)
			checkOutcome(t, l, &s, now, costs[i], o)
			if !o.Allowed {
				continue
			}
			per[windowStart(now, int64(l.Period))] += costs[i]
			w := l.swinOf(&s, now)
			if c := w.countAt(now); c > float64(l.Limit)+1e-9 {
				t.Fatalf("seed %d %+v: weighted count %.3f after admission", seed, l, c)
			}
		}
		for w, n := range per {
			if n > l.Limit {
				t.Fatalf("seed %d %+v: %d admitted in window %d", seed, l, n, w)
			}
		}
	}
}

// With clock skew (instants going back a little) every algorithm keeps its
// outcome contract, including exact retry and reset times.
func TestPropertyClockSkew(t *testing.T) {
	for a := TokenBucket; a <= FixedWindow; a++ {
		for seed := int64(1); seed <= 100; seed++ {
			r := rand.New(rand.NewSource(seed))
			l := randomLimit(r, a)
			instants, costs := schedule(r, 150, l.Period, 1+l.Capacity()/2)
			for i := range instants {
				if r.Intn(4) == 0 {
					instants[i] -= r.Int63n(int64(l.Period)/4 + 1)
				}
			}
			run(t, l, instants, costs)
		}
	}
}

// FuzzDecide feeds arbitrary limits, states, instants and costs: Decide never
// panics and keeps its outcome contract, and for a valid limit with a sane
// state (its instant within a period or so of now) retry and reset are exact.
func FuzzDecide(f *testing.F) {
	f.Add(uint8(1), int64(10), int64(60e9), int64(0), 3.5, 0.0, int64(-5e9), int64(0), int64(1), true)
	f.Add(uint8(2), int64(10), int64(60e9), int64(0), 9.0, 4.0, int64(-30e9), int64(0), int64(2), false)
	f.Add(uint8(3), int64(5), int64(1e9), int64(0), 0.0, 0.0, int64(0), int64(-3e8), int64(3), true)
	f.Add(uint8(4), int64(7), int64(1e6), int64(0), 7.0, 0.0, int64(-1), int64(0), int64(1), true)
	f.Fuzz(func(t *testing.T, alg uint8, limit, period, burst int64, tokens, prev float64, at, logAt, cost int64, consume bool) {
		l := Limit{Algorithm: Algorithm(alg), Limit: limit, Period: time.Duration(period), Burst: burst}
		now := t0
		s := State{Tokens: tokens, Prev: prev}
		if at != 0 {
			s.At = now + at
		}
		if l.Algorithm == SlidingLog && limit > 0 && limit <= MaxLogLimit {
			for i := range min(limit, 5) {
				s.Log = append(s.Log, now+logAt+i)
			}
		}
		sane := l.Validate() == nil && cost >= 1 && cost <= 4*l.Capacity() &&
			tokens >= 0 && tokens <= float64(l.Capacity()) && prev >= 0 && prev <= float64(l.Limit) &&
			at > -3*period && at <= 0 && logAt > -period && logAt <= 0 && !math.IsNaN(tokens) && !math.IsNaN(prev)
		if l.Algorithm == FixedWindow || l.Algorithm == SlidingWindow {
			sane = sane && s.At == windowStart(s.At, period) && tokens == math.Trunc(tokens) && prev == math.Trunc(prev)
		}
		before := s.Clone()
		o := l.Decide(&s, now, cost, consume)
		if o.Remaining < 0 || o.Reset < 0 || (o.Allowed && o.RetryAfter != 0) || (!o.Allowed && o.RetryAfter == 0) {
			t.Fatalf("%+v %+v cost %d: %+v", l, before, cost, o)
		}
		if sane {
			// A peek answers as the consuming check would; check that one
			// against the state it leaves.
			after := before.Clone()
			oc := l.Decide(&after, now, cost, true)
			if oc != o {
				t.Fatalf("%+v %+v: consume=%v %+v, consuming %+v", l, before, consume, o, oc)
			}
			checkOutcome(t, l, &after, now, cost, oc)
		}
	})
}
