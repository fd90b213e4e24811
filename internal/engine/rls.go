package engine

// Envoy's rate limit service (internal/rls is its gRPC transport). A
// tenant's descriptor policies (tenants.DescriptorRule) form one tree per
// domain, compiled into an rlsconf.Config when the tenant's view is
// indexed. A call's descriptors are matched with the reference server's
// rules (rlsconf.Lookup); each matched rule is decided like any policy,
// on a bucket of its own per counter key, through decide: exact across
// servers (forwarded to the partition's owner), durable, shadow mode,
// blocks and analytics as for /v1/check.
//
// As in the reference, every descriptor is decided on its own: one over
// its limit does not keep another from counting, and its hits count
// whether or not it is over (so that usage reported after a response,
// Envoy's apply_on_stream_done, always counts). A rule with sluice.denied:
// uncounted counts only what it allows instead.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/rlsconf"
	"github.com/sluicehq/sluice/internal/rlspolicy"
	"github.com/sluicehq/sluice/internal/tenants"
)

// RLSEntry is one entry of a descriptor.
type RLSEntry = rlsconf.Entry

// RLSOverride is a descriptor's own limit, from Envoy's route config.
type RLSOverride struct {
	RequestsPerUnit uint32
	Unit            string // SECOND … YEAR
}

// RLSDescriptor is one descriptor of a call.
type RLSDescriptor struct {
	Entries  []RLSEntry
	Override *RLSOverride
	// Hits is what the descriptor takes (0: a check that takes nothing).
	Hits int64
	// Refund gives Hits back instead (is_negative_hits).
	Refund bool
}

// RLSRequest is one ShouldRateLimit call.
type RLSRequest struct {
	Domain      string
	Descriptors []RLSDescriptor
}

// RLSLimit is the limit a descriptor was decided under.
type RLSLimit struct {
	Name            string // the rule's rate_limit name
	RequestsPerUnit uint32
	Unit            string // SECOND … YEAR; "" when the period is none of them
	Window          time.Duration
	PolicyName      string // for the RateLimit headers
}

// RLSStatus is one descriptor's answer.
type RLSStatus struct {
	OverLimit  bool
	Limit      *RLSLimit // nil when no limit applied
	Remaining  uint32
	ResetAfter time.Duration
}

// RLSAnswer is a decided call.
type RLSAnswer struct {
	OverLimit bool
	Statuses  []RLSStatus
}

// KindDescriptor is the identity kind analytics count a descriptor check
// under when it carries no remote_address entry.
const KindDescriptor = "descriptor"

// kindCounter is the caller kind of a descriptor counter's bucket key:
// "<tenant>/<policy>/d:<counter key>".
const kindCounter = "d"

// rlsDomain is one domain of a tenant's descriptor policies, compiled.
type rlsDomain struct {
	cfg   *rlsconf.Config
	rules map[string]*policyView // by the rule's full key (its policy's name)
	// override decides descriptors that carry their own limit: a policy
	// view of the domain's own (never stored), and their limits, one
	// shared slice per limit value.
	override  *policyView
	overrides sync.Map // overrideKey -> []quota.Limit
	nOverride atomic.Int32
}

type overrideKey struct {
	rpu  uint32
	unit string
}

// maxOverrideLimits bounds the override limits a domain keeps compiled;
// beyond it an override compiles per call.
const maxOverrideLimits = 256

// rlsOverridePolicyID is the id of a domain's override policy view: a
// bucket key part that no stored policy id can equal.
func rlsOverridePolicyID(domain string) string { return "rls-override:" + domain }

// compileRLS builds the tenant's descriptor domains from its descriptor
// policies. A domain whose tree does not compile (which validation keeps
// from happening) is left out, so its descriptors find no rule; the error
// names it.
func compileRLS(es []*policyEntry) (map[string]*rlsDomain, error) {
	byDomain := map[string][]*policyEntry{}
	for _, e := range es {
		if d := e.p.Descriptor; d != nil {
			byDomain[d.Domain] = append(byDomain[d.Domain], e)
		}
	}
	if len(byDomain) == 0 {
		return nil, nil
	}
	out := make(map[string]*rlsDomain, len(byDomain))
	var bad error
	for domain, pes := range byDomain {
		ps := make([]tenants.Policy, len(pes))
		rules := make(map[string]*policyView, len(pes))
		for i, e := range pes {
			ps[i] = e.p
			rules[e.p.Name] = e.pv
		}
		f, err := rlspolicy.FromPolicies(domain, ps)
		if err == nil {
			var cfg *rlsconf.Config
			if cfg, err = rlsconf.Compile(f); err == nil {
				out[domain] = &rlsDomain{cfg: cfg, rules: rules, override: &policyView{
					id: rlsOverridePolicyID(domain), name: domain, consistency: tenants.ConsistencyExact, tiers: map[string]*tierLimits{},
				}}
				continue
			}
		}
		bad = fmt.Errorf("descriptor domain %q: %w", domain, err)
	}
	return out, bad
}

