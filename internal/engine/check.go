package engine

import (
	"cmp"
	"context"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/route"
)

// Reasons a check answers with.
const (
	ReasonOK          = "ok"
	ReasonRateLimited = "rate_limited"
	ReasonInvalidKey  = "invalid_key"
	ReasonBlocked     = "blocked"
	// ReasonInvalidToken answers a JWT that failed verification.
	ReasonInvalidToken = "invalid_token"
	// ReasonConcurrencyLimited answers a check denied by a concurrency
	// limit: every slot is held by a lease (lease.go).
	ReasonConcurrencyLimited = "concurrency_limited"
)

// InvalidKeyIdentity is the identity id (kind "key") under which analytics
// count the checks whose api_key is unknown or another tenant's.
const InvalidKeyIdentity = "invalid_key"

// Tier names with a fixed meaning.
const (
	TierAnonymous = "anonymous"
	TierDefault   = "default"
)

// MaxLimits bounds the limits of one tier (validation enforces it), so a
// decision fits in fixed-size arrays on the stack.
const MaxLimits = 10

// CheckRequest is one question: may this caller do this now?
type CheckRequest struct {
	APIKey string
	// JWT is a compact token, used when APIKey is empty (jwt.go).
	JWT    string
	IP     string
	Method string
	Path   string
	Cost   int64
	Peek   bool
	// Hold asks, for a reservation, where the check's cost was taken
	// (Answer.Hold): the API's "reserve".
	Hold bool
	// LeaseTTL is how long a slot of a concurrency limit is held unless
	// released (MinLeaseTTL to MaxLeaseTTL; 0 = DefaultLeaseTTL).
	LeaseTTL time.Duration
	// Wait is how long the check may wait for its bucket when a rate
	// limit denies it (0: answer at once; at most MaxWait; wait.go).
	Wait time.Duration
}

// LimitStatus describes one limit of the decided tier, for headers.
type LimitStatus struct {
	Name      string // "<policy>" or "<policy>.<limit>"
	Limit     int64
	Period    time.Duration
	Remaining int64
	Reset     time.Duration
	// PeriodEnd is the time until the current window ends (a calendar's
	// or a periodic one), 0 for limits without windows; PeekCaller sets it.
	PeriodEnd time.Duration
	// Calendar is the limit's calendar unit ("month"), "" for a period.
	Calendar string
}

// Answer is a decided check.
type Answer struct {
	Allowed      bool
	Reason       string
	Policy       string // "" when no policy matched
	Tier         string
	IdentityKind string
	IdentityID   string
	// Customer is the caller's customer (a key attached to one), nil
	// when it has none. It is the view's, shared: read it, never change it.
	Customer     *Customer
	Limit        int64
	Remaining    int64
	Reset        time.Duration
	RetryAfter   time.Duration // quota.Never when no wait helps
	ShadowDenied bool
	// Limits lists every limit of the decided tier (empty when none applied).
	Limits []LimitStatus
	// Hold is where the cost was taken, for a request with Hold that
	// consumed it (allowed, not shadow-denied, under some limit); nil
	// otherwise.
	Hold *reserve.Hold
	// Lease names the slot an allowed check took of a concurrency limit
	// ("lse_…", lease.go), and LeaseExpires when it frees itself; "" and
	// zero when the check took none.
	Lease        string
	LeaseExpires time.Time
	// Waited is how long the check waited in its bucket's queue (0 when
	// it did not queue); WaitRefused says why a check that asked to wait
	// was denied before its wait ended (a WaitRefused* reason, "" when it
	// waited its whole wait or was allowed).
	Waited      time.Duration
	WaitRefused string
}

