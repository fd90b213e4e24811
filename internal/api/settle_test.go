package api

import (
	"testing"

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