// overrideLimits returns the limits of an override, shared across calls.
func (d *rlsDomain) overrideLimits(o *RLSOverride) ([]quota.Limit, error) {
	k := overrideKey{o.RequestsPerUnit, o.Unit}
	if v, ok := d.overrides.Load(k); ok {
		return v.([]quota.Limit), nil
	}
	secs := tenants.DescriptorUnitSeconds(o.Unit)
	if secs == 0 {
		return nil, errs.Errorf(errs.Invalid, "limit.unit: unknown unit %q", o.Unit)
	}
	ls := []quota.Limit{{Algorithm: quota.FixedWindow, Limit: int64(o.RequestsPerUnit), Period: time.Duration(secs) * time.Second}}
	if d.nOverride.Load() < maxOverrideLimits {
		if v, loaded := d.overrides.LoadOrStore(k, ls); loaded {
			return v.([]quota.Limit), nil
		}
		d.nOverride.Add(1) // checks racing here may store a few past the bound; it stays a bound
	}
	return ls, nil
}

// sharedRule is the policy view of the rule whose counter an override
// (l, with its limit ol) counts in: the file's rule for the same entries
// when it is a reference rule (no sluice extras) counting in one fixed
// window of the override's length, matched without a share_threshold
// pattern (whose counter names the pattern, not the entries). Nil when
// there is none: the override counts on its own.
func (d *rlsDomain) sharedRule(domain string, l *rlsconf.Limit, ol quota.Limit) *policyView {
	c := l.Configured
	if c == nil || c.Rule == nil || c.Unlimited || c.Sluice != nil {
		return nil
	}
	for i := range c.Rule.Path {
		if _, shared := c.SharePattern(i); shared {
			return nil
		}
	}
	pv := d.rules[rlsconf.FullKey(domain, c.Rule.Path)]
	if pv == nil {
		return nil
	}
	tl := pv.tiers[TierDefault]
	if tl == nil || len(tl.limits) != 1 {
		return nil
	}
	if rl := tl.limits[0]; rl.Algorithm != quota.FixedWindow || rl.Period != ol.Period || rl.Calendar != nil {
		return nil
	}
	return pv
}

// overrideTier names an override's limit in a forwarded decision, so the
// owner can compile the same limit: "=<requests>/<unit>".
func overrideTier(o *RLSOverride) string {
	return "=" + itoa(int(o.RequestsPerUnit)) + "/" + o.Unit
}

// parseOverrideTier is overrideTier's inverse.
func parseOverrideTier(tier string) (*RLSOverride, bool) {
	if len(tier) < 4 || tier[0] != '=' {
		return nil, false
	}
	n, unit := uint64(0), ""
	for i := 1; i < len(tier); i++ {
		c := tier[i]
		if c == '/' {
			if i == 1 {
				return nil, false
			}
			unit = tier[i+1:]
			break
		}
		if c < '0' || c > '9' || n > math.MaxUint32/10 {
			return nil, false
		}
		n = n*10 + uint64(c-'0')
	}
	if n > math.MaxUint32 || tenants.DescriptorUnitSeconds(unit) == 0 {
		return nil, false
	}
	return &RLSOverride{RequestsPerUnit: uint32(n), Unit: unit}, true
}

