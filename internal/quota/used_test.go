package quota

import (
	"testing"
	"time"
)

// Used reads what a limit holds, past the limit too, at fixed instants:
// a window's count until its window ends, a token bucket's debt until
// refill repays it, a log's entries within the period.
func TestUsed(t *testing.T) {
	start := int64(1e18) - int64(1e18)%int64(time.Minute)
	for _, tc := range []struct {
		alg         Algorithm
		at          time.Duration // after the minute's start, when it is read
		read, later float64
	}{
		{FixedWindow, 10 * time.Second, 8, 0},   // the next window holds none
		{SlidingWindow, 10 * time.Second, 8, 0}, // nor a sliding window's next
		{TokenBucket, 10 * time.Second, 8, 3},   // a minute refills 5 of the 8
		{SlidingLog, 10 * time.Second, 5, 0},    // a log keeps at most its limit
	} {
		l := Limit{Algorithm: tc.alg, Limit: 5, Period: time.Minute}
		var s State
		now := start + int64(tc.at)
		l.Force(&s, now, 8)
		if got := l.Used(&s, now); got != tc.read {
			t.Errorf("%s: %v used after forcing 8 of 5, want %v", tc.alg, got, tc.read)
		}
		if got := l.Used(&s, now+int64(time.Minute)); got != tc.later {
			t.Errorf("%s: %v used a minute later, want %v", tc.alg, got, tc.later)
		}
	}

	c := NewCache()
	limits := []Limit{{Algorithm: FixedWindow, Limit: 5, Period: time.Minute}, {Algorithm: TokenBucket, Limit: 100, Period: time.Hour}}
	key := []byte("t/p/ip:192.0.2.1")
	used := make([]float64, 2)
	if c.Used(key, limits, start, used) || used[0] != 0 || used[1] != 0 {
		t.Fatalf("an absent bucket: %v", used)
	}
	c.Force(string(key), limits, start, 7)
	if !c.Used(key, limits, start, used) || used[0] != 7 || used[1] != 7 {
		t.Fatalf("after forcing 7: %v", used)
	}
}
