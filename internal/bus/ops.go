package bus

// The operation table: every request a server sends the worker for config
// and analytics, with its subject and, in its type, the request it takes
// and the reply it answers. The client side (services.go) and the worker's
// handlers (internal/worker, through Bind) are both typed by these values, so a
// request or reply that does not match is a compile error; the worker's
// TestServerConfigOpsAreTheWorkers holds it to serving every one.
//
// Nothing is served under ConfigPrefix + ".operator.": the worker
// bootstraps the operator itself at start, and a server's NATS
// permissions deny those subjects (roles.go).

import (
	"context"

	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Op is one operation: requests of type Req to Subject() answer Res.
type Op[Req, Res any] struct {
	// Name is the operation as subjects and metrics name it.
	Name   string
	prefix string
}

// Subject is where the worker serves the operation.
func (o Op[Req, Res]) Subject() string { return o.prefix + "." + o.Name }

// OpName is the operation's name, for lists of operations of any type.
func (o Op[Req, Res]) OpName() string { return o.Name }

// AnyOp is an operation of any request and reply type.
type AnyOp interface {
	OpName() string
	Subject() string
}

func configOp[Req, Res any](name string) Op[Req, Res] {
	return Op[Req, Res]{Name: name, prefix: ConfigPrefix}
}

func analyticsOp[Req, Res any](name string) Op[Req, Res] {
	return Op[Req, Res]{Name: name, prefix: AnalyticsPrefix}
}

// None is an empty request or reply.
type None = service.None

// Config operations.
var (
	OpSnapshot = configOp[None, tenants.Snapshot]("snapshot")
	OpVersion  = configOp[None, Version]("version")

	OpTenantCreate  = configOp[TenantCreate, service.Written[service.TenantCreated]]("tenant.create")
	OpTenantList    = configOp[None, []tenants.TenantSummary]("tenant.list")
	OpTenantGet     = configOp[TenantScoped, tenants.TenantSummary]("tenant.get")
	OpTenantSuspend = configOp[TenantScoped, service.Written[tenants.Tenant]]("tenant.suspend")
	OpTenantResume  = configOp[TenantScoped, service.Written[tenants.Tenant]]("tenant.resume")
	OpTenantDelete  = configOp[TenantScoped, service.Written[tenants.Tenant]]("tenant.delete")
	// OpTenantTimeZone sets the zone a tenant's calendar quotas reset in.
	OpTenantTimeZone = configOp[TenantTimeZone, service.Written[tenants.Tenant]]("tenant.time_zone")
	// OpTenantOpen records the operator opening a tenant's dashboard.
	OpTenantOpen = configOp[TenantScoped, tenants.TenantSummary]("tenant.open")

	OpPolicyCreate = configOp[PolicyWrite, service.Written[tenants.Policy]]("policy.create")
	OpPolicyGet    = configOp[TenantScoped, tenants.Policy]("policy.get")
	OpPolicyList   = configOp[TenantScoped, []tenants.Policy]("policy.list")
	OpPolicyUpdate = configOp[PolicyWrite, service.Written[tenants.Policy]]("policy.update")
	OpPolicyDelete = configOp[TenantScoped, service.Written[None]]("policy.delete")
	// OpPolicyNames answers ids and names, or a count (PolicyNames).
	OpPolicyNames = configOp[PolicyNames, service.PolicyNameList]("policy.names")

	OpKeyCreate = configOp[service.KeyCreate, service.Written[service.KeyCreated]]("key.create")
	OpKeyGet    = configOp[TenantScoped, tenants.ConsumerKey]("key.get")
	// OpKeyList answers every key of a tenant (the API's list).
	OpKeyList = configOp[TenantScoped, []tenants.ConsumerKey]("key.list")
	// OpKeyPage answers one filtered, sorted page (KeyPageQuery).
	OpKeyPage   = configOp[KeyPageQuery, tenants.KeyPage]("key.page")
	OpKeyNames  = configOp[KeyNames, map[string]string]("key.names")
	OpKeyCount  = configOp[TenantScoped, tenants.KeyCounts]("key.count")
	OpKeyUpdate = configOp[KeyUpdate, service.Written[tenants.ConsumerKey]]("key.update")
	OpKeyRevoke = configOp[TenantScoped, service.Written[tenants.ConsumerKey]]("key.revoke")

	OpBlockCreate = configOp[tenants.Block, service.Written[tenants.Block]]("block.create")
	OpBlockList   = configOp[TenantScoped, []tenants.Block]("block.list")
	OpBlockDelete = configOp[TenantScoped, service.Written[None]]("block.delete")
	OpBucketReset = configOp[BucketReset, service.Written[None]]("bucket.reset")

	// Reservations (a check's "reserve", POST /v1/settle): not config
	// changes, so they answer no version.
	OpReservationCreate = configOp[reserve.Reservation, None]("reservation.create")
	OpReservationSettle = configOp[reserve.Settle, reserve.Settled]("reservation.settle")
	OpReservationReopen = configOp[TenantScoped, None]("reservation.reopen")
	// OpReservationApply asks, for a bucket's owner, whether it is the one
	// to apply a settle's difference (reserve.MarkApplied).
	OpReservationApply = configOp[reserve.Apply, reserve.Applying]("reservation.apply")
	// OpReservationCreateAll records a batch's reservations, all or none;
	// OpReservationCancel closes those whose estimates were given back.
	OpReservationCreateAll = configOp[ReservationBatch, None]("reservation.create_all")
	OpReservationCancel    = configOp[ReservationBatch, None]("reservation.cancel")

	// OpUserSignIn checks a password on the worker (SignIn).
	OpUserSignIn      = configOp[SignIn, service.UserRecord]("user.sign_in")
	OpUserCreate      = configOp[service.UserCreate, tenants.User]("user.create")
	OpUserList        = configOp[TenantScoped, []tenants.User]("user.list")
	OpUserRole        = configOp[UserRole, service.Written[tenants.User]]("user.role")
	OpUserDelete      = configOp[TenantScoped, service.Written[tenants.User]]("user.delete")
	OpUserPassword    = configOp[UserPassword, service.Written[service.UserRecord]]("user.password")
	OpUserEmail       = configOp[UserEmail, service.Written[service.UserRecord]]("user.email")
	OpUserEndSessions = configOp[TenantScoped, service.Written[service.UserRecord]]("user.end_sessions")

	OpServiceKeyCreate = configOp[TenantScoped, service.Written[service.ServiceKeyCreated]]("service_key.create")
	OpServiceKeyList   = configOp[TenantScoped, []tenants.ServiceKey]("service_key.list")
	OpServiceKeyRevoke = configOp[TenantScoped, service.Written[tenants.ServiceKey]]("service_key.revoke")
	// OpServiceKeyUsed is a server's batched last-use report.
	OpServiceKeyUsed = configOp[ServiceKeyUsed, None]("service_key.used")

	// The first-run setup link (SetupOffer, SetupClaim): not under
	// "operator.", which servers may not ask, because a server's dashboard
	// serves the link; the worker answers only while no operator login
	// exists.
	OpSetupOffer = configOp[SetupOffer, SetupOffered]("setup.offer")
	OpSetupClaim = configOp[SetupClaim, service.Written[service.UserRecord]]("setup.claim")

	// The audit log (reads; entries are written by the writes above).
	OpAuditList = configOp[tenants.AuditQuery, tenants.AuditPage]("audit.list")
	OpAuditGet  = configOp[service.AuditGet, tenants.AuditEntry]("audit.get")

	// Webhook endpoints and their deliveries (servers hold none of it).
	OpWebhookCreate     = configOp[WebhookWrite, tenants.WebhookCreated]("webhook.create")
	OpWebhookList       = configOp[TenantScoped, []tenants.Webhook]("webhook.list")
	OpWebhookGet        = configOp[TenantScoped, tenants.Webhook]("webhook.get")
	OpWebhookUpdate     = configOp[WebhookWrite, tenants.Webhook]("webhook.update")
	OpWebhookDelete     = configOp[TenantScoped, tenants.Webhook]("webhook.delete")
	OpWebhookRotate     = configOp[TenantScoped, tenants.WebhookCreated]("webhook.rotate")
	OpWebhookDeliveries = configOp[tenants.DeliveryQuery, tenants.DeliveryPage]("webhook.deliveries")
	OpWebhookResend     = configOp[WebhookResend, tenants.WebhookDelivery]("webhook.resend")

	// JWT issuers (servers hold them in their config view).
	OpJWTIssuerCreate = configOp[JWTIssuerWrite, service.Written[tenants.JWTIssuer]]("jwt_issuer.create")
	OpJWTIssuerList   = configOp[TenantScoped, []tenants.JWTIssuer]("jwt_issuer.list")
	OpJWTIssuerGet    = configOp[TenantScoped, tenants.JWTIssuer]("jwt_issuer.get")
	OpJWTIssuerUpdate = configOp[JWTIssuerWrite, service.Written[tenants.JWTIssuer]]("jwt_issuer.update")
	OpJWTIssuerDelete = configOp[TenantScoped, service.Written[None]]("jwt_issuer.delete")

	// Customers (servers hold them in their config view).
	OpCustomerCreate = configOp[CustomerWrite, service.Written[tenants.Customer]]("customer.create")
	OpCustomerPage   = configOp[CustomerPageQuery, tenants.CustomerPage]("customer.page")
	OpCustomerGet    = configOp[TenantScoped, tenants.Customer]("customer.get")
	OpCustomerUpdate = configOp[CustomerWrite, service.Written[tenants.Customer]]("customer.update")
	OpCustomerDelete = configOp[TenantScoped, service.Written[None]]("customer.delete")
)

// Analytics queries.
var (
	QueryTimeseries = analyticsOp[service.TimeseriesQuery, service.Timeseries]("timeseries")
	QueryTop        = analyticsOp[service.TopQuery, []service.TopEntry]("top")
	// QueryTopPolicies ranks policies by denials (PolicyRankRequest).
	QueryTopPolicies = analyticsOp[PolicyRankRequest, []service.PolicyRank]("top_policies")
	// QueryUsage answers the units consumed per day (UsageRequest).
	QueryUsage = analyticsOp[UsageRequest, service.Usage]("usage")
)

// ConfigOps is every config operation the worker serves, in the order
// docs/NATS.md and deploy/nats.conf list a server's permissions.
var ConfigOps = []AnyOp{
	OpSnapshot, OpVersion,
	OpTenantCreate, OpTenantList, OpTenantGet, OpTenantSuspend, OpTenantResume, OpTenantDelete, OpTenantOpen, OpTenantTimeZone,
	OpPolicyCreate, OpPolicyGet, OpPolicyList, OpPolicyUpdate, OpPolicyDelete, OpPolicyNames,
	OpKeyCreate, OpKeyGet, OpKeyList, OpKeyPage, OpKeyNames, OpKeyCount, OpKeyUpdate, OpKeyRevoke,
	OpBlockCreate, OpBlockList, OpBlockDelete, OpBucketReset,
	OpReservationCreate, OpReservationSettle, OpReservationReopen, OpReservationApply, OpReservationCreateAll, OpReservationCancel,
	OpServiceKeyCreate, OpServiceKeyList, OpServiceKeyRevoke, OpServiceKeyUsed,
	OpUserSignIn, OpUserCreate, OpUserList, OpUserRole, OpUserDelete, OpUserPassword, OpUserEmail, OpUserEndSessions,
	OpAuditList, OpAuditGet,
	OpSetupOffer, OpSetupClaim,
	OpWebhookCreate, OpWebhookList, OpWebhookGet, OpWebhookUpdate, OpWebhookDelete, OpWebhookRotate, OpWebhookDeliveries, OpWebhookResend,
	OpJWTIssuerCreate, OpJWTIssuerList, OpJWTIssuerGet, OpJWTIssuerUpdate, OpJWTIssuerDelete,
	OpCustomerCreate, OpCustomerPage, OpCustomerGet, OpCustomerUpdate, OpCustomerDelete,
}

// AnalyticsOps is every analytics query the worker serves.
var AnalyticsOps = []AnyOp{QueryTimeseries, QueryTop, QueryTopPolicies, QueryUsage}

// Call sends one operation's request and answers its reply. The request
// carries the context's actor (tenants.WithActor) for the audit log; c's
// timeout bounds it.
func Call[Req, Res any](ctx context.Context, c *Client, op Op[Req, Res], req Req) (Res, error) {
	var res Res
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	err := Request(ctx, c.nc, op.Subject(), req, &res)
	return res, err
}

// CallInto is Call for a caller that keeps the reply in a variable of its
// own; out may be nil when the reply does not matter.
func CallInto[Req, Res any](ctx context.Context, c *Client, op Op[Req, Res], req Req, out *Res) error {
	res, err := Call(ctx, c, op, req)
	if out != nil && err == nil {
		*out = res
	}
	return err
}
