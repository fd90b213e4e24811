package bus

import (
	"testing"
	"time"
)

// After requests fail for the set time on a live connection, Unstick moves
// it to another server once, and not again until that time has passed once
// more; a success starts the count again.
func TestUnstickReconnectsOnce(t *testing.T) {
	u := NewUnstick(nil, 3*time.Second, nil)
	now := time.Unix(1_700_000_000, 0)
	var moves int
	u.now, u.reconnect = func() time.Time { return now }, func() error { moves++; return nil }
	at := func(d time.Duration) { now = time.Unix(1_700_000_000, 0).Add(d) }
	for _, s := range []struct {
		at    time.Duration
		ok    bool
		moves int
	}{
		{at: 0, moves: 0},
		{at: 2 * time.Second, moves: 0},
		{at: 3 * time.Second, moves: 1},
		{at: 4 * time.Second, moves: 1},
		{at: 5900 * time.Millisecond, moves: 1},
		{at: 6 * time.Second, moves: 2},
		{at: 7 * time.Second, ok: true, moves: 2},
		{at: 8 * time.Second, moves: 2},
		{at: 10 * time.Second, moves: 2},
		{at: 11 * time.Second, moves: 3},
	} {
		at(s.at)
		if s.ok {
			u.OK()
		} else {
			u.Failed()
		}
		if moves != s.moves {
			t.Fatalf("at %v: %d reconnects, want %d", s.at, moves, s.moves)
		}
	}
}
