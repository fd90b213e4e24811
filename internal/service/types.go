package service

// The values the services take and answer, besides the domain's own
// (package tenants). They travel between the servers and the worker as
// JSON, so their tags are part of the wire format: renaming one breaks
// servers and workers of different versions.

import (
	"time"

	"github.com/sluicehq/sluice/internal/tenants"
)

// TenantCreated is the new tenant and its service key, shown once.
type TenantCreated struct {
	Tenant     tenants.Tenant `json:"tenant"`
	ServiceKey string         `json:"service_key"`
}

// KeyCreate creates a consumer key.
type KeyCreate struct {
	TenantID  string                    `json:"tenant_id"`
	Name      string                    `json:"name"`
	Tier      string                    `json:"tier"`
	ExpiresAt *time.Time                `json:"expires_at,omitempty"`
	Overrides map[string]tenants.Limits `json:"overrides,omitempty"`
	// BillingAnchor is the day the key's month quotas reset on (0 = the 1st).
	BillingAnchor int `json:"billing_anchor,omitempty"`
	// CustomerID attaches the key to one of the tenant's customers.
	CustomerID string `json:"customer_id,omitempty"`
}

// KeyCreated is a new consumer key and its secret, shown once.
type KeyCreated struct {
	Key    tenants.ConsumerKey `json:"key"`
	Secret string              `json:"secret"`
}

// PolicyNameList answers Policies.Names. Total counts every policy of the
// tenant, whatever IDs asked for.
type PolicyNameList struct {
	Total    int                  `json:"total"`
	Policies []tenants.PolicyName `json:"policies"`
}

// UserCreate invites a member to a tenant.
type UserCreate struct {
	TenantID string `json:"tenant_id"`
	Email    string `json:"email"`
	Password string `json:"password"`
	Role     string `json:"role"`
}

// ServiceKeyCreated is a new service key and its secret, shown once.
type ServiceKeyCreated struct {
	Key    tenants.ServiceKey `json:"key"`
	Secret string             `json:"secret"`
}

// UserRecord is a user (never their password hash) and the session version
// a new session of theirs carries. TenantSuspended says the user's tenant
// is suspended: sign-in is refused.
type UserRecord struct {
	User            tenants.User `json:"user"`
	SessionVersion  int64        `json:"session_version"`
	TenantSuspended bool         `json:"tenant_suspended,omitempty"`
}

// AuditGet reads one audit entry; AllTenants (the operator) reads any
// tenant's, otherwise another tenant's entry answers not found.
type AuditGet struct {
	TenantID   string `json:"tenant_id,omitempty"`
	AllTenants bool   `json:"all_tenants,omitempty"`
	ID         int64  `json:"id"`
}

// TimeseriesQuery asks for allowed/denied counts per step, optionally of
// one policy or one identity.
type TimeseriesQuery struct {
	TenantID string            `json:"tenant_id"`
	From     time.Time         `json:"from"`
	To       time.Time         `json:"to"`
	Step     string            `json:"step"`
	Policy   string            `json:"policy,omitempty"`
	Identity *tenants.Identity `json:"identity,omitempty"`
}

// TimeseriesPoint is one step of a timeseries. Denied is every denial;
// RateLimited, InvalidKey and Blocked split it by reason (denials counted
// before reasons were, see migration 0006, may be in Denied only).
type TimeseriesPoint struct {
	Start       time.Time `json:"start"`
	Allowed     int64     `json:"allowed"`
	Denied      int64     `json:"denied"`
	RateLimited int64     `json:"rate_limited"`
	InvalidKey  int64     `json:"invalid_key"`
	Blocked     int64     `json:"blocked"`
	// ConcurrencyLimited counts the denials by a concurrency limit (0
	// before migration 0027, and from servers older than it).
	ConcurrencyLimited int64 `json:"concurrency_limited"`
	// Units is what the step's decisions consumed (usage), settles'
	// charges and refunds included.
	Units int64 `json:"units"`
}

// Timeseries answers a TimeseriesQuery.
type Timeseries struct {
	From   time.Time         `json:"from"`
	To     time.Time         `json:"to"`
	Step   string            `json:"step"`
	Points []TimeseriesPoint `json:"points"`
}

// TopQuery asks for identities ranked by denials in one tenant or, with
// TenantID empty (the operator's abuse report), across all tenants.
// IdentityKind keeps one kind ("ip" or "key"); IncludeAllowed also ranks
// identities that were never denied (after those that were), which is how
// the dashboard learns when each key was last used.
type TopQuery struct {
	TenantID       string            `json:"tenant_id,omitempty"`
	From           time.Time         `json:"from"`
	To             time.Time         `json:"to"`
	Limit          int               `json:"limit"`
	Policy         string            `json:"policy,omitempty"`
	Identity       *tenants.Identity `json:"identity,omitempty"`
	IdentityKind   string            `json:"identity_kind,omitempty"`
	IncludeAllowed bool              `json:"include_allowed,omitempty"`
	// Reason, when set ("rate_limited", "invalid_key", "blocked" or
	// "concurrency_limited"), ranks
	// by that reason's denials and keeps only identities with some.
	Reason string `json:"reason,omitempty"`
}

