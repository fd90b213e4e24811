package engine

// Where a decision runs. On a single server, in this server's hot cache.
// In a cluster (SetCluster), a policy's consistency chooses:
//   - exact: the bucket's partition owner decides; this server decides only
//     the partitions it owns and forwards the rest. While a partition has no
//     owner (a hand-over), the check waits for one up to HandoverWait (less
//     if its context ends first) and then answers 503 unavailable, so the
//     tenant's SDK applies its fail-open or fail-closed choice; it never
//     admits blindly.
//     A forward that may have reached the owner without an answer coming
//     back goes again only to that owner, with the same id, which the owner
//     answers as before (applied.go); when the owner changed meanwhile the
//     check answers 503, since the unit may have been taken. An owner
//     whose config has no limits for the check yet (a policy made a moment
//     ago) is asked again until it has: no other server decides for it.
//   - local: this server decides from its own cache and tells the others what
//     it admitted (gossip.go); they force that consumption into their own
//     buckets, so overshoot is bounded by what the servers admit before they
//     hear of each other. A decision that takes or gives back a lease
//     (lease.go) is exact whatever the policy says.
//
// A decision that counts its cost whether or not it is allowed (count, the
// reference rate limit server's way: rls.go) reaches the owner with
// Item.Count set. An owner of an earlier version ignores it and counts only
// what it allows, so mixed versions stay available while an upgrade rolls,
// and are exact again once it is done.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/quota"
)

// HandoverWait is how long a check waits for its partition to get an owner.
const HandoverWait = 2 * time.Second

// decision is one question to a bucket: its key, the limits it is decided
// under, and what to take from it.
type decision struct {
	key      []byte // the bucket's hot-cache key (BucketKey)
	tenantID string
	pv       *policyView
	// tier and keyID (the consumer key whose override applies, if any)
	// let a partition's owner find the same limits in its own view.
	tier, keyID string
	limits      []quota.Limit
	now         int64 // unix ns
	cost        int64
	consume     bool // false for a peek
	// settle marks a reservation's settle (settle.go): a positive cost is
	// taken even past the limit (what the request used beyond its
	// estimate), a negative one given back from the windows that began by
	// since, when the reservation was made; the server that applies it
	// counts the units.
	settle bool
	since  int64
	// id names a moving decision for the owner (applied.go); 0 = decide()
	// gives it one. ref is a settle's reservation id.
	id  uint64
	ref string
	// units asks a partition's owner to count what d consumes for usage
	// where the bucket takes it (so usage is what the buckets took,
	// answered or not); counted says it did, and the caller counts no
	// units itself. A decision made on this server is counted by its
	// caller.
	units, counted bool
	// count takes the cost even when it is denied, and decides on the
	// usage with it (quota.Cache.CountBytes): the reference's counting.
	count bool
	// lease, when its Token is set, is the slot a consuming d takes of its
	// concurrency limits; with release, the slot d gives back (lease.go).
	lease   quota.Lease
	release bool
	// wait is how long d may wait for its bucket (wait.go); waited how
	// long it did, refused why it did not wait its whole wait.
	wait    time.Duration
	waited  time.Duration
	refused string
	// cusKey, when set, is the customer's bucket decided with key, all or
	// nothing, under cusLimits (customerlimits.go); out then holds the
	// outcomes of limits followed by those of cusLimits.
	cusKey    []byte
	cusLimits []quota.Limit
}

// item is d as it is forwarded to its owner.
func (d *decision) item() cluster.Item {
	return cluster.Item{Key: string(d.key), Tenant: d.tenantID, Policy: d.pv.id, Tier: d.tier, KeyID: d.keyID, Cost: d.cost, Consume: d.consume, Settle: d.settle, Since: d.since, Now: d.now, ID: d.id, Ref: d.ref, Units: d.units, Count: d.count,
		Lease: d.lease.Token, LeaseExp: d.lease.Expires, Release: d.release}
}

