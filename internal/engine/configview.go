package engine

// The config cache. A server holds the whole configuration it needs to
// decide checks (tenants, keys by hash, compiled policy routers, blocks) as
// one immutable view behind an atomic pointer: the check path reads it with
// one atomic load and no lock. A config change builds a new view and swaps
// the pointer. Changes arrive in version order from the worker; a gap makes
// the server resynchronise from a fresh snapshot.
//
// Everything of a tenant lives in its own tenantView, and a change copies
// only what it touches, so it costs what the changed tenant holds, never
// what the platform holds: the new view shares every other tenant's
// tenantView with the old one. The maps that can be large (all tenants,
// all users and active service keys, one tenant's consumer keys) are cow
// maps, of which a change copies one shard in 256. A policy change
// recompiles its own policy, then sorts the tenant's compiled policies
// (O(n log n)) and rebuilds its router; a block or key change touches
// neither.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/route"
	"github.com/sluicehq/sluice/internal/tenants"
)

type view struct {
	version      int64
	operatorHash string

	tenants cow[string, *tenantView] // by tenant id
	users   cow[string, int64]       // user id -> session version
	svcHash cow[string, svcEntry]    // service key hash (hex) -> key; active keys only
}

// tenantView is one tenant's configuration, compiled. It is never changed
// once a view holds it: a change makes a new one, sharing what it can.
type tenantView struct {
	id     string
	tenant tenants.Tenant
	// loc is the tenant's time zone, where its calendar limits reset.
	loc *time.Location

	// src is every policy of the tenant with its compiled form, by id.
	src      map[string]*policyEntry
	policies []*policyView // aligned with the router's patterns
	byName   map[string]*policyView
	byID     map[string]*policyView
	router   *route.Router
	// rls is the tenant's descriptor policies by domain (rls.go).
	rls map[string]*rlsDomain

	blockSrc map[string]tenants.Block // by id
	blocks   map[identityRef][]tenants.Block

	svcKeys map[string]string // active service key id -> hash
	keys    keyIndex
	// issuers are the tenant's JWT issuers by their "iss" (jwt.go).
	issuers map[string]*issuerView
	// customers are the tenant's customers by id, and customersByExt the
	// same by external id, which a JWT's customer claim names
	// (customers.go). Both stay unallocated (empty) until the tenant has
	// a customer, so a tenant without any costs no shard arrays.
	customers      cow[string, *Customer]
	customersByExt cow[string, *Customer]
}

// policyEntry is one policy as stored and as compiled.
type policyEntry struct {
	p   tenants.Policy
	pat route.Pattern
	pv  *policyView
}

// keyIndex is a tenant's consumer keys, revoked and expired ones included.
type keyIndex struct {
	byHash cow[[32]byte, *keyView]
	byID   cow[string, *keyView]
}

type identityRef struct{ kind, id string }

type policyView struct {
	id, name    string
	consistency string
	shadow      bool
	tiers       map[string]*tierLimits
	// denyUnlisted: a caller of a tier the policy does not list (and no
	// default tier covers) is denied rather than unlimited.
	denyUnlisted bool
}

// tierLimits is one tier's limits, compiled once per policy version; the
// slice identity tells the hot cache when a policy changed.
type tierLimits struct {
	limits []quota.Limit
	names  []string // header names: "<policy>" or "<policy>.<limit>"
	// months: a limit resets on a calendar month, which a key's billing
	// anchor moves (keyView.anchored).
	months bool
	// calendars: some limit has a calendar, whose crossings of a percent
	// of the quota a key's checks report (quotaevents.go).
	calendars bool
	// concurrency: some limit is a concurrency limit, so an allowed check
	// takes a lease (lease.go).
	concurrency bool
	// cus and cusNames are the limits counted per customer ("per":
	// "customer"), decided on the customer's bucket together with limits
	// on the caller's own (customerlimits.go); limits and names then hold
	// the per-key ones alone. both and bothNames are the per-key limits
	// followed by the per-customer ones, an answer's order.
	cus, both           []quota.Limit
	cusNames, bothNames []string
}

