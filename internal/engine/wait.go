package engine

// Waiting. A check with a wait that its bucket denies queues at the
// bucket's owner (here, when this server decides the bucket) instead of
// answering the denial, and is decided again when the bucket can allow it.
// The rules the code keeps:
//   - One queue per bucket key, first come first served: only the head is
//     ever decided again, and a check of the bucket that arrives while the
//     queue is not empty, waiting or not, goes behind it (a waiting one)
//     or is denied (one without a wait); it never takes what the head
//     waits for.
//   - No goroutine waits: a queue has one timer, for the instant its head
//     may be allowed (the outcome's retry-after), and each waiter one for
//     its deadline. Every change happens under Waits.mu, and the
//     answers are handed over (finish) after it is released.
//   - Every waiter is answered exactly once: admitted, denied at its
//     deadline, denied when its partition leaves this server or the server
//     shuts down. One that leaves (its client went away) is removed and
//     answered nothing, and takes nothing.
//   - Bounded: per bucket, per tenant and per server; past a bound a check
//     is denied at once and says which bound (WaitRefused*).

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/quota"
)

// MaxWait is the longest wait a check may ask for.
const MaxWait = 30 * time.Second

// Default bounds of the waiters a server holds.
const (
	DefaultWaitersPerBucket = 1000
	DefaultWaitersPerTenant = 10_000
	DefaultWaiters          = 100_000
)

// Why a check that asked to wait was denied without waiting
// (Answer.WaitRefused).
const (
	WaitRefusedBeyond       = "retry_after_beyond_wait" // waiting cannot help within the wait
	WaitRefusedBucketFull   = "bucket_queue_full"
	WaitRefusedTenantFull   = "tenant_queue_full"
	WaitRefusedServerFull   = "server_queue_full"
	WaitRefusedShuttingDown = "shutting_down"
	WaitRefusedHandover     = "handover"          // the bucket's partition left its owner
	WaitRefusedOwner        = "owner_cannot_wait" // the owner runs a version without waiting
)

// minRetry is the least time between two tries of a queue's head, so that
// a bucket that answers "now" while it denies cannot spin a timer.
const minRetry = time.Millisecond

// WaitConfig bounds the waiters of one server; zero fields take the defaults.
type WaitConfig struct {
	PerBucket, PerTenant, Total int
}

// validateWait checks a check's wait: 0 (none) or within (0, MaxWait], and
// none on a peek.
func validateWait(w time.Duration, peek bool, field string) error {
	switch {
	case w == 0:
		return nil
	case w < 0 || w > MaxWait:
		return errs.Errorf(errs.Invalid, "%swait: must be a duration above 0 and at most 30s", field)
	case peek:
		return errs.Errorf(errs.Invalid, "%swait: a peek takes nothing and cannot wait", field)
	}
	return nil
}

// waitClock is the clock of the queues: instants and timers. Tests give
// one they move by hand.
type waitClock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) waitTimer
}

type waitTimer interface{ Stop() bool }

type wallClock struct{ now func() time.Time }

func (c wallClock) Now() time.Time { return c.now() }
func (wallClock) AfterFunc(d time.Duration, f func()) waitTimer {
	return time.AfterFunc(d, f)
}

// waitResult is a waiter's answer.
type waitResult struct {
	allowed bool
	report  int
	outs    [MaxLimits]quota.Outcome
	waited  time.Duration
	refused string // a WaitRefused* reason when denied before the deadline
}

// waiter is one queued check.
type waiter struct {
	q          *bucketQueue
	d          decision
	n          int // limits
	enqueued   int64
	deadline   int64
	timer      waitTimer
	queued     bool
	prev, next *waiter
	id         uint64 // a forwarded waiter's item id (0 for a local one)
	done       func(*waitResult)
}

// bucketQueue is one bucket's waiters in arrival order.
type bucketQueue struct {
	key        string
	tenant     string
	head, tail *waiter
	n          int
	timer      waitTimer // the head's next try
	at         int64     // when timer fires, 0 = none
}

// Waits holds every waiter of this server. Safe for concurrent use.
type Waits struct {
	clock waitClock
	// eng decides in the hot cache (decideCache). A method call, not a
	// func value, so that the decisions and outcomes of the check path do
	// not escape to the heap.
	eng *Engine
	// owns reports whether this server still decides key's bucket; nil
	// on a server alone.
	owns func(key string) bool
	cfg  WaitConfig
	m    *waitMetrics
	log  *slog.Logger

	count atomic.Int64 // waiters, read without mu on the check path

	mu      sync.Mutex
	buckets map[string]*bucketQueue
	tenants map[string]int
	byID    map[uint64]*waiter
	closed  bool
}

