package engine

// The config cache. A server holds the whole configuration it needs to
// decide checks (tenants, keys by hash, compiled policy routers, blocks) as
// one immutable view behind an atomic pointer: the check path reads it with
// one atomic load and no lock. A config change builds a new view, copying
// only the maps the change touches and recompiling only the affected
// tenant, and swaps the pointer. Changes arrive in version order from the
// worker; a gap makes the server resynchronise from a fresh snapshot.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/tenants"
)

type view struct {
	version      int64
	operatorHash string

	tenants      map[string]tenants.Tenant
	serviceKeys  map[string]tenants.ServiceKeyRecord  // by id
	consumerKeys map[string]tenants.ConsumerKeyRecord // by id
	policies     map[string]tenants.Policy            // by id
	blocks       map[string]tenants.Block             // by id

	users map[string]int64 // user id -> session version

	compiled map[string]*tenantView // by tenant id
	svcHash  map[string]svcEntry    // service key hash -> key (active keys only)
	ckHash   map[[32]byte]*keyView  // consumer key SHA-256 -> key
	ckByID   map[string]*keyView    // consumer key id -> key
}

// tenantView is one tenant's compiled configuration.
type tenantView struct {
	id       string
	policies []*policyView // aligned with the router's patterns
	byName   map[string]*policyView
	byID     map[string]*policyView
	router   *quota.Router
	blocks   map[identityRef][]tenants.Block
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
}

type keyView struct {
	hash                       [32]byte
	id, tenantID, tier, prefix string
	expiresAt                  int64 // unix ns; 0 = never
	revoked                    bool
	overrides                  map[string]*tierLimits // by policy name
}

func emptyView() *view {
	return &view{
		tenants:      map[string]tenants.Tenant{},
		serviceKeys:  map[string]tenants.ServiceKeyRecord{},
		consumerKeys: map[string]tenants.ConsumerKeyRecord{},
		policies:     map[string]tenants.Policy{},
		blocks:       map[string]tenants.Block{},
		users:        map[string]int64{},
		compiled:     map[string]*tenantView{},
		svcHash:      map[string]svcEntry{},
		ckHash:       map[[32]byte]*keyView{},
		ckByID:       map[string]*keyView{},
	}
}

// viewFromSnapshot builds a complete view.
func viewFromSnapshot(s tenants.Snapshot) (*view, error) {
	v := emptyView()
	v.version = s.Version
	v.operatorHash = s.OperatorTokenHash
	for _, t := range s.Tenants {
		v.tenants[t.ID] = t
	}
	for _, k := range s.ServiceKeys {
		v.serviceKeys[k.ID] = k
		if k.RevokedAt == nil {
			v.svcHash[k.Hash] = newSvcEntry(k.ServiceKey)
		}
	}
	for _, u := range s.Users {
		v.users[u.ID] = u.Version
	}
	for _, p := range s.Policies {
		v.policies[p.ID] = p
	}
	for _, b := range s.Blocks {
		v.blocks[b.ID] = b
	}
	for _, k := range s.ConsumerKeys {
		v.consumerKeys[k.ID] = k
		kv, err := compileKey(k)
		if err != nil {
			return nil, err
		}
		v.ckHash[kv.hash] = kv
		v.ckByID[kv.id] = kv
	}
	for id := range v.tenants {
		tv, err := v.compileTenant(id)
		if err != nil {
			return nil, err
		}
		v.compiled[id] = tv
	}
	return v, nil
}

