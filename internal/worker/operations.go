package worker

// The config operations of the table (bus.ConfigOps) and the analytics
// queries, each bound (bus.Bind) to the method that answers it in the
// operation's own wire types. bus.Bind decodes the request and refuses a
// wire version it does not know; the methods here only unpack a request
// into a call of configsvc, the store or the worker. Config rules belong
// in configsvc and tenants.

import (
	"context"
	"database/sql"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/worker/analytics"
	"github.com/sluicehq/sluice/internal/worker/configsvc"
)

type none = bus.None

// configOperations binds every config operation the worker serves.
func (w *Worker) configOperations() []bus.Binding {
	svc := w.config.Services()
	st := storeOps{w.store}
	tn := tenantOps{svc.Tenants, w.config}
	pol := policyOps{svc.Policies}
	key := keyOps{svc.Keys}
	blk := blockOps{svc.Blocks, svc.Buckets}
	res := reservationOps{w.reservations}
	usr := userOps{svc.Users}
	sk := serviceKeyOps{svc.ServiceKeys}
	set := setupOps{svc.Setup}
	hook := webhookOps{svc.Webhooks}
	jwt := jwtIssuerOps{svc.JWTIssuers}
	cus := customerOps{svc.Customers}
	return []bus.Binding{
		bus.Bind(bus.OpSnapshot, st.snapshot),
		bus.Bind(bus.OpVersion, st.version),
		bus.Bind(bus.OpServiceKeyUsed, st.serviceKeyUsed),

		bus.Bind(bus.OpTenantCreate, tn.create),
		bus.Bind(bus.OpTenantOpen, tn.open),
		bus.Bind(bus.OpTenantList, tn.list),
		bus.Bind(bus.OpTenantGet, tn.get),
		bus.Bind(bus.OpTenantSuspend, tn.suspend),
		bus.Bind(bus.OpTenantResume, tn.resume),
		bus.Bind(bus.OpTenantDelete, tn.delete),
		bus.Bind(bus.OpTenantTimeZone, tn.setTimeZone),

		bus.Bind(bus.OpSetupOffer, set.offer),
		bus.Bind(bus.OpSetupClaim, set.claim),

		bus.Bind(bus.OpPolicyCreate, pol.create),
		bus.Bind(bus.OpPolicyUpdate, pol.update),
		bus.Bind(bus.OpPolicyGet, pol.get),
		bus.Bind(bus.OpPolicyList, pol.list),
		bus.Bind(bus.OpPolicyNames, pol.names),
		bus.Bind(bus.OpPolicyDelete, pol.delete),

		bus.Bind(bus.OpKeyCreate, svc.Keys.Create),
		bus.Bind(bus.OpKeyGet, key.get),
		bus.Bind(bus.OpKeyPage, key.page),
		bus.Bind(bus.OpKeyNames, key.names),
		bus.Bind(bus.OpKeyCount, key.count),
		bus.Bind(bus.OpKeyList, key.list),
		bus.Bind(bus.OpKeyUpdate, key.update),
		bus.Bind(bus.OpKeyRevoke, key.revoke),

		bus.Bind(bus.OpBlockCreate, svc.Blocks.Create),
		bus.Bind(bus.OpBlockList, blk.list),
		bus.Bind(bus.OpBlockDelete, blk.delete),
		bus.Bind(bus.OpBucketReset, blk.resetBucket),

		bus.Bind(bus.OpReservationCreate, res.create),
		bus.Bind(bus.OpReservationCreateAll, res.createAll),
		bus.Bind(bus.OpReservationCancel, res.cancel),
		bus.Bind(bus.OpReservationSettle, w.reservations.settle),
		bus.Bind(bus.OpReservationReopen, res.reopen),
		bus.Bind(bus.OpReservationApply, w.reservations.markApplied),

		bus.Bind(bus.OpUserCreate, svc.Users.Create),
		bus.Bind(bus.OpUserSignIn, usr.signIn),
		bus.Bind(bus.OpUserList, usr.list),
		bus.Bind(bus.OpUserRole, usr.setRole),
		bus.Bind(bus.OpUserDelete, usr.delete),
		bus.Bind(bus.OpUserPassword, usr.changePassword),
		bus.Bind(bus.OpUserEmail, usr.changeEmail),
		bus.Bind(bus.OpUserEndSessions, usr.endSessions),

		bus.Bind(bus.OpServiceKeyCreate, sk.create),
		bus.Bind(bus.OpServiceKeyList, sk.list),
		bus.Bind(bus.OpServiceKeyRevoke, sk.revoke),

		bus.Bind(bus.OpAuditList, svc.Audit.List),
		bus.Bind(bus.OpAuditGet, svc.Audit.Get),

		bus.Bind(bus.OpWebhookCreate, hook.create),
		bus.Bind(bus.OpWebhookList, hook.list),
		bus.Bind(bus.OpWebhookGet, hook.get),
		bus.Bind(bus.OpWebhookUpdate, hook.update),
		bus.Bind(bus.OpWebhookDelete, hook.delete),
		bus.Bind(bus.OpWebhookRotate, hook.rotate),
		bus.Bind(bus.OpWebhookDeliveries, svc.Webhooks.Deliveries),
		bus.Bind(bus.OpWebhookResend, hook.resend),

		bus.Bind(bus.OpJWTIssuerCreate, jwt.create),
		bus.Bind(bus.OpJWTIssuerList, jwt.list),
		bus.Bind(bus.OpJWTIssuerGet, jwt.get),
		bus.Bind(bus.OpJWTIssuerUpdate, jwt.update),
		bus.Bind(bus.OpJWTIssuerDelete, jwt.delete),

		bus.Bind(bus.OpCustomerCreate, cus.create),
		bus.Bind(bus.OpCustomerPage, cus.page),
		bus.Bind(bus.OpCustomerGet, cus.get),
		bus.Bind(bus.OpCustomerUpdate, cus.update),
		bus.Bind(bus.OpCustomerDelete, cus.delete),
	}
}

