// Package service declares what the front doors (the API, the dashboard)
// ask of the worker: one small interface per part of the domain, with the
// values they take and answer.
//
// internal/bus implements every interface over NATS (bus.NewServices),
// each method one request of its typed operation table (bus.Op), and the
// worker serves that table with handlers typed by it. Handlers hold a
// Services and never see a subject, an operation name or a wire type;
// their tests that need no NATS use the in-memory implementation in
// package servicetest.
//
// This package must never import the front doors, bus, the engine or the
// worker: it is below all of them.
package service

import (
	"context"

	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Services is everything the front doors ask of the worker.
type Services struct {
	Tenants     Tenants
	Policies    Policies
	Keys        Keys
	ServiceKeys ServiceKeys
	Users       Users
	Blocks      Blocks
	Buckets     Buckets
	// Reservations are checks' reserved estimates awaiting their settle.
	Reservations Reservations
	Audit        Audit
	Analytics    Analytics
	Setup        Setup
	Webhooks     Webhooks
	// JWTIssuers are the identity providers whose tokens checks carry.
	JWTIssuers JWTIssuers
	// Customers are the tenant's own customers, which hold its keys.
	Customers Customers
}

// Written is a write's result and the config version that committed it.
// A front door waits until its own server has applied Version before it
// answers, so that its next read sees the write.
type Written[T any] struct {
	Result  T     `json:"result"`
	Version int64 `json:"version"`
}

// None is the result of a write that answers nothing but its version.
type None struct{}

// Tenants are the operator's view of tenants.
type Tenants interface {
	// Create makes a tenant with its owner and first service key.
	Create(ctx context.Context, name, ownerEmail, ownerPassword string) (Written[TenantCreated], error)
	List(ctx context.Context) ([]tenants.TenantSummary, error)
	Get(ctx context.Context, id string) (tenants.TenantSummary, error)
	Suspend(ctx context.Context, id string) (Written[tenants.Tenant], error)
	Resume(ctx context.Context, id string) (Written[tenants.Tenant], error)
	Delete(ctx context.Context, id string) (Written[tenants.Tenant], error)
	// SetTimeZone sets the IANA zone the tenant's calendar quotas reset in.
	SetTimeZone(ctx context.Context, id, zone string) (Written[tenants.Tenant], error)
	// Open records in the tenant's audit log that the operator opened its
	// dashboard, and answers the tenant.
	Open(ctx context.Context, id string) (tenants.TenantSummary, error)
}

// Policies are a tenant's limit policies.
type Policies interface {
	Create(ctx context.Context, tenantID string, p tenants.Policy) (Written[tenants.Policy], error)
	Update(ctx context.Context, tenantID, id string, p tenants.Policy) (Written[tenants.Policy], error)
	Get(ctx context.Context, tenantID, id string) (tenants.Policy, error)
	// List answers whole policies; Names is the cheaper read for pages
	// that only name them.
	List(ctx context.Context, tenantID string) ([]tenants.Policy, error)
	// Names answers the ids and names of the tenant's policies, by name:
	// all of them, or with ids only those that are the tenant's (at most
	// tenants.MaxPolicyNameIDs).
	Names(ctx context.Context, tenantID string, ids []string) (PolicyNameList, error)
	// Count counts the tenant's policies.
	Count(ctx context.Context, tenantID string) (int, error)
	Delete(ctx context.Context, tenantID, id string) (Written[None], error)
}

// Keys are a tenant's consumer keys.
type Keys interface {
	Create(ctx context.Context, k KeyCreate) (Written[KeyCreated], error)
	Get(ctx context.Context, tenantID, id string) (tenants.ConsumerKey, error)
	// List answers every key of the tenant (the API's list); Page one
	// filtered, sorted page.
	List(ctx context.Context, tenantID string) ([]tenants.ConsumerKey, error)
	Page(ctx context.Context, q tenants.KeyQuery) (tenants.KeyPage, error)
	// Names maps each of ids that is the tenant's key to its name (at most
	// tenants.MaxRankedKeys ids); other ids are left out.
	Names(ctx context.Context, tenantID string, ids []string) (map[string]string, error)
	Count(ctx context.Context, tenantID string) (tenants.KeyCounts, error)
	Update(ctx context.Context, tenantID, id string, p tenants.KeyPatch) (Written[tenants.ConsumerKey], error)
	Revoke(ctx context.Context, tenantID, id string) (Written[tenants.ConsumerKey], error)
}

// ServiceKeys are the keys a tenant's apps call Sluice with.
type ServiceKeys interface {
	Create(ctx context.Context, tenantID string) (Written[ServiceKeyCreated], error)
	List(ctx context.Context, tenantID string) ([]tenants.ServiceKey, error)
	Revoke(ctx context.Context, tenantID, id string) (Written[tenants.ServiceKey], error)
}

// Users are dashboard users: a tenant's members and the operator.
type Users interface {
	// SignIn checks an email and password on the worker: a wrong email or
	// password alike answers errs.Unauthenticated, and password hashes
	// never leave the worker.
	SignIn(ctx context.Context, email, password string) (UserRecord, error)
	// Create invites a member to a tenant.
	Create(ctx context.Context, u UserCreate) (tenants.User, error)
	List(ctx context.Context, tenantID string) ([]tenants.User, error)
	SetRole(ctx context.Context, tenantID, id, role string) (Written[tenants.User], error)
	Delete(ctx context.Context, tenantID, id string) (Written[tenants.User], error)
	// ChangePassword changes a user's own password; current must be right.
	ChangePassword(ctx context.Context, id, current, next string) (Written[UserRecord], error)
	// ChangeEmail changes a user's own email; password must be right.
	ChangeEmail(ctx context.Context, id, password, email string) (Written[UserRecord], error)
	// EndSessions signs the user out everywhere.
	EndSessions(ctx context.Context, id string) (Written[UserRecord], error)
}

// Blocks are identities refused before any limit. An empty tenant id is
// the operator's: every tenant's blocks, or a block of any tenant.
type Blocks interface {
	Create(ctx context.Context, b tenants.Block) (Written[tenants.Block], error)
	List(ctx context.Context, tenantID string) ([]tenants.Block, error)
	Delete(ctx context.Context, tenantID, id string) (Written[None], error)
}

// Buckets are callers' live limit state.
type Buckets interface {
	// Reset refills one identity's buckets for a policy, by name.
	Reset(ctx context.Context, tenantID, policy string, id tenants.Identity) (Written[None], error)
}

// Reservations are estimates checks reserved ("reserve": n), settled later
// with the amount really used.
type Reservations interface {
	// Create records an open reservation (a check that took its estimate).
	Create(ctx context.Context, r reserve.Reservation) error
	// CreateAll records a batch's reservations (one tenant's), all or
	// none.
	CreateAll(ctx context.Context, rs []reserve.Reservation) error
	// Cancel closes reservations whose estimates were given back before
	// their ids were answered, recorded or not yet.
	Cancel(ctx context.Context, rs []reserve.Reservation) error
	// Settle records a reservation's actual amount, once; a repeat with
	// the same amount answers Replayed.
	Settle(ctx context.Context, s reserve.Settle) (reserve.Settled, error)
}

// Audit is the audit log (its entries are written by the writes above).
type Audit interface {
	List(ctx context.Context, q tenants.AuditQuery) (tenants.AuditPage, error)
	Get(ctx context.Context, g AuditGet) (tenants.AuditEntry, error)
}

// Webhooks are a tenant's webhook endpoints and their deliveries. Servers
// hold nothing of them, so their writes answer no config version.
type Webhooks interface {
	// Create adds an endpoint and answers it with its signing secret,
	// shown only here. The URL must be HTTPS and must not point at a
	// loopback, private or link-local address unless the operator allows
	// them; either error names the field url.
	Create(ctx context.Context, tenantID string, b tenants.WebhookBody) (tenants.WebhookCreated, error)
	List(ctx context.Context, tenantID string) ([]tenants.Webhook, error)
	Get(ctx context.Context, tenantID, id string) (tenants.Webhook, error)
	// Update changes the fields b sets, checked as Create checks them.
	Update(ctx context.Context, tenantID, id string, b tenants.WebhookBody) (tenants.Webhook, error)
	// Delete removes an endpoint and its deliveries, pending ones too.
	Delete(ctx context.Context, tenantID, id string) (tenants.Webhook, error)
	// Rotate gives an endpoint a new secret, answered only here; for a
	// day deliveries are signed with the previous secret too.
	Rotate(ctx context.Context, tenantID, id string) (tenants.WebhookCreated, error)
	// Deliveries answers a page of an endpoint's deliveries, newest first.
	Deliveries(ctx context.Context, q tenants.DeliveryQuery) (tenants.DeliveryPage, error)
	// Resend sends a delivery again, with the same id.
	Resend(ctx context.Context, tenantID, webhookID, deliveryID string) (tenants.WebhookDelivery, error)
}

// JWTIssuers are a tenant's JWT issuers. Servers hold them in their config
// view, so writes answer the version that committed them.
type JWTIssuers interface {
	// Create adds an issuer; every input error names its field and
	// changes nothing.
	Create(ctx context.Context, tenantID string, b tenants.JWTIssuerBody) (Written[tenants.JWTIssuer], error)
	List(ctx context.Context, tenantID string) ([]tenants.JWTIssuer, error)
	Get(ctx context.Context, tenantID, id string) (tenants.JWTIssuer, error)
	// Update changes the fields b sets, checked as Create checks them.
	Update(ctx context.Context, tenantID, id string, b tenants.JWTIssuerBody) (Written[tenants.JWTIssuer], error)
	Delete(ctx context.Context, tenantID, id string) (Written[None], error)
}

// Customers are a tenant's customers. Servers hold them in their config
// view (to name a key's customer in a check's answer), so writes answer
// the version that committed them.
type Customers interface {
	// Create adds a customer; every input error names its field and
	// changes nothing.
	Create(ctx context.Context, tenantID string, b tenants.CustomerBody) (Written[tenants.Customer], error)
	Page(ctx context.Context, q tenants.CustomerQuery) (tenants.CustomerPage, error)
	Get(ctx context.Context, tenantID, id string) (tenants.Customer, error)
	// Update changes the fields b sets, checked as Create checks them.
	Update(ctx context.Context, tenantID, id string, b tenants.CustomerBody) (Written[tenants.Customer], error)
	// Delete refuses a customer that still holds keys.
	Delete(ctx context.Context, tenantID, id string) (Written[None], error)
}

// Setup is the first-run setup link, which creates the operator's login
// once while none exists. Its token is printed by a server and only its
// hash is stored.
type Setup interface {
	// Offer makes tokenHash the link's (a newer offer replaces an older
	// one) and answers whether it was stored: false once an operator login
	// exists.
	Offer(ctx context.Context, tokenHash string) (bool, error)
	// Check answers whether token is the live link's (errs.Unauthenticated
	// when it is not).
	Check(ctx context.Context, token string) error
	// Claim creates the operator login with email and password if token
	// is the live link's, and kills the link.
	Claim(ctx context.Context, token, email, password string) (Written[UserRecord], error)
}

// Analytics are the decision counters rolled up by the worker.
type Analytics interface {
	Timeseries(ctx context.Context, q TimeseriesQuery) (Timeseries, error)
	Top(ctx context.Context, q TopQuery) ([]TopEntry, error)
	// TopPolicies ranks the tenant's policies by denials.
	TopPolicies(ctx context.Context, q PolicyRankQuery) ([]PolicyRank, error)
	// Usage answers the units the tenant's callers consumed per day, the
	// days in its time zone.
	Usage(ctx context.Context, q UsageQuery) (Usage, error)
}