// ShouldRateLimit decides a call of Envoy's rate limit service for a
// tenant: each descriptor in order, by the reference server's rules
// (rlsconf), the answer OVER_LIMIT when any non-quota descriptor is over
// its limit or every quota-mode descriptor is. An unknown domain, or a
// descriptor no rule matches, is OK without a limit, as in the
// reference. It waits as Check does; errors are errs.Unavailable.
func (e *Engine) ShouldRateLimit(ctx context.Context, tenantID string, req *RLSRequest, now time.Time) (RLSAnswer, error) {
	start := time.Now()
	v := e.view.Load()
	tv := v.tenant(tenantID)
	if tv == nil {
		return RLSAnswer{}, errs.Errorf(errs.Unauthenticated, "The service key's tenant no longer exists.")
	}
	if e.door != nil {
		if n := callBytes(req); n > doorFreeBytes {
			waited, err := e.door.take(ctx, tenantID, n)
			if err != nil {
				return RLSAnswer{}, err
			}
			now = now.Add(waited)
		}
	}
	ans := RLSAnswer{Statuses: make([]RLSStatus, len(req.Descriptors))}
	nowNS := now.UnixNano()
	dom := tv.rls[req.Domain]
	if dom == nil {
		for i := range req.Descriptors {
			a := Answer{Allowed: true, Reason: ReasonOK}
			a.IdentityKind, a.IdentityID = rlsIdentity(req.Descriptors[i].Entries)
			e.record(tenantID, "", "", &a, a.IdentityID, req.Descriptors[i].Hits == 0, nowNS, start, 0)
		}
		return ans, nil
	}
	rds := make([]rlsconf.RequestDescriptor, len(req.Descriptors))
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		rds[i].Entries = d.Entries
		if d.Override != nil {
			u, ok := rlsconf.ParseUnit(d.Override.Unit)
			if !ok {
				return RLSAnswer{}, errs.Errorf(errs.Invalid, "descriptors[%d].limit.unit: unknown unit %q", i, d.Override.Unit)
			}
			rds[i].Limit = &rlsconf.Override{RequestsPerUnit: d.Override.RequestsPerUnit, Unit: u}
		}
	}
	limits, unlimited := rlsconf.Plan(dom.cfg, req.Domain, rds)
	call := descriptorCall{e: e, tv: tv, dom: dom, domain: req.Domain, nowNS: nowNS, start: start}
	failedRate, failedQuota, totalQuota := 0, 0, 0
	for i := range req.Descriptors {
		st := &ans.Statuses[i]
		d := &req.Descriptors[i]
		switch {
		case unlimited[i]:
			st.Remaining = math.MaxUint32
			continue
		case limits[i] == nil:
			a := Answer{Allowed: true, Reason: ReasonOK}
			a.IdentityKind, a.IdentityID = rlsIdentity(d.Entries)
			e.record(tenantID, "", "", &a, a.IdentityID, d.Hits == 0, nowNS, start, 0)
			continue
		}
		l := limits[i]
		over, err := call.decide(ctx, d, l, st)
		if err != nil {
			return RLSAnswer{}, err
		}
		if l.QuotaMode {
			totalQuota++
			if over {
				failedQuota++
			}
		} else if over {
			failedRate++
		}
	}
	ans.OverLimit = failedRate > 0 || (totalQuota > 0 && totalQuota == failedQuota)
	return ans, nil
}

// descriptorCall decides the matched descriptors of one ShouldRateLimit
// call, each on a counter of its own: it holds what they share, the
// tenant's view, the domain and the call's instant.
type descriptorCall struct {
	e      *Engine
	tv     *tenantView
	dom    *rlsDomain
	domain string
	nowNS  int64
	start  time.Time // times the decisions for sluice_decision_seconds
}

// decide decides one matched descriptor into st and reports whether it is
// over its limit (before shadow mode answers OK).
func (c *descriptorCall) decide(ctx context.Context, d *RLSDescriptor, l *rlsconf.Limit, st *RLSStatus) (bool, error) {
	e, tv, nowNS := c.e, c.tv, c.nowNS
	var pv *policyView
	var lims []quota.Limit
	tier := TierDefault
	var err error
	if l.Rule == nil { // the descriptor's own limit
		if pv, lims, tier, err = c.dom.overrideOf(c.domain, l); err != nil {
			return false, err
		}
	} else {
		if pv = c.dom.rules[rlsconf.FullKey(c.domain, l.Rule.Path)]; pv == nil {
			return false, nil // the view changed under us; the next call sees the new one
		}
		tl := pv.tiers[TierDefault]
		if tl == nil || len(tl.limits) == 0 {
			return false, nil
		}
		lims = tl.limits[:min(len(tl.limits), MaxLimits)]
	}
	a := Answer{Policy: pv.name, Tier: tier}
	a.IdentityKind, a.IdentityID = rlsIdentity(d.Entries)
	if a.IdentityKind == KindIP {
		if _, ok := tv.activeBlock(KindIP, a.IdentityID, time.Unix(0, nowNS)); ok {
			a.Reason = ReasonBlocked
			e.record(tv.id, pv.name, tier, &a, a.IdentityID, d.Hits == 0 && !d.Refund, nowNS, c.start, 0)
			st.OverLimit = true
			return true, nil
		}
	}

	buf := e.keyBuf.Get().(*[]byte)
	k := bus.AppendBucketKey((*buf)[:0], tv.id, pv.id, kindCounter, "")
	at := len(k)
	k = boundCounterKey(appendCounterKey(k, c.domain, l, d.Entries), at)
	cost, consume := d.Hits, d.Hits > 0
	if d.Refund {
		cost, consume = -d.Hits, d.Hits > 0
	}
	count := counts(d, l)
	var outs [MaxLimits]quota.Outcome
	n := len(lims)
	refunded := int64(0)
	if d.Refund && consume {
		refunded, err = c.refundable(ctx, k, pv, tier, lims, d.Hits, outs[:n])
	}
	var allowed bool
	report := 0
	if err == nil {
		allowed, report, err = e.decide(ctx, &decision{key: k, tenantID: tv.id, pv: pv, tier: tier,
			limits: lims, now: nowNS, cost: cost, consume: consume, count: count}, outs[:n])
	}
	*buf = k
	e.keyBuf.Put(buf)
	if err != nil {
		return false, err
	}
	report = max(report, 0)
	return c.answer(d, l, pv, &a, &lims[report], &outs[report], allowed, refunded, st), nil
}