// analyticsOperations binds the analytics queries.
func (w *Worker) analyticsOperations() []bus.Binding {
	q := analyticsOps{analytics.Queries{DB: w.db}, w.usage}
	return []bus.Binding{
		bus.Bind(bus.QueryTimeseries, q.queries.Timeseries),
		bus.Bind(bus.QueryTop, q.queries.Top),
		bus.Bind(bus.QueryTopPolicies, q.topPolicies),
		bus.Bind(bus.QueryUsage, q.usage),
	}
}

// storeOps answers the reads and reports that go to the store directly.
type storeOps struct{ st *tenants.Store }

func (o storeOps) snapshot(ctx context.Context, _ none) (tenants.Snapshot, error) {
	return o.st.Snapshot(ctx)
}

func (o storeOps) version(ctx context.Context, _ none) (bus.Version, error) {
	v, err := o.st.ConfigVersion(ctx)
	return bus.Version{Version: v, StateFormats: []string{bus.PackedStateFormat, bus.FencedStateFormat}}, err
}

func (o storeOps) serviceKeyUsed(ctx context.Context, r bus.ServiceKeyUsed) (none, error) {
	return none{}, o.st.ServiceKeys().RecordUse(ctx, r.Used)
}

type tenantOps struct {
	svc    service.Tenants
	config *configsvc.Service
}

// create is configsvc's, not the Tenants service's: only the worker's own
// requests (a --demo server's) may mark a tenant Demo.
func (o tenantOps) create(ctx context.Context, r bus.TenantCreate) (service.Written[service.TenantCreated], error) {
	return o.config.CreateTenant(ctx, r.Name, r.OwnerEmail, r.OwnerPassword, r.Demo)
}

func (o tenantOps) open(ctx context.Context, r bus.TenantScoped) (tenants.TenantSummary, error) {
	return o.svc.Open(ctx, r.TenantID)
}

func (o tenantOps) list(ctx context.Context, _ none) ([]tenants.TenantSummary, error) {
	return o.svc.List(ctx)
}