// decide answers d where it runs (see the top of this file): whether d is
// allowed, and the index of the limit its answer reports; out receives
// each limit's outcome. out is a parameter of its own, not a field of d:
// d's contents escape (a forward copies them), and the callers' outcome
// arrays must stay on their stacks.
func (e *Engine) decide(ctx context.Context, d *decision, out []quota.Outcome) (bool, int, error) {
	c := e.cluster
	// A lease's slots have one owner whatever the policy says: a
	// concurrency limit in a key's override of a local policy is exact.
	local := d.pv.consistency == "local" && d.lease.Token == 0
	if c == nil || local {
		if !e.hyd.done.Load() {
			if err := e.hyd.touchDecision(ctx, d, e.bound); err != nil {
				return false, 0, err
			}
		}
	}
	if c == nil {
		if d.wait == 0 && !d.settle && !d.release && !e.waits.busy() {
			// The common case alone: no wait, no waiter anywhere.
			allowed, report := e.decideCache(d, out)
			return allowed, report, nil
		}
		return e.decideHere(ctx, d, out)
	}
	if local {
		allowed, report, err := e.decideHere(ctx, d, out)
		if err != nil {
			return false, 0, err
		}
		if (allowed || d.count) && d.consume && d.cost != 0 {
			var since int64
			if d.settle && d.cost < 0 {
				since = d.since
			}
			e.gossip.add(string(d.key), d.tenantID, d.pv.id, d.tier, d.keyID, d.cost, since)
		}
		return allowed, report, nil
	}
	p := bus.Partition(d.key)
	if c.Owns(p, e.cfg.Now()) {
		return e.decideHere(ctx, d, out)
	}
	if d.id == 0 && d.consume {
		d.id = e.fwd.nextID()
	}
	// The wait for an owner is bounded on the wall clock, not on
	// e.cfg.Now: it is a real wait on the network, and a clock a test
	// stops must not make it endless. Leases are compared with e.cfg.Now,
	// the clock the cluster's leases are written in.
	wctx, cancel := context.WithTimeout(ctx, HandoverWait+d.wait)
	defer cancel()
	deadline := time.Now().Add(d.wait) // a waiting d's, on the wall clock
	// maybe is the owner a forward may have reached unanswered: d goes
	// again only there.
	var maybe string
	for {
		owner, known := c.Owner(p)
		if c.Owns(p, e.cfg.Now()) {
			if maybe != "" {
				return false, 0, errMaybeDecided()
			}
			d.wait = max(time.Until(deadline), 0)
			return e.decideHere(ctx, d, out)
		}
		if maybe != "" && known && owner != maybe {
			return false, 0, errMaybeDecided()
		}
		if known && owner != c.Node() {
			res, err := forwardTo(wctx, c, owner, d, deadline)
			switch {
			case err == nil && res.Status == cluster.StatusOK:
				return d.answered(res, out)
			case err == nil:
				// Not decided there: not (yet) its owner, or its config
				// has no limits for d yet (< 1 s); ask again.
				maybe = ""
			case !errors.Is(err, cluster.ErrNotSent) && d.consume:
				maybe = owner
			}
		}
		select {
		case <-c.Changed():
		case <-time.After(20 * time.Millisecond):
		case <-wctx.Done():
		}
		if wctx.Err() != nil {
			if ctx.Err() != nil {
				return false, 0, cancelled(ctx)
			}
			if maybe != "" {
				// The wait ran out on a forward that may have been
				// decided: its owner remembers the answer, so one more
				// ask there usually gets it back.
				return e.askAgain(ctx, d, maybe, out)
			}
			return false, 0, errs.Errorf(errs.Unavailable, "The owner of this caller's bucket is changing hands; try again shortly.")
		}
	}
}

// askAgain sends d once more to owner, which a forward of d may have
// reached, with a wait of its own (lastAsk): it answers as the first
// did if it decided d, and decides it now if not and it still owns the
// partition. Anything else is errMaybeDecided.
func (e *Engine) askAgain(ctx context.Context, d *decision, owner string, out []quota.Outcome) (bool, int, error) {
	c := e.cluster
	if now, known := c.Owner(bus.Partition(d.key)); !known || now != owner {
		return false, 0, errMaybeDecided()
	}
	actx, cancel := context.WithTimeout(ctx, lastAsk)
	defer cancel()
	res, err := c.Forward(actx, owner, d.item())
	if err != nil || res.Status != cluster.StatusOK {
		return false, 0, errMaybeDecided()
	}
	return d.answered(res, out)
}