// apply returns a new view with one change applied. It never mutates v.
func (v *view) apply(c tenants.Change) (*view, error) {
	n := *v
	n.version = c.Version
	recompile := ""
	switch c.Kind {
	case tenants.ChangeTenant:
		if c.Tenant == nil {
			return nil, fmt.Errorf("change %d: tenant missing", c.Version)
		}
		n.tenants = maps.Clone(v.tenants)
		n.tenants[c.Tenant.ID] = *c.Tenant
		recompile = c.Tenant.ID
	case tenants.ChangeServiceKey:
		if c.ServiceKey == nil {
			return nil, fmt.Errorf("change %d: service key missing", c.Version)
		}
		k := *c.ServiceKey
		n.serviceKeys = maps.Clone(v.serviceKeys)
		n.serviceKeys[k.ID] = k
		n.svcHash = maps.Clone(v.svcHash)
		old, had := v.svcHash[k.Hash]
		delete(n.svcHash, k.Hash)
		if k.RevokedAt == nil {
			if had {
				n.svcHash[k.Hash] = old
			} else {
				n.svcHash[k.Hash] = newSvcEntry(k.ServiceKey)
			}
		}
	case tenants.ChangeConsumerKey:
		if c.ConsumerKey == nil {
			return nil, fmt.Errorf("change %d: consumer key missing", c.Version)
		}
		k := *c.ConsumerKey
		kv, err := compileKey(k)
		if err != nil {
			return nil, err
		}
		n.consumerKeys = maps.Clone(v.consumerKeys)
		n.consumerKeys[k.ID] = k
		n.ckHash = maps.Clone(v.ckHash)
		n.ckHash[kv.hash] = kv
		n.ckByID = maps.Clone(v.ckByID)
		n.ckByID[kv.id] = kv
	case tenants.ChangePolicy:
		if c.Policy == nil {
			return nil, fmt.Errorf("change %d: policy missing", c.Version)
		}
		n.policies = maps.Clone(v.policies)
		n.policies[c.Policy.ID] = *c.Policy
		recompile = c.Policy.TenantID
	case tenants.ChangePolicyDeleted:
		n.policies = maps.Clone(v.policies)
		delete(n.policies, c.ID)
		recompile = c.TenantID
	case tenants.ChangeBlock:
		if c.Block == nil {
			return nil, fmt.Errorf("change %d: block missing", c.Version)
		}
		n.blocks = maps.Clone(v.blocks)
		n.blocks[c.Block.ID] = *c.Block
		recompile = c.Block.TenantID
	case tenants.ChangeBlockDeleted:
		n.blocks = maps.Clone(v.blocks)
		delete(n.blocks, c.ID)
		recompile = c.TenantID
	case tenants.ChangeUserSession:
		if c.UserSession == nil {
			return nil, fmt.Errorf("change %d: user session missing", c.Version)
		}
		n.users = maps.Clone(v.users)
		n.users[c.UserSession.ID] = c.UserSession.Version
	case tenants.ChangeUserDeleted:
		n.users = maps.Clone(v.users)
		delete(n.users, c.ID)
	case tenants.ChangeTenantDeleted:
		n.dropTenant(v, c.TenantID)
	case tenants.ChangeOperatorToken:
		n.operatorHash = c.OperatorTokenHash
	default:
		// Kinds this server does not keep in its view (bucket resets,
		// which the caller handles) only advance the version.
	}
	if recompile != "" {
		tv, err := n.compileTenant(recompile)
		if err != nil {
			return nil, err
		}
		n.compiled = maps.Clone(v.compiled)
		n.compiled[recompile] = tv
	}
	return &n, nil
}

// dropTenant removes a deleted tenant and everything of it from n, a copy
// of v. Its users are removed by the ChangeUserDeleted changes announced
// with the deletion.
func (n *view) dropTenant(v *view, id string) {
	n.tenants = maps.Clone(v.tenants)
	delete(n.tenants, id)
	n.compiled = maps.Clone(v.compiled)
	delete(n.compiled, id)
	n.serviceKeys = maps.Clone(v.serviceKeys)
	n.svcHash = maps.Clone(v.svcHash)
	for kid, k := range v.serviceKeys {
		if k.TenantID == id {
			delete(n.serviceKeys, kid)
			delete(n.svcHash, k.Hash)
		}
	}
	n.consumerKeys = maps.Clone(v.consumerKeys)
	n.ckHash = maps.Clone(v.ckHash)
	n.ckByID = maps.Clone(v.ckByID)
	for kid, k := range v.consumerKeys {
		if k.TenantID == id {
			delete(n.consumerKeys, kid)
			if kv := v.ckByID[kid]; kv != nil {
				delete(n.ckHash, kv.hash)
			}
			delete(n.ckByID, kid)
		}
	}
	n.policies = maps.Clone(v.policies)
	maps.DeleteFunc(n.policies, func(_ string, p tenants.Policy) bool { return p.TenantID == id })
	n.blocks = maps.Clone(v.blocks)
	maps.DeleteFunc(n.blocks, func(_ string, b tenants.Block) bool { return b.TenantID == id })
}