// validate fills defaults and rejects bad input, naming the field.
func (r *CheckRequest) validate(field string) error {
	if r.Path == "" {
		return errs.Errorf(errs.Invalid, "%spath: required, the raw request target", field)
	}
	if len(r.Path) > 8192 {
		return errs.Errorf(errs.Invalid, "%spath: longer than 8192 bytes", field)
	}
	if r.Method == "" {
		r.Method = "GET"
	} else if len(r.Method) > 32 || strings.ContainsAny(r.Method, " \t\r\n") {
		return errs.Errorf(errs.Invalid, "%smethod: must be an HTTP method such as \"GET\"", field)
	}
	if r.Cost == 0 {
		r.Cost = 1
	} else if r.Cost < 1 || r.Cost > 1_000_000 {
		return errs.Errorf(errs.Invalid, "%scost: must be an integer between 1 and 1000000", field)
	}
	if r.APIKey == "" && r.JWT == "" && r.IP == "" {
		return errs.Errorf(errs.Invalid, "%sip: required when api_key and jwt are absent", field)
	}
	if len(r.APIKey) > 256 {
		return errs.Errorf(errs.Invalid, "%sapi_key: longer than 256 bytes", field)
	}
	if r.LeaseTTL == 0 {
		r.LeaseTTL = DefaultLeaseTTL
	} else if r.LeaseTTL < MinLeaseTTL || r.LeaseTTL > MaxLeaseTTL {
		return errs.Errorf(errs.Invalid, "%slease_ttl: must be a duration from 1s to 24h, such as \"60s\"", field)
	}
	if r.Wait != 0 {
		return validateWait(r.Wait, r.Peek, field)
	}
	return nil
}

// Check decides one request for a tenant at now. On a single server it
// reads memory only. It waits on I/O in two cases, each bounded and each
// ending early when ctx ends: a bucket not loaded yet while the server
// hydrates is fetched from the worker first (up to 2 s, hydrate.go), and
// in a cluster an exact policy's check goes to its partition's owner,
// waiting for one through a hand-over (up to HandoverWait, decide.go).
// Errors are input errors, and errs.Unavailable when such a wait fails or
// ctx ends (the error then also wraps ctx's error).
func (e *Engine) Check(ctx context.Context, tenantID string, req *CheckRequest, now time.Time) (Answer, error) {
	return e.check(ctx, tenantID, req, now, "")
}

// CheckBatch decides several requests in order; an input error in any of
// them fails the whole batch before anything is decided. It waits as Check
// does, for each request in turn. When deciding one fails, it answers the
// error with the answers decided before it: what they took stays taken,
// and a caller that reserved gives their holds back.
func (e *Engine) CheckBatch(ctx context.Context, tenantID string, reqs []CheckRequest, now time.Time) ([]Answer, error) {
	for i := range reqs {
		if err := reqs[i].validate(batchField(i)); err != nil {
			return nil, err
		}
		if reqs[i].Wait != 0 {
			// A batch is answered whole: one waiting check would hold
			// every other.
			return nil, errs.Errorf(errs.Invalid, "%swait: a check in a batch cannot wait", batchField(i))
		}
		if reqs[i].APIKey == "" && reqs[i].JWT == "" {
			if _, ok := NormalizeIP(reqs[i].IP); !ok {
				return nil, errs.Errorf(errs.Invalid, "%sip: must be an IPv4 or IPv6 address", batchField(i))
			}
		}
	}
	out := make([]Answer, len(reqs))
	for i := range reqs {
		a, err := e.check(ctx, tenantID, &reqs[i], now, batchField(i))
		if err != nil {
			return out[:i], err
		}
		out[i] = a
	}
	return out, nil
}

func batchField(i int) string {
	return "checks[" + itoa(i) + "]."
}