// answered takes the owner's answer to d: its outcomes into out, and
// whether it counted d's units.
func (d *decision) answered(res cluster.Result, out []quota.Outcome) (bool, int, error) {
	copy(out, res.Outcomes)
	d.counted = res.Counted
	d.waited = time.Duration(res.Waited)
	if res.Refused != "" {
		d.refused = res.Refused
	}
	return res.Allowed, res.Report, nil
}

// forwardTo sends d to owner: an ordinary forward, or a waiting one
// (cluster.ForwardWait) while d's wait, which ends at deadline, lasts. An
// owner that cannot wait (an older version) decides d at once, and d's
// answer says so.
func forwardTo(ctx context.Context, c *cluster.Cluster, owner string, d *decision, deadline time.Time) (cluster.Result, error) {
	if d.wait <= 0 {
		return c.Forward(ctx, owner, d.item())
	}
	it := d.item()
	if it.Wait = time.Until(deadline); it.Wait <= 0 {
		d.wait = 0
		return c.Forward(ctx, owner, it)
	}
	res, err := c.ForwardWait(ctx, owner, it)
	if errors.Is(err, cluster.ErrNoWait) {
		d.wait, d.refused = 0, WaitRefusedOwner
		return c.Forward(ctx, owner, d.item())
	}
	return res, err
}

// lastAsk bounds askAgain's wait. A sender therefore asks an owner about a
// decision for at most HandoverWait + lastAsk + the forward timeout after
// the first ask, well inside appliedKeep.
const lastAsk = 2 * time.Second

// errMaybeDecided answers a decision whose forward may have been decided by
// an owner that no longer answers for it: asking another server could take
// the units twice, so the caller hears 503 (as for a lost answer, the units
// may have been taken).
func errMaybeDecided() error {
	return errs.Errorf(errs.Unavailable, "The server that owns this caller's bucket did not answer in time and may have counted this request; try again shortly.")
}

// decideHere decides d in this server's hot cache: a waiting d through
// its bucket's queue (wait.go), and one that takes from a bucket with
// waiters is denied, so as not to pass them.
func (e *Engine) decideHere(ctx context.Context, d *decision, out []quota.Outcome) (bool, int, error) {
	if d.settle {
		return true, 0, e.applySettle(d, out)
	}
	if d.release {
		held := e.leases.release(d)
		if held {
			e.waits.slotFreed(d.key)
		}
		return held, 0, nil
	}
	if d.wait > 0 && d.consume {
		return e.waits.wait(ctx, d, out)
	}
	if e.waits.busy() && d.consume && d.cost > 0 && !d.count {
		if allowed, report, ok := e.waits.behind(d, out); ok {
			return allowed, report, nil
		}
	}
	// Units decided here are counted by the caller, on this server too.
	allowed, report := e.decideCache(d, out)
	return allowed, report, nil
}

// decideCache decides d in the hot cache, on its bucket, or on its
// tenant's overflow bucket when it has none and the tenant holds its bound
// of buckets here (overflow.go). A negative cost is a refund (a
// descriptor's is_negative_hits, rls.go): it gives the units back and
// answers the bucket as it then is, allowed. With count the cost is taken
// whether or not it is allowed (quota.Cache.CountBytes). A peek, or a
// refund, of a caller with no bucket creates none.
func (e *Engine) decideCache(d *decision, out []quota.Outcome) (bool, int) {
	if d.cusKey != nil {
		return d.decideLevels(e.cache, e.bound, out)
	}
	key, limits, now, cost, b := d.key, d.limits, d.now, d.cost, e.bound
	if cost < 0 {
		key = b.route(key, d.tier, d.keyID)
		if d.consume {
			e.cache.Refund(key, limits, now, -cost)
		}
		_, report, _ := e.cache.CheckBytesBound(key, -1, limits, now, 0, false, out)
		return true, report
	}
	if d.count {
		if !d.consume {
			cost = 0
		}
		allowed, report, ok := e.cache.CountBytesBound(key, b.max, limits, now, cost, out)
		if !ok {
			allowed, report, _ = e.cache.CountBytesBound(b.overflow(key, d.tier, d.keyID), -1, limits, now, cost, out)
		}
		return allowed, report
	}
	if d.lease.Token != 0 && d.consume {
		return e.leases.acquire(d, out)
	}
	allowed, report, ok := e.cache.CheckBytesBound(key, b.max, limits, now, cost, d.consume, out)
	if !ok {
		allowed, report, _ = e.cache.CheckBytesBound(b.overflow(key, d.tier, d.keyID), -1, limits, now, cost, d.consume, out)
	}
	return allowed, report
}

