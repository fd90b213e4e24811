package engine

// Looking a caller up: the dashboard's "Callers" page shows, for one IP or
// consumer key of a tenant, what each of the tenant's policies would answer
// it now. Every policy's bucket is read through the same path a check with
// peek: true takes (hydration first, the partition's owner in a cluster),
// with consume false, so nothing is taken, counted or reset; a bucket that
// is not in memory is full, as a peek creates it.

import (
	"cmp"
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/tenants"
)

// CallerState is one caller of a tenant as the servers see it now.
type CallerState struct {
	Kind, ID string
	// KeyStatus is "active", "revoked" or "expired" for a key; a key that
	// is not active answers invalid_key before any policy is matched.
	KeyStatus string
	// Tier is the caller's own tier: the key's, anonymous for an IP, or
	// the one asked for a JWT caller (default when none).
	Tier string
	// Block is the block in force on the caller, if any.
	Block    *tenants.Block
	Policies []CallerPolicy
}

// CallerPolicy is one policy's bucket for the caller.
type CallerPolicy struct {
	Policy string
	// Tier is the tier the policy decides the caller with.
	Tier string
	// Override says the key's override for this policy replaces the tier.
	Override bool
	// Unlisted: no tier of the policy covers the caller; DenyUnlisted says
	// whether its checks are then denied (else unlimited).
	Unlisted, DenyUnlisted bool
	// Limits has each limit's bucket: remaining of limit, and when it is
	// full again; Allowed whether a check of cost 1 would pass now.
	Limits     []LimitStatus
	Allowed    bool
	RetryAfter time.Duration // quota.Never when no wait helps
	// Err is why the bucket could not be read (its owner changing hands).
	Err string
}

// Caller names a caller to look up: Kind KindIP, KindKey or KindJWT and
// its ID (an address, a key id, a token's subject). Tier is the tier a JWT
// caller's token names ("" for default, as a token without the issuer's
// tier claim): the token carries it, so a look-up must say it. Other
// callers have their own tier and leave it empty.
type Caller struct{ Kind, ID, Tier string }

// PeekCaller reports the caller's state at now for every policy of the
// tenant. A key id that is not this tenant's answers not found, as the API
// does for foreign ids.
func (e *Engine) PeekCaller(tenantID string, who Caller, now time.Time) (CallerState, error) {
	v := e.view.Load()
	tv := v.tenant(tenantID)
	if tv == nil {
		return CallerState{}, errs.Errorf(errs.NotFound, "no such tenant")
	}
	st, key, err := tv.caller(who, now)
	if err != nil {
		return CallerState{}, err
	}
	nowNS := now.UnixNano()
	var outs [MaxLimits]quota.Outcome
	var cusID string // the key's customer, whose bucket per-customer limits read
	if key != nil && key.customerID != "" {
		if _, known := tv.customers.get(key.customerID); known {
			cusID = key.customerID
		}
	}
	for _, pv := range tv.policies {
		cp, tl, keyID := pv.callerBucket(key, st.Tier)
		switch {
		case tl == nil:
			cp.Unlisted, cp.DenyUnlisted, cp.Allowed = true, pv.denyUnlisted, !pv.denyUnlisted
		case len(tl.limits) == 0 && (cusID == "" || len(tl.cus) == 0):
			cp.Allowed = true // every limit is per customer, and the caller has none
		default:
			e.peekBucket(tenantID, &st, pv, tl, keyID, cusID, nowNS, &cp, outs[:])
		}
		st.Policies = append(st.Policies, cp)
	}
	return st, nil
}

// caller finds the caller kind and id name in tv, with its own tier and the
// block in force on it; key is the caller's key, nil for an IP.
func (tv *tenantView) caller(who Caller, now time.Time) (st CallerState, key *keyView, err error) {
	kind, id := who.Kind, who.ID
	st = CallerState{Kind: kind}
	if who.Tier != "" && kind != KindJWT {
		return CallerState{}, nil, errs.Errorf(errs.Invalid, "tier: only a JWT caller's tier is given; a key has its own, an IP is anonymous")
	}
	switch kind {
	case KindIP:
		ip, err := NormalizeIdentity("identity", kind, id)
		if err != nil {
			return CallerState{}, nil, err
		}
		st.ID, st.Tier = ip, TierAnonymous
	case KindKey:
		key, _ = tv.keys.byID.get(id)
		if key == nil || key.tenantID != tv.id {
			return CallerState{}, nil, errs.Errorf(errs.NotFound, "key not found")
		}
		st.ID, st.Tier, st.KeyStatus = key.id, key.tier, "active"
		switch {
		case key.revoked:
			st.KeyStatus = "revoked"
		case key.expiresAt != 0 && now.UnixNano() >= key.expiresAt:
			st.KeyStatus = "expired"
		}
	case KindJWT:
		sub, err := NormalizeIdentity("identity", kind, id)
		if err != nil {
			return CallerState{}, nil, err
		}
		if len(who.Tier) > maxJWTTier {
			return CallerState{}, nil, errs.Errorf(errs.Invalid, "tier: at most %d bytes", maxJWTTier)
		}
		st.ID, st.Tier = sub, cmp.Or(who.Tier, TierDefault)
	default:
		return CallerState{}, nil, errs.Errorf(errs.Invalid, "kind: must be ip, key or jwt")
	}
	if b, ok := tv.activeBlock(st.Kind, st.ID, now); ok {
		st.Block = &b
	}
	return st, key, nil
}

