package api

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/service"
)

// The worker limits each tenant's settles and reservations across the
// cluster (worker.WriteLimits) and says, with its refusal, when to retry.
// A server remembers that answer until then and refuses the tenant's next
// settles, or reservations, itself: before a check takes an estimate, and
// without a round trip to the worker. So a tenant's flood past its limit
// costs the worker one refusal per server per retry interval, not one per
// request.

// heldOff is, per tenant, until when the worker refuses its writes of one
// kind. Safe for concurrent use. Tenants are authenticated, and an entry
// lasts only until its instant passes: expired entries are dropped when
// the table has doubled since the last such sweep.
type heldOff struct {
	what string // "settle", "reservation": for the refusal's message

	mu      sync.Mutex
	until   map[string]time.Time
	sweepAt int
}

// check refuses tenant's write at now while the worker's last refusal
// holds.
func (h *heldOff) check(tenant string, now time.Time) error {
	h.mu.Lock()
	until, ok := h.until[tenant]
	h.mu.Unlock()
	if !ok || !now.Before(until) {
		return nil
	}
	wait := until.Sub(now)
	return errs.Limited(wait, "%s: this tenant made more than its limit across the cluster; retry after %d ms", h.what, max(wait.Milliseconds(), 1))
}

// note remembers the worker's refusal err (if it is one) of tenant's
// write made at now.
func (h *heldOff) note(tenant string, err error, now time.Time) {
	wait := errs.RetryAfter(err)
	if !errs.Is(err, errs.RateLimited) || wait <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.until == nil {
		h.until = map[string]time.Time{}
	}
	if len(h.until) >= max(h.sweepAt, 64) {
		for t, u := range h.until {
			if !now.Before(u) {
				delete(h.until, t)
			}
		}
		h.sweepAt = 2 * len(h.until)
	}
	if u := now.Add(wait); u.After(h.until[tenant]) {
		h.until[tenant] = u
	}
}

// heldConfigWrites puts the servers' memory of the worker's refusals in
// front of a tenant's config writes (every request of f but GET and HEAD):
// once the worker refused one for the tenant's rate across the cluster,
// saying when to retry, the tenant's next config writes on this server
// are refused here until then, without a round trip to the worker.
func (h *handler) heldConfigWrites(f echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if m := c.Request().Method; m == http.MethodGet || m == http.MethodHead {
			return f(c)
		}
		tenant := tenantID(c)
		if err := h.configWrites.check(tenant, h.Now()); err != nil {
			return err
		}
		err := f(c)
		h.configWrites.note(tenant, err, h.Now())
		return err
	}
}

// heldReservations is the worker's reservations with the servers' memory
// of its refusals in front.
type heldReservations struct {
	service.Reservations
	creates, settles *heldOff
}

func (r heldReservations) Create(ctx context.Context, res reserve.Reservation) error {
	err := r.Reservations.Create(ctx, res)
	r.creates.note(res.TenantID, err, res.CreatedAt)
	return err
}

func (r heldReservations) Settle(ctx context.Context, s reserve.Settle) (reserve.Settled, error) {
	if err := r.settles.check(s.TenantID, s.At); err != nil {
		return reserve.Settled{}, err
	}
	out, err := r.Reservations.Settle(ctx, s)
	r.settles.note(s.TenantID, err, s.At)
	return out, err
}