// NewWaits returns the waiting queues of one server, bounded by cfg; give
// them to New (Config.Waits), which binds them to its hot cache. The
// server's shutdown calls Close before it stops serving HTTP.
func NewWaits(cfg WaitConfig) *Waits {
	if cfg.PerBucket <= 0 {
		cfg.PerBucket = DefaultWaitersPerBucket
	}
	if cfg.PerTenant <= 0 {
		cfg.PerTenant = DefaultWaitersPerTenant
	}
	if cfg.Total <= 0 {
		cfg.Total = DefaultWaiters
	}
	return &Waits{cfg: cfg, m: newWaitMetrics(),
		buckets: map[string]*bucketQueue{}, tenants: map[string]int{}, byID: map[uint64]*waiter{}}
}

// Close answers every waiter with its denial (WaitRefusedShuttingDown)
// and refuses every wait from then on: checks that ask to wait are decided
// at once.
func (wq *Waits) Close() {
	if n := wq.denyAll(nil, WaitRefusedShuttingDown, true); n > 0 && wq.log != nil {
		wq.log.Info("shutdown answered the checks waiting for their buckets", "waiters", n)
	}
}

// Len is the number of checks waiting now.
func (wq *Waits) Len() int { return int(wq.count.Load()) }

// finishes collects answers to hand over once mu is released.
type finishes []func()

func (f finishes) run() {
	for _, fn := range f {
		fn()
	}
}

// enter decides d, which may wait up to wait, at the clock's now. It
// answers at once (queued false, r filled) when d is allowed, when waiting
// cannot help or is refused, or queues d and later calls done once with
// its answer (queued true). out receives the outcomes of an answer at
// once. id names a forwarded waiter for leaveID (0: none).
func (wq *Waits) enter(d *decision, out []quota.Outcome, wait time.Duration, id uint64, done func(*waitResult)) (w *waiter, r waitResult, queued bool) {
	n := len(out)
	now := wq.clock.Now().UnixNano()
	d.now = now
	wq.mu.Lock()
	if old := wq.byID[id]; id != 0 && old != nil && old.queued {
		// The sender asks again for a waiter it queued here already (its
		// first request failed on the way back): the answer goes to the
		// new request, and the bucket is taken once at most.
		old.done = done
		wq.mu.Unlock()
		return old, r, true
	}
	q := wq.buckets[string(d.key)]
	if q != nil && q.n > 0 {
		// Behind the queue: no decision that takes, whatever the bucket holds.
		r.refused = wq.bounded(q, d.tenantID)
		if r.refused != "" {
			wq.denyBehind(q, d, out, now, &r)
			wq.mu.Unlock()
			wq.m.refused(r.refused)
			return nil, r, false
		}
	} else {
		r.allowed, r.report = wq.eng.decideCache(d, out)
		if r.allowed {
			wq.mu.Unlock()
			return nil, r, false
		}
		rate, slot := retryFor(d.limits, out)
		retry := max(rate, min(slot, wait))
		switch {
		case wq.closed:
			r.refused = WaitRefusedShuttingDown
		case rate == quota.Never || rate > wait:
			r.refused = WaitRefusedBeyond
		default:
			r.refused = wq.bounded(nil, d.tenantID)
		}
		if r.refused != "" {
			wq.mu.Unlock()
			wq.m.refused(r.refused)
			return nil, r, false
		}
		if q == nil {
			q = &bucketQueue{key: string(d.key), tenant: d.tenantID}
			wq.buckets[q.key] = q
		}
		wq.schedule(q, now+int64(max(retry, minRetry)))
	}
	w = &waiter{q: q, d: *d, n: n, enqueued: now, deadline: now + int64(wait), id: id, done: done}
	w.d.key = []byte(q.key)
	wq.push(w)
	w.timer = wq.clock.AfterFunc(wait, func() { wq.expire(w) })
	wq.mu.Unlock()
	return w, r, true
}

// bounded answers the bound a new waiter of tenant would pass ("" none).
// q is the waiter's queue, nil when it has none yet.
func (wq *Waits) bounded(q *bucketQueue, tenant string) string {
	switch {
	case wq.closed:
		return WaitRefusedShuttingDown
	case q != nil && q.n >= wq.cfg.PerBucket:
		return WaitRefusedBucketFull
	case wq.tenants[tenant] >= wq.cfg.PerTenant:
		return WaitRefusedTenantFull
	case int(wq.count.Load()) >= wq.cfg.Total:
		return WaitRefusedServerFull
	}
	return ""
}