// compileTenant builds the router and lookups of one tenant. Policies are
// ordered by creation so that equal specificity resolves the same way on
// every server.
func (v *view) compileTenant(tenantID string) (*tenantView, error) {
	tv := &tenantView{id: tenantID, byName: map[string]*policyView{}, byID: map[string]*policyView{}, blocks: map[identityRef][]tenants.Block{}}
	var ps []tenants.Policy
	for _, p := range v.policies {
		if p.TenantID == tenantID {
			ps = append(ps, p)
		}
	}
	sortPolicies(ps)
	patterns := make([]quota.Pattern, 0, len(ps))
	for _, p := range ps {
		pat, err := quota.CompilePattern(p.Method, p.Path, p.Query)
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", p.ID, err)
		}
		pv := &policyView{id: p.ID, name: p.Name, consistency: p.Consistency, shadow: p.Shadow, tiers: map[string]*tierLimits{}, denyUnlisted: p.UnlistedTiers == tenants.UnlistedDeny}
		for tier, specs := range p.Tiers {
			tl, err := compileLimits(p.Name, specs)
			if err != nil {
				return nil, fmt.Errorf("policy %s tier %s: %w", p.ID, tier, err)
			}
			pv.tiers[tier] = tl
		}
		patterns = append(patterns, pat)
		tv.policies = append(tv.policies, pv)
		tv.byName[p.Name] = pv
		tv.byID[p.ID] = pv
	}
	tv.router = quota.NewRouter(patterns)
	for _, b := range v.blocks {
		if b.TenantID != tenantID {
			continue
		}
		id := b.Identity.ID
		if b.Identity.Kind == KindIP {
			if n, ok := NormalizeIP(id); ok {
				id = n
			} else if n, err := NormalizeIdentity("identity", KindIP, id); err == nil {
				id = n
			}
		}
		ref := identityRef{b.Identity.Kind, id}
		tv.blocks[ref] = append(tv.blocks[ref], b)
	}
	return tv, nil
}

func sortPolicies(ps []tenants.Policy) {
	// Insertion sort keeps this allocation-free and stable; tenants have
	// tens of policies, not thousands.
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && policyLess(ps[j], ps[j-1]); j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

func policyLess(a, b tenants.Policy) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.Before(b.CreatedAt)
	}
	return a.ID < b.ID
}

func compileLimits(policy string, specs tenants.Limits) (*tierLimits, error) {
	tl := &tierLimits{limits: make([]quota.Limit, len(specs)), names: make([]string, len(specs))}
	for i, s := range specs {
		alg, err := quota.ParseAlgorithm(s.Algorithm)
		if err != nil {
			return nil, err
		}
		d, err := s.PeriodDuration()
		if err != nil {
			return nil, err
		}
		tl.limits[i] = quota.Limit{Name: s.Name, Algorithm: alg, Limit: s.Limit, Period: d, Burst: s.Burst}
		if len(specs) == 1 && s.Name == "" {
			tl.names[i] = policy
		} else {
			name := s.Name
			if name == "" {
				name = fmt.Sprint(i)
			}
			tl.names[i] = policy + "." + name
		}
	}
	return tl, nil
}

func compileKey(k tenants.ConsumerKeyRecord) (*keyView, error) {
	kv := &keyView{id: k.ID, tenantID: k.TenantID, tier: k.Tier, prefix: k.Prefix, revoked: k.RevokedAt != nil}
	h, err := hex.DecodeString(k.Hash)
	if err != nil || len(h) != len(kv.hash) {
		return nil, fmt.Errorf("key %s: malformed hash", k.ID)
	}
	copy(kv.hash[:], h)
	if k.ExpiresAt != nil {
		kv.expiresAt = k.ExpiresAt.UnixNano()
	}
	if len(k.Overrides) > 0 {
		kv.overrides = make(map[string]*tierLimits, len(k.Overrides))
		for pol, specs := range k.Overrides {
			tl, err := compileLimits(pol, specs)
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
// tier's. It returns nil when this server's config has none.
func (v *view) limitsFor(tenantID, policyID, tier, keyID string) []quota.Limit {
	tv := v.compiled[tenantID]
	if tv == nil {
		return nil
	}
	pv := tv.byID[policyID]
	if pv == nil {
		return nil
	}
	if keyID != "" {
		if kv := v.ckByID[keyID]; kv != nil && kv.tenantID == tenantID {
			if o := kv.overrides[pv.name]; o != nil {
				return o.limits
			}
		}
	}
	if tl := pv.tiers[tier]; tl != nil {
		return tl.limits
	}
	return nil
}