func (o tenantOps) get(ctx context.Context, r bus.TenantScoped) (tenants.TenantSummary, error) {
	return o.svc.Get(ctx, r.TenantID)
}

func (o tenantOps) suspend(ctx context.Context, r bus.TenantScoped) (service.Written[tenants.Tenant], error) {
	return o.svc.Suspend(ctx, r.TenantID)
}

func (o tenantOps) resume(ctx context.Context, r bus.TenantScoped) (service.Written[tenants.Tenant], error) {
	return o.svc.Resume(ctx, r.TenantID)
}

func (o tenantOps) delete(ctx context.Context, r bus.TenantScoped) (service.Written[tenants.Tenant], error) {
	return o.svc.Delete(ctx, r.TenantID)
}

func (o tenantOps) setTimeZone(ctx context.Context, r bus.TenantTimeZone) (service.Written[tenants.Tenant], error) {
	return o.svc.SetTimeZone(ctx, r.TenantID, r.TimeZone)
}

type setupOps struct{ svc service.Setup }

func (o setupOps) offer(ctx context.Context, r bus.SetupOffer) (bus.SetupOffered, error) {
	open, err := o.svc.Offer(ctx, r.TokenHash)
	return bus.SetupOffered{Open: open}, err
}

func (o setupOps) claim(ctx context.Context, r bus.SetupClaim) (service.Written[service.UserRecord], error) {
	if r.CheckOnly {
		return service.Written[service.UserRecord]{}, o.svc.Check(ctx, r.Token)
	}
	return o.svc.Claim(ctx, r.Token, r.Email, r.Password)
}

type policyOps struct{ svc service.Policies }

func (o policyOps) create(ctx context.Context, r bus.PolicyWrite) (service.Written[tenants.Policy], error) {
	return o.svc.Create(ctx, r.TenantID, r.Policy)
}

func (o policyOps) update(ctx context.Context, r bus.PolicyWrite) (service.Written[tenants.Policy], error) {
	return o.svc.Update(ctx, r.TenantID, r.ID, r.Policy)
}

func (o policyOps) get(ctx context.Context, r bus.TenantScoped) (tenants.Policy, error) {
	return o.svc.Get(ctx, r.TenantID, r.ID)
}

func (o policyOps) list(ctx context.Context, r bus.TenantScoped) ([]tenants.Policy, error) {
	return o.svc.List(ctx, r.TenantID)
}

func (o policyOps) names(ctx context.Context, r bus.PolicyNames) (service.PolicyNameList, error) {
	if r.CountOnly {
		n, err := o.svc.Count(ctx, r.TenantID)
		return service.PolicyNameList{Total: n, Policies: []tenants.PolicyName{}}, err
	}
	return o.svc.Names(ctx, r.TenantID, r.IDs)
}

func (o policyOps) delete(ctx context.Context, r bus.TenantScoped) (service.Written[none], error) {
	return o.svc.Delete(ctx, r.TenantID, r.ID)
}

type keyOps struct{ svc service.Keys }

func (o keyOps) get(ctx context.Context, r bus.TenantScoped) (tenants.ConsumerKey, error) {
	return o.svc.Get(ctx, r.TenantID, r.ID)
}

func (o keyOps) page(ctx context.Context, r bus.KeyPageQuery) (tenants.KeyPage, error) {
	return o.svc.Page(ctx, r.KeyQuery)
}

func (o keyOps) names(ctx context.Context, r bus.KeyNames) (map[string]string, error) {
	return o.svc.Names(ctx, r.TenantID, r.IDs)
}

func (o keyOps) count(ctx context.Context, r bus.TenantScoped) (tenants.KeyCounts, error) {
	return o.svc.Count(ctx, r.TenantID)
}

func (o keyOps) list(ctx context.Context, r bus.TenantScoped) ([]tenants.ConsumerKey, error) {
	return o.svc.List(ctx, r.TenantID)
}

func (o keyOps) update(ctx context.Context, r bus.KeyUpdate) (service.Written[tenants.ConsumerKey], error) {
	return o.svc.Update(ctx, r.TenantID, r.ID, r.Patch)
}

