package ui

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/quota"
)

// loginLimiter rate-limits sign-in attempts with Sluice's own hot cache: a
// token bucket per email and one per client address (IPv6 by /64). Every
// attempt costs a token from both, so guessing one account's password and
// spraying one password over many accounts are both slowed. The buckets
// live in this process only; each server limits on its own.
type loginLimiter struct {
	cache   *quota.Cache
	perUser []quota.Limit
	perIP   []quota.Limit

	mu        sync.Mutex
	nextSweep time.Time
}

// Default sign-in limits: 5 attempts per email and 20 per address, each
// refilled over 5 minutes.
var (
	defaultUserLimit = quota.Limit{Algorithm: quota.TokenBucket, Limit: 5, Period: 5 * time.Minute}
	defaultIPLimit   = quota.Limit{Algorithm: quota.TokenBucket, Limit: 20, Period: 5 * time.Minute}
)

func newLoginLimiter(perUser, perIP quota.Limit) *loginLimiter {
	return &loginLimiter{cache: quota.NewCache(), perUser: []quota.Limit{perUser}, perIP: []quota.Limit{perIP}}
}

// allow takes one attempt for email from addr at now; when it is refused it
// says how long to wait. Both buckets are checked before either is
// charged, so a refusal by one does not drain the other.
func (l *loginLimiter) allow(email, addr string, now time.Time) (bool, time.Duration) {
	l.sweep(now)
	ns := now.UnixNano()
	ip, ok := engine.NormalizeIP(addr)
	if !ok {
		ip = addr
	}
	userKey, ipKey := "login/email:"+email, "login/ip:"+ip
	var out [1]quota.Outcome
	okUser, _ := l.cache.Check(userKey, l.perUser, ns, 1, false, out[:])
	waitUser := out[0].RetryAfter
	okIP, _ := l.cache.Check(ipKey, l.perIP, ns, 1, false, out[:])
	waitIP := out[0].RetryAfter
	if !okUser || !okIP {
		return false, max(waitUser, waitIP)
	}
	l.cache.Check(userKey, l.perUser, ns, 1, true, out[:])
	l.cache.Check(ipKey, l.perIP, ns, 1, true, out[:])
	return true, 0
}

// sweep drops full buckets once a minute so memory follows recent
// attempts only. Nothing persists these buckets, so their dirty marks are
// simply cleared first (Sweep keeps dirty buckets).
func (l *loginLimiter) sweep(now time.Time) {
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
