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
		// Failing on the next server too: it is given twice as long (6 s).
		{at: 6 * time.Second, moves: 1},
		{at: 8900 * time.Millisecond, moves: 1},
		{at: 9 * time.Second, moves: 2},
		// Then four times as long (12 s), then eight (24 s), no more.
		{at: 20 * time.Second, moves: 2},
		{at: 21 * time.Second, moves: 3},
		{at: 44 * time.Second, moves: 3},
		{at: 45 * time.Second, moves: 4},
		{at: 68 * time.Second, moves: 4},
		{at: 69 * time.Second, moves: 5},
		// A success starts over: 3 s of failures move again.
		{at: 70 * time.Second, ok: true, moves: 5},
		{at: 71 * time.Second, moves: 5},
		{at: 73 * time.Second, moves: 5},
		{at: 74 * time.Second, moves: 6},
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
