package tenants

import (
	"time"
)

// User roles.
const (
	RoleOperator = "operator" // platform operator; belongs to no tenant
	RoleOwner    = "owner"    // created with the tenant
	RoleMember   = "member"   // invited by the owner
)

// Identity kinds.
const (
	IdentityIP  = "ip"
	IdentityKey = "key"
	// IdentityJWT is a caller identified by a verified JWT's subject.
	IdentityJWT = "jwt"
)

// What a policy does with tiers it does not list (Policy.UnlistedTiers).
const (
	UnlistedAllow = "allow"
	UnlistedDeny  = "deny"
)

// Policy consistency modes (see DESIGN.md, "Many servers").
const (
	ConsistencyExact = "exact"
	ConsistencyLocal = "local"
)

// Algorithm names, as the API spells them.
const (
	TokenBucket   = "token_bucket"
	SlidingWindow = "sliding_window"
	SlidingLog    = "sliding_log"
	FixedWindow   = "fixed_window"
	// Concurrency counts requests in flight, not per period: a check takes
	// a slot, held by its lease until released or expired.
	Concurrency = "concurrency"
)

// MethodAny is the stored method of a policy that matches every method.
const MethodAny = "*"

// Tenant is one customer of the platform.
type Tenant struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	// SuspendedAt is when the operator suspended the tenant; nil while it
	// is active. A suspended tenant's service keys are refused with 403
	// and its users cannot sign in; nothing of it is deleted.
	SuspendedAt *time.Time `json:"suspended_at"`
	// Demo marks the tenant `cmd/server --demo` made, with generated
	// policies, keys and traffic; a later --demo replaces it.
	Demo bool `json:"demo,omitempty"`
	// TimeZone is the IANA name of the zone the tenant's calendar quotas
	// reset in ("UTC" unless set).
	TimeZone string `json:"time_zone"`
}

// Zone is the tenant's time zone name, "UTC" when it has none.
func (t Tenant) Zone() string {
	if t.TimeZone == "" {
		return "UTC"
	}
	return t.TimeZone
}

// Suspended reports whether the operator suspended the tenant.
func (t Tenant) Suspended() bool { return t.SuspendedAt != nil }

// TenantSummary is a tenant with the sizes of its configuration, for the
// operator's tenant list.
type TenantSummary struct {
	Tenant
	Policies     int `json:"policy_count"`
	ConsumerKeys int `json:"consumer_key_count"`
	ServiceKeys  int `json:"service_key_count"`
	Users        int `json:"user_count"`
}

// User is a dashboard login. TenantID is empty for the operator.
type User struct {
	ID           string    `json:"id"`
	TenantID     string    `json:"tenant_id,omitempty"`
	Email        string    `json:"email"`
	PasswordHash string    `json:"-"`
	Role         string    `json:"role"`
	CreatedAt    time.Time `json:"created_at"`
	// LastLoginAt is the last dashboard sign-in; nil if never.
	LastLoginAt *time.Time `json:"last_login_at"`
	// SessionVersion is carried in the user's session tokens; a token with
	// another version is refused. It moves on every change of password,
	// email or role.
	SessionVersion int64 `json:"-"`
}

// ServiceKey authenticates a tenant's servers on /v1/*. Only its hash is
// stored; Prefix is what lists show.
type ServiceKey struct {
	ID        string     `json:"id"`
	TenantID  string     `json:"tenant_id"`
	Prefix    string     `json:"prefix"`
	Hash      string     `json:"-"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
	// LastUsedAt is the start of the last minute a server saw the key in
	// use, as reported so far; nil if never.
	LastUsedAt *time.Time `json:"last_used_at"`
}

// Identity is who a check is counted against: a client IP or a consumer key.
type Identity struct {
	Kind string `json:"kind"` // IdentityIP or IdentityKey
	ID   string `json:"id"`
}

// Policy is one protected endpoint of a tenant's API and its limits per
// tier. Method is MethodAny or an upper-case HTTP method; Path is a pattern
// (literal segments, ":name" for one segment, a final "*" for the rest).
type Policy struct {
	ID          string            `json:"id"`
	TenantID    string            `json:"tenant_id"`
	Name        string            `json:"name"`
	Method      string            `json:"method"`
	Path        string            `json:"path"`
	Query       map[string]string `json:"query,omitempty"`
	Consistency string            `json:"consistency"`
	Shadow      bool              `json:"shadow"`
	Tiers       map[string]Limits `json:"tiers"`
	// UnlistedTiers is what a caller gets whose tier the policy does not
	// list, when it has no default tier either: UnlistedAllow (no limit)
	// or UnlistedDeny.
	UnlistedTiers string `json:"unlisted_tiers"`
	// Descriptor, when set, makes the policy a rule of Envoy's rate limit
	// service instead of an HTTP endpoint (descriptor.go).
	Descriptor *DescriptorRule `json:"descriptor,omitempty"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
}

