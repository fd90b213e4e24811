package quota

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Algorithm names a rate-limit algorithm. The zero Algorithm is invalid.
type Algorithm uint8

// The algorithms a Limit can use.
const (
	// TokenBucket holds up to Capacity tokens, refilled continuously at Limit
	// per Period; a request takes cost tokens.
	TokenBucket Algorithm = iota + 1
	// SlidingWindow is the weighted two-window counter (Cloudflare-style):
	// count = curr + prev*(1 - elapsed fraction of the current window).
	SlidingWindow
	// SlidingLog keeps the exact instant of every admitted unit within the last
	// Period; Limit is at most MaxLogLimit.
	SlidingLog
	// FixedWindow counts units in windows aligned at multiples of Period since
	// the unix epoch, or in the windows of the limit's Calendar.
	FixedWindow
	// Concurrency holds at most Limit leases at once, whatever the cost of
	// a request: a slot is taken only by Cache.AcquireBytesBound and given
	// back by Cache.Release or when its lease expires (concurrency.go). It
	// has no Period, Burst or Calendar.
	Concurrency
)

// Bounds checked by Limit.Validate.
const (
	// MaxLogLimit bounds a sliding log's Limit, and so the memory of its bucket.
	MaxLogLimit = 1000
	// MaxConcurrency bounds a concurrency limit's Limit, and so the leases a
	// bucket holds (two numbers each in its state).
	MaxConcurrency = 1000
	// MaxLimit bounds Limit and Burst so that counts and costs stay exact in a
	// float64 and no arithmetic on them can overflow.
	MaxLimit = 1 << 50
	// MinPeriod and MaxPeriod bound Period. The upper bound keeps window and
	// refill arithmetic on unix nanoseconds far from overflow.
	MinPeriod = time.Millisecond
	MaxPeriod = 10 * 365 * 24 * time.Hour
)

// Never is the RetryAfter of a request that can never be allowed because its
// cost exceeds the limit's capacity.
const Never time.Duration = -1

var algorithmNames = [...]string{
	TokenBucket:   "token_bucket",
	SlidingWindow: "sliding_window",
	SlidingLog:    "sliding_log",
	FixedWindow:   "fixed_window",
	Concurrency:   "concurrency",
}

// String returns the API name of a ("token_bucket", …), or "algorithm(N)" for
// an invalid value.
func (a Algorithm) String() string {
	if a.Valid() {
		return algorithmNames[a]
	}
	return "algorithm(" + strconv.Itoa(int(a)) + ")"
}

// Valid reports whether a is one of the defined algorithms.
func (a Algorithm) Valid() bool { return a >= TokenBucket && a <= Concurrency }

// ParseAlgorithm parses an API algorithm name, ignoring ASCII case. The error
// is a *FieldError for field "algorithm".
func ParseAlgorithm(s string) (Algorithm, error) {
	for a := TokenBucket; a <= Concurrency; a++ {
		if strings.EqualFold(s, algorithmNames[a]) {
			return a, nil
		}
	}
	return 0, &FieldError{Field: "algorithm", Message: "must be one of token_bucket, sliding_window, sliding_log, fixed_window, concurrency (got " + strconv.Quote(s) + ")"}
}