func (o keyOps) revoke(ctx context.Context, r bus.TenantScoped) (service.Written[tenants.ConsumerKey], error) {
	return o.svc.Revoke(ctx, r.TenantID, r.ID)
}

type blockOps struct {
	blocks  service.Blocks
	buckets service.Buckets
}

func (o blockOps) list(ctx context.Context, r bus.TenantScoped) ([]tenants.Block, error) {
	return o.blocks.List(ctx, r.TenantID)
}

func (o blockOps) delete(ctx context.Context, r bus.TenantScoped) (service.Written[none], error) {
	return o.blocks.Delete(ctx, r.TenantID, r.ID)
}

func (o blockOps) resetBucket(ctx context.Context, r bus.BucketReset) (service.Written[none], error) {
	return o.buckets.Reset(ctx, r.TenantID, r.Policy, r.Identity)
}

type reservationOps struct{ l *reservationLedger }

func (o reservationOps) create(ctx context.Context, r reserve.Reservation) (none, error) {
	return none{}, o.l.create(ctx, []reserve.Reservation{r})
}

func (o reservationOps) createAll(ctx context.Context, r bus.ReservationBatch) (none, error) {
	return none{}, o.l.create(ctx, r.Reservations)
}

func (o reservationOps) cancel(ctx context.Context, r bus.ReservationBatch) (none, error) {
	if len(r.Reservations) > reserve.MaxBatch {
		return none{}, errs.Errorf(errs.Invalid, "reservations: more than %d in one batch", reserve.MaxBatch)
	}
	return none{}, o.l.writeTx(ctx, func(tx *sql.Tx) error { return reserve.Cancel(ctx, tx, r.Reservations, o.l.now()) })
}

func (o reservationOps) reopen(ctx context.Context, r bus.TenantScoped) (none, error) {
	return none{}, o.l.writeTx(ctx, func(tx *sql.Tx) error { return reserve.Reopen(ctx, tx, r.TenantID, r.ID) })
}

type userOps struct{ svc service.Users }

func (o userOps) signIn(ctx context.Context, r bus.SignIn) (service.UserRecord, error) {
	return o.svc.SignIn(ctx, r.Email, r.Password)
}

func (o userOps) list(ctx context.Context, r bus.TenantScoped) ([]tenants.User, error) {
	return o.svc.List(ctx, r.TenantID)
}

func (o userOps) setRole(ctx context.Context, r bus.UserRole) (service.Written[tenants.User], error) {
	return o.svc.SetRole(ctx, r.TenantID, r.ID, r.Role)
}

func (o userOps) delete(ctx context.Context, r bus.TenantScoped) (service.Written[tenants.User], error) {
	return o.svc.Delete(ctx, r.TenantID, r.ID)
}

func (o userOps) changePassword(ctx context.Context, r bus.UserPassword) (service.Written[service.UserRecord], error) {
	return o.svc.ChangePassword(ctx, r.ID, r.Current, r.New)
}

func (o userOps) changeEmail(ctx context.Context, r bus.UserEmail) (service.Written[service.UserRecord], error) {
	return o.svc.ChangeEmail(ctx, r.ID, r.Password, r.Email)
}

func (o userOps) endSessions(ctx context.Context, r bus.TenantScoped) (service.Written[service.UserRecord], error) {
	return o.svc.EndSessions(ctx, r.ID)
}

type serviceKeyOps struct{ svc service.ServiceKeys }

func (o serviceKeyOps) create(ctx context.Context, r bus.TenantScoped) (service.Written[service.ServiceKeyCreated], error) {
	return o.svc.Create(ctx, r.TenantID)
}

func (o serviceKeyOps) list(ctx context.Context, r bus.TenantScoped) ([]tenants.ServiceKey, error) {
	return o.svc.List(ctx, r.TenantID)
}

func (o serviceKeyOps) revoke(ctx context.Context, r bus.TenantScoped) (service.Written[tenants.ServiceKey], error) {
	return o.svc.Revoke(ctx, r.TenantID, r.ID)
}

