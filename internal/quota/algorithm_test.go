package quota

import (
	"errors"
	"math"
	"testing"
	"time"
)

// t0 is a fixed instant aligned to an hour (and so to every period used
// below that divides a minute), so window boundaries fall at known offsets.
const t0 = int64(1_699_999_200) * int64(time.Second)

func at(d time.Duration) int64 { return t0 + int64(d) }

// step is one request in a table: at offset at, cost units, consuming unless
// peek, and the outcome it must get.
type step struct {
	at   time.Duration
	cost int64
	peek bool
	want Outcome
}

func ok(limit, remaining int64, reset time.Duration) Outcome {
	return Outcome{Allowed: true, Limit: limit, Remaining: remaining, Reset: reset}
}

func deny(limit, remaining int64, reset, retry time.Duration) Outcome {
	return Outcome{Limit: limit, Remaining: remaining, Reset: reset, RetryAfter: retry}
}

// repeat returns n identical steps.
func repeat(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func runSteps(t *testing.T, l Limit, steps []step) *State {
	t.Helper()
	var s State
	for i, st := range steps {
		cost := st.cost
		if cost == 0 {
			cost = 1
		}
		got := l.Decide(&s, at(st.at), cost, !st.peek)
		if got != st.want {
			t.Fatalf("step %d (at %v, cost %d, peek %v):\n got %+v\nwant %+v", i, st.at, cost, st.peek, got, st.want)
		}
	}
	return &s
}

func seq(parts ...[]step) []step {
	var out []step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestTokenBucketSteps(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Minute} // one token per 6 s
	var burst []step
	for i := range 10 {
		burst = append(burst, step{at: 0, want: ok(10, int64(9-i), time.Duration(i+1)*6*time.Second)})
	}
	runSteps(t, l, seq(burst, []step{
		{at: 0, want: deny(10, 0, 60*time.Second, 6*time.Second)},               // 11th: one token in 6 s
		{at: 3 * time.Second, want: deny(10, 0, 57*time.Second, 3*time.Second)}, // half a token, kept as a float
		{at: 6 * time.Second, want: ok(10, 0, 60*time.Second)},                  // lazy refill gave exactly 1
		{at: 6 * time.Second, cost: 2, want: deny(10, 0, 60*time.Second, 12*time.Second)},
		{at: 6 * time.Second, cost: 11, want: deny(10, 0, 60*time.Second, Never)}, // more than capacity
		{at: 6 * time.Second, cost: 10, peek: true, want: deny(10, 0, 60*time.Second, 60*time.Second)},
		// A long idle refills to capacity and no further: 10 tokens, not 100.
		{at: 10 * time.Minute, cost: 10, want: ok(10, 0, 60*time.Second)},
		{at: 10 * time.Minute, want: deny(10, 0, 60*time.Second, 6*time.Second)},
	}))
}

// The seed-003 schedule: 5 requests, 15 s idle, 6 more. A token bucket keeps
// the first five (no idle reset) and refills 2.5 tokens meanwhile.
func TestTokenBucketIdleDoesNotReset(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Minute}
	var steps []step
	for i := range 5 {
		steps = append(steps, step{at: 0, want: ok(10, int64(9-i), time.Duration(i+1)*6*time.Second)})
	}
	// At 15 s: 5 + 2.5 = 7.5 tokens. Remaining floors; reset = missing × 6 s.
	for i := range 7 {
		left := 7.5 - float64(i+1)
		steps = append(steps, step{at: 15 * time.Second, want: ok(10, int64(left), time.Duration((10-left)*6)*time.Second)})
	}
	// 0.5 tokens left: the next token is 3 s away; full in 57 s.
	steps = append(steps, step{at: 15 * time.Second, want: deny(10, 0, 57*time.Second, 3*time.Second)})
	runSteps(t, l, steps)
}