// MarshalText implements encoding.TextMarshaler with the API name.
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.Valid() {
		return nil, &FieldError{Field: "algorithm", Message: "invalid value " + strconv.Itoa(int(a))}
	}
	return []byte(algorithmNames[a]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler, as ParseAlgorithm.
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// FieldError is a validation failure of one named input field. Field uses the
// API's JSON names ("algorithm", "limit", "period", "burst", "calendar",
// "anchor", "path", "method", "query").
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Limit is one rate limit. Limits are plain values, safe to share between
// goroutines as long as nobody mutates them. Compare them with Equal: ==
// compares Calendars by address.
type Limit struct {
	Name      string        // "" for a tier's single unnamed limit
	Algorithm Algorithm     //
	Limit     int64         // units per Period (per calendar window with a Calendar), >= 1; 0 admits nothing (fixed_window only)
	Period    time.Duration // >= MinPeriod
	Burst     int64         // token bucket capacity; 0 means Limit. Ignored by other algorithms.
	// Calendar, when set, makes a FixedWindow count in its windows (a local
	// month, say) instead of multiples of Period. Period must still be
	// within [MinPeriod, MaxPeriod] but no window uses it: it is the nominal
	// length callers may report (a month as 30 days, say).
	Calendar *Calendar
}

// Equal reports whether l and m are the same limit: equal fields, their
// Calendars equal by value (Calendar.Equal). The Cache keeps a bucket's
// consumption across limits that are Equal.
func (l Limit) Equal(m Limit) bool {
	lc, mc := l.Calendar, m.Calendar
	l.Calendar, m.Calendar = nil, nil
	return l == m && lc.Equal(mc)
}

// Capacity is the most units the limit can admit at once: Burst for a token
// bucket with a positive Burst, else Limit.
func (l Limit) Capacity() int64 {
	if l.Algorithm == TokenBucket && l.Burst > 0 {
		return l.Burst
	}
	return l.Limit
}

// Validate checks l and returns a *FieldError naming the first bad field, or nil.
func (l Limit) Validate() error {
	fe := func(field, msg string) error { return &FieldError{Field: field, Message: msg} }
	if l.Algorithm == Concurrency {
		return l.validateConcurrency()
	}
	switch {
	case !l.Algorithm.Valid():
		return fe("algorithm", "must be one of token_bucket, sliding_window, sliding_log, fixed_window, concurrency")
	case l.Calendar != nil && l.Algorithm != FixedWindow:
		return fe("calendar", "needs algorithm fixed_window")
	case l.Calendar != nil && !l.Calendar.valid():
		return fe("calendar", "must be made by NewCalendar")
	case l.Limit < 1 && !l.banned():
		return fe("limit", "must be at least 1 (0 only for a fixed_window without a calendar)")
	case l.Limit > MaxLimit:
		return fe("limit", "must be at most "+strconv.FormatInt(MaxLimit, 10))
	case l.Algorithm == SlidingLog && l.Limit > MaxLogLimit:
		return fe("limit", "must be at most "+strconv.Itoa(MaxLogLimit)+" for sliding_log")
	case l.Period < MinPeriod:
		return fe("period", "must be at least 1ms")
	case l.Period > MaxPeriod:
		return fe("period", "must be at most 3650 days")
	case l.Burst < 0:
		return fe("burst", "must not be negative")
	case l.Burst > MaxLimit:
		return fe("burst", "must be at most "+strconv.FormatInt(MaxLimit, 10))
	}
	return nil
}

// banned reports a fixed window of limit 0: it counts, and admits nothing
// (the reference's requests_per_unit: 0).
func (l *Limit) banned() bool {
	return l.Limit == 0 && l.Algorithm == FixedWindow && l.Calendar == nil
}

// usable is Validate without the error values, cheap enough for every decision.
func (l *Limit) usable() bool {
	if l.Algorithm == Concurrency {
		return l.Limit >= 1 && l.Limit <= MaxConcurrency && l.Period == 0 && l.Burst == 0 && l.Calendar == nil
	}
	return l.Algorithm.Valid() && (l.Limit >= 1 || l.banned()) && l.Limit <= MaxLimit &&
		(l.Algorithm != SlidingLog || l.Limit <= MaxLogLimit) &&
		l.Period >= MinPeriod && l.Period <= MaxPeriod && l.Burst >= 0 && l.Burst <= MaxLimit &&
		(l.Calendar == nil || l.Algorithm == FixedWindow && l.Calendar.valid())
}

// State is the bucket of one limit for one key. The zero State is a full,
// never-used bucket. A State belongs to one Limit: decide it only with that
// limit (the Cache remaps states when a policy changes).
type State struct {
	// Tokens is, for a token bucket, the tokens at At (a float, never rounded:
	// rounding would lose partial refills); for the window algorithms, the
	// units counted in the window starting at At.
	Tokens float64
	// Prev is, for a sliding window, the units counted in the window before At.
	Prev float64
	// At is unix nanoseconds: a token bucket's last refill, or the start of
	// the current window (a multiple of Period, or a calendar window's
	// start). 0 means never used.
	At int64
	// Log holds, for a sliding log, the instant of each admitted unit, oldest
	// first, at most Limit entries (a cost of n appends n entries).
	Log []int64
}

// Clone returns a copy of s that shares no memory with it.
func (s State) Clone() State {
	if s.Log != nil {
		s.Log = append([]int64(nil), s.Log...)
	}
	return s
}

// Outcome is the answer of one limit to one request.
type Outcome struct {
	Allowed bool
	// Limit is the limit's Limit (units per period).
	Limit int64
	// Remaining is the whole units left after this decision, never negative.
	Remaining int64
	// Reset is the time until the bucket is full again (no usage counted).
	Reset time.Duration
	// RetryAfter is the time until this same request (same cost) would be
	// allowed: 0 if allowed, Never if the cost exceeds the capacity.
	RetryAfter time.Duration
}

// Decide evaluates the limit for a request of cost units at instant now (unix
// ns). A cost below 1 counts as 1. If consume is true and the request is
// allowed, Decide updates *s; a denied request never consumes. With consume
// false (a peek) *s is left untouched but the Outcome is the one a consuming
// call would have returned.
//
// A limit that fails Validate denies every request with RetryAfter Never.
// Decide never panics, whatever the state or the instant.
func (l *Limit) Decide(s *State, now int64, cost int64, consume bool) Outcome {
	var o Outcome
	l.decide(s, now, cost, consume, &o)
	return o
}

// decide is Decide writing its Outcome to *o, which saves the hot path two
// copies of it.
func (l *Limit) decide(s *State, now int64, cost int64, consume bool, o *Outcome) {
	cost = max(cost, 1)
	if !l.usable() {
		*o = Outcome{Limit: l.Limit, RetryAfter: Never}
		return
	}
	switch l.Algorithm {
	case TokenBucket:
		l.tokenBucket(s, now, cost, consume, o)
	case FixedWindow:
		l.fixedWindow(s, now, cost, consume, o)
	case SlidingWindow:
		l.slidingWindow(s, now, cost, consume, o)
	case Concurrency:
		l.concurrency(s, now, o)
	default:
		l.slidingLog(s, now, cost, consume, o)
	}
}

// status returns the Remaining and Reset of the bucket as it is, with no
// request's consumption: a request larger than the capacity is always denied,
// and a denial describes the bucket unchanged.
func (l *Limit) status(s *State, now int64) (remaining int64, reset time.Duration) {
	if l.Algorithm == Concurrency {
		live, _, last := leaseSpan(s.Log, now)
		if live > 0 {
			reset = time.Duration(last - now)
		}
		return max(l.Limit-live, 0), reset
	}
	o := l.Decide(s, now, l.Capacity()+1, false)
	return o.Remaining, o.Reset
}

func (l *Limit) tokenBucket(s *State, now, cost int64, consume bool, o *Outcome) {
	*o = Outcome{Limit: l.Limit}
	tokens, base := l.tbLevel(s, now)
	c := float64(cost)
	if cost <= l.Capacity() && tokens >= c {
		after := tokens - c
		o.Allowed = true
		o.Remaining = floorUnits(after)
		o.Reset = l.tbFullIn(after, base, now)
		if consume {
			s.Tokens, s.At = after, base
		}
		return
	}
	o.Remaining = floorUnits(tokens)
	o.Reset = l.tbFullIn(tokens, base, now)
	if cost > l.Capacity() {
		o.RetryAfter = Never
		return
	}
	guess := base + ceilNanos((c-tokens)*float64(l.Period)/float64(l.Limit))
	// The check runs on *s exactly as a later Decide will, so the answer is
	// the first nanosecond at which that later call allows.
	t := settle(guess, now, func(t int64) bool {
		lv, _ := l.tbLevel(s, t)
		return lv >= c
	})
	o.RetryAfter = time.Duration(t - now)
}

// tbLevel returns the tokens in the bucket at now and the instant they are
// counted at: now, or the bucket's own At when the clock has gone backwards
// (there is no negative refill, and At never moves back).
func (l *Limit) tbLevel(s *State, now int64) (tokens float64, at int64) {
	capacity := float64(l.Capacity())
	if s.At == 0 {
		return capacity, now
	}
	tokens = s.Tokens
	if math.IsNaN(tokens) || math.IsInf(tokens, -1) {
		tokens = 0 // a corrupt state fails closed
	}
	tokens = min(tokens, capacity)
	if now <= s.At {
		return tokens, s.At
	}
	elapsed := now - s.At
	if elapsed < 0 { // overflow: an absurdly old At is simply a full bucket
		return capacity, now
	}
	tokens += float64(elapsed) * float64(l.Limit) / float64(l.Period)
	return min(tokens, capacity), now
}

// tbFullIn is the time from now until a bucket holding tokens at base is
// full: (capacity - tokens)/rate, rounded up to the nanosecond. Float
// rounding may put it a nanosecond off the instant a later Decide first sees
// a full bucket; FullAt, which expiry relies on, is exact.
func (l *Limit) tbFullIn(tokens float64, base, now int64) time.Duration {
	missing := float64(l.Capacity()) - tokens
	if !(missing > 0) {
		return 0
	}
	return time.Duration(max(base-now+ceilNanos(missing*float64(l.Period)/float64(l.Limit)), 0))
}

// tbFullAt is the first nanosecond at which a later Decide on s sees a full
// bucket, or 0 if s is full already at its own instant.
func (l *Limit) tbFullAt(s *State) int64 {
	if s.At == 0 {
		return 0
	}
	capacity := float64(l.Capacity())
	tokens, _ := l.tbLevel(s, s.At)
	if !(tokens < capacity) {
		return 0
	}
	guess := s.At + ceilNanos((capacity-tokens)*float64(l.Period)/float64(l.Limit))
	return settle(guess, s.At, func(t int64) bool {
		lv, _ := l.tbLevel(s, t)
		return lv >= capacity
	})
}

// FullAt returns the instant (unix ns) from which the bucket in state s holds
// no usage if nothing more is admitted: the instant Reset counts down to. An
// instant at or before now means the bucket is full; 0 means s records no
// usage at all. The Cache uses it to expire buckets.
func (l *Limit) FullAt(s *State) int64 {
	if !l.usable() {
		return 0
	}
	p := int64(l.Period)
	switch l.Algorithm {
	case TokenBucket:
		return l.tbFullAt(s)
	case FixedWindow:
		if s.At != 0 && sanitizeCount(s.Tokens) > 0 {
			if l.Calendar != nil {
				_, end := l.Calendar.Window(s.At)
				return end
			}
			return s.At + p
		}
	case SlidingWindow:
		switch {
		case s.At == 0:
		case sanitizeCount(s.Tokens) > 0:
			return s.At + 2*p
		case sanitizeCount(s.Prev) > 0:
			return s.At + p
		}
	case Concurrency:
		return leasesEnd(s.Log)
	default:
		if len(s.Log) > 0 {
			return s.Log[len(s.Log)-1] + p
		}
	}
	return 0
}

func (l *Limit) fixedWindow(s *State, now, cost int64, consume bool, o *Outcome) {
	*o = Outcome{Limit: l.Limit}
	start, end, count := l.fwCount(s, now)
	lim := float64(l.Limit)
	if cost <= l.Limit && count+float64(cost) <= lim {
		o.Allowed = true
		o.Remaining = floorUnits(lim - count - float64(cost))
		o.Reset = time.Duration(end - now)
		if consume {
			s.Tokens, s.At = count+float64(cost), start
		}
		return
	}
	o.Remaining = floorUnits(lim - count)
	if count > 0 {
		o.Reset = time.Duration(end - now)
	}
	if cost > l.Limit {
		o.RetryAfter = Never
	} else {
		o.RetryAfter = time.Duration(end - now) // the next window starts empty
	}
}

// fwCount returns the fixed window that now falls in and the units counted
// in it. If the state's window is a later one (the clock went back), that is
// the window returned.
func (l *Limit) fwCount(s *State, now int64) (start, end int64, count float64) {
	if c := l.Calendar; c != nil {
		start, end = c.Window(now)
		if s.At != 0 && s.At >= start {
			if s.At != start {
				_, end = c.Window(s.At)
			}
			return s.At, end, sanitizeCount(s.Tokens)
		}
		return start, end, 0
	}
	p := int64(l.Period)
	start = windowStart(now, p)
	if s.At != 0 && s.At >= start { // this window, or a later one if the clock went back
		return s.At, s.At + p, sanitizeCount(s.Tokens)
	}
	return start, start + p, 0
}

// windowOf is the start of the fixed window that t falls in.
func (l *Limit) windowOf(t int64) int64 {
	if l.Calendar != nil {
		start, _ := l.Calendar.Window(t)
		return start
	}
	return windowStart(t, int64(l.Period))
}

// swinOf returns the sliding window's counters as seen at now. A state from
// the window before becomes prev; an older one has expired.
func (l *Limit) swinOf(s *State, now int64) swin {
	p := int64(l.Period)
	w := swin{start: windowStart(now, p), p: p}
	if s.At != 0 {
		switch {
		case s.At >= w.start: // this window, or a later one if the clock went back
			w.start, w.curr, w.prev = s.At, sanitizeCount(s.Tokens), sanitizeCount(s.Prev)
		case s.At == w.start-p:
			w.prev = sanitizeCount(s.Tokens)
		}
	}
	return w
}

// swin is a sliding window's two counters, seen from the window at start.
type swin struct {
	start, p   int64
	curr, prev float64
}

// countAt is the weighted count at instant t >= the decision instant, if
// nothing more is admitted. It performs the same float operations a later
// Decide at t will, so retry times computed with it are exact.
func (w *swin) countAt(t int64) float64 {
	switch end := w.start + w.p; {
	case t < end:
		rem := min(end-t, w.p) // t before start (clock skew) weighs prev fully
		return w.curr + w.prev*float64(rem)/float64(w.p)
	case t < end+w.p:
		return w.curr * float64(end+w.p-t) / float64(w.p)
	}
	return 0
}

func (l *Limit) slidingWindow(s *State, now, cost int64, consume bool, o *Outcome) {
	*o = Outcome{Limit: l.Limit}
	p := int64(l.Period)
	w := l.swinOf(s, now)
	count := w.countAt(now)
	lim, c := float64(l.Limit), float64(cost)
	if cost <= l.Limit && count+c <= lim {
		o.Allowed = true
		o.Remaining = floorUnits(lim - count - c)
		o.Reset = time.Duration(w.start + 2*p - now)
		if consume {
			s.Tokens, s.Prev, s.At = w.curr+c, w.prev, w.start
		}
		return
	}
	o.Remaining = floorUnits(lim - count)
	switch { // both windows stop counting: curr at the end of the next window
	case w.curr > 0:
		o.Reset = time.Duration(w.start + 2*p - now)
	case w.prev > 0:
		o.Reset = time.Duration(w.start + p - now)
	}
	if cost > l.Limit {
		o.RetryAfter = Never
		return
	}
	// Solve count(t) + cost <= limit. If the current window alone has room,
	// wait for prev's weight to fall enough; else the answer lies in the next
	// window, where curr becomes the decaying previous count.
	var guess int64
	if w.curr+c <= lim && w.prev > 0 {
		guess = w.start + p - floorNanos((lim-w.curr-c)*float64(p)/w.prev)
	} else if w.curr > 0 {
		guess = w.start + 2*p - floorNanos((lim-c)*float64(p)/w.curr)
	} else {
		guess = w.start + p
	}
	t := settle(guess, now, func(t int64) bool { return w.countAt(t)+c <= lim })
	o.RetryAfter = time.Duration(t - now)
}

func (l *Limit) slidingLog(s *State, now, cost int64, consume bool, o *Outcome) {
	*o = Outcome{Limit: l.Limit}
	p := int64(l.Period)
	log := s.Log
	// Entries at or before now-p have expired. Later ones count, including any
	// stamped after now by a server whose clock ran ahead: usage is not
	// forgotten because this clock is behind.
	cut := now - p
	lo, hi := 0, len(log)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if log[m] > cut {
			hi = m
		} else {
			lo = m + 1
		}
	}
	first := lo
	n := int64(len(log) - first)
	if cost <= l.Limit && n+cost <= l.Limit {
		stamp := now
		if len(log) > 0 && log[len(log)-1] > stamp {
			stamp = log[len(log)-1] // keep the log sorted when the clock went back
		}
		o.Allowed = true
		o.Remaining = l.Limit - n - cost
		o.Reset = time.Duration(stamp + p - now)
		if consume {
			if first > 0 {
				log = append(log[:0], log[first:]...) // reuse the array: no growth in steady state
			}
			for range cost {
				log = append(log, stamp)
			}
			s.Log = log
		}
		return
	}
	o.Remaining = max(l.Limit-n, 0)
	if n > 0 {
		o.Reset = time.Duration(log[len(log)-1] + p - now)
	}
	if cost > l.Limit {
		o.RetryAfter = Never
		return
	}
	// The request fits once the k oldest counted entries have expired.
	k := n + cost - l.Limit
	o.RetryAfter = time.Duration(log[first+int(k)-1] + p - now)
}