func (e *Engine) check(ctx context.Context, tenantID string, req *CheckRequest, now time.Time, field string) (Answer, error) {
	// start times the decision for sluice_decision_seconds: a duration on
	// the monotonic clock, not a time the decision depends on.
	start := time.Now()
	if err := req.validate(field); err != nil {
		return Answer{}, err
	}
	v := e.view.Load()
	tv := v.tenant(tenantID)
	if tv == nil {
		return Answer{}, errs.Errorf(errs.Unauthenticated, "The service key's tenant no longer exists.")
	}
	nowNS := now.UnixNano()

	var a Answer
	var key *keyView
	var counted, jwtTier string
	var err error
	if req.APIKey == "" && req.JWT != "" {
		jwtTier = e.jwt.identifyAnswer(tv, req.JWT, now, &a)
		counted = a.IdentityID
	} else if key, counted, err = tv.identify(req, nowNS, field, &a); err != nil {
		return Answer{}, err
	}
	if a.Reason == ReasonInvalidKey || a.Reason == ReasonInvalidToken {
		e.record(tenantID, "", "", &a, counted, req.Peek, nowNS, start, 0)
		return a, nil
	}
	if b, ok := tv.activeBlock(a.IdentityKind, a.IdentityID, now); ok {
		a.Reason = ReasonBlocked
		if b.ExpiresAt != nil {
			a.RetryAfter = b.ExpiresAt.Sub(now)
		}
		e.record(tenantID, "", "", &a, a.IdentityID, req.Peek, nowNS, start, 0)
		return a, nil
	}

	pv, tl, keyID := tv.route(req, key, jwtTier, &a)
	if pv == nil {
		a.Allowed, a.Reason = true, ReasonOK
		e.record(tenantID, "", "", &a, a.IdentityID, req.Peek, nowNS, start, 0)
		return a, nil
	}
	if tl == nil || (len(tl.limits) == 0 && (a.Customer == nil || len(tl.cus) == 0)) {
		// The policy lists no limit for this tier: unlimited, or denied
		// when the policy says so (unlisted_tiers: deny). A tier whose
		// limits are all per customer has none for a caller without one.
		a.Allowed, a.Reason = true, ReasonOK
		if pv.denyUnlisted && tl == nil {
			a.Allowed, a.Reason, a.RetryAfter = false, ReasonRateLimited, quota.Never
		}
		// A tier without limits consumes from no bucket, but the caller
		// used the endpoint: its cost counts as usage all the same.
		e.record(tenantID, pv.name, a.Tier, &a, a.IdentityID, req.Peek, nowNS, start, req.Cost)
		if !a.Allowed && pv.shadow {
			a.Allowed, a.ShadowDenied, a.Reason, a.RetryAfter = true, true, ReasonOK, 0
		}
		return a, nil
	}
	units, err := e.decideCheck(ctx, tenantID, req, key, pv, tl, keyID, nowNS, &a)
	if err != nil {
		return Answer{}, err
	}
	if a.Waited > 0 {
		// A check that waited is counted once, as it ended; its wait is
		// not decision time.
		nowNS, start = nowNS+int64(a.Waited), start.Add(a.Waited)
	}
	e.record(tenantID, pv.name, a.Tier, &a, a.IdentityID, req.Peek, nowNS, start, units)
	if !a.Allowed && pv.shadow {
		// Shadow mode: decided and recorded as a denial, answered as allowed.
		a.Allowed, a.ShadowDenied, a.Reason, a.RetryAfter = true, true, ReasonOK, 0
	}
	return a, nil
}

// identify fills a with the check's caller: a presented consumer key is
// verified, never downgraded to IP. It answers the key (nil for an IP),
// and for a key that is not valid here a.Reason ReasonInvalidKey with the
// identity analytics count it under.
func (tv *tenantView) identify(req *CheckRequest, nowNS int64, field string, a *Answer) (*keyView, string, error) {
	if req.APIKey == "" {
		ip, ok := NormalizeIP(req.IP)
		if !ok {
			return nil, "", errs.Errorf(errs.Invalid, "%sip: must be an IPv4 or IPv6 address", field)
		}
		a.IdentityKind, a.IdentityID = KindIP, ip
		return nil, "", nil
	}
	key, _ := tv.keys.byHash.get(hashKey(req.APIKey))
	a.IdentityKind = KindKey
	if key == nil || key.tenantID != tv.id || key.revoked || (key.expiresAt != 0 && nowNS >= key.expiresAt) {
		a.Reason = ReasonInvalidKey
		a.IdentityID = keyPrefix(req.APIKey)
		// Analytics count every key that is not this tenant's under one
		// identity: each random string would otherwise be a caller of
		// its own. The tenant's own revoked or expired keys are as many
		// as it issued, and keep their id.
		counted := InvalidKeyIdentity
		if key != nil && key.tenantID == tv.id {
			a.IdentityID = key.id
			counted = key.id
		}
		return key, counted, nil
	}
	a.IdentityID = key.id
	if key.customerID != "" {
		tv.nameCustomer(key, a)
	}
	return key, "", nil
}