func TestTokenBucketBurst(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Minute, Burst: 20}
	steps := []step{{at: 0, cost: 15, want: ok(10, 5, 90*time.Second)}}
	steps = append(steps, step{at: 0, cost: 5, want: ok(10, 0, 120*time.Second)})
	steps = append(steps, step{at: 0, want: deny(10, 0, 120*time.Second, 6*time.Second)})
	steps = append(steps, step{at: 0, cost: 21, want: deny(10, 0, 120*time.Second, Never)})
	// After an hour the bucket holds its burst (20), not the rate (10).
	steps = append(steps, step{at: time.Hour, cost: 20, want: ok(10, 0, 120*time.Second)})
	runSteps(t, l, steps)
}

// Retry-after is rounded up to the nanosecond: at 3 per second a token takes
// 333,333,333.3 ns, so the answer is 333,333,334 ns, and a request exactly
// then is allowed while one a nanosecond earlier is not.
func TestTokenBucketRetryRoundsUp(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Limit: 3, Period: time.Second}
	var s State
	for range 3 {
		if !l.Decide(&s, t0, 1, true).Allowed {
			t.Fatal("burst denied")
		}
	}
	o := l.Decide(&s, t0, 1, true)
	if o.Allowed || o.RetryAfter != 333_333_334 || o.Reset != time.Second {
		t.Fatalf("got %+v", o)
	}
	if l.Decide(&s, t0+int64(o.RetryAfter)-1, 1, false).Allowed {
		t.Fatal("allowed a nanosecond before retry-after")
	}
	if !l.Decide(&s, t0+int64(o.RetryAfter), 1, false).Allowed {
		t.Fatal("denied at retry-after")
	}
}

func TestFixedWindowSteps(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Limit: 10, Period: time.Minute}
	var steps []step
	// 10 in the last 10 s of a window…
	for i := range 10 {
		steps = append(steps, step{at: 50 * time.Second, want: ok(10, int64(9-i), 10*time.Second)})
	}
	steps = append(steps,
		step{at: 50 * time.Second, want: deny(10, 0, 10*time.Second, 10*time.Second)},
		step{at: 59*time.Second + 999*time.Millisecond, cost: 1, peek: true, want: deny(10, 0, time.Millisecond, time.Millisecond)},
	)
	// …and 10 more in the first second of the next: the boundary burst a
	// fixed window allows by design (20 in 10 s), and no more.
	for i := range 10 {
		steps = append(steps, step{at: 60 * time.Second, want: ok(10, int64(9-i), 60*time.Second)})
	}
	steps = append(steps,
		step{at: 61 * time.Second, want: deny(10, 0, 59*time.Second, 59*time.Second)},
		step{at: 61 * time.Second, cost: 11, want: deny(10, 0, 59*time.Second, Never)},
		// An empty window reports no reset; cost counts whole units.
		step{at: 5 * time.Minute, peek: true, want: ok(10, 9, 60*time.Second)},
		step{at: 5*time.Minute + 30*time.Second, cost: 4, want: ok(10, 6, 30*time.Second)},
		step{at: 5*time.Minute + 30*time.Second, cost: 7, want: deny(10, 6, 30*time.Second, 30*time.Second)},
	)
	runSteps(t, l, steps)
}

// The boundary burst of seeds 001/002: a fixed window admits 10 at the end of
// one window and 10 more at the start of the next. The weighted sliding
// window does not: at the boundary the previous window still weighs fully.
func TestSlidingWindowBoundaryBurst(t *testing.T) {
	l := Limit{Algorithm: SlidingWindow, Limit: 10, Period: time.Minute}
	var steps []step
	for i := range 10 {
		steps = append(steps, step{at: 50 * time.Second, want: ok(10, int64(9-i), 70*time.Second)})
	}
	steps = append(steps,
		// At the boundary count = 0 + 10×1 = 10: denied. 10×(rem/60 s) <= 9
		// needs rem <= 54 s, so 6 s. Both windows stop counting at 120 s.
		step{at: 60 * time.Second, want: deny(10, 0, 60*time.Second, 6*time.Second)},
		step{at: 66 * time.Second, want: ok(10, 0, 114*time.Second)}, // count 10×54/60 = 9, +1
		// count 1 + 9 = 10. Room for one when 10×rem/60 <= 8: rem 48 s, at 72 s.
		step{at: 66 * time.Second, want: deny(10, 0, 114*time.Second, 6*time.Second)},
		step{at: 72 * time.Second, peek: true, want: ok(10, 0, 108*time.Second)},
		step{at: 72 * time.Second, cost: 2, want: deny(10, 1, 108*time.Second, 6*time.Second)},
		step{at: 72 * time.Second, cost: 11, want: deny(10, 1, 108*time.Second, Never)},
	)
	runSteps(t, l, steps)
}