// cancelled is the error of a check whose ctx ended while it waited:
// unavailable, as any failed wait, and wrapping ctx's error so that the
// caller can tell its own cancellation.
func cancelled(ctx context.Context) error {
	return fmt.Errorf("%w: %w", errs.Errorf(errs.Unavailable, "The check was cancelled before it could be decided."), context.Cause(ctx))
}

// serveForward decides checks forwarded by other servers. An item that
// moved a bucket and carries an id is answered from the applied table when
// this server decided it before (its first answer was lost or late), even
// if the partition has moved on since: it was decided once, here.
func (e *Engine) serveForward(items []cluster.Item, res []cluster.Result) {
	v := e.view.Load()
	now := time.Now()
	for i := range items {
		it := &items[i]
		if it.ID == 0 || !it.Consume || it.Settle {
			res[i] = e.serveItem(v, it) // a settle: applySettle keeps it once
			continue
		}
		s := e.fwd.applied.lock(it.ID, now)
		r, seen := s.get(it.ID)
		if !seen {
			// Only what moved the bucket is remembered: a denial that
			// took nothing may be decided afresh when a copy of it comes
			// (its first answer reached nobody), and a flood of denials
			// costs the table nothing.
			if r = e.serveItem(v, it); r.Status == cluster.StatusOK && (r.Allowed || it.Count || it.Cost < 0) {
				s.put(it.ID, r)
			}
		} else {
			e.metrics.repeats.Inc()
		}
		s.mu.Unlock()
		res[i] = r
	}
}

// serveItem decides one forwarded item in this server's hot cache.
func (e *Engine) serveItem(v *view, it *cluster.Item) cluster.Result {
	if !e.cluster.Owns(bus.Partition([]byte(it.Key)), e.cfg.Now()) {
		return cluster.Result{Status: cluster.StatusNotOwner}
	}
	if it.Release {
		d := decision{key: []byte(it.Key), tenantID: it.Tenant, tier: it.Tier, keyID: it.KeyID, now: it.Now,
			lease: quota.Lease{Token: it.Lease, Expires: it.LeaseExp}, release: true}
		held := e.leases.release(&d)
		if held {
			e.waits.slotFreed(d.key)
		}
		return cluster.Result{Allowed: held}
	}
	limits := v.limitsFor(it.Tenant, it.Policy, it.Tier, it.KeyID)
	var lv decision // the customer's level, for a placed key
	if bus.KeyCustomer([]byte(it.Key)) != "" && !it.Settle {
		if st := v.customerOfItem(it, &lv); st != cluster.StatusOK {
			return cluster.Result{Status: st}
		}
	} else if len(limits) == 0 {
		return cluster.Result{Status: cluster.StatusNoLimits}
	}
	if len(limits) > MaxLimits {
		return cluster.Result{Status: cluster.StatusNoLimits}
	}
	var outs [MaxLimits]quota.Outcome
	n := len(limits)
	var allowed bool
	var report int
	if it.Settle {
		var pv *policyView
		if tv := v.tenant(it.Tenant); tv != nil {
			pv = tv.byID[it.Policy]
		}
		d := decision{key: []byte(it.Key), tenantID: it.Tenant, pv: pv, tier: it.Tier, keyID: it.KeyID, limits: limits,
			now: it.Now, cost: it.Cost, consume: true, settle: true, since: it.Since, id: it.ID, ref: it.Ref}
		if err := e.applySettle(&d, outs[:n]); err != nil {
			if errors.Is(err, errFenced) {
				return cluster.Result{Status: cluster.StatusNotOwner} // a newer owner applies it
			}
			e.log.Warn("a forwarded settle could not be marked applied at the worker; the sender asks again", "err", err)
			return cluster.Result{Status: cluster.StatusRetry}
		}
		allowed = true
	} else {
		d := decision{key: []byte(it.Key), tenantID: it.Tenant, tier: it.Tier, keyID: it.KeyID, limits: limits,
			now: it.Now, cost: it.Cost, consume: it.Consume, count: it.Count, lease: quota.Lease{Token: it.Lease, Expires: it.LeaseExp},
			cusKey: lv.cusKey, cusLimits: lv.cusLimits}
		n += len(lv.cusLimits)
		var behind bool
		if e.waits.busy() && it.Consume && it.Cost > 0 && !it.Count {
			allowed, report, behind = e.waits.behind(&d, outs[:n])
		}
		if !behind {
			allowed, report = e.decideCache(&d, outs[:n])
		}
	}
	r := cluster.Result{Allowed: allowed, Report: report, Outcomes: slices.Clone(outs[:n])}
	if allowed && it.Consume && it.Units && !it.Settle {
		if tv := v.tenant(it.Tenant); tv != nil && tv.byID[it.Policy] != nil {
			r.Counted = e.counters.addKeyUnits(it.Key, it.Tenant, tv.byID[it.Policy].name, it.Tier, it.Now, it.Cost)
		}
	}
	return r
}

