package bus

// The services of package service, implemented over NATS: each method is
// one request of the operation table (ops.go).

import (
	"context"

	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// NewServices returns every service, sent to the worker through c.
func NewServices(c *Client) service.Services {
	return service.Services{
		Tenants:      tenantsClient{c},
		Policies:     policiesClient{c},
		Keys:         keysClient{c},
		ServiceKeys:  serviceKeysClient{c},
		Users:        usersClient{c},
		Blocks:       blocksClient{c},
		Buckets:      bucketsClient{c},
		Reservations: reservationsClient{c},
		Audit:        auditClient{c},
		Analytics:    analyticsClient{c},
		Setup:        setupClient{c},
		Webhooks:     webhooksClient{c},
		JWTIssuers:   jwtIssuersClient{c},
		Customers:    customersClient{c},
	}
}

type tenantsClient struct{ c *Client }

func (t tenantsClient) Create(ctx context.Context, name, ownerEmail, ownerPassword string) (service.Written[service.TenantCreated], error) {
	return Call(ctx, t.c, OpTenantCreate, TenantCreate{Name: name, OwnerEmail: ownerEmail, OwnerPassword: ownerPassword})
}

func (t tenantsClient) List(ctx context.Context) ([]tenants.TenantSummary, error) {
	return Call(ctx, t.c, OpTenantList, None{})
}

func (t tenantsClient) Get(ctx context.Context, id string) (tenants.TenantSummary, error) {
	return Call(ctx, t.c, OpTenantGet, TenantScoped{TenantID: id})
}

func (t tenantsClient) Suspend(ctx context.Context, id string) (service.Written[tenants.Tenant], error) {
	return Call(ctx, t.c, OpTenantSuspend, TenantScoped{TenantID: id})
}

func (t tenantsClient) Resume(ctx context.Context, id string) (service.Written[tenants.Tenant], error) {
	return Call(ctx, t.c, OpTenantResume, TenantScoped{TenantID: id})
}

func (t tenantsClient) Delete(ctx context.Context, id string) (service.Written[tenants.Tenant], error) {
	return Call(ctx, t.c, OpTenantDelete, TenantScoped{TenantID: id})
}

func (t tenantsClient) SetTimeZone(ctx context.Context, id, zone string) (service.Written[tenants.Tenant], error) {
	return Call(ctx, t.c, OpTenantTimeZone, TenantTimeZone{TenantID: id, TimeZone: zone})
}

func (t tenantsClient) Open(ctx context.Context, id string) (tenants.TenantSummary, error) {
	return Call(ctx, t.c, OpTenantOpen, TenantScoped{TenantID: id})
}

type policiesClient struct{ c *Client }

func (p policiesClient) Create(ctx context.Context, tenantID string, pol tenants.Policy) (service.Written[tenants.Policy], error) {
	return Call(ctx, p.c, OpPolicyCreate, PolicyWrite{TenantID: tenantID, Policy: pol})
}

func (p policiesClient) Update(ctx context.Context, tenantID, id string, pol tenants.Policy) (service.Written[tenants.Policy], error) {
	return Call(ctx, p.c, OpPolicyUpdate, PolicyWrite{TenantID: tenantID, ID: id, Policy: pol})
}

func (p policiesClient) Get(ctx context.Context, tenantID, id string) (tenants.Policy, error) {
	return Call(ctx, p.c, OpPolicyGet, TenantScoped{TenantID: tenantID, ID: id})
}

func (p policiesClient) List(ctx context.Context, tenantID string) ([]tenants.Policy, error) {
	return Call(ctx, p.c, OpPolicyList, TenantScoped{TenantID: tenantID})
}

func (p policiesClient) Names(ctx context.Context, tenantID string, ids []string) (service.PolicyNameList, error) {
	return Call(ctx, p.c, OpPolicyNames, PolicyNames{V: WireVersion, TenantID: tenantID, IDs: ids})
}

func (p policiesClient) Count(ctx context.Context, tenantID string) (int, error) {
	l, err := Call(ctx, p.c, OpPolicyNames, PolicyNames{V: WireVersion, TenantID: tenantID, CountOnly: true})
	return l.Total, err
}

func (p policiesClient) Delete(ctx context.Context, tenantID, id string) (service.Written[None], error) {
	return Call(ctx, p.c, OpPolicyDelete, TenantScoped{TenantID: tenantID, ID: id})
}

type keysClient struct{ c *Client }

func (k keysClient) Create(ctx context.Context, req service.KeyCreate) (service.Written[service.KeyCreated], error) {
	return Call(ctx, k.c, OpKeyCreate, req)
}

func (k keysClient) Get(ctx context.Context, tenantID, id string) (tenants.ConsumerKey, error) {
	return Call(ctx, k.c, OpKeyGet, TenantScoped{TenantID: tenantID, ID: id})
}

func (k keysClient) List(ctx context.Context, tenantID string) ([]tenants.ConsumerKey, error) {
	return Call(ctx, k.c, OpKeyList, TenantScoped{TenantID: tenantID})
}

func (k keysClient) Page(ctx context.Context, q tenants.KeyQuery) (tenants.KeyPage, error) {
	return Call(ctx, k.c, OpKeyPage, KeyPageQuery{V: WireVersion, KeyQuery: q})
}

func (k keysClient) Names(ctx context.Context, tenantID string, ids []string) (map[string]string, error) {
	return Call(ctx, k.c, OpKeyNames, KeyNames{V: WireVersion, TenantID: tenantID, IDs: ids})
}

func (k keysClient) Count(ctx context.Context, tenantID string) (tenants.KeyCounts, error) {
	return Call(ctx, k.c, OpKeyCount, TenantScoped{TenantID: tenantID})
}

func (k keysClient) Update(ctx context.Context, tenantID, id string, p tenants.KeyPatch) (service.Written[tenants.ConsumerKey], error) {
	return Call(ctx, k.c, OpKeyUpdate, KeyUpdate{TenantID: tenantID, ID: id, Patch: p})
}

func (k keysClient) Revoke(ctx context.Context, tenantID, id string) (service.Written[tenants.ConsumerKey], error) {
	return Call(ctx, k.c, OpKeyRevoke, TenantScoped{TenantID: tenantID, ID: id})
}

type serviceKeysClient struct{ c *Client }

func (s serviceKeysClient) Create(ctx context.Context, tenantID string) (service.Written[service.ServiceKeyCreated], error) {
	return Call(ctx, s.c, OpServiceKeyCreate, TenantScoped{TenantID: tenantID})
}

func (s serviceKeysClient) List(ctx context.Context, tenantID string) ([]tenants.ServiceKey, error) {
	return Call(ctx, s.c, OpServiceKeyList, TenantScoped{TenantID: tenantID})
}

func (s serviceKeysClient) Revoke(ctx context.Context, tenantID, id string) (service.Written[tenants.ServiceKey], error) {
	return Call(ctx, s.c, OpServiceKeyRevoke, TenantScoped{TenantID: tenantID, ID: id})
}

type usersClient struct{ c *Client }

func (u usersClient) SignIn(ctx context.Context, email, password string) (service.UserRecord, error) {
	return Call(ctx, u.c, OpUserSignIn, SignIn{Email: email, Password: password})
}

func (u usersClient) Create(ctx context.Context, req service.UserCreate) (tenants.User, error) {
	return Call(ctx, u.c, OpUserCreate, req)
}

func (u usersClient) List(ctx context.Context, tenantID string) ([]tenants.User, error) {
	return Call(ctx, u.c, OpUserList, TenantScoped{TenantID: tenantID})
}

func (u usersClient) SetRole(ctx context.Context, tenantID, id, role string) (service.Written[tenants.User], error) {
	return Call(ctx, u.c, OpUserRole, UserRole{TenantID: tenantID, ID: id, Role: role})
}

func (u usersClient) Delete(ctx context.Context, tenantID, id string) (service.Written[tenants.User], error) {
	return Call(ctx, u.c, OpUserDelete, TenantScoped{TenantID: tenantID, ID: id})
}

func (u usersClient) ChangePassword(ctx context.Context, id, current, next string) (service.Written[service.UserRecord], error) {
	return Call(ctx, u.c, OpUserPassword, UserPassword{ID: id, Current: current, New: next})
}

func (u usersClient) ChangeEmail(ctx context.Context, id, password, email string) (service.Written[service.UserRecord], error) {
	return Call(ctx, u.c, OpUserEmail, UserEmail{ID: id, Password: password, Email: email})
}

func (u usersClient) EndSessions(ctx context.Context, id string) (service.Written[service.UserRecord], error) {
	return Call(ctx, u.c, OpUserEndSessions, TenantScoped{ID: id})
}

type blocksClient struct{ c *Client }

func (b blocksClient) Create(ctx context.Context, blk tenants.Block) (service.Written[tenants.Block], error) {
	return Call(ctx, b.c, OpBlockCreate, blk)
}

func (b blocksClient) List(ctx context.Context, tenantID string) ([]tenants.Block, error) {
	return Call(ctx, b.c, OpBlockList, TenantScoped{TenantID: tenantID})
}

func (b blocksClient) Delete(ctx context.Context, tenantID, id string) (service.Written[None], error) {
	return Call(ctx, b.c, OpBlockDelete, TenantScoped{TenantID: tenantID, ID: id})
}

type bucketsClient struct{ c *Client }

func (b bucketsClient) Reset(ctx context.Context, tenantID, policy string, id tenants.Identity) (service.Written[None], error) {
	return Call(ctx, b.c, OpBucketReset, BucketReset{TenantID: tenantID, Policy: policy, Identity: id})
}

type reservationsClient struct{ c *Client }

func (r reservationsClient) Create(ctx context.Context, res reserve.Reservation) error {
	_, err := Call(ctx, r.c, OpReservationCreate, res)
	return err
}

func (r reservationsClient) CreateAll(ctx context.Context, rs []reserve.Reservation) error {
	_, err := Call(ctx, r.c, OpReservationCreateAll, ReservationBatch{V: WireVersion, Reservations: rs})
	return err
}

func (r reservationsClient) Cancel(ctx context.Context, rs []reserve.Reservation) error {
	_, err := Call(ctx, r.c, OpReservationCancel, ReservationBatch{V: WireVersion, Reservations: rs})
	return err
}

func (r reservationsClient) Settle(ctx context.Context, s reserve.Settle) (reserve.Settled, error) {
	return Call(ctx, r.c, OpReservationSettle, s)
}

type auditClient struct{ c *Client }

func (a auditClient) List(ctx context.Context, q tenants.AuditQuery) (tenants.AuditPage, error) {
	return Call(ctx, a.c, OpAuditList, q)
}

func (a auditClient) Get(ctx context.Context, g service.AuditGet) (tenants.AuditEntry, error) {
	return Call(ctx, a.c, OpAuditGet, g)
}

type analyticsClient struct{ c *Client }

func (a analyticsClient) Timeseries(ctx context.Context, q service.TimeseriesQuery) (service.Timeseries, error) {
	return Call(ctx, a.c, QueryTimeseries, q)
}

func (a analyticsClient) Top(ctx context.Context, q service.TopQuery) ([]service.TopEntry, error) {
	return Call(ctx, a.c, QueryTop, q)
}

func (a analyticsClient) TopPolicies(ctx context.Context, q service.PolicyRankQuery) ([]service.PolicyRank, error) {
	return Call(ctx, a.c, QueryTopPolicies, PolicyRankRequest{V: WireVersion, PolicyRankQuery: q})
}

func (a analyticsClient) Usage(ctx context.Context, q service.UsageQuery) (service.Usage, error) {
	return Call(ctx, a.c, QueryUsage, UsageRequest{V: WireVersion, UsageQuery: q})
}

type setupClient struct{ c *Client }

func (s setupClient) Offer(ctx context.Context, tokenHash string) (bool, error) {
	res, err := Call(ctx, s.c, OpSetupOffer, SetupOffer{V: WireVersion, TokenHash: tokenHash})
	return res.Open, err
}

func (s setupClient) Check(ctx context.Context, token string) error {
	_, err := Call(ctx, s.c, OpSetupClaim, SetupClaim{V: WireVersion, Token: token, CheckOnly: true})
	return err
}

func (s setupClient) Claim(ctx context.Context, token, email, password string) (service.Written[service.UserRecord], error) {
	return Call(ctx, s.c, OpSetupClaim, SetupClaim{V: WireVersion, Token: token, Email: email, Password: password})
}

type webhooksClient struct{ c *Client }

func (w webhooksClient) Create(ctx context.Context, tenantID string, b tenants.WebhookBody) (tenants.WebhookCreated, error) {
	return Call(ctx, w.c, OpWebhookCreate, WebhookWrite{TenantID: tenantID, Body: b})
}

func (w webhooksClient) List(ctx context.Context, tenantID string) ([]tenants.Webhook, error) {
	return Call(ctx, w.c, OpWebhookList, TenantScoped{TenantID: tenantID})
}

func (w webhooksClient) Get(ctx context.Context, tenantID, id string) (tenants.Webhook, error) {
	return Call(ctx, w.c, OpWebhookGet, TenantScoped{TenantID: tenantID, ID: id})
}

func (w webhooksClient) Update(ctx context.Context, tenantID, id string, b tenants.WebhookBody) (tenants.Webhook, error) {
	return Call(ctx, w.c, OpWebhookUpdate, WebhookWrite{TenantID: tenantID, ID: id, Body: b})
}

func (w webhooksClient) Delete(ctx context.Context, tenantID, id string) (tenants.Webhook, error) {
	return Call(ctx, w.c, OpWebhookDelete, TenantScoped{TenantID: tenantID, ID: id})
}

func (w webhooksClient) Rotate(ctx context.Context, tenantID, id string) (tenants.WebhookCreated, error) {
	return Call(ctx, w.c, OpWebhookRotate, TenantScoped{TenantID: tenantID, ID: id})
}

func (w webhooksClient) Deliveries(ctx context.Context, q tenants.DeliveryQuery) (tenants.DeliveryPage, error) {
	return Call(ctx, w.c, OpWebhookDeliveries, q)
}

func (w webhooksClient) Resend(ctx context.Context, tenantID, webhookID, deliveryID string) (tenants.WebhookDelivery, error) {
	return Call(ctx, w.c, OpWebhookResend, WebhookResend{TenantID: tenantID, WebhookID: webhookID, DeliveryID: deliveryID})
}

type jwtIssuersClient struct{ c *Client }

func (j jwtIssuersClient) Create(ctx context.Context, tenantID string, b tenants.JWTIssuerBody) (service.Written[tenants.JWTIssuer], error) {
	return Call(ctx, j.c, OpJWTIssuerCreate, JWTIssuerWrite{TenantID: tenantID, Body: b})
}

func (j jwtIssuersClient) List(ctx context.Context, tenantID string) ([]tenants.JWTIssuer, error) {
	return Call(ctx, j.c, OpJWTIssuerList, TenantScoped{TenantID: tenantID})
}

func (j jwtIssuersClient) Get(ctx context.Context, tenantID, id string) (tenants.JWTIssuer, error) {
	return Call(ctx, j.c, OpJWTIssuerGet, TenantScoped{TenantID: tenantID, ID: id})
}

func (j jwtIssuersClient) Update(ctx context.Context, tenantID, id string, b tenants.JWTIssuerBody) (service.Written[tenants.JWTIssuer], error) {
	return Call(ctx, j.c, OpJWTIssuerUpdate, JWTIssuerWrite{TenantID: tenantID, ID: id, Body: b})
}

func (j jwtIssuersClient) Delete(ctx context.Context, tenantID, id string) (service.Written[None], error) {
	return Call(ctx, j.c, OpJWTIssuerDelete, TenantScoped{TenantID: tenantID, ID: id})
}

type customersClient struct{ c *Client }

func (k customersClient) Create(ctx context.Context, tenantID string, b tenants.CustomerBody) (service.Written[tenants.Customer], error) {
	return Call(ctx, k.c, OpCustomerCreate, CustomerWrite{TenantID: tenantID, Body: b})
}

func (k customersClient) Page(ctx context.Context, q tenants.CustomerQuery) (tenants.CustomerPage, error) {
	return Call(ctx, k.c, OpCustomerPage, CustomerPageQuery{V: WireVersion, CustomerQuery: q})
}

func (k customersClient) Get(ctx context.Context, tenantID, id string) (tenants.Customer, error) {
	return Call(ctx, k.c, OpCustomerGet, TenantScoped{TenantID: tenantID, ID: id})
}

func (k customersClient) Update(ctx context.Context, tenantID, id string, b tenants.CustomerBody) (service.Written[tenants.Customer], error) {
	return Call(ctx, k.c, OpCustomerUpdate, CustomerWrite{TenantID: tenantID, ID: id, Body: b})
}

func (k customersClient) Delete(ctx context.Context, tenantID, id string) (service.Written[None], error) {
	return Call(ctx, k.c, OpCustomerDelete, TenantScoped{TenantID: tenantID, ID: id})
}