// When the current window alone is full, the answer lies in the next window,
// where the current count decays as the previous one.
func TestSlidingWindowRetryCrossesWindow(t *testing.T) {
	l := Limit{Algorithm: SlidingWindow, Limit: 10, Period: time.Minute}
	steps := []step{{at: 10 * time.Second, cost: 10, want: ok(10, 0, 110*time.Second)}}
	// Need 10×(120 s − t)/60 s + 1 <= 10: t >= 66 s, 56 s from now.
	steps = append(steps, step{at: 10 * time.Second, want: deny(10, 0, 110*time.Second, 56*time.Second)})
	// cost 5 needs 10×(120−t)/60 <= 5: t >= 90 s.
	steps = append(steps, step{at: 10 * time.Second, cost: 5, want: deny(10, 0, 110*time.Second, 80*time.Second)})
	steps = append(steps, step{at: 66 * time.Second, want: ok(10, 0, 114*time.Second)})
	// Two windows later nothing counts any more.
	steps = append(steps, step{at: 3 * time.Minute, cost: 10, want: ok(10, 0, 120*time.Second)})
	runSteps(t, l, steps)
}

// A sliding log is exact: it denies the 11th request within any 60 s and
// names the instant the oldest entry leaves the window.
func TestSlidingLogSteps(t *testing.T) {
	l := Limit{Algorithm: SlidingLog, Limit: 10, Period: time.Minute}
	var steps []step
	for i := range 10 { // one per second, 0 s … 9 s
		steps = append(steps, step{at: time.Duration(i) * time.Second, want: ok(10, int64(9-i), 60*time.Second)})
	}
	steps = append(steps,
		step{at: 30 * time.Second, want: deny(10, 0, 39*time.Second, 30*time.Second)}, // 0 s entry leaves at 60 s
		step{at: 60*time.Second - 1, peek: true, want: deny(10, 0, 9*time.Second+1, 1)},
		step{at: 60 * time.Second, want: ok(10, 0, 60*time.Second)}, // (now−60 s, now] no longer holds 0 s
		step{at: 60 * time.Second, want: deny(10, 0, 60*time.Second, time.Second)},
		// cost 3 needs the three oldest counted entries (1 s, 2 s, 3 s) gone.
		step{at: 60 * time.Second, cost: 3, want: deny(10, 0, 60*time.Second, 3*time.Second)},
		step{at: 60 * time.Second, cost: 11, want: deny(10, 0, 60*time.Second, Never)},
		step{at: 63 * time.Second, cost: 3, want: ok(10, 0, 60*time.Second)},
	)
	s := runSteps(t, l, steps)
	// Expired entries were pruned: 4 s … 9 s, 60 s, and three at 63 s.
	if len(s.Log) != 10 || s.Log[0] != at(4*time.Second) || s.Log[9] != at(63*time.Second) {
		t.Fatalf("log = %v", s.Log)
	}
}

// The seed-003 idle test on a sliding log: 5, idle 15 s, 6 → the 11th is denied.
func TestSlidingLogIdle(t *testing.T) {
	l := Limit{Algorithm: SlidingLog, Limit: 10, Period: time.Minute}
	var steps []step
	for i := range 5 {
		steps = append(steps, step{at: 0, want: ok(10, int64(9-i), 60*time.Second)})
	}
	for i := range 5 {
		steps = append(steps, step{at: 15 * time.Second, want: ok(10, int64(4-i), 60*time.Second)})
	}
	steps = append(steps, step{at: 15 * time.Second, want: deny(10, 0, 60*time.Second, 45*time.Second)})
	runSteps(t, l, steps)
}