type webhookOps struct{ svc service.Webhooks }

func (o webhookOps) create(ctx context.Context, r bus.WebhookWrite) (tenants.WebhookCreated, error) {
	return o.svc.Create(ctx, r.TenantID, r.Body)
}

func (o webhookOps) list(ctx context.Context, r bus.TenantScoped) ([]tenants.Webhook, error) {
	return o.svc.List(ctx, r.TenantID)
}

func (o webhookOps) get(ctx context.Context, r bus.TenantScoped) (tenants.Webhook, error) {
	return o.svc.Get(ctx, r.TenantID, r.ID)
}

func (o webhookOps) update(ctx context.Context, r bus.WebhookWrite) (tenants.Webhook, error) {
	return o.svc.Update(ctx, r.TenantID, r.ID, r.Body)
}

func (o webhookOps) delete(ctx context.Context, r bus.TenantScoped) (tenants.Webhook, error) {
	return o.svc.Delete(ctx, r.TenantID, r.ID)
}

func (o webhookOps) rotate(ctx context.Context, r bus.TenantScoped) (tenants.WebhookCreated, error) {
	return o.svc.Rotate(ctx, r.TenantID, r.ID)
}

func (o webhookOps) resend(ctx context.Context, r bus.WebhookResend) (tenants.WebhookDelivery, error) {
	return o.svc.Resend(ctx, r.TenantID, r.WebhookID, r.DeliveryID)
}

type analyticsOps struct {
	queries analytics.Queries
	daily   *dailyUsage
}

func (o analyticsOps) topPolicies(ctx context.Context, r bus.PolicyRankRequest) ([]service.PolicyRank, error) {
	return o.queries.TopPolicies(ctx, r.PolicyRankQuery)
}

func (o analyticsOps) usage(ctx context.Context, r bus.UsageRequest) (service.Usage, error) {
	return o.daily.query(ctx, r.UsageQuery)
}

type jwtIssuerOps struct{ svc service.JWTIssuers }

func (o jwtIssuerOps) create(ctx context.Context, r bus.JWTIssuerWrite) (service.Written[tenants.JWTIssuer], error) {
	return o.svc.Create(ctx, r.TenantID, r.Body)
}

func (o jwtIssuerOps) list(ctx context.Context, r bus.TenantScoped) ([]tenants.JWTIssuer, error) {
	return o.svc.List(ctx, r.TenantID)
}

func (o jwtIssuerOps) get(ctx context.Context, r bus.TenantScoped) (tenants.JWTIssuer, error) {
	return o.svc.Get(ctx, r.TenantID, r.ID)
}

func (o jwtIssuerOps) update(ctx context.Context, r bus.JWTIssuerWrite) (service.Written[tenants.JWTIssuer], error) {
	return o.svc.Update(ctx, r.TenantID, r.ID, r.Body)
}

func (o jwtIssuerOps) delete(ctx context.Context, r bus.TenantScoped) (service.Written[none], error) {
	return o.svc.Delete(ctx, r.TenantID, r.ID)
}

type customerOps struct{ svc service.Customers }

func (o customerOps) create(ctx context.Context, r bus.CustomerWrite) (service.Written[tenants.Customer], error) {
	return o.svc.Create(ctx, r.TenantID, r.Body)
}

func (o customerOps) page(ctx context.Context, r bus.CustomerPageQuery) (tenants.CustomerPage, error) {
	return o.svc.Page(ctx, r.CustomerQuery)
}

func (o customerOps) get(ctx context.Context, r bus.TenantScoped) (tenants.Customer, error) {
	return o.svc.Get(ctx, r.TenantID, r.ID)
}

func (o customerOps) update(ctx context.Context, r bus.CustomerWrite) (service.Written[tenants.Customer], error) {
	return o.svc.Update(ctx, r.TenantID, r.ID, r.Body)
}

func (o customerOps) delete(ctx context.Context, r bus.TenantScoped) (service.Written[none], error) {
	return o.svc.Delete(ctx, r.TenantID, r.ID)
}
