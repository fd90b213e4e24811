package worker

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

func (w *Worker) announce(changes []tenants.Change) {
	data, err := json.Marshal(bus.ChangeMsg{V: bus.WireVersion, Changes: changes})
	if err != nil {
		w.log.Error("encode config change", "err", err)
		return
	}
	// Core NATS: a server that misses this notices the version gap (or its
	// periodic version check does) and resynchronises from a snapshot.
	if err := w.nc.Publish(bus.ChangesSubject, data); err != nil {
		w.log.Warn("announce config change failed; servers will resynchronise", "version", changes[0].Version, "err", err)
	}
	for _, c := range changes {
		w.log.Info("config change committed", "version", c.Version, "kind", c.Kind, "tenant", c.TenantID)
	}
}

type none = bus.None

func (w *Worker) registerConfig(add func(subject, name string, h micro.Handler) error) error {
	st := w.store
	svc := w.config.Services()
	ops := map[string]micro.Handler{
		bus.OpSnapshot.Name: serve(w, bus.OpSnapshot, func(ctx context.Context, _ none) (tenants.Snapshot, error) {
			return st.Snapshot(ctx)
		}),
		bus.OpVersion.Name: serve(w, bus.OpVersion, func(ctx context.Context, _ none) (bus.Version, error) {
			v, err := st.ConfigVersion(ctx)
			return bus.Version{Version: v, StateFormats: []string{bus.PackedStateFormat, bus.FencedStateFormat}}, err
		}),
		bus.OpServiceKeyUsed.Name: serve(w, bus.OpServiceKeyUsed, func(ctx context.Context, r bus.ServiceKeyUsed) (none, error) {
			if r.V != bus.WireVersion {
				return none{}, errs.Errorf(errs.Invalid, "service key use report: wire version %d", r.V)
			}
			return none{}, st.ServiceKeys().RecordUse(ctx, r.Used)
		}),

		bus.OpTenantCreate.Name: serve(w, bus.OpTenantCreate, func(ctx context.Context, r bus.TenantCreate) (service.Written[service.TenantCreated], error) {
			return w.config.CreateTenant(ctx, r.Name, r.OwnerEmail, r.OwnerPassword, r.Demo)
		}),
		bus.OpTenantOpen.Name: serve(w, bus.OpTenantOpen, func(ctx context.Context, r bus.TenantScoped) (tenants.TenantSummary, error) {
			return svc.Tenants.Open(ctx, r.TenantID)
		}),
		bus.OpSetupOffer.Name: serve(w, bus.OpSetupOffer, func(ctx context.Context, r bus.SetupOffer) (bus.SetupOffered, error) {
			if r.V != bus.WireVersion {
				return bus.SetupOffered{}, errs.Errorf(errs.Invalid, "setup offer: wire version %d", r.V)
			}
			open, err := svc.Setup.Offer(ctx, r.TokenHash)
			return bus.SetupOffered{Open: open}, err
		}),
		bus.OpSetupClaim.Name: serve(w, bus.OpSetupClaim, func(ctx context.Context, r bus.SetupClaim) (service.Written[service.UserRecord], error) {
			if r.V != bus.WireVersion {
				return service.Written[service.UserRecord]{}, errs.Errorf(errs.Invalid, "setup claim: wire version %d", r.V)
			}
			if r.CheckOnly {
				return service.Written[service.UserRecord]{}, svc.Setup.Check(ctx, r.Token)
			}
			return svc.Setup.Claim(ctx, r.Token, r.Email, r.Password)
		}),
		bus.OpTenantList.Name: serve(w, bus.OpTenantList, func(ctx context.Context, _ none) ([]tenants.TenantSummary, error) {
			return svc.Tenants.List(ctx)
		}),
		bus.OpTenantGet.Name: serve(w, bus.OpTenantGet, func(ctx context.Context, r bus.TenantScoped) (tenants.TenantSummary, error) {
			return svc.Tenants.Get(ctx, r.TenantID)
		}),
		bus.OpTenantSuspend.Name: serve(w, bus.OpTenantSuspend, func(ctx context.Context, r bus.TenantScoped) (service.Written[tenants.Tenant], error) {
			return svc.Tenants.Suspend(ctx, r.TenantID)
		}),
		bus.OpTenantResume.Name: serve(w, bus.OpTenantResume, func(ctx context.Context, r bus.TenantScoped) (service.Written[tenants.Tenant], error) {
			return svc.Tenants.Resume(ctx, r.TenantID)
		}),
		bus.OpTenantDelete.Name: serve(w, bus.OpTenantDelete, func(ctx context.Context, r bus.TenantScoped) (service.Written[tenants.Tenant], error) {
			return svc.Tenants.Delete(ctx, r.TenantID)
		}),
		bus.OpTenantTimeZone.Name: serve(w, bus.OpTenantTimeZone, func(ctx context.Context, r bus.TenantTimeZone) (service.Written[tenants.Tenant], error) {
			return svc.Tenants.SetTimeZone(ctx, r.TenantID, r.TimeZone)
		}),

		bus.OpPolicyCreate.Name: serve(w, bus.OpPolicyCreate, func(ctx context.Context, r bus.PolicyWrite) (service.Written[tenants.Policy], error) {
			return svc.Policies.Create(ctx, r.TenantID, r.Policy)
		}),
		bus.OpPolicyUpdate.Name: serve(w, bus.OpPolicyUpdate, func(ctx context.Context, r bus.PolicyWrite) (service.Written[tenants.Policy], error) {
			return svc.Policies.Update(ctx, r.TenantID, r.ID, r.Policy)
		}),
		bus.OpPolicyGet.Name: serve(w, bus.OpPolicyGet, func(ctx context.Context, r bus.TenantScoped) (tenants.Policy, error) {
			return svc.Policies.Get(ctx, r.TenantID, r.ID)
		}),
		bus.OpPolicyList.Name: serve(w, bus.OpPolicyList, func(ctx context.Context, r bus.TenantScoped) ([]tenants.Policy, error) {
			return svc.Policies.List(ctx, r.TenantID)
		}),
		bus.OpPolicyNames.Name: serve(w, bus.OpPolicyNames, func(ctx context.Context, r bus.PolicyNames) (service.PolicyNameList, error) {
			if r.V != bus.WireVersion {
				return service.PolicyNameList{}, errs.Errorf(errs.Invalid, "policy names query: wire version %d", r.V)
			}
			if r.CountOnly {
				n, err := svc.Policies.Count(ctx, r.TenantID)
				return service.PolicyNameList{Total: n, Policies: []tenants.PolicyName{}}, err
			}
			return svc.Policies.Names(ctx, r.TenantID, r.IDs)
		}),
		bus.OpPolicyDelete.Name: serve(w, bus.OpPolicyDelete, func(ctx context.Context, r bus.TenantScoped) (service.Written[none], error) {
			return svc.Policies.Delete(ctx, r.TenantID, r.ID)
		}),

		bus.OpKeyCreate.Name: serve(w, bus.OpKeyCreate, func(ctx context.Context, r service.KeyCreate) (service.Written[service.KeyCreated], error) {
			return svc.Keys.Create(ctx, r)
		}),
		bus.OpKeyGet.Name: serve(w, bus.OpKeyGet, func(ctx context.Context, r bus.TenantScoped) (tenants.ConsumerKey, error) {
			return svc.Keys.Get(ctx, r.TenantID, r.ID)
		}),
		bus.OpKeyPage.Name: serve(w, bus.OpKeyPage, func(ctx context.Context, r bus.KeyPageQuery) (tenants.KeyPage, error) {
			if r.V != bus.WireVersion {
				return tenants.KeyPage{}, errs.Errorf(errs.Invalid, "key page query: wire version %d", r.V)
			}
			return svc.Keys.Page(ctx, r.KeyQuery)
		}),
		bus.OpKeyNames.Name: serve(w, bus.OpKeyNames, func(ctx context.Context, r bus.KeyNames) (map[string]string, error) {
			if r.V != bus.WireVersion {
				return nil, errs.Errorf(errs.Invalid, "key names query: wire version %d", r.V)
			}
			return svc.Keys.Names(ctx, r.TenantID, r.IDs)
		}),
		bus.OpKeyCount.Name: serve(w, bus.OpKeyCount, func(ctx context.Context, r bus.TenantScoped) (tenants.KeyCounts, error) {
			return svc.Keys.Count(ctx, r.TenantID)
		}),
		bus.OpKeyList.Name: serve(w, bus.OpKeyList, func(ctx context.Context, r bus.TenantScoped) ([]tenants.ConsumerKey, error) {
			return svc.Keys.List(ctx, r.TenantID)
		}),
		bus.OpKeyUpdate.Name: serve(w, bus.OpKeyUpdate, func(ctx context.Context, r bus.KeyUpdate) (service.Written[tenants.ConsumerKey], error) {
			return svc.Keys.Update(ctx, r.TenantID, r.ID, r.Patch)
		}),
		bus.OpKeyRevoke.Name: serve(w, bus.OpKeyRevoke, func(ctx context.Context, r bus.TenantScoped) (service.Written[tenants.ConsumerKey], error) {
			return svc.Keys.Revoke(ctx, r.TenantID, r.ID)
		}),

		bus.OpBlockCreate.Name: serve(w, bus.OpBlockCreate, func(ctx context.Context, b tenants.Block) (service.Written[tenants.Block], error) {
			return svc.Blocks.Create(ctx, b)
		}),
		bus.OpBlockList.Name: serve(w, bus.OpBlockList, func(ctx context.Context, r bus.TenantScoped) ([]tenants.Block, error) {
			return svc.Blocks.List(ctx, r.TenantID)
		}),
		bus.OpBlockDelete.Name: serve(w, bus.OpBlockDelete, func(ctx context.Context, r bus.TenantScoped) (service.Written[none], error) {
			return svc.Blocks.Delete(ctx, r.TenantID, r.ID)
		}),
		bus.OpBucketReset.Name: serve(w, bus.OpBucketReset, func(ctx context.Context, r bus.BucketReset) (service.Written[none], error) {
			return svc.Buckets.Reset(ctx, r.TenantID, r.Policy, r.Identity)
		}),

		bus.OpReservationCreate.Name: serve(w, bus.OpReservationCreate, func(ctx context.Context, r reserve.Reservation) (none, error) {
			return none{}, w.createReservations(ctx, []reserve.Reservation{r})
		}),
		bus.OpReservationCreateAll.Name: serve(w, bus.OpReservationCreateAll, func(ctx context.Context, r bus.ReservationBatch) (none, error) {
			if r.V != bus.WireVersion {
				return none{}, errs.Errorf(errs.Invalid, "reservations: wire version %d", r.V)
			}
			return none{}, w.createReservations(ctx, r.Reservations)
		}),
		bus.OpReservationCancel.Name: serve(w, bus.OpReservationCancel, func(ctx context.Context, r bus.ReservationBatch) (none, error) {
			switch {
			case r.V != bus.WireVersion:
				return none{}, errs.Errorf(errs.Invalid, "reservations: wire version %d", r.V)
			case len(r.Reservations) > reserve.MaxBatch:
				return none{}, errs.Errorf(errs.Invalid, "reservations: more than %d in one batch", reserve.MaxBatch)
			}
			return none{}, st.WriteTx(ctx, func(tx *sql.Tx) error { return reserve.Cancel(ctx, tx, r.Reservations, w.cfg.Now()) })
		}),
		bus.OpReservationSettle.Name: serve(w, bus.OpReservationSettle, w.settleReservation),
		bus.OpReservationReopen.Name: serve(w, bus.OpReservationReopen, func(ctx context.Context, r bus.TenantScoped) (none, error) {
			return none{}, st.WriteTx(ctx, func(tx *sql.Tx) error { return reserve.Reopen(ctx, tx, r.TenantID, r.ID) })
		}),
		bus.OpReservationApply.Name: serve(w, bus.OpReservationApply, w.markSettleApplied),

		bus.OpUserCreate.Name: serve(w, bus.OpUserCreate, func(ctx context.Context, r service.UserCreate) (tenants.User, error) {
			return svc.Users.Create(ctx, r)
		}),
		bus.OpUserSignIn.Name: serve(w, bus.OpUserSignIn, func(ctx context.Context, r bus.SignIn) (service.UserRecord, error) {
			return svc.Users.SignIn(ctx, r.Email, r.Password)
		}),
		bus.OpUserList.Name: serve(w, bus.OpUserList, func(ctx context.Context, r bus.TenantScoped) ([]tenants.User, error) {
			return svc.Users.List(ctx, r.TenantID)
		}),
		bus.OpUserRole.Name: serve(w, bus.OpUserRole, func(ctx context.Context, r bus.UserRole) (service.Written[tenants.User], error) {
			return svc.Users.SetRole(ctx, r.TenantID, r.ID, r.Role)
		}),
		bus.OpUserDelete.Name: serve(w, bus.OpUserDelete, func(ctx context.Context, r bus.TenantScoped) (service.Written[tenants.User], error) {
			return svc.Users.Delete(ctx, r.TenantID, r.ID)
		}),
		bus.OpUserPassword.Name: serve(w, bus.OpUserPassword, func(ctx context.Context, r bus.UserPassword) (service.Written[service.UserRecord], error) {
			return svc.Users.ChangePassword(ctx, r.ID, r.Current, r.New)
		}),
		bus.OpUserEmail.Name: serve(w, bus.OpUserEmail, func(ctx context.Context, r bus.UserEmail) (service.Written[service.UserRecord], error) {
			return svc.Users.ChangeEmail(ctx, r.ID, r.Password, r.Email)
		}),
		bus.OpUserEndSessions.Name: serve(w, bus.OpUserEndSessions, func(ctx context.Context, r bus.TenantScoped) (service.Written[service.UserRecord], error) {
			return svc.Users.EndSessions(ctx, r.ID)
		}),

		bus.OpServiceKeyCreate.Name: serve(w, bus.OpServiceKeyCreate, func(ctx context.Context, r bus.TenantScoped) (service.Written[service.ServiceKeyCreated], error) {
			return svc.ServiceKeys.Create(ctx, r.TenantID)
		}),
		bus.OpServiceKeyList.Name: serve(w, bus.OpServiceKeyList, func(ctx context.Context, r bus.TenantScoped) ([]tenants.ServiceKey, error) {
			return svc.ServiceKeys.List(ctx, r.TenantID)
		}),
		bus.OpServiceKeyRevoke.Name: serve(w, bus.OpServiceKeyRevoke, func(ctx context.Context, r bus.TenantScoped) (service.Written[tenants.ServiceKey], error) {
			return svc.ServiceKeys.Revoke(ctx, r.TenantID, r.ID)
		}),

		bus.OpAuditList.Name: serve(w, bus.OpAuditList, func(ctx context.Context, q tenants.AuditQuery) (tenants.AuditPage, error) {
			return svc.Audit.List(ctx, q)
		}),
		bus.OpAuditGet.Name: serve(w, bus.OpAuditGet, func(ctx context.Context, r service.AuditGet) (tenants.AuditEntry, error) {
			return svc.Audit.Get(ctx, r)
		}),

		bus.OpWebhookCreate.Name: serve(w, bus.OpWebhookCreate, func(ctx context.Context, r bus.WebhookWrite) (tenants.WebhookCreated, error) {
			return svc.Webhooks.Create(ctx, r.TenantID, r.Body)
		}),
		bus.OpWebhookList.Name: serve(w, bus.OpWebhookList, func(ctx context.Context, r bus.TenantScoped) ([]tenants.Webhook, error) {
			return svc.Webhooks.List(ctx, r.TenantID)
		}),
		bus.OpWebhookGet.Name: serve(w, bus.OpWebhookGet, func(ctx context.Context, r bus.TenantScoped) (tenants.Webhook, error) {
			return svc.Webhooks.Get(ctx, r.TenantID, r.ID)
		}),
		bus.OpWebhookUpdate.Name: serve(w, bus.OpWebhookUpdate, func(ctx context.Context, r bus.WebhookWrite) (tenants.Webhook, error) {
			return svc.Webhooks.Update(ctx, r.TenantID, r.ID, r.Body)
		}),
		bus.OpWebhookDelete.Name: serve(w, bus.OpWebhookDelete, func(ctx context.Context, r bus.TenantScoped) (tenants.Webhook, error) {
			return svc.Webhooks.Delete(ctx, r.TenantID, r.ID)
		}),
		bus.OpWebhookRotate.Name: serve(w, bus.OpWebhookRotate, func(ctx context.Context, r bus.TenantScoped) (tenants.WebhookCreated, error) {
			return svc.Webhooks.Rotate(ctx, r.TenantID, r.ID)
		}),
		bus.OpWebhookDeliveries.Name: serve(w, bus.OpWebhookDeliveries, func(ctx context.Context, q tenants.DeliveryQuery) (tenants.DeliveryPage, error) {
			return svc.Webhooks.Deliveries(ctx, q)
		}),
		bus.OpWebhookResend.Name: serve(w, bus.OpWebhookResend, func(ctx context.Context, r bus.WebhookResend) (tenants.WebhookDelivery, error) {
			return svc.Webhooks.Resend(ctx, r.TenantID, r.WebhookID, r.DeliveryID)
		}),
	}
	for op, h := range ops {
		if err := add(bus.ConfigPrefix+"."+op, "config_"+safeName(op), h); err != nil {
			return err
		}
	}
	return nil
}

