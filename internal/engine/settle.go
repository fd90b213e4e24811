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
// check took the estimate from (h): a negative diff gives units back,
// never raising a bucket above what it holds when full; a positive one
// charges them even past the limit, since the request has already used
// them. It runs where a check of the same bucket would (the partition's
// owner in a cluster), so it is exact and persisted as checks are. A
// policy or key that no longer limits the bucket leaves nothing to adjust.
func (e *Engine) Settle(ctx context.Context, tenantID string, h reserve.Hold, diff int64, now time.Time) error {
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
		limits: tl.limits, now: nowNS, cost: diff, consume: true, force: diff > 0}, outs[:n]); err != nil {
		return err
	}
	if diff > 0 && h.IdentityKind == KindKey && tl.calendars {
		e.noteCrossings(tenantID, h.IdentityID, pv.name, tl, outs[:n], diff, nowNS)
	}
	return nil
}
