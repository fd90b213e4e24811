package engine

// Limits per customer. A tier's limit with "per": "customer" counts in one
// bucket shared by all of a customer's callers (its keys, and the JWT
// subjects its tokens name). A check of a caller with a customer under such
// a tier decides two buckets together: the caller's own, under the tier's
// per-key limits, and the customer's, under its per-customer limits; it is
// admitted only if both admit it, and then both are debited
// (quota.Cache.CheckLevelsBound). Both buckets are in the customer's
// partition (bus's customer placement: the caller's bucket key carries its
// customer), so one owner decides them and no transaction spans servers.
// A caller without a customer is decided under the per-key limits alone.
//
// Placement changes where a caller's own bucket lives, and an older server
// hashes the whole key: a check that needs the customer's bucket is
// answered 503 until every live server announces placement
// (cluster.CustomerPlacement). An owner resolves both levels' limits from
// its own view, and answers StatusRetry when its view puts the key with
// another customer than the sender's did (the sender asks again, and its
// next checks are built from its newer view).

import (
	"sync"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/tenants"
)

// splitPerCustomer moves the per-customer limits of tl, compiled from
// specs in their order, to tl.cus, and fills tl.both.
func (tl *tierLimits) splitPerCustomer(specs tenants.Limits) {
	var keys, cus []quota.Limit
	var keyNames, cusNames []string
	for i, s := range specs {
		if s.PerCustomer() {
			cus, cusNames = append(cus, tl.limits[i]), append(cusNames, tl.names[i])
		} else {
			keys, keyNames = append(keys, tl.limits[i]), append(keyNames, tl.names[i])
		}
	}
	tl.limits, tl.names, tl.cus, tl.cusNames = keys, keyNames, cus, cusNames
	tl.both = append(append(make([]quota.Limit, 0, len(specs)), keys...), cus...)
	tl.bothNames = append(append(make([]string, 0, len(specs)), keyNames...), cusNames...)
}

// WaitRefusedCustomer: a check decided on its customer's bucket too does
// not wait.
const WaitRefusedCustomer = "customer_limit"

// customerLevel readies d, a check of a caller with a customer under
// tl (policy policyID), for its customer's bucket: the per-customer
// limits, no wait, the customer's bucket key. It appends the caller's own
// bucket key, placed with the customer, to buf and returns it; the
// customer's key follows it in buf's array. A reservation is refused, and
// so is the check while some live server does not place customers'
// buckets. It stays out of the common check's code (noinline).
//
//go:noinline
func (d *decision) customerLevel(c *cluster.Cluster, req *CheckRequest, a *Answer, tl *tierLimits, policyID string, buf []byte) ([]byte, error) {
	if req.Hold && !req.Peek {
		return nil, errs.Errorf(errs.Invalid, "reserve: not available under a tier with a per-customer limit (policy %q, tier %q)", a.Policy, a.Tier)
	}
	if tl.concurrency {
		return nil, errs.Errorf(errs.Invalid, "Policy %q, tier %q: a per-customer limit cannot share a tier with a concurrency limit.", a.Policy, a.Tier)
	}
	if !bus.ValidCustomerID(a.Customer.ID) {
		return nil, errs.Errorf(errs.Internal, "The caller's customer id cannot name a bucket.")
	}
	if c != nil && !c.CustomerPlacement() {
		return nil, errs.Errorf(errs.Unavailable, "Policy %q counts per customer, which needs every server of the cluster on a version that keeps a customer's buckets together; some live server does not yet. Finish the upgrade, then try again.", a.Policy)
	}
	d.cusLimits = tl.cus[:min(len(tl.cus), MaxLimits-len(d.limits))] // a tier holds at most MaxLimits in all
	if d.wait > 0 {
		d.wait, d.refused = 0, WaitRefusedCustomer
	}
	k := bus.AppendPlacedBucketKey(buf, d.tenantID, policyID, a.IdentityKind, a.Customer.ID, a.IdentityID)
	d.cusKey = bus.AppendCustomerBucketKey(k[len(k):], d.tenantID, policyID, a.Customer.ID)
	return k, nil
}

