package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// A tenant's Envoy calls past its share of the door wait for it (a call
// costs at most a burst, so at most a second); another tenant's calls
// never wait for the first one's.
func TestDoorShareHoldsATenantToItsBytes(t *testing.T) {
	d := newDoorShare(100_000) // 100 000 bytes a second, bursts of as many
	ctx := context.Background()
	if w, err := d.take(ctx, "ten_a", 100_000); err != nil || w != 0 {
		t.Fatalf("a burst's worth: waited %s, %v; want at once", w, err)
	}
	// Small calls are not charged, even past the share.
	for range 100 {
		if w, err := d.take(ctx, "ten_a", doorFreeBytes); err != nil || w != 0 {
			t.Fatalf("a call of %d bytes past the share: waited %s, %v; want at once", doorFreeBytes, w, err)
		}
	}
	// The next 10 000 bytes are there in 100 ms.
	w, err := d.take(ctx, "ten_a", 10_000)
	if err != nil || w < 80*time.Millisecond || w > time.Second {
		t.Fatalf("past the share: waited %s, %v; want about 100ms", w, err)
	}
	// Another tenant is not held by ten_a's share.
	if w, err := d.take(ctx, "ten_b", 50_000); err != nil || w != 0 {
		t.Fatalf("another tenant: waited %s, %v; want at once", w, err)
	}
	// A call larger than a burst costs a burst: it is decided, not refused
	// for ever.
	d2 := newDoorShare(10_000)
	if _, err := d2.take(ctx, "ten_a", 1<<20); err != nil {
		t.Fatalf("a call larger than a burst: %v", err)
	}
	// A call whose context ends stops waiting.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := d2.take(cctx, "ten_a", 5_000); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call whose deadline passes while it waits: %v", err)
	}
	if n := len(d2.waiting); n != 0 {
		t.Fatalf("%d tenants still counted waiting", n)
	}
	// Negative: no share.
	if d := newDoorShare(-1); d != nil {
		t.Fatal("a negative share is a share")
	}
}

func TestDoorShareBoundsItsWaiters(t *testing.T) {
	d := newDoorShare(1_000_000)
	ctx := context.Background()
	d.take(ctx, "ten_a", 1_000_000) // empty
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := 0
	for range doorWaitersMax + 4 {
		wg.Go(func() {
			// 10 000 bytes each: 10 ms apart, all within doorWaitMax.
			if _, err := d.take(ctx, "ten_a", 10_000); errs.Is(err, errs.RateLimited) {
				mu.Lock()
				refused++
				mu.Unlock()
			} else if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if refused == 0 {
		t.Fatalf("%d calls waited at once, none refused; want at most %d waiting", doorWaitersMax+4, doorWaitersMax)
	}
	if len(d.waiting) != 0 {
		t.Fatalf("waiting counts left: %v", d.waiting)
	}
}

func TestCallBytes(t *testing.T) {
	r := &RLSRequest{Domain: "edge", Descriptors: []RLSDescriptor{desc("a", "bc"), desc("remote_address", "10.0.0.1")}}
	if n := callBytes(r); n != int64(len("edge")+len("abc")+len("remote_address10.0.0.1")) {
		t.Fatalf("callBytes = %d", n)
	}
}
