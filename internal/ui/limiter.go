package ui

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/quota"
)

// loginLimiter slows password guessing on the sign-in form without letting
// anyone lock an account's owner out:
//
//   - each client address (IPv6 by /64; behind trusted proxies, the address
//     X-Forwarded-For names, see httpsec.ClientIP) has a token bucket, so
//     one address cannot spray passwords over many accounts;
//   - each email and address pair has its own, so one address cannot keep
//     guessing one account's password; an attempt from another address is
//     not refused because of it;
//   - each email keeps a score of its recent failed attempts, from any
//     address; past a few, every attempt on it waits a delay that doubles
//     with each further failure up to a cap. A guesser spread over many
//     addresses is slowed, and the owner still gets in, after at most the
//     cap.
//
// Every table holds at most maxEntries entries: the least recently touched
// is evicted first, and entries idle long enough to be back at their
// starting state are dropped as the table is used. Keys are 64-bit
// hashes under a seed chosen per process, so an entry's size does not
// depend on the email's length and nobody can aim for a collision.
//
// The state lives in this process only; each server limits on its own.
// Safe for concurrent use.
type loginLimiter struct {
	delay delayRule
	seed  maphash.Seed

	mu     sync.Mutex
	addrs  *keyed.Buckets[uint64]
	pairs  *keyed.Buckets[uint64]
	emails *keyed.Table[uint64, failScore]
}

// Default sign-in limits: 20 attempts per address and 5 per email and
// address, each refilled over 5 minutes; then the delay of defaultDelay.
var (
	defaultUserLimit = quota.Limit{Algorithm: quota.TokenBucket, Limit: 5, Period: 5 * time.Minute}
	defaultIPLimit   = quota.Limit{Algorithm: quota.TokenBucket, Limit: 20, Period: 5 * time.Minute}
	defaultDelay     = delayRule{Free: 5, Base: 250 * time.Millisecond, Max: 3 * time.Second, Fade: time.Minute}
)

// defaultMaxEntries bounds each of the limiter's three tables: about 6 MiB
// in all when every one is full.
const defaultMaxEntries = 1 << 15

// delayRule is the growing delay per email. A failed attempt adds one to
// the email's score and each Fade takes one away. An attempt on an email
// whose score is below Free waits nothing; at Free it waits Base, and each
// further point doubles the wait, up to Max.
type delayRule struct {
	Free      float64
	Base, Max time.Duration
	Fade      time.Duration
}

// after is the delay for an email with score s.
func (r delayRule) after(s float64) time.Duration {
	if r.Base <= 0 || s < r.Free {
		return 0
	}
	d := r.Base
	for i := r.Free + 1; i <= s && d < r.Max; i++ {
		d *= 2
	}
	return min(d, r.Max)
}

// maxScore is where the score stops growing: the delay is at its cap
// already, and the score fades in bounded time.
func (r delayRule) maxScore() float64 {
	s := r.Free
	for d := r.Base; d > 0 && d < r.Max; d *= 2 {
		s++
	}
	return s + 1
}

func newLoginLimiter(perPair, perAddr quota.Limit, delay delayRule, maxEntries int) *loginLimiter {
	return &loginLimiter{
		delay:  delay,
		seed:   maphash.MakeSeed(),
		addrs:  keyed.NewBuckets[uint64](tokenBucket(perAddr), maxEntries),
		pairs:  keyed.NewBuckets[uint64](tokenBucket(perPair), maxEntries),
		emails: keyed.NewTable[uint64, failScore](maxEntries),
	}
}

// tokenBucket is l as a token bucket of Limit attempts refilled evenly
// over Period: the sign-in and per-user limits have no burst of their own.
func tokenBucket(l quota.Limit) quota.Limit {
	return quota.Limit{Algorithm: quota.TokenBucket, Limit: l.Limit, Period: l.Period}
}

// refusal is how long a refused outcome o of limit l says to wait: its
// RetryAfter, or l's period for a limit that never admits.
func refusal(o quota.Outcome, l quota.Limit) time.Duration {
	if o.RetryAfter == quota.Never || o.RetryAfter <= 0 {
		return max(l.Period, time.Second)
	}
	return o.RetryAfter
}