// denyBehind fills r and out with the denial of d, which arrived behind
// q's waiters: the bucket as a peek sees it, denied, with a retry-after
// of at least the head's next try.
func (wq *Waits) denyBehind(q *bucketQueue, d *decision, out []quota.Outcome, now int64, r *waitResult) {
	p := *d
	p.consume, p.now = false, now
	_, r.report = wq.eng.decideCache(&p, out)
	r.allowed = false
	retry := quota.CombinedRetryAfter(out)
	if next := time.Duration(q.at - now); q.at != 0 && next > retry && retry != quota.Never {
		retry = next
	}
	if retry <= 0 {
		retry = time.Millisecond
	}
	o := &out[r.report]
	o.Allowed = false
	if o.RetryAfter != quota.Never {
		o.RetryAfter = retry
	}
}

// behind reports whether a check of key arriving now must go behind
// waiters; if so it fills out and answers its denial. The check path asks
// only while some waiter exists anywhere on this server (busy: one atomic
// load, inlined).
func (wq *Waits) behind(d *decision, out []quota.Outcome) (bool, int, bool) {
	wq.mu.Lock()
	defer wq.mu.Unlock()
	q := wq.buckets[string(d.key)]
	if q == nil || q.n == 0 {
		return false, 0, false
	}
	var r waitResult
	wq.denyBehind(q, d, out, d.now, &r)
	wq.m.behind.Inc()
	return false, r.report, true
}

// busy reports whether any check waits on this server.
func (wq *Waits) busy() bool { return wq.count.Load() != 0 }

// retryFor splits the retry-after of a denial by out for waiting: rate is
// when its rate limits allow it (quota.Never when they never will), and
// slot when its concurrency limits do at the latest, their earliest
// lease's expiry; a release may free a slot at any moment before that
// (slotFreed).
func retryFor(limits []quota.Limit, out []quota.Outcome) (rate, slot time.Duration) {
	for i := range out {
		ra := out[i].RetryAfter
		switch {
		case i < len(limits) && limits[i].Algorithm == quota.Concurrency:
			slot = max(slot, ra)
		case ra == quota.Never:
			return quota.Never, slot
		default:
			rate = max(rate, ra)
		}
	}
	return rate, slot
}

// slotFreed tries the head of key's queue now: a release gave a slot of
// its concurrency limit back, and a waiter need not wait for a timer.
func (wq *Waits) slotFreed(key []byte) {
	if !wq.busy() {
		return
	}
	var f finishes
	wq.mu.Lock()
	if q := wq.buckets[string(key)]; q != nil && q.n > 0 {
		if q.timer != nil {
			q.timer.Stop()
		}
		q.timer, q.at = nil, 0
		wq.serveHead(q, &f)
	}
	wq.mu.Unlock()
	f.run()
}

// schedule sets q's timer to try its head at the instant at.
func (wq *Waits) schedule(q *bucketQueue, at int64) {
	if q.timer != nil {
		q.timer.Stop()
	}
	q.at = at
	delay := time.Duration(at - wq.clock.Now().UnixNano())
	q.timer = wq.clock.AfterFunc(max(delay, 0), func() { wq.wake(q) })
}

func (wq *Waits) push(w *waiter) {
	q := w.q
	w.queued = true
	if q.tail == nil {
		q.head, q.tail = w, w
	} else {
		w.prev, q.tail.next, q.tail = q.tail, w, w
	}
	q.n++
	wq.tenants[q.tenant]++
	if w.id != 0 {
		wq.byID[w.id] = w
	}
	wq.count.Add(1)
	wq.m.waiters.Inc()
}

// remove takes w out of its queue; the caller answers it.
func (wq *Waits) remove(w *waiter) {
	q := w.q
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
	if w.timer != nil {
		w.timer.Stop()
	}
	q.n--
	if wq.tenants[q.tenant]--; wq.tenants[q.tenant] <= 0 {
		delete(wq.tenants, q.tenant)
	}
	if w.id != 0 && wq.byID[w.id] == w {
		delete(wq.byID, w.id)
	}
	wq.count.Add(-1)
	wq.m.waiters.Dec()
	if q.n == 0 {
		if q.timer != nil {
			q.timer.Stop()
		}
		q.timer, q.at = nil, 0
		if wq.buckets[q.key] == q {
			delete(wq.buckets, q.key)
		}
	}
}

// wake tries q's head, and each next one it admits, at now.
func (wq *Waits) wake(q *bucketQueue) {
	wq.mu.Lock()
	var f finishes
	q.timer, q.at = nil, 0
	wq.serveHead(q, &f)
	wq.mu.Unlock()
	f.run()
}