// purgeDelays are when, after a tenant is deleted, its buckets and
// analytics are deleted again: servers may have had states and counters of
// it in flight (flushed every 200 ms and 1 s, applied within about a
// second), which land after the delete committed.
var purgeDelays = []time.Duration{10 * time.Second, 2 * time.Minute}

// purgeLater asks purgeDeleted to delete a deleted tenant's late buckets
// and counters.
func (w *Worker) purgeLater(tenantID string) {
	select {
	case w.purges <- tenantID:
	default:
		w.log.Warn("purge queue full; a deleted tenant's late data stays until it expires", "tenant", tenantID)
	}
}

// purgeDeleted runs the purges purgeLater asked for, at purgeDelays after
// each delete, until ctx ends.
func (w *Worker) purgeDeleted(ctx context.Context) {
	type due struct {
		tenantID string
		at       time.Time
	}
	var pending []due
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-w.purges:
			for _, d := range purgeDelays {
				pending = append(pending, due{id, time.Now().Add(d)})
			}
		case now := <-tick.C:
			rest := pending[:0]
			for _, p := range pending {
				if now.Before(p.at) {
					rest = append(rest, p)
					continue
				}
				if err := w.store.Tenants().PurgeData(ctx, p.tenantID); err != nil && ctx.Err() == nil {
					w.log.Warn("purge deleted tenant's late data", "tenant", p.tenantID, "err", err)
				}
			}
			pending = rest
		}
	}
}

// deleteResetBuckets removes a reset identity's persisted buckets, so a
// server hydrating later does not bring the old consumption back.
func (w *Worker) deleteResetBuckets(ctx context.Context, cs []tenants.Change) {
	for _, c := range cs {
		if c.BucketReset == nil {
			continue
		}
		key := c.TenantID + "/" + c.BucketReset.PolicyID + "/" + c.BucketReset.Identity.Kind + ":" + c.BucketReset.Identity.ID
		part := bus.Partition([]byte(key))
		err := w.store.WriteTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `DELETE FROM buckets WHERE part = ? AND key = ?`, part, key); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `DELETE FROM bucket_runs WHERE run IN (SELECT run FROM bucket_run_ids) AND part = ? AND key = ?`, part, key)
			return err
		})
		if err != nil {
			w.log.Error("delete reset bucket", "key", key, "err", err)
		}
	}
}

func safeName(op string) string {
	b := []byte(op)
	for i, c := range b {
		if c == '.' {
			b[i] = '_'
		}
	}
	return string(b)
}