// identifyAnswer fills a with the caller a token names, or with
// ReasonInvalidToken when it fails verification; it answers the token's
// tier claim ("" when none).
func (j *jwtVerifier) identifyAnswer(tv *tenantView, tok string, now time.Time, a *Answer) string {
	a.IdentityKind = KindJWT
	v, ok := j.identify(tv, tok, now)
	if !ok {
		a.Reason, a.IdentityID = ReasonInvalidToken, InvalidTokenIdentity
		return ""
	}
	a.IdentityID = v.subject
	if v.customer != "" {
		a.Customer, _ = tv.customersByExt.get(v.customer)
	}
	return v.tier
}

// route finds the policy of req's target (nil when none matches, else
// a.Policy) and the limits the caller is decided with there: its tier's,
// where a.Tier is the key's tier, else default; an IP uses anonymous, else
// default; a caller no tier covers keeps its own tier's name. A key's
// override replaces its tier, and its month quotas reset on its billing
// anchor day: keyID then names the key, so the owner of a forwarded
// decision finds the same limits by it.
func (tv *tenantView) route(req *CheckRequest, key *keyView, jwtTier string, a *Answer) (pv *policyView, tl *tierLimits, keyID string) {
	target := route.NormalizeTarget(req.Path)
	idx := tv.router.Match(strings.ToUpper(req.Method), &target)
	if idx < 0 {
		return nil, nil, ""
	}
	pv = tv.policies[idx]
	a.Policy = pv.name
	switch {
	case key != nil:
		a.Tier = key.tier
	case a.IdentityKind == KindJWT:
		// The token's tier claim, else default; a tier the policy does
		// not list falls to default below.
		a.Tier = cmp.Or(jwtTier, TierDefault)
	default:
		a.Tier = TierAnonymous
	}
	if o := key.override(pv.name); o != nil {
		tl, keyID = o, key.id
	} else if tl = pv.tiers[a.Tier]; tl == nil {
		if tl = pv.tiers[TierDefault]; tl != nil {
			a.Tier = TierDefault
		}
	}
	if key != nil && key.anchor != 0 && tl != nil && tl.months {
		tl, keyID = key.anchored(tl), key.id
	}
	return pv, tl, keyID
}

