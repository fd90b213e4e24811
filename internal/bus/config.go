package bus

// The config and query requests servers send the worker, and a typed
// client for them. Every write answers with the config version it
// committed, so the caller can wait until its own server has applied it.

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/tenants"
)

// Written is the answer to a config write.
type Written[T any] struct {
	Result  T     `json:"result"`
	Version int64 `json:"version"`
}

// TenantCreate creates a tenant with its owner and first service key.
type TenantCreate struct {
	Name          string `json:"name"`
	OwnerEmail    string `json:"owner_email"`
	OwnerPassword string `json:"owner_password"`
	// Demo marks the tenant as cmd/server --demo's (tenants.Tenant.Demo).
	Demo bool `json:"demo,omitempty"`
}

// TenantCreated is the new tenant and its service key, shown once.
type TenantCreated struct {
	Tenant     tenants.Tenant `json:"tenant"`
	ServiceKey string         `json:"service_key"`
}

// TenantScoped names a tenant's object (ID may be empty for lists).
type TenantScoped struct {
	TenantID string `json:"tenant_id"`
	ID       string `json:"id,omitempty"`
}

// PolicyWrite creates (ID empty) or replaces a policy.
type PolicyWrite struct {
	TenantID string         `json:"tenant_id"`
	ID       string         `json:"id,omitempty"`
	Policy   tenants.Policy `json:"policy"`
}

// KeyCreate creates a consumer key.
type KeyCreate struct {
	TenantID  string                    `json:"tenant_id"`
	Name      string                    `json:"name"`
	Tier      string                    `json:"tier"`
	ExpiresAt *time.Time                `json:"expires_at,omitempty"`
	Overrides map[string]tenants.Limits `json:"overrides,omitempty"`
}

// KeyCreated is a new consumer key and its secret, shown once.
type KeyCreated struct {
	Key    tenants.ConsumerKey `json:"key"`
	Secret string              `json:"secret"`
}

// KeyUpdate patches a consumer key.
type KeyUpdate struct {
	TenantID string           `json:"tenant_id"`
	ID       string           `json:"id"`
	Patch    tenants.KeyPatch `json:"patch"`
}

// KeyPageQuery asks OpKeyPage for one page of a tenant's consumer keys. V
// is WireVersion; the worker refuses a version it does not know. OpKeyList
// still answers every key, for the API and for servers older than these
// page reads, so the worker must be upgraded before the servers.
type KeyPageQuery struct {
	V int `json:"v"`
	tenants.KeyQuery
}

// KeyNames asks OpKeyNames for the names of some of a tenant's consumer
// keys (at most tenants.MaxRankedKeys ids). The answer maps each id that
// is the tenant's key to its name; other ids are left out.
type KeyNames struct {
	V        int      `json:"v"`
	TenantID string   `json:"tenant_id"`
	IDs      []string `json:"ids"`
}

// PolicyNames asks OpPolicyNames for the ids and names of a tenant's
// policies, by name: all of them, or with IDs only those that are the
// tenant's (at most tenants.MaxPolicyNameIDs). With CountOnly the answer
// holds the count and no names. V is WireVersion; the worker refuses a
// version it does not know. OpPolicyList still answers whole policies, for
// the API and for servers older than this read.
type PolicyNames struct {
	V         int      `json:"v"`
	TenantID  string   `json:"tenant_id"`
	IDs       []string `json:"ids,omitempty"`
	CountOnly bool     `json:"count_only,omitempty"`
}

// PolicyNameList answers PolicyNames. Total counts every policy of the
// tenant, whatever IDs asked for.
type PolicyNameList struct {
	Total    int                  `json:"total"`
	Policies []tenants.PolicyName `json:"policies"`
}

