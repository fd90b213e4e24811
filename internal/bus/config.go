package bus

// The wire forms of the config and query requests servers send the
// worker (ops.go names them), and the client that sends them. Every write
// answers with the config version it committed, so the caller can wait
// until its own server has applied it.

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// TenantCreate creates a tenant with its owner and first service key.
type TenantCreate struct {
	Name          string `json:"name"`
	OwnerEmail    string `json:"owner_email"`
	OwnerPassword string `json:"owner_password"`
	// Demo marks the tenant as cmd/server --demo's (tenants.Tenant.Demo).
	Demo bool `json:"demo,omitempty"`
}

// TenantScoped names a tenant's object (ID may be empty for lists).
type TenantScoped struct {
	TenantID string `json:"tenant_id"`
	ID       string `json:"id,omitempty"`
}

// TenantTimeZone sets a tenant's time zone.
type TenantTimeZone struct {
	TenantID string `json:"tenant_id"`
	TimeZone string `json:"time_zone"`
}

// PolicyWrite creates (ID empty) or replaces a policy.
type PolicyWrite struct {
	TenantID string         `json:"tenant_id"`
	ID       string         `json:"id,omitempty"`
	Policy   tenants.Policy `json:"policy"`
}

// JWTIssuerWrite creates (ID empty) or patches a JWT issuer.
type JWTIssuerWrite struct {
	TenantID string                `json:"tenant_id"`
	ID       string                `json:"id,omitempty"`
	Body     tenants.JWTIssuerBody `json:"body"`
}

// CustomerWrite creates (ID empty) or patches a customer.
type CustomerWrite struct {
	TenantID string               `json:"tenant_id"`
	ID       string               `json:"id,omitempty"`
	Body     tenants.CustomerBody `json:"body"`
}

// CustomerPageQuery asks OpCustomerPage for one page of a tenant's
// customers. V is WireVersion; the worker refuses a version it does not
// know.
type CustomerPageQuery struct {
	V int `json:"v"`
	tenants.CustomerQuery
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

// BucketReset refills one identity's buckets for a policy, by name.
type BucketReset struct {
	TenantID string           `json:"tenant_id"`
	Policy   string           `json:"policy"`
	Identity tenants.Identity `json:"identity"`
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

// Version answers OpVersion.
type Version struct {
	Version int64 `json:"version"`
	// StateFormats are the state stream message forms the worker reads
	// besides JSON (PackedStateFormat); servers publish those only to a
	// worker that names them.
	StateFormats []string `json:"state_formats,omitempty"`
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

// LoadSnapshot reads the config snapshot from the worker. A snapshot larger
// than one NATS message arrives in parts (see Request).
func LoadSnapshot(ctx context.Context, nc *nats.Conn) (tenants.Snapshot, error) {
	var snap tenants.Snapshot
	err := Request(ctx, nc, OpSnapshot.Subject(), None{}, &snap)
	return snap, err
}

// PolicyRankRequest is QueryTopPolicies's request. V is WireVersion; the
// worker refuses a version it does not know.
type PolicyRankRequest struct {
	V int `json:"v"`
	service.PolicyRankQuery
}

// ReservationBatch is OpReservationCreateAll's and OpReservationCancel's
// request: reservations of one tenant. V is WireVersion; the worker
// refuses a version it does not know.
type ReservationBatch struct {
	V            int                   `json:"v"`
	Reservations []reserve.Reservation `json:"reservations"`
}

// UsageRequest is QueryUsage's request. V is WireVersion; the worker
// refuses a version it does not know.
type UsageRequest struct {
	V int `json:"v"`
	service.UsageQuery
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

// WebhookWrite creates (ID empty) or updates one of a tenant's webhook
// endpoints.
type WebhookWrite struct {
	TenantID string              `json:"tenant_id"`
	ID       string              `json:"id,omitempty"`
	Body     tenants.WebhookBody `json:"body"`
}

// WebhookResend sends one delivery of an endpoint again.
type WebhookResend struct {
	TenantID   string `json:"tenant_id"`
	WebhookID  string `json:"webhook_id"`
	DeliveryID string `json:"delivery_id"`
}