// serveHead admits q's waiters from the head while the bucket allows
// them, and sets the timer for the first it cannot. Under mu.
func (wq *Waits) serveHead(q *bucketQueue, f *finishes) {
	now := wq.clock.Now().UnixNano()
	if wq.owns != nil && !wq.owns(q.key) {
		// The partition left this server: its new owner decides from
		// now on, and these waiters are denied rather than decided twice.
		n := q.n
		for q.head != nil {
			wq.deny(q.head, WaitRefusedHandover, false, f)
		}
		wq.m.refusedN(WaitRefusedHandover, n)
		return
	}
	for q.head != nil {
		w := q.head
		r := &waitResult{}
		w.d.now = now
		r.allowed, r.report = wq.eng.decideCache(&w.d, r.outs[:w.n])
		if r.allowed {
			wq.remove(w)
			r.waited = time.Duration(now - w.enqueued)
			wq.m.admitted.Inc()
			done := w.done // read under mu: a repeated request may replace it
			*f = append(*f, func() { done(r) })
			continue
		}
		rate, slot := retryFor(w.d.limits, r.outs[:w.n])
		retry := max(rate, min(slot, time.Duration(w.deadline-now)))
		if rate == quota.Never {
			// The limits changed under the waiter: waiting cannot help.
			wq.remove(w)
			r.waited, r.refused = time.Duration(now-w.enqueued), WaitRefusedBeyond
			wq.m.refused(WaitRefusedBeyond)
			done := w.done // read under mu: a repeated request may replace it
			*f = append(*f, func() { done(r) })
			continue
		}
		wq.schedule(q, now+int64(max(retry, minRetry)))
		return
	}
}

// expire answers w's denial at its deadline, if it still waits.
func (wq *Waits) expire(w *waiter) {
	wq.mu.Lock()
	var f finishes
	if w.queued {
		wq.deny(w, "", true, &f)
		wq.m.timedOut.Inc()
	}
	wq.mu.Unlock()
	f.run()
}

// deny removes w and answers it denied, the bucket as it is now; with
// next, a new head is tried at once. Under mu.
func (wq *Waits) deny(w *waiter, refused string, next bool, f *finishes) {
	q := w.q
	wasHead := q.head == w
	wq.remove(w)
	now := wq.clock.Now().UnixNano()
	r := &waitResult{waited: time.Duration(now - w.enqueued), refused: refused}
	p := w.d
	p.consume, p.now = false, now
	_, r.report = wq.eng.decideCache(&p, r.outs[:w.n])
	o := &r.outs[r.report]
	if o.Allowed && o.RetryAfter == 0 {
		o.RetryAfter = time.Millisecond
	}
	o.Allowed = false
	done := w.done // read under mu: a repeated request may replace it
	*f = append(*f, func() { done(r) })
	if next && wasHead && q.head != nil {
		wq.serveHead(q, f)
	}
}

// leave takes w out of its queue if it still waits: its client went away.
// It reports false when w was answered already (its answer is on its way).
func (wq *Waits) leave(w *waiter) bool {
	wq.mu.Lock()
	if !w.queued {
		wq.mu.Unlock()
		return false
	}
	q := w.q
	wasHead := q.head == w
	wq.remove(w)
	wq.m.cancelled.Inc()
	var f finishes
	if wasHead && q.head != nil {
		wq.serveHead(q, &f)
	}
	wq.mu.Unlock()
	f.run()
	return true
}

// leaveID is leave for the forwarded waiter of item id, if any.
func (wq *Waits) leaveID(id uint64) bool {
	wq.mu.Lock()
	w := wq.byID[id]
	wq.mu.Unlock()
	if w == nil {
		return false
	}
	return wq.leave(w)
}

// denyAll answers every waiter whose bucket key match reports true with a
// denial saying why (nil match: every waiter), and with close set refuses
// every wait from then on.
func (wq *Waits) denyAll(match func(key string) bool, why string, close bool) int {
	wq.mu.Lock()
	var f finishes
	if close {
		wq.closed = true
	}
	n := 0
	for key, q := range wq.buckets {
		if match != nil && !match(key) {
			continue
		}
		for q.head != nil {
			wq.deny(q.head, why, false, &f)
			n++
		}
	}
	wq.mu.Unlock()
	if n > 0 {
		wq.m.refusedN(why, n)
	}
	f.run()
	return n
}

// wait decides d, which asks to wait (d.wait), here: at once, or after
// waiting in its bucket's queue. ctx ending while it waits takes it out of
// the queue (it takes nothing) and answers cancelled.
func (wq *Waits) wait(ctx context.Context, d *decision, out []quota.Outcome) (bool, int, error) {
	ch := make(chan *waitResult, 1)
	w, r, queued := wq.enter(d, out, d.wait, 0, func(r *waitResult) { ch <- r })
	if !queued {
		d.refused = r.refused
		return r.allowed, r.report, nil
	}
	var res *waitResult
	select {
	case res = <-ch:
	case <-ctx.Done():
		if wq.leave(w) {
			return false, 0, cancelled(ctx)
		}
		res = <-ch // answered as ctx ended: the answer stands
	}
	copy(out, res.outs[:len(out)])
	d.waited, d.refused, d.now = res.waited, res.refused, wq.clock.Now().UnixNano()
	return res.allowed, res.report, nil
}