// decideLevels decides d on its own bucket and its customer's together,
// all or nothing: out holds d.limits' outcomes, then d.cusLimits'. A
// caller's bucket that cannot be made past its tenant's bound is decided
// on the tenant's overflow bucket (in the same partition), with the
// customer's.
func (d *decision) decideLevels(c *quota.Cache, b *tenantBound, out []quota.Outcome) (bool, int) {
	n := len(d.limits)
	// The levels' outcomes go to an array of this path's own, copied to
	// out after: to escape analysis a level's contents leak (the cache
	// keeps its limits), and passing out would move every check's outcome
	// array to the heap.
	sc := levelOuts.Get().(*[MaxLimits]quota.Outcome)
	defer func() {
		copy(out, sc[:n+len(d.cusLimits)])
		levelOuts.Put(sc)
	}()
	lv := [2]quota.Level{
		{Key: d.key, Limits: d.limits, Out: sc[:n]},
		{Key: d.cusKey, Limits: d.cusLimits, Out: sc[n : n+len(d.cusLimits)]},
	}
	allowed, denied, ok := c.CheckLevelsBound(lv[:], b.max, d.now, d.cost, d.consume, quota.Lease{})
	if !ok {
		lv[0].Key = b.overflow(d.key, d.tier, d.keyID)
		allowed, denied, _ = c.CheckLevelsBound(lv[:], -1, d.now, d.cost, d.consume, quota.Lease{})
	}
	if denied >= 0 {
		return false, levelReport(&lv, denied, n)
	}
	// Allowed: report the level whose reported limit has the least left.
	k := 1
	if lv[1].Report < 0 || (lv[0].Report >= 0 && lv[0].Out[lv[0].Report].Remaining <= lv[1].Out[lv[1].Report].Remaining) {
		k = 0
	}
	return allowed, levelReport(&lv, k, n)
}

// levelOuts holds decideLevels' outcome arrays.
var levelOuts = sync.Pool{New: func() any { return new([MaxLimits]quota.Outcome) }}

// levelReport is level k's report as an index into the outcomes of both.
func levelReport(lv *[2]quota.Level, k, n int) int {
	r := max(lv[k].Report, 0)
	if k == 1 {
		r += n
	}
	return r
}

// customerOfItem resolves, from this server's own view, the per-customer
// limits of a forwarded item whose key is placed with a customer, and
// sets them and the customer's bucket key in d. It answers StatusOK, or
// StatusRetry when the view does not put the item's caller with that
// customer under a tier counted per customer (the sender's view and this
// one differ, for a moment), or StatusNoLimits when the caller is not
// placed at all.
func (v *view) customerOfItem(it *cluster.Item, d *decision) int {
	tenantID, policyID, caller, ok := bus.SplitBucketKey(it.Key)
	cus := bus.KeyCustomer([]byte(it.Key))
	if !ok || cus == "" || tenantID != it.Tenant || policyID != it.Policy {
		return cluster.StatusNoLimits
	}
	tv := v.tenant(it.Tenant)
	if tv == nil {
		return cluster.StatusRetry
	}
	kind, id, _ := bus.SplitCaller(caller)
	if kind == KindKey {
		// A key's customer is this view's: a sender whose view is older
		// or newer asks again.
		k, _ := tv.keys.byID.get(id)
		if k == nil || k.tenantID != tv.id || k.customerID != cus {
			return cluster.StatusRetry
		}
	}
	if _, known := tv.customers.get(cus); !known {
		return cluster.StatusRetry
	}
	pv := tv.byID[it.Policy]
	if pv == nil {
		return cluster.StatusRetry
	}
	tl := tv.tierFor(pv, it.Tier, it.KeyID)
	if tl == nil || len(tl.cus) == 0 {
		return cluster.StatusRetry
	}
	d.cusLimits = tl.cus[:min(len(tl.cus), max(MaxLimits-len(tl.limits), 0))]
	d.cusKey = bus.AppendCustomerBucketKey(nil, it.Tenant, it.Policy, cus)
	return cluster.StatusOK
}
