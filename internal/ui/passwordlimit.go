package ui

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/quota"
)

// passwordWorkLimiter rate-limits, per signed-in user, the dashboard
// requests that make the worker hash or check a password: invites and
// changes of password or email. Each costs the worker 19 MiB and a core
// for about 25 ms, and the worker runs only a few at once (tenants,
// passwords.go), so one user's flood would otherwise delay everyone's.
// A token bucket per user lives in this server's hot cache (the sign-in
// limiter's live in keyed tables); each server limits on its own.
type passwordWorkLimiter struct {
	cache *quota.Cache
	limit []quota.Limit
	now   func() time.Time

	mu        sync.Mutex
	nextSweep time.Time
}

// defaultPasswordWorkLimit is 20 such requests per user, refilled over 10
// minutes: a burst of invites, then one every 30 seconds.
var defaultPasswordWorkLimit = quota.Limit{Algorithm: quota.TokenBucket, Limit: 20, Period: 10 * time.Minute}

func newPasswordWorkLimiter(l quota.Limit, now func() time.Time) *passwordWorkLimiter {
	return &passwordWorkLimiter{cache: quota.NewCache(), limit: []quota.Limit{l}, now: now}
}

// middleware limits routes behind gate.session: a user over the
// limit gets 429 with Retry-After, and the worker is not asked.
func (l *passwordWorkLimiter) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if ok, wait := l.allow(mustSession(c).UserID, l.now()); !ok {
			c.Response().Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(wait.Seconds()))))
			return errs.Errorf(errs.RateLimited, "Too many invites and password or email changes from your account. Try again in %s.", humanWait(wait))
		}
		return next(c)
	}
}

// allow takes one request of userID at now; when it is refused it says how
// long to wait.
func (l *passwordWorkLimiter) allow(userID string, now time.Time) (bool, time.Duration) {
	l.sweep(now)
	var out [1]quota.Outcome
	ok, _ := l.cache.Check("password-work/user:"+userID, l.limit, now.UnixNano(), 1, true, out[:])
	return ok, out[0].RetryAfter
}

// sweep drops full buckets once a minute (loginLimiter.trim drops them
// on every attempt).
func (l *passwordWorkLimiter) sweep(now time.Time) {
	l.mu.Lock()
	due := now.After(l.nextSweep)
	if due {
		l.nextSweep = now.Add(time.Minute)
	}
	l.mu.Unlock()
	if !due {
		return
	}
	l.cache.DrainDirty(func(string, []quota.Limit, []quota.State, int64) {})
	l.cache.Sweep(now.UnixNano())
}