// Clock skew: a decision at an instant before the bucket's own never refills
// or slides backwards, and answers relative to the bucket's time.
func TestClockGoesBackwards(t *testing.T) {
	t.Run("token_bucket", func(t *testing.T) {
		l := Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Minute}
		runSteps(t, l, []step{
			{at: 60 * time.Second, cost: 10, want: ok(10, 0, 60*time.Second)},
			// 6 s earlier than the last refill: still empty, token at 66 s.
			{at: 54 * time.Second, want: deny(10, 0, 66*time.Second, 12*time.Second)},
			{at: 66 * time.Second, want: ok(10, 0, 60*time.Second)},
		})
	})
	t.Run("fixed_window", func(t *testing.T) {
		l := Limit{Algorithm: FixedWindow, Limit: 2, Period: time.Minute}
		runSteps(t, l, []step{
			{at: 61 * time.Second, cost: 2, want: ok(2, 0, 59*time.Second)},
			// Back into the previous window: the newer window's count stands.
			{at: 59 * time.Second, want: deny(2, 0, 61*time.Second, 61*time.Second)},
		})
	})
	t.Run("sliding_window", func(t *testing.T) {
		l := Limit{Algorithm: SlidingWindow, Limit: 2, Period: time.Minute}
		runSteps(t, l, []step{
			{at: 61 * time.Second, cost: 2, want: ok(2, 0, 119*time.Second)},
			{at: 59 * time.Second, want: deny(2, 0, 121*time.Second, 91*time.Second)},
		})
	})
	t.Run("sliding_log", func(t *testing.T) {
		l := Limit{Algorithm: SlidingLog, Limit: 2, Period: time.Minute}
		s := runSteps(t, l, []step{
			{at: 61 * time.Second, want: ok(2, 1, 60*time.Second)},
			// Stamped at 61 s to keep the log sorted; it counts until 121 s.
			{at: 59 * time.Second, want: ok(2, 0, 62*time.Second)},
			{at: 59 * time.Second, want: deny(2, 0, 62*time.Second, 62*time.Second)},
		})
		if s.Log[0] != at(61*time.Second) || s.Log[1] != at(61*time.Second) {
			t.Fatalf("log = %v", s.Log)
		}
	})
}

func TestDecideNeverPanics(t *testing.T) {
	states := []State{
		{},
		{Tokens: math.NaN(), At: 1},
		{Tokens: math.Inf(-1), Prev: math.NaN(), At: math.MaxInt64},
		{Tokens: math.Inf(1), Prev: -5, At: math.MinInt64},
		{Tokens: -1e300, At: -1, Log: []int64{math.MaxInt64, math.MinInt64, 0}},
	}
	instants := []int64{math.MinInt64, -1, 0, 1, t0, math.MaxInt64}
	limits := []Limit{{}, {Algorithm: 99, Limit: 1, Period: 1}, {Algorithm: TokenBucket, Limit: -1, Period: -1}}
	for a := TokenBucket; a <= FixedWindow; a++ {
		limits = append(limits, Limit{Algorithm: a, Limit: 1, Period: MinPeriod}, Limit{Algorithm: a, Limit: MaxLogLimit, Period: MaxPeriod, Burst: MaxLimit})
	}
	for _, l := range limits {
		for _, s0 := range states {
			for _, now := range instants {
				for _, cost := range []int64{math.MinInt64, 0, 1, 7, math.MaxInt64} {
					s := s0.Clone()
					o := l.Decide(&s, now, cost, true)
					if o.Remaining < 0 || (o.Allowed && o.RetryAfter != 0) || (!o.Allowed && o.RetryAfter == 0) {
						t.Fatalf("%+v %+v now %d cost %d: %+v", l, s0, now, cost, o)
					}
				}
			}
		}
	}
}

func TestInvalidLimitDenies(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Limit: 0, Period: time.Second}
	var s State
	if o := l.Decide(&s, t0, 1, true); o.Allowed || o.RetryAfter != Never {
		t.Fatalf("got %+v", o)
	}
}