// attempt takes one sign-in attempt for email from addr at now. It is
// refused, with how long to wait, when the address or the email and
// address pair has no attempt left; both are checked before either is
// charged, so a refusal by one does not drain the other. An admitted
// attempt is to wait delay before its password is checked.
func (l *loginLimiter) attempt(email, addr string, now time.Time) (ok bool, wait, delay time.Duration) {
	ip, valid := engine.NormalizeIP(addr)
	if !valid {
		ip = addr
	}
	addrKey := maphash.String(l.seed, ip)
	emailKey := maphash.String(l.seed, email)
	pairKey := maphash.String(l.seed, ip+"\x00"+email)

	t := now.UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.trim(now)
	a, p := l.addrs.Check(addrKey, t, 1), l.pairs.Check(pairKey, t, 1)
	if !a.Allowed || !p.Allowed {
		var waitA, waitP time.Duration
		if !a.Allowed {
			waitA = refusal(a, l.addrs.Limit())
		}
		if !p.Allowed {
			waitP = refusal(p, l.pairs.Limit())
		}
		return false, max(waitA, waitP), 0
	}
	l.addrs.Take(addrKey, t, 1)
	l.pairs.Take(pairKey, t, 1)
	if s, ok := l.emails.Peek(emailKey); ok {
		return true, 0, l.delay.after(s.at(now, l.delay.Fade))
	}
	return true, 0, 0
}

// failed records a failed attempt on email: a wrong password, or an email
// no one signs in with (counted alike, so the delay tells nothing).
func (l *loginLimiter) failed(email string, now time.Time) {
	key := maphash.String(l.seed, email)
	l.mu.Lock()
	defer l.mu.Unlock()
	s, _ := l.emails.Get(key, failScore{})
	s.score = min(s.at(now, l.delay.Fade)+1, l.delay.maxScore())
	s.since = now
}

// trim drops, from the least recently touched end of each table, the
// entries that are back at their starting state: a bucket full again, and
// a score last raised maxScore Fades ago.
func (l *loginLimiter) trim(now time.Time) {
	l.addrs.Trim(now.UnixNano())
	l.pairs.Trim(now.UnixNano())
	cutoff := now.Add(-time.Duration(l.delay.maxScore() * float64(l.delay.Fade)))
	l.emails.DropWhile(func(s *failScore) bool { return s.since.Before(cutoff) })
}

// failScore is an email's recent failures, fading linearly.
type failScore struct {
	score float64
	since time.Time
}

func (s failScore) at(now time.Time, fade time.Duration) float64 {
	if s.since.IsZero() || fade <= 0 {
		return s.score
	}
	return max(0, s.score-float64(now.Sub(s.since))/float64(fade))
}

// userLimiter is a token bucket per signed-in user, for dashboard actions
// that answer something an attacker could use one attempt at a time (an
// email change says, in the end, whether an address was free), or per
// client address, for the setup page. It holds
// at most maxEntries users, evicting the least recently touched. Safe for
// concurrent use.
type userLimiter struct {
	mu    sync.Mutex
	users *keyed.Buckets[uint64]
}

// Default limit of email changes: 5 per user per hour.
var defaultEmailChangeLimit = quota.Limit{Algorithm: quota.TokenBucket, Limit: 5, Period: time.Hour}

func newUserLimiter(l quota.Limit, maxEntries int) *userLimiter {
	return &userLimiter{users: keyed.NewBuckets[uint64](tokenBucket(l), maxEntries)}
}

// take takes one attempt for the user at now, or says how long until one
// is there.
func (l *userLimiter) take(userID string, now time.Time) (ok bool, wait time.Duration) {
	key := maphash.String(userSeed, userID)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.users.Trim(now.UnixNano())
	if o := l.users.Take(key, now.UnixNano(), 1); !o.Allowed {
		return false, refusal(o, l.users.Limit())
	}
	return true, 0
}

// userSeed hashes user ids; they are the server's own, so one seed for
// the process is enough.
var userSeed = maphash.MakeSeed()
