package engine

import (
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/tenants"
)

// Counting and draining run concurrently (checks and the flusher); every
// decision must land in exactly one drain. Run with -race: an empty shard
// read outside its lock was once a data race here.
func TestCounterAggConcurrentDrain(t *testing.T) {
	c := newCounterAgg()
	const writers, perWriter = 8, 5000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var total int64
	var drained sync.WaitGroup
	drained.Go(func() {
		for {
			for _, r := range c.drain() {
				total += r.Allowed + r.Denied
			}
			select {
			case <-stop:
				for _, r := range c.drain() {
					total += r.Allowed + r.Denied
				}
				return
			default:
			}
		}
	})
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				// Few identities, so most shards stay empty between drains.
				c.add("t", "p", "anonymous", "ip", string(rune('a'+w%3)), 0, i%2 == 0)
			}
		})
	}
	wg.Wait()
	close(stop)
	drained.Wait()
	if total != writers*perWriter {
		t.Fatalf("drained %d decisions, want %d", total, writers*perWriter)
	}
}

// Presented keys are hashed as stored, without allocating.
func TestHashKeyHex(t *testing.T) {
	for _, k := range []string{"sk_short", "sk_" + strings.Repeat("a", 200)} {
		h := hashKeyHex(k)
		if string(h[:]) != tenants.HashKey(k) {
			t.Fatalf("hashKeyHex(%q) = %s, want %s", k, h[:], tenants.HashKey(k))
		}
	}
	k := "sk_0123456789abcdefghijklmnopqrstuvwxyzABCD"
	m := map[string]string{tenants.HashKey(k): "ten_1"}
	if n := testing.AllocsPerRun(100, func() {
		h := hashKeyHex(k)
		if m[string(h[:])] != "ten_1" {
			t.Fatal("lookup failed")
		}
	}); n != 0 {
		t.Fatalf("service key lookup allocates %.0f times", n)
	}
}