type keyView struct {
	hash                       [32]byte
	id, tenantID, tier, prefix string
	expiresAt                  int64 // unix ns; 0 = never
	revoked                    bool
	overrides                  map[string]*tierLimits     // by policy name
	src                        *tenants.ConsumerKeyRecord // set only for a key with overrides
	// customerID is the key's customer, "" for none (customers.go).
	customerID string
	// anchor is the day the key's month quotas reset on (0 = the 1st);
	// anchoredTiers keeps the tiers' limits moved to it, by the tier's
	// compiled limits (a new policy version is a new entry).
	anchor        int
	anchoredMu    sync.Mutex
	anchoredTiers map[*tierLimits]*tierLimits
}

func emptyView() *view {
	return &view{
		tenants: newCow[string, *tenantView](stringShard),
		users:   newCow[string, int64](stringShard),
		svcHash: newCow[string, svcEntry](stringShard),
	}
}

func newTenantView(t tenants.Tenant) *tenantView {
	return &tenantView{
		id: t.ID, tenant: t, loc: tenantLocation(t),
		src: map[string]*policyEntry{}, byName: map[string]*policyView{}, byID: map[string]*policyView{}, router: route.NewRouter(nil),
		blockSrc: map[string]tenants.Block{}, blocks: map[identityRef][]tenants.Block{},
		svcKeys: map[string]string{},
		keys:    keyIndex{byHash: newCow[[32]byte, *keyView](sumShard), byID: newCow[string, *keyView](stringShard)},
	}
}

// tenant returns a tenant's compiled configuration, nil when the view has
// no such tenant.
func (v *view) tenant(id string) *tenantView {
	tv, _ := v.tenants.get(id)
	return tv
}

// serviceKey looks an active service key up by its hash in hex, without
// making a string of it.
func (v *view) serviceKey(h *[64]byte) (svcEntry, bool) {
	ent, ok := v.svcHash.s[bytesShard(h[:])][string(h[:])]
	return ent, ok
}

// viewFromSnapshot builds a complete view.
func viewFromSnapshot(s tenants.Snapshot) (*view, error) {
	v := emptyView()
	v.version = s.Version
	v.operatorHash = s.OperatorTokenHash
	byID := map[string]*tenantView{}
	for _, t := range s.Tenants {
		tv := newTenantView(t)
		byID[t.ID] = tv
		v.tenants.put(t.ID, tv)
	}
	// own returns the tenantView an object belongs to; objects of a
	// tenant the snapshot does not list are kept as a change would keep
	// them.
	own := func(id string) *tenantView {
		tv := byID[id]
		if tv == nil {
			tv = newTenantView(tenants.Tenant{ID: id})
			byID[id] = tv
			v.tenants.put(id, tv)
		}
		return tv
	}
	for _, k := range s.ServiceKeys {
		if k.RevokedAt == nil {
			own(k.TenantID).svcKeys[k.ID] = k.Hash
			v.svcHash.put(k.Hash, newSvcEntry(k.ServiceKey))
		}
	}
	for _, u := range s.Users {
		v.users.put(u.ID, u.Version)
	}
	for _, p := range s.Policies {
		tv := own(p.TenantID)
		e, err := compilePolicy(p, tv.loc)
		if err != nil {
			return nil, err
		}
		tv.src[p.ID] = e
	}
	for _, b := range s.Blocks {
		tv := own(b.TenantID)
		tv.blockSrc[b.ID] = b
		ref := blockRef(b)
		tv.blocks[ref] = append(tv.blocks[ref], b)
	}
	for _, iss := range s.JWTIssuers {
		tv := own(iss.TenantID)
		if tv.issuers == nil {
			tv.issuers = map[string]*issuerView{}
		}
		tv.issuers[iss.Issuer] = compileIssuer(iss)
	}
	for _, c := range s.Customers {
		tv, cv := own(c.TenantID), &Customer{ID: c.ID, ExternalID: c.ExternalID}
		tv.allocCustomers()
		tv.customers.put(c.ID, cv)
		tv.customersByExt.put(c.ExternalID, cv)
	}
	for _, k := range s.ConsumerKeys {
		tv := own(k.TenantID)
		kv, err := compileKey(k, tv.loc)
		if err != nil {
			return nil, err
		}
		tv.keys.byHash.put(kv.hash, kv)
		tv.keys.byID.put(kv.id, kv)
	}
	for _, tv := range byID {
		tv.index()
	}
	return v, nil
}