func TestDecideAll(t *testing.T) {
	limits := []Limit{
		{Name: "burst", Algorithm: TokenBucket, Limit: 10, Period: time.Minute},
		{Name: "hourly", Algorithm: FixedWindow, Limit: 3, Period: time.Hour},
	}
	states := make([]State, 2)
	out := make([]Outcome, 2)
	for i := range 3 {
		allowed, report := DecideAll(limits, states, t0, 1, true, out)
		// hourly has the least remaining (2, 1, 0 against 9, 8, 7).
		if !allowed || report != 1 || out[0].Remaining != int64(9-i) || out[1].Remaining != int64(2-i) {
			t.Fatalf("request %d: %v %d %+v", i, allowed, report, out)
		}
	}
	before := []State{states[0].Clone(), states[1].Clone()}
	allowed, report := DecideAll(limits, states, t0, 1, true, out)
	if allowed || report != 1 {
		t.Fatalf("4th: %v %d", allowed, report)
	}
	// burst alone would allow; it is described as it is (7 left, nothing
	// consumed), not as the consumption would have left it.
	if want := ok(10, 7, 18*time.Second); out[0] != want {
		t.Fatalf("burst outcome %+v, want %+v", out[0], want)
	}
	if want := deny(3, 0, time.Hour, time.Hour); out[1] != want {
		t.Fatalf("hourly outcome %+v, want %+v", out[1], want)
	}
	if states[0].Tokens != before[0].Tokens || states[0].At != before[0].At || states[1].Tokens != before[1].Tokens || states[1].At != before[1].At {
		t.Fatalf("denied request consumed: %+v -> %+v", before, states)
	}
	if d := CombinedRetryAfter(out); d != time.Hour {
		t.Fatalf("combined retry %v", d)
	}

	// The first denying limit is reported even when a later one denies too.
	limits2 := []Limit{
		{Name: "a", Algorithm: FixedWindow, Limit: 1, Period: time.Minute},
		{Name: "b", Algorithm: FixedWindow, Limit: 1, Period: time.Hour},
		{Name: "c", Algorithm: FixedWindow, Limit: 5, Period: time.Hour},
	}
	states2 := make([]State, 3)
	out2 := make([]Outcome, 3)
	if allowed, report := DecideAll(limits2, states2, t0, 1, true, out2); !allowed || report != 0 {
		t.Fatalf("first: %v %d (ties go to the lowest index)", allowed, report)
	}
	if allowed, report := DecideAll(limits2, states2, t0+1, 1, true, out2); allowed || report != 0 || out2[0].Allowed || out2[1].Allowed || !out2[2].Allowed {
		t.Fatalf("second: %v %d %+v", allowed, report, out2)
	}
	if out2[2].Remaining != 4 {
		t.Fatalf("c remaining %d, want 4 (nothing consumed)", out2[2].Remaining)
	}

	// A peek over several limits consumes nothing even when it allows.
	states3 := make([]State, 3)
	if allowed, _ := DecideAll(limits2, states3, t0, 1, false, out2); !allowed || states3[0].At != 0 || states3[2].At != 0 {
		t.Fatalf("peek consumed: %+v", states3)
	}

	if allowed, report := DecideAll(nil, nil, t0, 1, true, nil); !allowed || report != -1 {
		t.Fatalf("no limits: %v %d", allowed, report)
	}
}

// No partial consumption: when one limit denies, the others keep their
// tokens, so the next request that fits everywhere still finds them.
func TestDecideAllNoPartialConsumption(t *testing.T) {
	limits := []Limit{
		{Name: "fast", Algorithm: TokenBucket, Limit: 100, Period: time.Second},
		{Name: "slow", Algorithm: SlidingLog, Limit: 2, Period: time.Minute},
	}
	states := make([]State, 2)
	out := make([]Outcome, 2)
	admitted := 0
	for i := range 50 {
		if allowed, _ := DecideAll(limits, states, t0+int64(i)*int64(time.Millisecond), 1, true, out); allowed {
			admitted++
		}
	}
	if admitted != 2 || len(states[1].Log) != 2 {
		t.Fatalf("admitted %d, log %v", admitted, states[1].Log)
	}
	tokens, _ := limits[0].tbLevel(&states[0], t0+49*int64(time.Millisecond))
	if tokens != 100 {
		t.Fatalf("fast bucket holds %v tokens, want 100: denied requests consumed", tokens)
	}
}