// BucketReset refills one identity's buckets for a policy, by name.
type BucketReset struct {
	TenantID string           `json:"tenant_id"`
	Policy   string           `json:"policy"`
	Identity tenants.Identity `json:"identity"`
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

// ServiceKeyUsed reports the last minute one server saw each service key
// in use (only keys used since its previous report).
type ServiceKeyUsed struct {
	V    int              `json:"v"`
	Node string           `json:"node"`
	Used []tenants.KeyUse `json:"used"`
}

// UserRole sets a tenant user's role.
type UserRole struct {
	TenantID string `json:"tenant_id"`
	ID       string `json:"id"`
	Role     string `json:"role"`
}

// UserPassword changes a user's own password; Current must be right.
type UserPassword struct {
	ID      string `json:"id"`
	Current string `json:"current"`
	New     string `json:"new"`
}

// UserEmail changes a user's own email; Password must be right.
type UserEmail struct {
	ID       string `json:"id"`
	Password string `json:"password"`
	Email    string `json:"email"`
}

// SignIn asks the worker to check a dashboard user's email and password
// (OpUserSignIn). The worker answers a UserRecord, or errs.Unauthenticated
// for a wrong email or password alike; password hashes never leave it.
type SignIn struct {
	Email    string `json:"email"`
	Password string `json:"password"`
}

// UserRecord is a user (never their password hash) and the session version
// a new session of theirs carries. TenantSuspended says the user's tenant
// is suspended: sign-in is refused.
type UserRecord struct {
	User            tenants.User `json:"user"`
	SessionVersion  int64        `json:"session_version"`
	TenantSuspended bool         `json:"tenant_suspended,omitempty"`
}

// Version answers OpVersion.
type Version struct {
	Version int64 `json:"version"`
	// StateFormats are the state stream message forms the worker reads
	// besides JSON (PackedStateFormat); servers publish those only to a
	// worker that names them.
	StateFormats []string `json:"state_formats,omitempty"`
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
	// Reason, when set ("rate_limited", "invalid_key" or "blocked"), ranks
	// by that reason's denials and keeps only identities with some.
	Reason string `json:"reason,omitempty"`
}

// PolicyRankQuery asks QueryTopPolicies for the tenant's policies ranked
// by denials over a range, in one query rather than a timeseries per
// policy. Only the tenant's current policies are ranked (counters name a
// policy by name; one deleted or renamed since is left out). V is
// WireVersion; the worker refuses a version it does not know.
type PolicyRankQuery struct {
	V        int       `json:"v"`
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
	DenialRatio float64          `json:"denial_ratio"`
	FirstSeen   time.Time        `json:"first_seen"`
	LastSeen    time.Time        `json:"last_seen"`
}

// Client sends config and query requests to the worker.
type Client struct {
	nc      *nats.Conn
	timeout time.Duration
}

// NewClient returns a client with a per-request timeout.
func NewClient(nc *nats.Conn, timeout time.Duration) *Client {
	return &Client{nc: nc, timeout: timeout}
}

// Call sends one config operation (an Op constant) and decodes its result.
func (c *Client) Call(ctx context.Context, op string, req, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return Request(ctx, c.nc, ConfigPrefix+"."+op, req, out)
}

// Query sends one analytics query (a Query constant).
func (c *Client) Query(ctx context.Context, op string, req, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return Request(ctx, c.nc, AnalyticsPrefix+"."+op, req, out)
}

// LoadSnapshot reads the config snapshot from the worker. A snapshot larger
// than one NATS message arrives in parts (see Request).
func LoadSnapshot(ctx context.Context, nc *nats.Conn) (tenants.Snapshot, error) {
	var snap tenants.Snapshot
	err := Request(ctx, nc, ConfigPrefix+"."+OpSnapshot, struct{}{}, &snap)
	return snap, err
}

// SetupOffer asks OpSetupOffer to make TokenHash (tenants.HashToken of a
// random token the server printed) the first-run setup link's, which the
// worker does only while no operator login exists. A newer offer replaces
// an older one.
type SetupOffer struct {
	V         int    `json:"v"`
	TokenHash string `json:"token_hash"`
}

// SetupOffered answers SetupOffer: Open says the offer was stored (no
// operator login exists), so the server prints its link.
type SetupOffered struct {
	Open bool `json:"open"`
}

// SetupClaim asks OpSetupClaim to create the operator login with Email and
// Password if Token is the current setup token, deleting it. With
// CheckOnly it only answers whether the link is live (nothing else is
// read). A dead link answers errs.Unauthenticated.
type SetupClaim struct {
	V         int    `json:"v"`
	Token     string `json:"token"`
	Email     string `json:"email,omitempty"`
	Password  string `json:"password,omitempty"`
	CheckOnly bool   `json:"check_only,omitempty"`
}

// AuditGet reads one audit entry; AllTenants (the operator) reads any
// tenant's, otherwise another tenant's entry answers not found.
type AuditGet struct {
	TenantID   string `json:"tenant_id,omitempty"`
	AllTenants bool   `json:"all_tenants,omitempty"`
	ID         int64  `json:"id"`
}