// DecideAll is the all-or-nothing decision over several limits: the request is
// allowed only if every limit allows it, and (when consume is true) it
// consumes from all of them or from none.
//
// states[i] is the state of limits[i]; out must have at least len(limits)
// elements and receives each limit's outcome. When the request is allowed,
// out[i] is what Decide returns. When it is denied, nothing is consumed, so
// every out[i] describes its bucket as it is: out[i].Allowed says whether
// that limit alone would have allowed the request (then its RetryAfter is 0).
//
// report is the index an API answer describes: the first limit that denied,
// else the one with the least Remaining (ties: the lowest index). With no
// limits DecideAll allows and report is -1.
func DecideAll(limits []Limit, states []State, now int64, cost int64, consume bool, out []Outcome) (allowed bool, report int) {
	n := len(limits)
	if n == 0 {
		return true, -1
	}
	if len(states) < n || len(out) < n {
		panic("quota: DecideAll needs a state and an outcome slot per limit")
	}
	if n == 1 {
		limits[0].decide(&states[0], now, cost, consume, &out[0])
		return out[0].Allowed, 0
	}
	allowed = true
	for i := range limits {
		limits[i].decide(&states[i], now, cost, false, &out[i])
		allowed = allowed && out[i].Allowed
	}
	switch {
	case !allowed:
		// Nothing is consumed: describe the limits that would have allowed
		// by their buckets as they are, not as a consumption would leave them.
		for i := range limits {
			if out[i].Allowed {
				out[i].Remaining, out[i].Reset = limits[i].status(&states[i], now)
			}
		}
	case consume:
		for i := range limits {
			limits[i].Decide(&states[i], now, cost, true)
		}
	}
	return allowed, reportIndex(out[:n], allowed)
}

