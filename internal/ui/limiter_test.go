package ui

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
)

func testLimiter(pair, addr int64, maxEntries int) *loginLimiter {
	return newLoginLimiter(
		quota.Limit{Algorithm: quota.TokenBucket, Limit: pair, Period: 5 * time.Minute},
		quota.Limit{Algorithm: quota.TokenBucket, Limit: addr, Period: 5 * time.Minute},
		defaultDelay, maxEntries)
}

func TestLoginLimiterSteps(t *testing.T) {
	l := testLimiter(2, 3, 100)
	t0 := time.Unix(1_700_000_000, 0)
	type step struct {
		at          time.Duration
		email, addr string
		fail        bool // the attempt's password is wrong
		ok          bool
		delay       time.Duration
	}
	for i, s := range []step{
		{0, "a@x", "192.0.2.1", true, true, 0},
		{0, "a@x", "192.0.2.1", true, true, 0},
		{0, "a@x", "192.0.2.1", true, false, 0}, // the pair's 2 are used
		{0, "b@x", "192.0.2.1", true, true, 0},  // another email from there: the address's third
		{0, "c@x", "192.0.2.1", true, false, 0}, // the address's 3 are used
		{0, "c@x", "2001:db8::1", true, true, 0},
		{0, "c@x", "2001:db8::2", true, true, 0},
		{0, "c@x", "2001:db8::3", true, false, 0}, // the same /64: the same pair, used up
		// a@x fails from other addresses: past 5 recent failures its
		// attempts wait 250 ms, doubling per failure up to 3 s.
		{0, "a@x", "198.51.100.1", true, true, 0},
		{0, "a@x", "198.51.100.1", true, true, 0},
		{0, "a@x", "198.51.100.2", true, true, 0},
		{0, "a@x", "198.51.100.2", true, true, 250 * time.Millisecond},
		{0, "a@x", "198.51.100.3", true, true, 500 * time.Millisecond},
		{0, "a@x", "198.51.100.3", true, true, time.Second},
		{0, "a@x", "198.51.100.4", true, true, 2 * time.Second},
		{0, "a@x", "198.51.100.4", true, true, 3 * time.Second},
		{0, "a@x", "198.51.100.5", true, true, 3 * time.Second},
		// A refused pair costs nothing and adds no failure.
		{0, "a@x", "198.51.100.5", true, true, 3 * time.Second},
		{0, "a@x", "198.51.100.5", false, false, 0},
		// The failures fade, one a minute.
		{3 * time.Minute, "a@x", "198.51.100.6", false, true, time.Second},
		{20 * time.Minute, "a@x", "198.51.100.6", false, true, 0},
		// Buckets refill: one attempt of 3 per 5 minutes every 100 s.
		{20 * time.Minute, "c@x", "192.0.2.1", true, true, 0},
	} {
		now := t0.Add(s.at)
		ok, wait, delay := l.attempt(s.email, s.addr, now)
		if ok != s.ok || delay != s.delay {
			t.Fatalf("step %d (%s from %s): ok %v delay %s, want %v %s", i, s.email, s.addr, ok, delay, s.ok, s.delay)
		}
		if !ok && (wait <= 0 || wait > 5*time.Minute) {
			t.Fatalf("step %d: refused with wait %s", i, wait)
		}
		if ok && s.fail {
			l.failed(s.email, now)
		}
	}
}

func TestLoginLimiterBounded(t *testing.T) {
	const maxEntries = 50
	l := testLimiter(5, 20, maxEntries)
	now := time.Unix(1_700_000_000, 0)
	l.attempt("victim@x", "192.0.2.1", now)
	l.attempt("victim@x", "192.0.2.1", now)
	l.failed("victim@x", now)
	// Many others, each from its own address, fill every table; the
	// oldest entries (the victim's) go first.
	for i := range 10 * maxEntries {
		email, addr := fmt.Sprintf("u%d@x", i), fmt.Sprintf("10.0.%d.%d", i/256, i%256)
		l.attempt(email, addr, now)
		l.failed(email, now)
		if n := max(l.addrs.Len(), l.pairs.Len(), l.emails.Len()); n > maxEntries {
			t.Fatalf("after %d attempts a table holds %d entries, over %d", i+1, n, maxEntries)
		}
	}
	if l.addrs.Len() != maxEntries || l.pairs.Len() != maxEntries || l.emails.Len() != maxEntries {
		t.Fatalf("tables hold %d, %d, %d entries, want %d each", l.addrs.Len(), l.pairs.Len(), l.emails.Len(), maxEntries)
	}
	// Evicted state starts afresh: a full budget, no failures.
	for i := range 5 {
		if ok, _, delay := l.attempt("victim@x", "192.0.2.1", now); !ok || delay != 0 {
			t.Fatalf("victim's attempt %d after eviction: %v, delay %s", i, ok, delay)
		}
	}
	// Idle entries leave as the limiter is used: 20 minutes later the
	// failures have faded and the buckets refilled.
	l.attempt("late@x", "203.0.113.1", now.Add(20*time.Minute))
	if l.addrs.Len() != 1 || l.pairs.Len() != 1 || l.emails.Len() != 0 {
		t.Errorf("after 20 idle minutes: %d, %d, %d entries, want 1, 1, 0", l.addrs.Len(), l.pairs.Len(), l.emails.Len())
	}
}