// callerBucket finds the limits pv decides a caller of tier (and key, nil
// for an IP) with: the key's override, else its tier's, else default's,
// anchored to the key's billing day. keyID names the key whose override
// or billing anchor applies, as a check's does (tenantView.route), so the
// owner of a forwarded peek reads the bucket with the same limits.
func (pv *policyView) callerBucket(key *keyView, tier string) (cp CallerPolicy, tl *tierLimits, keyID string) {
	cp = CallerPolicy{Policy: pv.name, Tier: tier}
	if o := key.override(pv.name); o != nil {
		tl, keyID, cp.Override = o, key.id, true
	} else if tl = pv.tiers[cp.Tier]; tl == nil {
		if tl = pv.tiers[TierDefault]; tl != nil {
			cp.Tier = TierDefault
		}
	}
	if a := key.anchored(tl); a != tl {
		tl, keyID = a, key.id
	}
	return cp, tl, keyID
}

// peekBucket reads the caller st's bucket of pv under the limits tl into
// cp, taking nothing; outs is scratch space of MaxLimits outcomes.
func (e *Engine) peekBucket(tenantID string, st *CallerState, pv *policyView, tl *tierLimits, keyID, cusID string, nowNS int64, cp *CallerPolicy, outs []quota.Outcome) {
	n := min(len(tl.limits), MaxLimits)
	lims, names := tl.limits, tl.names
	d := decision{key: []byte(BucketKey(tenantID, pv.id, st.Kind, st.ID)), tenantID: tenantID, pv: pv, tier: cp.Tier, keyID: keyID, limits: tl.limits[:n], now: nowNS}
	if cusID != "" && len(tl.cus) > 0 {
		// Read as a check reads them: the key's bucket placed with its
		// customer, and the customer's (customerlimits.go).
		if e.cluster != nil && !e.cluster.CustomerPlacement() {
			cp.Err = "a live server does not keep a customer's buckets together yet"
			return
		}
		d.key = bus.AppendPlacedBucketKey(nil, tenantID, pv.id, st.Kind, cusID, st.ID)
		d.cusKey = bus.AppendCustomerBucketKey(nil, tenantID, pv.id, cusID)
		d.cusLimits = tl.cus[:min(len(tl.cus), MaxLimits-n)]
		lims, names = tl.both, tl.bothNames
	}
	n += len(d.cusLimits)
	// The buckets as they are: a cost no limit can hold is denied by
	// every limit, and a denial reports each bucket's level and its
	// time to full without the cost taken off.
	for _, l := range lims[:n] {
		d.cost = max(d.cost, l.Capacity()+1)
	}
	_, _, err := e.decide(context.Background(), &d, outs[:n])
	if err == nil {
		// A check of cost 1 passes exactly when every limit has a whole
		// unit left; only when one has not is the wait asked for.
		cp.Allowed = true
		for i := range n {
			cp.Allowed = cp.Allowed && outs[i].Remaining >= 1
		}
		if !cp.Allowed {
			var again [MaxLimits]quota.Outcome
			var allowed bool
			d.cost = 1
			if allowed, _, err = e.decide(context.Background(), &d, again[:n]); err == nil {
				cp.Allowed = allowed
				if !allowed {
					cp.RetryAfter = quota.CombinedRetryAfter(again[:n])
				}
			}
		}
	}
	if err != nil {
		cp.Err = errs.Message(err)
		return
	}
	cp.Limits = make([]LimitStatus, n)
	for i := range n {
		l := &lims[i]
		cp.Limits[i] = LimitStatus{Name: names[i], Limit: outs[i].Limit, Period: l.Period, Remaining: outs[i].Remaining, Reset: outs[i].Reset}
		if end := l.PeriodEnd(nowNS); end != 0 {
			cp.Limits[i].PeriodEnd = time.Duration(end - nowNS)
		}
		if l.Calendar != nil {
			cp.Limits[i].Calendar = l.Calendar.Unit().String()
		}
	}
}