// apply returns a new view with one change applied. It never mutates v.
func (v *view) apply(c tenants.Change) (*view, error) {
	n := *v
	n.version = c.Version
	var err error
	switch c.Kind {
	case tenants.ChangeTenant:
		err = n.applyTenant(c)
	case tenants.ChangeServiceKey:
		err = n.applyServiceKey(c)
	case tenants.ChangeConsumerKey:
		err = n.applyConsumerKey(c)
	case tenants.ChangePolicy:
		err = n.applyPolicy(c)
	case tenants.ChangePolicyDeleted:
		tv := n.edit(c.TenantID)
		tv.src = maps.Clone(tv.src)
		delete(tv.src, c.ID)
		tv.index()
	case tenants.ChangeBlock:
		if c.Block == nil {
			return nil, fmt.Errorf("change %d: block missing", c.Version)
		}
		n.edit(c.Block.TenantID).setBlock(c.Block.ID, c.Block)
	case tenants.ChangeBlockDeleted:
		n.edit(c.TenantID).setBlock(c.ID, nil)
	case tenants.ChangeJWTIssuer:
		if c.JWTIssuer == nil {
			return nil, fmt.Errorf("change %d: jwt issuer missing", c.Version)
		}
		n.edit(c.JWTIssuer.TenantID).setIssuer(c.JWTIssuer.ID, c.JWTIssuer)
	case tenants.ChangeJWTIssuerDeleted:
		n.edit(c.TenantID).setIssuer(c.ID, nil)
	case tenants.ChangeCustomer:
		if c.Customer == nil {
			return nil, fmt.Errorf("change %d: customer missing", c.Version)
		}
		n.edit(c.Customer.TenantID).setCustomer(c.Customer.ID, c.Customer)
	case tenants.ChangeCustomerDeleted:
		n.edit(c.TenantID).setCustomer(c.ID, nil)
	case tenants.ChangeUserSession:
		if c.UserSession == nil {
			return nil, fmt.Errorf("change %d: user session missing", c.Version)
		}
		n.users = n.users.set(c.UserSession.ID, c.UserSession.Version)
	case tenants.ChangeUserDeleted:
		n.users = n.users.without(c.ID)
	case tenants.ChangeTenantDeleted:
		n.deleteTenant(c.TenantID)
	case tenants.ChangeOperatorToken:
		n.operatorHash = c.OperatorTokenHash
	default:
		// Kinds this server does not keep in its view (bucket resets,
		// which the caller handles) only advance the version.
	}
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// The apply* functions apply one kind of change to v, a new view no reader
// has seen yet (apply's copy).

// edit returns a copy of the tenant's view to change, and stores it in v;
// a tenant the view does not know yet starts empty.
func (v *view) edit(id string) *tenantView {
	var tv tenantView
	if old := v.tenant(id); old != nil {
		tv = *old
	} else {
		tv = *newTenantView(tenants.Tenant{ID: id})
	}
	v.tenants = v.tenants.set(id, &tv)
	return &tv
}

func (v *view) applyTenant(c tenants.Change) error {
	if c.Tenant == nil {
		return fmt.Errorf("change %d: tenant missing", c.Version)
	}
	tv := v.edit(c.Tenant.ID)
	tv.tenant = *c.Tenant
	if loc := tenantLocation(*c.Tenant); tv.loc == nil || loc.String() != tv.loc.String() {
		if err := tv.relocate(loc); err != nil {
			return err
		}
	}
	return nil
}

// applyServiceKey keeps an active key's use (keyuse.go) across the change.
func (v *view) applyServiceKey(c tenants.Change) error {
	if c.ServiceKey == nil {
		return fmt.Errorf("change %d: service key missing", c.Version)
	}
	k := *c.ServiceKey
	tv := v.edit(k.TenantID)
	tv.svcKeys = maps.Clone(tv.svcKeys)
	delete(tv.svcKeys, k.ID)
	old, had := v.svcHash.get(k.Hash)
	v.svcHash = v.svcHash.without(k.Hash)
	if k.RevokedAt == nil {
		tv.svcKeys[k.ID] = k.Hash
		if !had {
			old = newSvcEntry(k.ServiceKey)
		}
		v.svcHash = v.svcHash.set(k.Hash, old)
	}
	return nil
}

func (v *view) applyConsumerKey(c tenants.Change) error {
	if c.ConsumerKey == nil {
		return fmt.Errorf("change %d: consumer key missing", c.Version)
	}
	tv := v.edit(c.ConsumerKey.TenantID)
	kv, err := compileKey(*c.ConsumerKey, tv.loc)
	if err != nil {
		return err
	}
	tv.keys.byHash = tv.keys.byHash.set(kv.hash, kv)
	tv.keys.byID = tv.keys.byID.set(kv.id, kv)
	return nil
}

func (v *view) applyPolicy(c tenants.Change) error {
	if c.Policy == nil {
		return fmt.Errorf("change %d: policy missing", c.Version)
	}
	tv := v.edit(c.Policy.TenantID)
	e, err := compilePolicy(*c.Policy, tv.loc)
	if err != nil {
		return err
	}
	tv.src = maps.Clone(tv.src)
	tv.src[c.Policy.ID] = e
	tv.index()
	return nil
}

// deleteTenant drops a tenant and its service keys.
func (v *view) deleteTenant(id string) {
	if tv := v.tenant(id); tv != nil {
		for _, h := range tv.svcKeys {
			v.svcHash = v.svcHash.without(h)
		}
		v.tenants = v.tenants.without(id)
	}
}

// setBlock replaces (b set) or removes (b nil) the block id in tv, a copy
// no reader has seen: it copies the tenant's two block maps and one
// identity's list.
func (tv *tenantView) setBlock(id string, b *tenants.Block) {
	old, had := tv.blockSrc[id]
	tv.blockSrc = maps.Clone(tv.blockSrc)
	tv.blocks = maps.Clone(tv.blocks)
	if had {
		delete(tv.blockSrc, id)
		ref := blockRef(old)
		rest := slices.DeleteFunc(slices.Clone(tv.blocks[ref]), func(x tenants.Block) bool { return x.ID == id })
		if len(rest) == 0 {
			delete(tv.blocks, ref)
		} else {
			tv.blocks[ref] = rest
		}
	}
	if b != nil {
		tv.blockSrc[id] = *b
		ref := blockRef(*b)
		tv.blocks[ref] = append(slices.Clone(tv.blocks[ref]), *b)
	}
}

// blockRef is the identity a block is looked up by: IPs in the form
// checks normalize them to.
func blockRef(b tenants.Block) identityRef {
	id := b.Identity.ID
	if b.Identity.Kind == KindIP {
		if n, ok := NormalizeIP(id); ok {
			id = n
		} else if n, err := NormalizeIdentity("identity", KindIP, id); err == nil {
			id = n
		}
	}
	return identityRef{b.Identity.Kind, id}
}

// compilePolicy compiles one policy's pattern and limits.
func compilePolicy(p tenants.Policy, loc *time.Location) (*policyEntry, error) {
	var pat route.Pattern
	if p.Descriptor == nil {
		var err error
		if pat, err = route.CompilePattern(p.Method, p.Path, p.Query); err != nil {
			return nil, fmt.Errorf("policy %s: %w", p.ID, err)
		}
	}
	pv := &policyView{id: p.ID, name: p.Name, consistency: p.Consistency, shadow: p.Shadow, tiers: map[string]*tierLimits{}, denyUnlisted: p.UnlistedTiers == tenants.UnlistedDeny}
	for tier, specs := range p.Tiers {
		tl, err := compileLimits(p.Name, specs, loc)
		if err != nil {
			return nil, fmt.Errorf("policy %s tier %s: %w", p.ID, tier, err)
		}
		pv.tiers[tier] = tl
	}
	return &policyEntry{p: p, pat: pat, pv: pv}, nil
}

// index rebuilds the tenant's router and policy lookups from src, in tv,
// a copy no reader has seen. Policies are ordered by creation so that
// equal specificity resolves the same way on every server.
func (tv *tenantView) index() {
	es := slices.Collect(maps.Values(tv.src))
	sortPolicies(es, comparePolicies)
	patterns := make([]route.Pattern, 0, len(es))
	tv.policies = make([]*policyView, 0, len(es))
	tv.byName = make(map[string]*policyView, len(es))
	tv.byID = make(map[string]*policyView, len(es))
	for _, e := range es {
		tv.byName[e.p.Name] = e.pv
		tv.byID[e.p.ID] = e.pv
		if e.p.Descriptor != nil {
			continue // matched by descriptors, never by a path
		}
		patterns = append(patterns, e.pat)
		tv.policies = append(tv.policies, e.pv)
	}
	tv.router = route.NewRouter(patterns)
	// Validation keeps a domain's tree whole; should one not compile, its
	// descriptors find no rule (OK without a limit) rather than failing
	// every other change of the tenant.
	tv.rls, _ = compileRLS(es)
}

// sortPolicies orders policies by cmp (comparePolicies: by creation, then
// id, the same order on every server since ids are unique) in O(n log n)
// comparisons.
func sortPolicies(es []*policyEntry, cmp func(a, b tenants.Policy) int) {
	slices.SortFunc(es, func(a, b *policyEntry) int { return cmp(a.p, b.p) })
}

func comparePolicies(a, b tenants.Policy) int {
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	return cmpString(a.ID, b.ID)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func compileLimits(policy string, specs tenants.Limits, loc *time.Location) (*tierLimits, error) {
	tl := &tierLimits{limits: make([]quota.Limit, len(specs)), names: make([]string, len(specs))}
	for i, s := range specs {
		alg, err := quota.ParseAlgorithm(s.Algorithm)
		if err != nil {
			return nil, err
		}
		if alg == quota.Concurrency {
			tl.concurrency = true
			tl.limits[i] = quota.Limit{Name: s.Name, Algorithm: alg, Limit: s.Limit}
			tl.names[i] = limitName(policy, specs, i)
			continue
		}
		if s.Calendar != "" {
			l, err := calendarLimit(s, loc, 0)
			if err != nil {
				return nil, err
			}
			tl.months = tl.months || l.Calendar.Unit() == quota.CalendarMonth
			tl.calendars = true
			tl.limits[i] = l
			tl.names[i] = limitName(policy, specs, i)
			continue
		}
		d, err := s.PeriodDuration()
		if err != nil {
			return nil, err
		}
		tl.limits[i] = quota.Limit{Name: s.Name, Algorithm: alg, Limit: s.Limit, Period: d, Burst: s.Burst}
		tl.names[i] = limitName(policy, specs, i)
	}
	if specs.HasPerCustomer() {
		tl.splitPerCustomer(specs)
	}
	return tl, nil
}

func compileKey(k tenants.ConsumerKeyRecord, loc *time.Location) (*keyView, error) {
	kv := &keyView{id: k.ID, tenantID: k.TenantID, tier: k.Tier, prefix: k.Prefix, revoked: k.RevokedAt != nil, anchor: k.BillingAnchor, customerID: k.CustomerID}
	h, err := hex.DecodeString(k.Hash)
	if err != nil || len(h) != len(kv.hash) {
		return nil, fmt.Errorf("key %s: malformed hash", k.ID)
	}
	copy(kv.hash[:], h)
	if k.ExpiresAt != nil {
		kv.expiresAt = k.ExpiresAt.UnixNano()
	}
	if hasCalendar(k.Overrides) {
		kv.src = &k // compiled again when the tenant's time zone changes
	}
	if len(k.Overrides) > 0 {
		kv.overrides = make(map[string]*tierLimits, len(k.Overrides))
		for pol, specs := range k.Overrides {
			tl, err := compileLimits(pol, specs, loc)
			if err != nil {
				return nil, fmt.Errorf("key %s override %s: %w", k.ID, pol, err)
			}
			kv.overrides[pol] = tl
		}
	}
	return kv, nil
}

// override is the key's limits for a policy name, nil when it has none (or
// there is no key).
func (kv *keyView) override(policy string) *tierLimits {
	if kv == nil {
		return nil
	}
	return kv.overrides[policy]
}

// maxAnchoredTiers bounds the tiers a key keeps moved to its anchor; past
// it the cache starts again (policy versions come and go).
const maxAnchoredTiers = 64

// anchored is tl with its month limits reset on the key's billing anchor
// day: tl itself for a key without an anchor or a tier without a month
// limit. The result is kept, so that the hot cache sees the same limits
// slice on every check of the key.
func (kv *keyView) anchored(tl *tierLimits) *tierLimits {
	if kv == nil || kv.anchor == 0 || tl == nil || !tl.months {
		return tl
	}
	kv.anchoredMu.Lock()
	defer kv.anchoredMu.Unlock()
	if a := kv.anchoredTiers[tl]; a != nil {
		return a
	}
	a := &tierLimits{limits: slices.Clone(tl.limits), names: tl.names, months: true, calendars: true, concurrency: tl.concurrency,
		cus: tl.cus, both: tl.both, cusNames: tl.cusNames, bothNames: tl.bothNames}
	for i := range a.limits {
		c := a.limits[i].Calendar
		if c == nil || c.Unit() != quota.CalendarMonth {
			continue
		}
		if nc, err := quota.NewCalendar(quota.CalendarMonth, c.Location(), kv.anchor); err == nil {
			a.limits[i].Calendar = nc
		}
	}
	if kv.anchoredTiers == nil || len(kv.anchoredTiers) >= maxAnchoredTiers {
		kv.anchoredTiers = map[*tierLimits]*tierLimits{}
	}
	kv.anchoredTiers[tl] = a
	return a
}

// activeBlock returns the block on an identity at now, if any.
func (tv *tenantView) activeBlock(kind, id string, now time.Time) (tenants.Block, bool) {
	for _, b := range tv.blocks[identityRef{kind, id}] {
		if b.Active(now) {
			return b, true
		}
	}
	return tenants.Block{}, false
}

// hashKey is the SHA-256 of a presented key; keys are looked up by hash, so
// the secret itself is never compared or kept. Keys are short, so the bytes
// are hashed from a stack buffer: no allocation per check.
func hashKey(k string) [32]byte {
	var buf [128]byte
	if len(k) <= len(buf) {
		return sha256.Sum256(append(buf[:0], k...))
	}
	return sha256.Sum256([]byte(k))
}

// hashKeyHex is hashKey in the stored (hex) form, as an array, so that a
// map lookup with string(h[:]) does not allocate either.
func hashKeyHex(k string) (h [64]byte) {
	sum := hashKey(k)
	hex.Encode(h[:], sum[:])
	return h
}

// limitsFor resolves the limits a forwarded or replicated decision names:
// the key's override for the policy if keyID is set and has one, else the
// tier's, moved to the key's billing anchor when it has one. It returns
// nil when this server's config has none.
func (v *view) limitsFor(tenantID, policyID, tier, keyID string) []quota.Limit {
	tv := v.tenant(tenantID)
	if tv == nil {
		return nil
	}
	if len(tier) > 0 && tier[0] == '=' { // no tier name starts so
		return tv.overrideLimitsFor(policyID, tier)
	}
	pv := tv.byID[policyID]
	if pv == nil {
		return nil
	}
	if tl := tv.tierFor(pv, tier, keyID); tl != nil {
		return tl.limits
	}
	return nil
}

// tierFor is the limits a decision of policy pv under tier and keyID (the
// key whose own limits apply, if any) is made with: limitsFor's, whole.
func (tv *tenantView) tierFor(pv *policyView, tier, keyID string) *tierLimits {
	var kv *keyView
	if keyID != "" {
		if k, _ := tv.keys.byID.get(keyID); k != nil && k.tenantID == tv.id {
			kv = k
		}
	}
	tl := kv.override(pv.name)
	if tl == nil {
		tl = pv.tiers[tier]
	}
	if tl == nil {
		return nil
	}
	return kv.anchored(tl)
}

// overrideLimitsFor resolves a forwarded descriptor decision made under
// the descriptor's own limit (rls.go): its tier names the limit, and its
// policy id the domain's override view or the rule whose counter the
// override shares.
func (tv *tenantView) overrideLimitsFor(policyID, tier string) []quota.Limit {
	domain, ok := strings.CutPrefix(policyID, rlsOverridePolicyID(""))
	if !ok {
		e := tv.src[policyID]
		if e == nil || e.p.Descriptor == nil {
			return nil
		}
		domain = e.p.Descriptor.Domain
	}
	dom := tv.rls[domain]
	o, ok := parseOverrideTier(tier)
	if dom == nil || !ok {
		return nil
	}
	ls, _ := dom.overrideLimits(o)
	return ls
}

// tenantLocation is the tenant's time zone; UTC when its name does not
// load (validation keeps that from happening).
func tenantLocation(t tenants.Tenant) *time.Location {
	loc, err := time.LoadLocation(t.Zone())
	if err != nil {
		return time.UTC
	}
	return loc
}

// relocate moves the tenant to another time zone, in tv, a copy no reader
// has seen: its policies and its keys' overrides are compiled again so
// that their calendar limits reset in the new zone. A bucket's current
// period ends as it began; the next starts by the new zone.
func (tv *tenantView) relocate(loc *time.Location) error {
	tv.loc = loc
	src := make(map[string]*policyEntry, len(tv.src))
	for id, e := range tv.src {
		ne, err := compilePolicy(e.p, loc)
		if err != nil {
			return err
		}
		src[id] = ne
	}
	tv.src = src
	var moved []*keyView
	var err error
	tv.keys.byID.all(func(_ string, kv *keyView) bool {
		if kv.src == nil {
			return true
		}
		var nk *keyView
		if nk, err = compileKey(*kv.src, loc); err != nil {
			return false
		}
		moved = append(moved, nk)
		return true
	})
	if err != nil {
		return err
	}
	for _, nk := range moved {
		tv.keys.byHash = tv.keys.byHash.set(nk.hash, nk)
		tv.keys.byID = tv.keys.byID.set(nk.id, nk)
	}
	tv.index()
	return nil
}

// calendarLimit compiles a calendar limit in loc (a month anchored on day
// anchor when it is not 0). Its Period is the calendar's nominal length,
// for the RateLimit-Policy header's window.
func calendarLimit(s tenants.LimitSpec, loc *time.Location, anchor int) (quota.Limit, error) {
	unit, err := quota.ParseCalendarUnit(s.Calendar)
	if err != nil {
		return quota.Limit{}, err
	}
	cal, err := quota.NewCalendar(unit, loc, anchor)
	if err != nil {
		return quota.Limit{}, err
	}
	return quota.Limit{Name: s.Name, Algorithm: quota.FixedWindow, Limit: s.Limit, Period: calendarNominal[unit], Calendar: cal}, nil
}

// calendarNominal is each calendar unit's usual length.
var calendarNominal = map[quota.CalendarUnit]time.Duration{
	quota.CalendarDay: 24 * time.Hour, quota.CalendarWeek: 7 * 24 * time.Hour,
	quota.CalendarMonth: 30 * 24 * time.Hour, quota.CalendarYear: 365 * 24 * time.Hour,
}

// limitName is the header name of the i-th limit of specs: "<policy>" for
// a tier's single unnamed limit, else "<policy>.<name or index>".
func limitName(policy string, specs tenants.Limits, i int) string {
	if len(specs) == 1 && specs[i].Name == "" {
		return policy
	}
	name := specs[i].Name
	if name == "" {
		name = fmt.Sprint(i)
	}
	return policy + "." + name
}

// hasCalendar reports whether any of a key's overrides resets on the
// calendar, and so depends on the tenant's time zone.
func hasCalendar(overrides map[string]tenants.Limits) bool {
	for _, ls := range overrides {
		for _, l := range ls {
			if l.Calendar != "" {
				return true
			}
		}
	}
	return false
}