// overrideOf is what a descriptor with its own limit (an override) is
// decided under: the limit, compiled once per domain, counted in the file's
// rule for the same entries when there is one (sharedRule), else in the
// domain's override policy view.
func (dom *rlsDomain) overrideOf(domain string, l *rlsconf.Limit) (*policyView, []quota.Limit, string, error) {
	o := &RLSOverride{RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit.String()}
	ls, err := dom.overrideLimits(o)
	if err != nil {
		return nil, nil, "", err
	}
	pv := dom.override
	if rpv := dom.sharedRule(domain, l, ls[0]); rpv != nil {
		// Counted in the file's counter for the same entries, as the
		// reference does: its cache key does not name the limit.
		pv = rpv
	}
	return pv, ls, overrideTier(o), nil
}

// refundable is what a refund of hits on bucket k gives back to usage:
// what the buckets can, no more than the most any limit has used now, so
// that a refund larger than what was taken cannot push a caller's usage
// below what it consumed. out is scratch space.
func (c *descriptorCall) refundable(ctx context.Context, k []byte, pv *policyView, tier string, lims []quota.Limit, hits int64, out []quota.Outcome) (int64, error) {
	if _, _, err := c.e.decide(ctx, &decision{key: k, tenantID: c.tv.id, pv: pv, tier: tier,
		limits: lims, now: c.nowNS, cost: 1, consume: false}, out); err != nil {
		return 0, err
	}
	refunded := int64(0)
	for _, o := range out {
		left := o.Remaining
		if o.Allowed {
			left++ // the look took one unit
		}
		refunded = max(refunded, min(hits, o.Limit-left))
	}
	return refunded, nil
}

// counts says whether d's hits count, allowed or not, as in the
// reference: unless the rule says a denial counts nothing. A refund gives
// back.
func counts(d *RLSDescriptor, l *rlsconf.Limit) bool {
	return !d.Refund && (l.Sluice == nil || l.Sluice.Denied != rlsconf.DeniedUncounted)
}

// answer fills st from the decided descriptor's reported outcome (of
// limit lim), records the decision (a refund only gives units back), and
// reports whether the descriptor is over its limit. a holds the policy,
// tier and identity the decision is recorded under.
func (c *descriptorCall) answer(d *RLSDescriptor, l *rlsconf.Limit, pv *policyView, a *Answer, lim *quota.Limit, reported *quota.Outcome, allowed bool, refunded int64, st *RLSStatus) bool {
	e, tv, nowNS, tier := c.e, c.tv, c.nowNS, a.Tier
	r, count := *reported, counts(d, l)
	if !count && (d.Hits == 0 || d.Refund) {
		// Where a denial counts nothing, usage never passes the limit: a
		// check that takes nothing (or gives back) is never over, and
		// reports what is left now. The cache answered a look at one
		// unit, which leaves one less when it fits.
		if r.Allowed {
			r.Remaining++
		}
		allowed = true
	}
	if !allowed && r.Reset == 0 {
		// More hits than the limit at once on an unused window: the
		// reference still answers the time until the window turns.
		r.Reset = windowReset(*lim, nowNS)
	}
	rl := &RLSLimit{Name: l.Name, PolicyName: pv.name}
	if l.Rule == nil {
		rl.PolicyName = c.domain
	}
	rl.RequestsPerUnit = uint32(min(r.Limit, math.MaxUint32))
	rl.Window = lim.Period
	rl.Unit = unitOf(rl.Window)
	if l.Rule != nil && l.Sluice == nil {
		rl.RequestsPerUnit, rl.Unit = l.RequestsPerUnit, l.Unit.String()
	}
	st.Limit = rl
	st.Remaining = uint32(min(max(r.Remaining, 0), math.MaxUint32))
	st.ResetAfter = r.Reset
	a.Allowed, a.Limit, a.Remaining, a.Reset = allowed, r.Limit, r.Remaining, r.Reset
	a.Reason = ReasonOK
	if !allowed {
		a.Reason = ReasonRateLimited
		st.Remaining = 0
	}
	// Shadow mode is the rule's; an override never is in it.
	shadow := pv.shadow && l.Rule != nil
	if !d.Refund {
		e.record(tv.id, pv.name, tier, a, a.IdentityID, d.Hits == 0, nowNS, c.start, d.Hits)
		if count && !allowed && d.Hits > 0 {
			// Counted though denied: it is usage against the limit.
			e.counters.addUnits(tv.id, pv.name, tier, a.IdentityKind, a.IdentityID, nowNS, d.Hits)
		}
		e.metrics.rls.observe(tv.id, c.domain, l.StatsKey, d.Hits, r, allowed, shadow)
	} else if refunded > 0 {
		// A refund is no decision, but gives units back, in the minute it
		// came.
		e.counters.addUnits(tv.id, pv.name, tier, a.IdentityKind, a.IdentityID, nowNS, -refunded)
	}
	// Shadow mode answers OK, and the call's answer follows the
	// descriptors' answers, as in the reference.
	st.OverLimit = !allowed && !shadow
	return st.OverLimit
}

