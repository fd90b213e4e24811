package ui

import (
	"container/list"
	"hash/maphash"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
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
	perAddr, perPair bucketLimit
	delay            delayRule
	seed             maphash.Seed

	mu     sync.Mutex
	addrs  lruTable[bucket]
	pairs  lruTable[bucket]
	emails lruTable[failScore]
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
		perAddr: bucketLimit{capacity: float64(perAddr.Limit), period: perAddr.Period},
		perPair: bucketLimit{capacity: float64(perPair.Limit), period: perPair.Period},
		delay:   delay,
		seed:    maphash.MakeSeed(),
		addrs:   newLRU[bucket](maxEntries),
		pairs:   newLRU[bucket](maxEntries),
		emails:  newLRU[failScore](maxEntries),
	}
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

	l.mu.Lock()
	defer l.mu.Unlock()
	l.trim(now)
	a := l.addrs.get(addrKey, now, bucket{tokens: l.perAddr.capacity})
	p := l.pairs.get(pairKey, now, bucket{tokens: l.perPair.capacity})
	waitA, waitP := l.perAddr.take(a, now, false), l.perPair.take(p, now, false)
	if waitA > 0 || waitP > 0 {
		return false, max(waitA, waitP), 0
	}
	l.perAddr.take(a, now, true)
	l.perPair.take(p, now, true)
	if s, ok := l.emails.peek(emailKey); ok {
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
	s := l.emails.get(key, now, failScore{})
	s.score = min(s.at(now, l.delay.Fade)+1, l.delay.maxScore())
	s.since = now
}

// trim drops, from the least recently touched end of each table, the
// entries that are back at their starting state: a bucket untouched for
// its whole period is full again, and a score fades by maxScore Fades.
func (l *loginLimiter) trim(now time.Time) {
	l.addrs.dropIdle(now.Add(-l.perAddr.period))
	l.pairs.dropIdle(now.Add(-l.perPair.period))
	l.emails.dropIdle(now.Add(-time.Duration(l.delay.maxScore() * float64(l.delay.Fade))))
}

// bucketLimit is a token bucket's shape: capacity tokens, refilled evenly
// over period.
type bucketLimit struct {
	capacity float64
	period   time.Duration
}

type bucket struct {
	tokens float64
	at     time.Time
}

// take refills b to now and, when a token is there, takes it if charge
// is set; it returns 0, or how long until a token is there.
func (bl bucketLimit) take(b *bucket, now time.Time, charge bool) time.Duration {
	rate := bl.capacity / bl.period.Seconds() // tokens a second
	if !b.at.IsZero() && now.After(b.at) {
		b.tokens = min(bl.capacity, b.tokens+now.Sub(b.at).Seconds()*rate)
	}
	if b.at.IsZero() || now.After(b.at) {
		b.at = now
	}
	if b.tokens >= 1 {
		if charge {
			b.tokens--
		}
		return 0
	}
	return time.Duration((1 - b.tokens) / rate * float64(time.Second))
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

// lruTable is a map bounded to max entries, kept in the order they were
// last touched. Not safe for concurrent use: loginLimiter.mu guards it.
type lruTable[V any] struct {
	max   int
	m     map[uint64]*list.Element
	order list.List // of *lruEntry[V]; front: most recently touched
}

type lruEntry[V any] struct {
	key     uint64
	touched time.Time
	v       V
}

func newLRU[V any](size int) lruTable[V] {
	return lruTable[V]{max: size, m: make(map[uint64]*list.Element)}
}

// get returns key's value, creating it as zero when absent (evicting the
// least recently touched entry when the table is full), and marks it
// touched at now.
func (t *lruTable[V]) get(key uint64, now time.Time, zero V) *V {
	if el, ok := t.m[key]; ok {
		t.order.MoveToFront(el)
		e := el.Value.(*lruEntry[V])
		e.touched = now
		return &e.v
	}
	if t.order.Len() >= t.max {
		oldest := t.order.Back()
		delete(t.m, oldest.Value.(*lruEntry[V]).key)
		t.order.Remove(oldest)
	}
	e := &lruEntry[V]{key: key, touched: now, v: zero}
	t.m[key] = t.order.PushFront(e)
	return &e.v
}

// peek returns key's value without touching it.
func (t *lruTable[V]) peek(key uint64) (V, bool) {
	if el, ok := t.m[key]; ok {
		return el.Value.(*lruEntry[V]).v, true
	}
	var zero V
	return zero, false
}

// dropIdle removes the entries last touched before cutoff.
func (t *lruTable[V]) dropIdle(cutoff time.Time) {
	for el := t.order.Back(); el != nil; el = t.order.Back() {
		e := el.Value.(*lruEntry[V])
		if !e.touched.Before(cutoff) {
			return
		}
		delete(t.m, e.key)
		t.order.Remove(el)
	}
}

func (t *lruTable[V]) len() int { return t.order.Len() }

// userLimiter is a token bucket per signed-in user, for dashboard actions
// that answer something an attacker could use one attempt at a time (an
// email change says, in the end, whether an address was free), or per
// client address, for the setup page. It holds
// at most maxEntries users, evicting the least recently touched. Safe for
// concurrent use.
type userLimiter struct {
	limit bucketLimit

	mu    sync.Mutex
	users lruTable[bucket]
}

// Default limit of email changes: 5 per user per hour.
var defaultEmailChangeLimit = quota.Limit{Algorithm: quota.TokenBucket, Limit: 5, Period: time.Hour}

func newUserLimiter(l quota.Limit, maxEntries int) *userLimiter {
	return &userLimiter{limit: bucketLimit{capacity: float64(l.Limit), period: l.Period}, users: newLRU[bucket](maxEntries)}
}

// take takes one attempt for the user at now, or says how long until one
// is there.
func (l *userLimiter) take(userID string, now time.Time) (ok bool, wait time.Duration) {
	key := maphash.String(userSeed, userID)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.users.dropIdle(now.Add(-l.limit.period))
	b := l.users.get(key, now, bucket{tokens: l.limit.capacity})
	if wait := l.limit.take(b, now, true); wait > 0 {
		return false, wait
	}
	return true, 0
}

// userSeed hashes user ids; they are the server's own, so one seed for
// the process is enough.
var userSeed = maphash.MakeSeed()
