// Package tick runs background work on a ticker. It imports only the
// standard library, so that every package may use it. Loops that also
// wake on something else (a status change, a request, a freed slot), run
// once at start, or end themselves keep a ticker of their own.
package tick

import (
	"context"
	"time"
)

// Every calls fn every d until ctx ends, first after d. Calls never
// overlap or queue up: after a call that took longer than d the next
// follows at once, and the other ticks it overlapped are dropped
// (time.Ticker's rule). Every returns when ctx ends, once the call under
// way, if any, has returned.
func Every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
