package tick

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Every calls fn once a period, first after one period; after a slow
// call the next follows at once and the other ticks it overlapped are
// dropped; Every returns once ctx ends.
func TestEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		var (
			mu sync.Mutex
			at []time.Duration
		)
		calls := func() []time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return append([]time.Duration(nil), at...)
		}
		start := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			Every(ctx, time.Second, func() {
				mu.Lock()
				at = append(at, time.Since(start))
				n := len(at)
				mu.Unlock()
				if n == 2 {
					time.Sleep(2500 * time.Millisecond) // over the ticks at 3 s and 4 s
				}
			})
		}()
		synctest.Wait()
		if got := calls(); len(got) != 0 {
			t.Fatalf("called at once: %v", got)
		}
		time.Sleep(6500 * time.Millisecond)
		synctest.Wait()
		want := []time.Duration{1 * time.Second, 2 * time.Second, 4500 * time.Millisecond, 5 * time.Second, 6 * time.Second}
		if got := calls(); !slices.Equal(got, want) {
			t.Fatalf("called at %v, want %v", got, want)
		}
		cancel()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("Every still runs after its context ended")
		}
	})
}