// decideCheck decides a check under the limits tl of policy pv (keyID as
// route answered) and fills a with the answer. It returns the units the
// check's record counts: none when the bucket's owner counted them.
func (e *Engine) decideCheck(ctx context.Context, tenantID string, req *CheckRequest, key *keyView, pv *policyView, tl *tierLimits, keyID string, nowNS int64, a *Answer) (int64, error) {
	var outs [MaxLimits]quota.Outcome
	n := min(len(tl.limits), MaxLimits)
	lims, names := tl.limits, tl.names
	buf := e.keyBuf.Get().(*[]byte)
	var k []byte
	d := decision{tenantID: tenantID, pv: pv, tier: a.Tier, keyID: keyID,
		limits: tl.limits[:n], now: nowNS, cost: req.Cost, consume: !req.Peek, units: true, wait: req.Wait}
	if a.Customer != nil && len(tl.cus) > 0 {
		// Counted per customer too: both buckets in the customer's
		// partition, decided together (customerlimits.go).
		var err error
		if k, err = d.customerLevel(e.cluster, req, a, tl, pv.id, (*buf)[:0]); err != nil {
			e.keyBuf.Put(buf)
			return 0, err
		}
		lims, names = tl.both, tl.bothNames
	} else {
		k = bus.AppendBucketKey((*buf)[:0], tenantID, pv.id, a.IdentityKind, a.IdentityID)
	}
	d.key = k
	if tl.concurrency && !req.Peek {
		d.lease = quota.Lease{Token: newLeaseToken(), Expires: nowNS + int64(req.LeaseTTL)}
	}
	if pv.shadow {
		d.wait = 0 // a shadow policy's denial is answered allowed: nothing to wait for
	}
	all := n + len(d.cusLimits)
	allowed, report, err := e.decide(ctx, &d, outs[:all])
	if err == nil && allowed && d.lease.Token != 0 {
		a.Lease, a.LeaseExpires = leaseID(k, a.Tier, keyID, d.lease), time.Unix(0, d.lease.Expires).UTC()
	}
	if err == nil && allowed && !req.Peek && key != nil && tl.calendars {
		e.pub.crossings.note(tenantID, key.id, pv.name, tl, outs[:n], req.Cost, nowNS)
	}
	if err == nil && allowed && req.Hold && !req.Peek {
		a.Hold = &reserve.Hold{BucketKey: string(k), PolicyID: pv.id, Policy: pv.name, Tier: a.Tier, KeyID: keyID,
			IdentityKind: a.IdentityKind, IdentityID: a.IdentityID}
	}
	*buf = k
	e.keyBuf.Put(buf)
	if err != nil {
		return 0, err
	}

	r := outs[report]
	a.Allowed = allowed
	a.Waited, a.WaitRefused = d.waited, d.refused
	a.Limit, a.Remaining, a.Reset = r.Limit, r.Remaining, r.Reset
	if allowed {
		a.Reason = ReasonOK
	} else {
		a.Reason = ReasonRateLimited
		if lims[report].Algorithm == quota.Concurrency {
			a.Reason = ReasonConcurrencyLimited
		}
		// With several limits denying, the caller must wait for the last.
		a.RetryAfter = quota.CombinedRetryAfter(outs[:all])
	}
	a.Limits = make([]LimitStatus, all)
	for i := 0; i < all; i++ {
		a.Limits[i] = LimitStatus{Name: names[i], Limit: outs[i].Limit, Period: lims[i].Period, Remaining: outs[i].Remaining, Reset: outs[i].Reset}
	}
	if d.counted {
		return 0, nil // counted where the bucket took them
	}
	return req.Cost, nil
}

// record counts a decision for analytics and metrics, under the identity
// id analytics count it as (the answer's, but for a key that is not
// valid here). Peeks are not decisions and are not counted. cost is what
// the decision asked for: an allowed decision under a policy consumed it
// (usage units), a denied one nothing. It must be called before shadow
// mode turns a denial into an answer that allows.
func (e *Engine) record(tenantID, policy, tier string, a *Answer, id string, peek bool, nowNS int64, start time.Time, cost int64) {
	e.metrics.observe(a.Reason, a.Allowed, time.Since(start))
	if peek {
		return
	}
	var units int64
	if a.Allowed && policy != "" {
		units = cost
	}
	e.counters.add(tenantID, policy, tier, a.IdentityKind, id, nowNS, a.Allowed, a.Reason, units)
}

// keyPrefix is what an answer may say about a presented key that is not
// this tenant's: its first 8 characters, keeping only the characters a key
// can contain so the answer never echoes arbitrary bytes.
func keyPrefix(k string) string {
	var b [8]byte
	n := 0
	for i := 0; i < len(k) && n < len(b); i++ {
		c := k[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' {
			b[n] = c
			n++
		}
	}
	return string(b[:n])
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	p := len(b)
	for i > 0 {
		p--
		b[p] = byte('0' + i%10)
		i /= 10
	}
	return string(b[p:])
}