// SetCluster makes the engine a cluster member: exact policies go to their
// partition's owner, local ones share their consumption. Call before Start.
func (e *Engine) SetCluster(c *cluster.Cluster) error {
	e.useCluster(c)
	e.waits.owns = func(key string) bool { return c.Owns(bus.Partition([]byte(key)), e.cfg.Now()) }
	if err := c.Serve(e.serveForward); err != nil {
		return err
	}
	ws := waitServer{e: e}
	if err := c.ServeWaits(ws.serve, ws.cancel); err != nil {
		return err
	}
	return e.gossip.subscribe()
}

// useCluster makes c the cluster the engine decides and publishes in.
func (e *Engine) useCluster(c *cluster.Cluster) {
	e.cluster = c
	e.pub.cluster = c
}

// LoadPartition replaces partition p's buckets with what the worker has,
// as p's new owner under lease: the first page raises p's term at the
// worker (its fencing token), and the states this server decides for p from now on
// carry that term. The term is taken only once every page is in, so a
// flush meanwhile cannot stamp a bucket the load has yet to replace with
// it; pending states of an older term are dropped, as the worker would
// refuse them.
func (e *Engine) LoadPartition(ctx context.Context, p int, lease bus.LeaseID) error {
	req := bus.BucketsRequest{Limit: hydratePage, Partition: &p, Acquire: true, Lease: lease}
	var pl pageLoader
	var term uint64
	for {
		page, err := e.hyd.requestBuckets(ctx, req)
		if err != nil {
			return err
		}
		if req.Acquire {
			term, req.Acquire = page.Term, false
		}
		pl.each(e.log, &page, func(key string, limits []quota.Limit, states []quota.State, fullAt int64) {
			e.cache.Load(key, limits, states, fullAt)
			e.leases.keys.note([]byte(key), limits)
		})
		if page.Next == "" {
			break
		}
		req.After = page.Next
	}
	e.pub.adoptTerm(p, term)
	return nil
}

// FlushAndSync publishes every pending bucket state and waits until the
// worker has committed it: the cluster calls it before giving a partition
// back, so the next owner loads the latest state.
func (e *Engine) FlushAndSync(ctx context.Context) error {
	// Waiters of a partition given back are denied: the next owner
	// decides its buckets, and nothing here may take from them again.
	if c := e.cluster; c != nil {
		now := e.cfg.Now()
		if n := e.waits.denyAll(func(key string) bool { return !c.Owns(bus.Partition([]byte(key)), now) }, WaitRefusedHandover, false); n > 0 {
			e.log.Info("waiting checks denied: their partition is handed over", "waiters", n)
		}
	}
	time.Sleep(5 * time.Millisecond) // let decisions that passed the ownership test finish
	e.pub.flushStates(ctx)
	if e.pub.pendingCount() > 0 {
		e.pub.flushStates(ctx)
	}
	var synced struct {
		State uint64 `json:"state"`
	}
	return bus.Request(ctx, e.nc, bus.SyncSubject, struct{}{}, &synced)
}
