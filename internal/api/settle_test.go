package api

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// A tenant's reservations are bounded per second on one server; another
// tenant's are not touched by it.
func TestReserveLimiter(t *testing.T) {
	var l reserveLimiter
	if err := l.allow("ten_a", ReservesPerSecond-1); err != nil {
		t.Fatal(err)
	}
	if err := l.allow("ten_a", 1); err != nil {
		t.Fatal(err)
	}
	if err := l.allow("ten_a", 2); errs.Code(err) != errs.RateLimited {
		t.Fatalf("past the bound: %v", err)
	}
	if err := l.allow("ten_b", ReservesPerSecond); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	if err := l.allow("ten_a", 0); err != nil {
		t.Fatalf("no reservation: %v", err)
	}
}

// A worker's refusal of a tenant's reservations or settles, with when to
// retry, is remembered: until then the server refuses that tenant's
// next ones itself (before a check takes an estimate), and no other
// tenant's.
func TestHeldOffAfterTheWorkersRefusal(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	now := t0
	l := reserveLimiter{now: func() time.Time { return now }, held: heldOff{what: "reserve"}}
	l.held.note("ten_a", errs.Errorf(errs.Unavailable, "down"), now)
	l.held.note("ten_a", errs.Errorf(errs.RateLimited, "no retry time"), now)
	if err := l.allow("ten_a", 1); err != nil {
		t.Fatalf("held off by an error that says no retry time: %v", err)
	}
	l.held.note("ten_a", errs.Limited(300*time.Millisecond, "limited"), now)
	now = t0.Add(100 * time.Millisecond)
	err := l.allow("ten_a", 1)
	if errs.Code(err) != errs.RateLimited || errs.RetryAfter(err) != 200*time.Millisecond {
		t.Fatalf("while held off: %v (retry after %s)", err, errs.RetryAfter(err))
	}
	if err := l.allow("ten_b", 1); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	now = t0.Add(300 * time.Millisecond)
	if err := l.allow("ten_a", 1); err != nil {
		t.Fatalf("after the retry time: %v", err)
	}
	// The table drops what has passed as it grows.
	for i := range 1000 {
		l.held.note(fmt.Sprint("ten_", i), errs.Limited(time.Millisecond, "limited"), now.Add(time.Duration(i)*time.Second))
	}
	if n := len(l.held.until); n > 128 {
		t.Fatalf("%d tenants held, want at most 128", n)
	}
}