// windowReset is the time from now until l's window turns: its fixed
// window's end, or a period for the other algorithms.
func windowReset(l quota.Limit, now int64) time.Duration {
	if l.Algorithm != quota.FixedWindow {
		return l.Period
	}
	if l.Calendar != nil {
		_, end := l.Calendar.Window(now)
		return time.Duration(end - now)
	}
	p := int64(l.Period)
	if p <= 0 {
		return 0
	}
	return time.Duration(p - ((now%p)+p)%p)
}

// unitOf names a window as a reference unit, "" when it is none.
func unitOf(w time.Duration) string {
	for _, u := range tenants.DescriptorUnits {
		if time.Duration(u.Seconds)*time.Second == w {
			return u.Name
		}
	}
	return ""
}

// rlsIdentity is who analytics and blocks count a descriptor against: the
// client address Envoy's remote_address action sends, else the
// descriptor's values (bounded).
func rlsIdentity(es []RLSEntry) (kind, id string) {
	for _, en := range es {
		if en.Key == "remote_address" {
			if ip, ok := NormalizeIP(en.Value); ok {
				return KindIP, ip
			}
		}
	}
	// Copies at most maxIdentityBytes, however long the values: a call's
	// cost must not grow with bytes nobody keeps.
	var arr [maxIdentityBytes]byte
	b := arr[:0]
	add := func(s string) bool {
		n := min(len(s), maxIdentityBytes-len(b))
		b = append(b, s[:n]...)
		return n == len(s)
	}
	for i, en := range es {
		if i > 0 && !add(".") || !add(en.Key) || en.Value != "" && (!add("_") || !add(en.Value)) {
			break
		}
	}
	return KindDescriptor, string(b)
}

// maxIdentityBytes bounds a descriptor identity in analytics.
const maxIdentityBytes = 200

// maxCounterKeyBytes bounds the counter part of a bucket key: a longer
// one (long values, deep descriptors) stands for its SHA-256, so a bucket
// costs the same memory whatever a caller sends, and distinct counters
// stay distinct.
const maxCounterKeyBytes = 256

// boundCounterKey replaces the counter key that starts at b[at:] by "#"
// and its SHA-256 in hex when it is longer than maxCounterKeyBytes.
func boundCounterKey(b []byte, at int) []byte {
	if len(b)-at <= maxCounterKeyBytes {
		return b
	}
	sum := sha256.Sum256(b[at:])
	b = append(b[:at], '#')
	return hex.AppendEncode(b, sum[:])
}

// appendCounterKey appends the reference's counter key of a match
// (rlsconf.Limit.CounterKey) to b without a string of its own.
func appendCounterKey(b []byte, domain string, l *rlsconf.Limit, es []RLSEntry) []byte {
	b = append(b, domain...)
	b = append(b, '_')
	for i, e := range es {
		b = append(b, e.Key...)
		b = append(b, '_')
		if p, ok := l.SharePattern(i); ok {
			b = append(b, p...)
		} else {
			b = append(b, e.Value...)
		}
		b = append(b, '_')
	}
	return b
}
