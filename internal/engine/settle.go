package engine

import (
	"context"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/reserve"
)

// Settle applies a settled reservation's difference to the buckets its
// check took the estimate from (h), reserved at since: a negative diff
// gives units back, never raising a bucket above what it holds when full
// and never into a window that began after since (a month quota's
// reservation settled in the next month leaves the new month alone); a
// positive one charges them even past the limit, since the request has
// already used them. It runs where a check of the same bucket would (the
// partition's owner in a cluster), so it is exact and persisted as checks
// are, and that server counts the units for usage. A policy or key that no
// longer limits the bucket leaves nothing to adjust. The apply's id is the
// reservation's (settleID), so a retry of a settle whose answer was lost,
// from any server, is applied once by an owner that saw it.
func (e *Engine) Settle(ctx context.Context, r reserve.Reservation, now time.Time) error {
	return e.adjust(ctx, r.TenantID, r.Hold, r.Difference(), r.CreatedAt, now, settleID(r.TenantID, r.ID), r.ID)
}

// GiveBack returns an estimate a check took for a reservation that was
// never recorded (the worker refused or could not record it), as a settle
// at 0 would, once.
func (e *Engine) GiveBack(ctx context.Context, tenantID string, h reserve.Hold, estimate int64, now time.Time) error {
	return e.adjust(ctx, tenantID, h, -estimate, now, now, e.fwd.nextID(), "")
}

// adjust applies diff to h's buckets as a settle (Settle): id names it for
// the owner, and ref, when set, is the reservation the owner marks applied
// at the worker first.
func (e *Engine) adjust(ctx context.Context, tenantID string, h reserve.Hold, diff int64, since, now time.Time, id uint64, ref string) error {
	if diff == 0 {
		return nil
	}
	if !strings.HasPrefix(h.BucketKey, tenantID+"/") {
		return errs.Errorf(errs.NotFound, "reservation: no such reservation")
	}
	v := e.view.Load()
	tv := v.tenant(tenantID)
	if tv == nil {
		return errs.Errorf(errs.Unauthenticated, "The service key's tenant no longer exists.")
	}
	pv := tv.byID[h.PolicyID]
	if pv == nil {
		return nil
	}
	tl := tv.tierFor(pv, h.Tier, h.KeyID)
	if tl == nil || len(tl.limits) == 0 || len(tl.limits) > MaxLimits {
		return nil
	}
	var outs [MaxLimits]quota.Outcome
	n := len(tl.limits)
	nowNS := now.UnixNano()
	if _, _, err := e.decide(ctx, &decision{key: []byte(h.BucketKey), tenantID: tenantID, pv: pv, tier: h.Tier, keyID: h.KeyID,
		limits: tl.limits, now: nowNS, cost: diff, consume: true, settle: true, since: since.UnixNano(), id: id, ref: ref}, outs[:n]); err != nil {
		return err
	}
	if diff > 0 && h.IdentityKind == KindKey && tl.calendars {
		e.pub.crossings.note(tenantID, h.IdentityID, pv.name, tl, outs[:n], diff, nowNS)
	}
	return nil
}

// settleCache applies a settle in this server's hot cache and counts its
// units: a charge's cost, or what a refund gave back (of the calendar
// limits when the tier has some, since those are what a tenant bills; of
// any limit otherwise). out receives the buckets as they then are. A
// caller with no bucket whose tenant holds its bound of buckets here is
// settled on the overflow bucket its checks went to (overflow.go); its
// units count for the caller all the same.
func (e *Engine) settleCache(key []byte, tenantID string, pv *policyView, tier, keyID string, limits []quota.Limit, now, cost, since int64, out []quota.Outcome) {
	var units int64
	bk := e.bound.route(key, tier, keyID)
	if cost > 0 {
		e.cache.Force(string(bk), limits, now, cost)
		units = cost
	} else if cost < 0 {
		var given [MaxLimits]float64
		e.cache.RefundSince(bk, limits, now, -cost, since, given[:len(limits)])
		var all, cal float64
		calendars := false
		for i := range limits {
			all = max(all, given[i])
			if limits[i].Calendar != nil {
				calendars = true
				cal = max(cal, given[i])
			}
		}
		if calendars {
			all = cal
		}
		units = -int64(all + 0.5)
	}
	e.lookAt(bk, limits, now, out)
	if cost > 0 {
		// Past the limit what is left reads 0: a charge's outcome says
		// how far past instead, as a negative remaining, so that its
		// quota crossings start from the real use (crossingQueue.note).
		var used [MaxLimits]float64
		e.cache.Used(bk, limits, now, used[:len(limits)])
		for i := range out {
			if u := int64(used[i]); out[i].Remaining == 0 && u > out[i].Limit {
				out[i].Remaining = out[i].Limit - u
			}
		}
	}
	if units == 0 || pv == nil {
		return
	}
	kind, id, ok := strings.Cut(string(key[min(len(key), len(tenantID)+len(pv.id)+2):]), ":")
	if !ok {
		return
	}
	e.counters.addUnits(tenantID, pv.name, tier, kind, id, now, units)
}

// lookAt fills out with key's buckets as they are. A look at one unit
// answers one less than is left when it fits: the outcomes say what is
// left.
func (e *Engine) lookAt(key []byte, limits []quota.Limit, now int64, out []quota.Outcome) {
	e.cache.CheckBytesBound(key, -1, limits, now, 1, false, out) // creates no bucket
	for i := range out {
		if out[i].Allowed {
			out[i].Remaining++
		}
	}
}