func TestCombinedRetryAfter(t *testing.T) {
	if d := CombinedRetryAfter([]Outcome{{RetryAfter: time.Second}, {RetryAfter: Never}, {RetryAfter: time.Hour}}); d != Never {
		t.Fatal(d)
	}
	if d := CombinedRetryAfter([]Outcome{{}, {RetryAfter: 3 * time.Second}, {RetryAfter: time.Second}}); d != 3*time.Second {
		t.Fatal(d)
	}
}

func TestValidate(t *testing.T) {
	good := Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Minute}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		mod   func(*Limit)
		field string
	}{
		{func(l *Limit) { l.Algorithm = 0 }, "algorithm"},
		{func(l *Limit) { l.Algorithm = 9 }, "algorithm"},
		{func(l *Limit) { l.Limit = 0 }, "limit"},
		{func(l *Limit) { l.Limit = MaxLimit + 1 }, "limit"},
		{func(l *Limit) { l.Algorithm, l.Limit = SlidingLog, MaxLogLimit+1 }, "limit"},
		{func(l *Limit) { l.Period = time.Millisecond - 1 }, "period"},
		{func(l *Limit) { l.Period = MaxPeriod + 1 }, "period"},
		{func(l *Limit) { l.Burst = -1 }, "burst"},
		{func(l *Limit) { l.Burst = MaxLimit + 1 }, "burst"},
	}
	for _, c := range cases {
		l := good
		c.mod(&l)
		var fe *FieldError
		if err := l.Validate(); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: got %v, want field %q", l, err, c.field)
		}
		if l.usable() {
			t.Errorf("%+v: usable but invalid", l)
		}
	}
	sl := Limit{Algorithm: SlidingLog, Limit: MaxLogLimit, Period: time.Millisecond}
	if err := sl.Validate(); err != nil || !sl.usable() {
		t.Fatal(err)
	}
}

func TestCapacity(t *testing.T) {
	for _, c := range []struct {
		l    Limit
		want int64
	}{
		{Limit{Algorithm: TokenBucket, Limit: 10}, 10},
		{Limit{Algorithm: TokenBucket, Limit: 10, Burst: 3}, 3},
		{Limit{Algorithm: FixedWindow, Limit: 10, Burst: 30}, 10},
		{Limit{Algorithm: SlidingWindow, Limit: 10, Burst: 30}, 10},
	} {
		if got := c.l.Capacity(); got != c.want {
			t.Errorf("%+v: %d, want %d", c.l, got, c.want)
		}
	}
}

func TestAlgorithmNames(t *testing.T) {
	for a := TokenBucket; a <= FixedWindow; a++ {
		got, err := ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Fatalf("%v: %v %v", a, got, err)
		}
		b, err := a.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Algorithm
		if err := back.UnmarshalText(b); err != nil || back != a {
			t.Fatalf("%s: %v %v", b, back, err)
		}
	}
	if a, err := ParseAlgorithm("Token_Bucket"); err != nil || a != TokenBucket {
		t.Fatal(a, err)
	}
	var fe *FieldError
	if _, err := ParseAlgorithm("leaky_bucket"); !errors.As(err, &fe) || fe.Field != "algorithm" {
		t.Fatal(err)
	}
	if Algorithm(0).String() != "algorithm(0)" {
		t.Fatal(Algorithm(0).String())
	}
	if _, err := Algorithm(7).MarshalText(); err == nil {
		t.Fatal("marshalled an invalid algorithm")
	}
	want := map[Algorithm]string{TokenBucket: "token_bucket", SlidingWindow: "sliding_window", SlidingLog: "sliding_log", FixedWindow: "fixed_window"}
	for a, s := range want {
		if a.String() != s {
			t.Errorf("%d: %q", a, a.String())
		}
	}
}

func TestWindowStart(t *testing.T) {
	for _, c := range []struct{ t, p, want int64 }{
		{0, 10, 0}, {9, 10, 0}, {10, 10, 10}, {-1, 10, -10}, {-10, 10, -10}, {-11, 10, -20},
	} {
		if got := windowStart(c.t, c.p); got != c.want {
			t.Errorf("windowStart(%d, %d) = %d, want %d", c.t, c.p, got, c.want)
		}
	}
}