// PolicyRankQuery asks Analytics.TopPolicies for the tenant's policies
// ranked by denials over a range, in one query rather than a timeseries
// per policy. Only the tenant's current policies are ranked (counters name
// a policy by name; one deleted or renamed since is left out).
type PolicyRankQuery struct {
	TenantID string    `json:"tenant_id"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	// Limit is how many policies to answer, 1–1000; 20 when 0.
	Limit int `json:"limit"`
}

// PolicyRank is one policy's decisions over a range: every decision,
// callers counted together as "others" included, so the totals are exact.
type PolicyRank struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Allowed     int64  `json:"allowed"`
	Denied      int64  `json:"denied"`
	RateLimited int64  `json:"rate_limited"`
	InvalidKey  int64  `json:"invalid_key"`
	Blocked     int64  `json:"blocked"`
	// ConcurrencyLimited counts the denials by a concurrency limit (0
	// from a worker older than the reason).
	ConcurrencyLimited int64 `json:"concurrency_limited"`
}

// TopEntry is one ranked identity.
type TopEntry struct {
	TenantID    string           `json:"tenant_id,omitempty"`
	TenantName  string           `json:"tenant_name,omitempty"`
	Identity    tenants.Identity `json:"identity"`
	Allowed     int64            `json:"allowed"`
	Denied      int64            `json:"denied"`
	RateLimited int64            `json:"rate_limited"`
	InvalidKey  int64            `json:"invalid_key"`
	Blocked     int64            `json:"blocked"`
	// ConcurrencyLimited counts the denials by a concurrency limit.
	ConcurrencyLimited int64     `json:"concurrency_limited"`
	DenialRatio        float64   `json:"denial_ratio"`
	FirstSeen          time.Time `json:"first_seen"`
	LastSeen           time.Time `json:"last_seen"`
}

// UsageQuery asks Analytics.Usage for the units a tenant's callers
// consumed per day. From and To are the first and last day, inclusive,
// each a date ("2027-01-31") or an RFC 3339 time, which stands for its
// date in the tenant's time zone. Group is "key" (per day, consumer key
// and policy: what each key used of each policy's quotas) or "policy"
// (per day and policy, every caller together).
//
// Limit asks for a page of at most that many rows (1 to MaxUsageRows),
// Cursor for the page after the one whose NextCursor it is. A query
// without Limit (a server older than paging) asks for the whole range in
// one answer, which is refused past MaxUsageRows rows.
type UsageQuery struct {
	TenantID string `json:"tenant_id"`
	From     string `json:"from"`
	To       string `json:"to"`
	Group    string `json:"group"`
	Limit    int    `json:"limit,omitempty"`
	Cursor   string `json:"cursor,omitempty"`
}

// UsageRow is one day's units of one key under one policy (KeyID ""
// counts every caller without a key), or of one policy.
type UsageRow struct {
	Day       string `json:"day"`
	KeyID     string `json:"key_id"`
	KeyName   string `json:"key_name"`
	KeyPrefix string `json:"key_prefix"`
	Policy    string `json:"policy"`
	Units     int64  `json:"units"`
}

// Usage answers a UsageQuery: its days resolved in the tenant's time
// zone, and the rows in day order, then by key id and policy name. Rows
// of 0 units (refunds that gave back all that was used) are left out.
// Total is the units of the whole range, whichever page this is.
// NextCursor, when not empty, is the Cursor of the next page; Paged says
// the answer is a page (a worker older than paging answers the whole
// range and leaves it false).
type Usage struct {
	From       string     `json:"from"`
	To         string     `json:"to"`
	Group      string     `json:"group"`
	TimeZone   string     `json:"time_zone"`
	Rows       []UsageRow `json:"rows"`
	Total      int64      `json:"total"`
	NextCursor string     `json:"next_cursor,omitempty"`
	Paged      bool       `json:"paged,omitempty"`
}

// Usage grouping.
const (
	UsageByKey    = "key"
	UsageByPolicy = "policy"
)

// MaxUsageDays is the longest range a UsageQuery may ask for; usage is
// kept at least that long (UsageRetention).
const MaxUsageDays = 400

// MaxUsageRows bounds the rows of one Usage answer: the largest page, and
// what a query without Limit may answer (more is refused and asks for
// fewer days).
const MaxUsageRows = 100_000