// ConsumerKey identifies one of a tenant's end users. Overrides, keyed by
// policy name, replace the tier's limits for that policy.
type ConsumerKey struct {
	ID        string            `json:"id"`
	TenantID  string            `json:"tenant_id"`
	Name      string            `json:"name"`
	Tier      string            `json:"tier"`
	Prefix    string            `json:"prefix"`
	Hash      string            `json:"-"`
	Overrides map[string]Limits `json:"overrides,omitempty"`
	// BillingAnchor is the day of the month (1-31) its month quotas reset
	// on, clamped to each month's last day; 0 = the 1st.
	BillingAnchor int `json:"billing_anchor,omitempty"`
	// CustomerID is the tenant's customer the key belongs to ("" for
	// none): the check's answer names it.
	CustomerID string     `json:"customer_id,omitempty"`
	ExpiresAt  *time.Time `json:"expires_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
}

// Active reports whether the key may be used at now: not revoked and not
// expired.
func (k ConsumerKey) Active(now time.Time) bool {
	return k.RevokedAt == nil && (k.ExpiresAt == nil || now.Before(*k.ExpiresAt))
}

// Block denies every check of one identity in one tenant until ExpiresAt
// (nil = until deleted).
type Block struct {
	ID        string     `json:"id"`
	TenantID  string     `json:"tenant_id"`
	Identity  Identity   `json:"identity"`
	Reason    string     `json:"reason"`
	ExpiresAt *time.Time `json:"expires_at"`
	CreatedAt time.Time  `json:"created_at"`
}

// Active reports whether the block applies at now.
func (b Block) Active(now time.Time) bool {
	return b.ExpiresAt == nil || now.Before(*b.ExpiresAt)
}

// PolicyBody is a policy as clients write it: the body of POST and PUT
// /v1/policies, which the API reads and the CLI sends. The Go SDK keeps a
// copy of its own (sdk.Policy), held equal to this one by a test.
type PolicyBody struct {
	Name        string            `json:"name"`
	Method      string            `json:"method"`
	Path        string            `json:"path"`
	Query       map[string]string `json:"query,omitempty"`
	Consistency string            `json:"consistency"`
	Shadow      bool              `json:"shadow"`
	Tiers       map[string]Limits `json:"tiers"`
	// UnlistedTiers: "allow" (the default) or "deny".
	UnlistedTiers string          `json:"unlisted_tiers"`
	Descriptor    *DescriptorRule `json:"descriptor,omitempty"`
}

// Policy is the policy b describes, without the ids and times Sluice sets.
func (b PolicyBody) Policy() Policy {
	return Policy{Name: b.Name, Method: b.Method, Path: b.Path, Query: b.Query, Consistency: b.Consistency, Shadow: b.Shadow, Tiers: b.Tiers, UnlistedTiers: b.UnlistedTiers, Descriptor: b.Descriptor}
}

// BodyOf is p as a client writes it.
func BodyOf(p Policy) PolicyBody {
	return PolicyBody{Name: p.Name, Method: p.Method, Path: p.Path, Query: p.Query, Consistency: p.Consistency, Shadow: p.Shadow, Tiers: p.Tiers, UnlistedTiers: p.UnlistedTiers, Descriptor: p.Descriptor}
}