func reportIndex(out []Outcome, allowed bool) int {
	best := 0
	for i := range out {
		if !allowed {
			if !out[i].Allowed {
				return i
			}
			continue
		}
		if out[i].Remaining < out[best].Remaining {
			best = i
		}
	}
	return best
}

// CombinedRetryAfter is the time until a request denied by DecideAll would be
// allowed by every limit: the largest RetryAfter in out, or Never if any is
// Never. It is exact because, without new consumption, no algorithm here ever
// turns an allowed request back into a denied one as time passes.
func CombinedRetryAfter(out []Outcome) time.Duration {
	var d time.Duration
	for i := range out {
		if out[i].RetryAfter == Never {
			return Never
		}
		d = max(d, out[i].RetryAfter)
	}
	return d
}

// windowStart is the start of the window of length p containing t: the
// largest multiple of p not after t (floor division, also for negative t).
func windowStart(t, p int64) int64 {
	q := t / p
	if t%p < 0 {
		q--
	}
	return q * p
}

// settle returns the earliest instant after now at which ok holds, searching
// from an analytic guess. ok must be monotone (once true, true for every
// later instant). Float rounding puts the guess within a few nanoseconds of
// the answer, so this usually costs two calls of ok; the gallop is bounded so
// that a pathological state cannot loop.
func settle(guess, now int64, ok func(int64) bool) int64 {
	lo, hi := now, max(guess, now+1) // invariant once established: !ok(lo), ok(hi)
	if ok(hi) {
		for step := int64(1); ; step *= 2 {
			t := hi - step
			if t <= lo {
				break
			}
			if !ok(t) {
				lo = t
				break
			}
			hi = t
		}
	} else {
		found := false
		lo = hi
		for step, i := int64(1), 0; i < 48; step, i = step*2, i+1 {
			t := lo + step
			if ok(t) {
				hi, found = t, true
				break
			}
			lo = t
		}
		if !found {
			return lo
		}
	}
	for hi-lo > 1 {
		m := lo + (hi-lo)/2
		if ok(m) {
			hi = m
		} else {
			lo = m
		}
	}
	return hi
}

// maxDuration caps computed durations far below the int64 limit, so adding
// one to a unix-nanosecond instant cannot overflow.
const maxDuration = 1 << 62

func ceilNanos(f float64) int64 {
	if !(f > 0) {
		return 0
	}
	if f >= maxDuration {
		return maxDuration
	}
	return int64(math.Ceil(f))
}

func floorNanos(f float64) int64 {
	if !(f > 0) {
		return 0
	}
	if f >= maxDuration {
		return maxDuration
	}
	return int64(f)
}

// floorUnits is the whole units in x, clamped to [0, MaxLimit].
func floorUnits(x float64) int64 {
	if !(x > 0) {
		return 0
	}
	if x >= MaxLimit {
		return MaxLimit
	}
	return int64(x)
}

// sanitizeCount guards window counts from corrupt states: NaN counts as
// unlimited usage (fail closed), negative as none.
func sanitizeCount(x float64) float64 {
	if math.IsNaN(x) {
		return math.Inf(1)
	}
	return max(x, 0)
}
