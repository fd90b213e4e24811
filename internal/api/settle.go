package api

import (
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/reserve"
)

type settleBody struct {
	Reservation string `json:"reservation"`
	Actual      *int64 `json:"actual"`
}

// settleAnswer is POST /v1/settle's answer.
type settleAnswer struct {
	Reservation string    `json:"reservation"`
	Policy      string    `json:"policy"`
	Reserved    int64     `json:"reserved"`
	Cap         int64     `json:"cap"`
	Actual      int64     `json:"actual"`
	Difference  int64     `json:"difference"` // charged (> 0) or given back (< 0)
	SettledAt   time.Time `json:"settled_at"`
	Replayed    bool      `json:"replayed"`
}

// settle settles a reservation with the amount the request really used.
// The worker records the settle first, once (a repeat with the same
// amount is answered as the first was and changes nothing); then the
// difference goes to the reservation's buckets. When that fails, the
// record is undone so that the caller's retry settles again.
func (h settleRoutes) settle(c echo.Context) error {
	now := h.Now()
	var b settleBody
	if err := bind(c, &b); err != nil {
		return err
	}
	switch {
	case b.Reservation == "":
		return errs.Errorf(errs.Invalid, "reservation: required, the id a check with reserve answered")
	case len(b.Reservation) > 64:
		return errs.Errorf(errs.Invalid, "reservation: longer than 64 bytes")
	case b.Actual == nil:
		return errs.Errorf(errs.Invalid, "actual: required, the units the request used")
	case *b.Actual < 0 || *b.Actual > reserve.MaxUnits:
		return errs.Errorf(errs.Invalid, "actual: must be an integer between 0 and %d", reserve.MaxUnits)
	}
	tenant := tenantID(c)
	ctx := c.Request().Context()
	s, err := h.Services.Reservations.Settle(ctx, reserve.Settle{TenantID: tenant, ID: b.Reservation, Actual: *b.Actual, At: now})
	if err != nil {
		return err
	}
	r := s.Reservation
	if !s.Replayed || r.Unapplied {
		if err := h.Engine.Settle(ctx, r, now); err != nil {
			return err
		}
	}
	return c.JSON(http.StatusOK, settleAnswer{Reservation: r.ID, Policy: r.Policy, Reserved: r.Reserved, Cap: r.Cap,
		Actual: *r.Actual, Difference: r.Difference(), SettledAt: *r.SettledAt, Replayed: s.Replayed})
}

// ReservesPerSecond bounds the reservations one tenant makes per second on
// one server (bursts of as many): each is a write at the worker before the
// check answers, and one tenant's flood of them must not slow the others'
// writes. Checks without reserve are not limited by it.
const ReservesPerSecond = 5000

// maxReserveTenants bounds the tenants whose reservation buckets a server
// holds at once. A bucket full again is dropped before a new tenant's is
// made, so only tenants reserving within the last second count; past the
// bound the least recently active tenant's bucket is evicted.
const maxReserveTenants = 1 << 16

// reserveLimiter holds a token bucket per tenant (ReservesPerSecond a
// second, bursts of as many) in a bounded table. In front of it, held
// refuses a tenant the worker's cluster-wide limit refused lately
// (writelimit.go). The zero value is ready to use.
type reserveLimiter struct {
	now     func() time.Time
	held    heldOff
	mu      sync.Mutex
	buckets *keyed.Buckets[string]
}

// allow takes n reservations from tenant's bucket, or refuses with the
// error to answer; a refusal takes nothing.
func (l *reserveLimiter) allow(tenant string, n int) error {
	if n == 0 {
		return nil
	}
	now := time.Now
	if l.now != nil {
		now = l.now
	}
	t := now()
	if err := l.held.check(tenant, t); err != nil {
		return err
	}
	l.mu.Lock()
	if l.buckets == nil {
		l.buckets = keyed.NewBuckets[string](quota.Limit{Algorithm: quota.TokenBucket, Limit: ReservesPerSecond, Period: time.Second}, maxReserveTenants)
	}
	o := l.buckets.Take(tenant, t.UnixNano(), int64(n))
	l.mu.Unlock()
	if !o.Allowed {
		return errs.Errorf(errs.RateLimited, "reserve: more than %d reservations a second for this tenant on this server; try again shortly", ReservesPerSecond)
	}
	return nil
}
