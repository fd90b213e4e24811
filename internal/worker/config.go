package worker

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

// write runs one config write and announces its changes. writeMu keeps
// commit order and announcement order the same, so servers see versions
// one by one.
func write[T any](w *Worker, ctx context.Context, fn func() (T, []tenants.Change, error)) (bus.Written[T], error) {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	res, changes, err := fn()
	if err != nil {
		return bus.Written[T]{}, err
	}
	out := bus.Written[T]{Result: res}
	if len(changes) > 0 {
		out.Version = changes[0].Version
		w.announce(changes)
	}
	return out, nil
}

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

type none struct{}

func (w *Worker) registerConfig(add func(subject, name string, h micro.Handler) error) error {
	st := w.store
	now := func() time.Time { return w.cfg.Now() }
	ops := map[string]micro.Handler{
		bus.OpSnapshot: handle(w, bus.OpSnapshot, func(ctx context.Context, _ none) (tenants.Snapshot, error) {
			return st.Snapshot(ctx)
		}),
		bus.OpVersion: handle(w, bus.OpVersion, func(ctx context.Context, _ none) (bus.Version, error) {
			v, err := st.ConfigVersion(ctx)
			return bus.Version{Version: v, StateFormats: []string{bus.PackedStateFormat, bus.FencedStateFormat}}, err
		}),
		bus.OpTenantCreate: handle(w, bus.OpTenantCreate, func(ctx context.Context, r bus.TenantCreate) (bus.Written[bus.TenantCreated], error) {
			// The owner's password is hashed before the writer is taken.
			nt, err := st.PrepareTenant(ctx, r.Name, r.OwnerEmail, r.OwnerPassword)
			if err != nil {
				return bus.Written[bus.TenantCreated]{}, err
			}
			nt.Demo = r.Demo
			return write(w, ctx, func() (bus.TenantCreated, []tenants.Change, error) {
				t, key, cs, err := st.CommitTenant(ctx, nt, now())
				return bus.TenantCreated{Tenant: t, ServiceKey: key}, cs, err
			})
		}),
		bus.OpTenantList: handle(w, bus.OpTenantList, func(ctx context.Context, _ none) ([]tenants.TenantSummary, error) {
			return st.ListTenants(ctx)
		}),
		bus.OpTenantGet: handle(w, bus.OpTenantGet, func(ctx context.Context, r bus.TenantScoped) (tenants.TenantSummary, error) {
			return st.GetTenantSummary(ctx, r.TenantID)
		}),
		bus.OpTenantSuspend: handle(w, bus.OpTenantSuspend, func(ctx context.Context, r bus.TenantScoped) (bus.Written[tenants.Tenant], error) {
			return write(w, ctx, func() (tenants.Tenant, []tenants.Change, error) {
				return st.SuspendTenant(ctx, r.TenantID, now())
			})
		}),
		bus.OpTenantResume: handle(w, bus.OpTenantResume, func(ctx context.Context, r bus.TenantScoped) (bus.Written[tenants.Tenant], error) {
			return write(w, ctx, func() (tenants.Tenant, []tenants.Change, error) {
				return st.ResumeTenant(ctx, r.TenantID)
			})
		}),
		bus.OpTenantDelete: handle(w, bus.OpTenantDelete, func(ctx context.Context, r bus.TenantScoped) (bus.Written[tenants.Tenant], error) {
			res, err := write(w, ctx, func() (tenants.Tenant, []tenants.Change, error) {
				return st.DeleteTenant(ctx, r.TenantID)
			})
			if err == nil {
				w.purgeLater(r.TenantID)
			}
			return res, err
		}),
		bus.OpTenantOpen: handle(w, bus.OpTenantOpen, func(ctx context.Context, r bus.TenantScoped) (tenants.TenantSummary, error) {
			return st.RecordTenantOpened(ctx, r.TenantID, now())
		}),
		bus.OpPolicyCreate: handle(w, bus.OpPolicyCreate, func(ctx context.Context, r bus.PolicyWrite) (bus.Written[tenants.Policy], error) {
			return write(w, ctx, func() (tenants.Policy, []tenants.Change, error) {
				return st.CreatePolicy(ctx, r.TenantID, r.Policy, now())
			})
		}),
		bus.OpPolicyUpdate: handle(w, bus.OpPolicyUpdate, func(ctx context.Context, r bus.PolicyWrite) (bus.Written[tenants.Policy], error) {
			return write(w, ctx, func() (tenants.Policy, []tenants.Change, error) {
				return st.UpdatePolicy(ctx, r.TenantID, r.ID, r.Policy, now())
			})
		}),
		bus.OpPolicyGet: handle(w, bus.OpPolicyGet, func(ctx context.Context, r bus.TenantScoped) (tenants.Policy, error) {
			return st.GetPolicy(ctx, r.TenantID, r.ID)
		}),
		bus.OpPolicyList: handle(w, bus.OpPolicyList, func(ctx context.Context, r bus.TenantScoped) ([]tenants.Policy, error) {
			return nonNil(st.ListPolicies(ctx, r.TenantID))
		}),
		bus.OpPolicyNames: handle(w, bus.OpPolicyNames, func(ctx context.Context, r bus.PolicyNames) (bus.PolicyNameList, error) {
			if r.V != bus.WireVersion {
				return bus.PolicyNameList{}, errs.Errorf(errs.Invalid, "policy names query: wire version %d", r.V)
			}
			if err := st.RequireTenant(ctx, r.TenantID); err != nil {
				return bus.PolicyNameList{}, err
			}
			n, err := st.CountPolicies(ctx, r.TenantID)
			if err != nil || r.CountOnly {
				return bus.PolicyNameList{Total: n, Policies: []tenants.PolicyName{}}, err
			}
			ps, err := st.PolicyNames(ctx, r.TenantID, r.IDs)
			return bus.PolicyNameList{Total: n, Policies: ps}, err
		}),
		bus.OpPolicyDelete: handle(w, bus.OpPolicyDelete, func(ctx context.Context, r bus.TenantScoped) (bus.Written[none], error) {
			return write(w, ctx, func() (none, []tenants.Change, error) {
				cs, err := st.DeletePolicy(ctx, r.TenantID, r.ID, now())
				return none{}, cs, err
			})
		}),
		bus.OpKeyCreate: handle(w, bus.OpKeyCreate, func(ctx context.Context, r bus.KeyCreate) (bus.Written[bus.KeyCreated], error) {
			return write(w, ctx, func() (bus.KeyCreated, []tenants.Change, error) {
				k, secret, cs, err := st.CreateConsumerKey(ctx, r.TenantID, r.Name, r.Tier, r.ExpiresAt, r.Overrides, now())
				return bus.KeyCreated{Key: k, Secret: secret}, cs, err
			})
		}),
		bus.OpKeyGet: handle(w, bus.OpKeyGet, func(ctx context.Context, r bus.TenantScoped) (tenants.ConsumerKey, error) {
			return st.GetConsumerKey(ctx, r.TenantID, r.ID)
		}),
		bus.OpKeyPage: handle(w, bus.OpKeyPage, func(ctx context.Context, r bus.KeyPageQuery) (tenants.KeyPage, error) {
			if r.V != bus.WireVersion {
				return tenants.KeyPage{}, errs.Errorf(errs.Invalid, "key page query: wire version %d", r.V)
			}
			if err := st.RequireTenant(ctx, r.TenantID); err != nil {
				return tenants.KeyPage{}, err
			}
			return st.ListConsumerKeyPage(ctx, r.KeyQuery)
		}),
		bus.OpKeyNames: handle(w, bus.OpKeyNames, func(ctx context.Context, r bus.KeyNames) (map[string]string, error) {
			if r.V != bus.WireVersion {
				return nil, errs.Errorf(errs.Invalid, "key names query: wire version %d", r.V)
			}
			return st.ConsumerKeyNames(ctx, r.TenantID, r.IDs)
		}),
		bus.OpKeyCount: handle(w, bus.OpKeyCount, func(ctx context.Context, r bus.TenantScoped) (tenants.KeyCounts, error) {
			if err := st.RequireTenant(ctx, r.TenantID); err != nil {
				return tenants.KeyCounts{}, err
			}
			return st.CountConsumerKeys(ctx, r.TenantID)
		}),
		bus.OpKeyList: handle(w, bus.OpKeyList, func(ctx context.Context, r bus.TenantScoped) ([]tenants.ConsumerKey, error) {
			return nonNil(st.ListConsumerKeys(ctx, r.TenantID))
		}),
		bus.OpKeyUpdate: handle(w, bus.OpKeyUpdate, func(ctx context.Context, r bus.KeyUpdate) (bus.Written[tenants.ConsumerKey], error) {
			return write(w, ctx, func() (tenants.ConsumerKey, []tenants.Change, error) {
				return st.UpdateConsumerKey(ctx, r.TenantID, r.ID, r.Patch, now())
			})
		}),
		bus.OpKeyRevoke: handle(w, bus.OpKeyRevoke, func(ctx context.Context, r bus.TenantScoped) (bus.Written[tenants.ConsumerKey], error) {
			return write(w, ctx, func() (tenants.ConsumerKey, []tenants.Change, error) {
				return st.RevokeConsumerKey(ctx, r.TenantID, r.ID, now())
			})
		}),
		bus.OpBlockCreate: handle(w, bus.OpBlockCreate, func(ctx context.Context, b tenants.Block) (bus.Written[tenants.Block], error) {
			return write(w, ctx, func() (tenants.Block, []tenants.Change, error) {
				return st.CreateBlock(ctx, b, now())
			})
		}),
		bus.OpBlockList: handle(w, bus.OpBlockList, func(ctx context.Context, r bus.TenantScoped) ([]tenants.Block, error) {
			return nonNil(st.ListBlocks(ctx, r.TenantID))
		}),
		bus.OpBlockDelete: handle(w, bus.OpBlockDelete, func(ctx context.Context, r bus.TenantScoped) (bus.Written[none], error) {
			return write(w, ctx, func() (none, []tenants.Change, error) {
				cs, err := st.DeleteBlock(ctx, r.TenantID, r.ID, now())
				return none{}, cs, err
			})
		}),
		bus.OpBucketReset: handle(w, bus.OpBucketReset, func(ctx context.Context, r bus.BucketReset) (bus.Written[none], error) {
			return write(w, ctx, func() (none, []tenants.Change, error) {
				cs, err := st.ResetBuckets(ctx, r.TenantID, r.Policy, r.Identity, now())
				if err == nil {
					w.deleteResetBuckets(ctx, cs)
				}
				return none{}, cs, err
			})
		}),
		bus.OpUserCreate: handle(w, bus.OpUserCreate, func(ctx context.Context, r bus.UserCreate) (tenants.User, error) {
			u, err := st.CreateUser(ctx, r.TenantID, r.Email, r.Password, r.Role, now())
			if err != nil {
				return u, err
			}
			return u, w.announceUser(ctx, u.ID)
		}),
		bus.OpUserSignIn: handle(w, bus.OpUserSignIn, func(ctx context.Context, r bus.SignIn) (bus.UserRecord, error) {
			return w.signIn(ctx, r)
		}),
		bus.OpUserList: handle(w, bus.OpUserList, func(ctx context.Context, r bus.TenantScoped) ([]tenants.User, error) {
			return nonNil(st.ListUsers(ctx, r.TenantID))
		}),
		bus.OpUserRole: handle(w, bus.OpUserRole, func(ctx context.Context, r bus.UserRole) (bus.Written[tenants.User], error) {
			return write(w, ctx, func() (tenants.User, []tenants.Change, error) {
				return st.SetUserRole(ctx, r.TenantID, r.ID, r.Role, now())
			})
		}),
		bus.OpUserDelete: handle(w, bus.OpUserDelete, func(ctx context.Context, r bus.TenantScoped) (bus.Written[tenants.User], error) {
			return write(w, ctx, func() (tenants.User, []tenants.Change, error) {
				return st.DeleteUser(ctx, r.TenantID, r.ID, now())
			})
		}),
		bus.OpUserPassword: handle(w, bus.OpUserPassword, func(ctx context.Context, r bus.UserPassword) (bus.Written[bus.UserRecord], error) {
			// Checked and hashed before the writer is taken; the write
			// goes ahead only if the password checked is still the stored one.
			p, err := st.PreparePasswordChange(ctx, r.ID, r.Current, r.New)
			if err != nil {
				return bus.Written[bus.UserRecord]{}, err
			}
			return write(w, ctx, func() (bus.UserRecord, []tenants.Change, error) {
				u, cs, err := st.CommitPasswordChange(ctx, p, now())
				return bus.UserRecord{User: u, SessionVersion: u.SessionVersion}, cs, err
			})
		}),
		bus.OpUserEmail: handle(w, bus.OpUserEmail, func(ctx context.Context, r bus.UserEmail) (bus.Written[bus.UserRecord], error) {
			c, err := st.PrepareEmailChange(ctx, r.ID, r.Password, r.Email)
			if err != nil {
				return bus.Written[bus.UserRecord]{}, err
			}
			return write(w, ctx, func() (bus.UserRecord, []tenants.Change, error) {
				u, cs, err := st.CommitEmailChange(ctx, c, now())
				return bus.UserRecord{User: u, SessionVersion: u.SessionVersion}, cs, err
			})
		}),
		bus.OpUserEndSessions: handle(w, bus.OpUserEndSessions, func(ctx context.Context, r bus.TenantScoped) (bus.Written[bus.UserRecord], error) {
			return write(w, ctx, func() (bus.UserRecord, []tenants.Change, error) {
				u, cs, err := st.EndSessions(ctx, r.ID, now())
				return bus.UserRecord{User: u, SessionVersion: u.SessionVersion}, cs, err
			})
		}),
		bus.OpServiceKeyCreate: handle(w, bus.OpServiceKeyCreate, func(ctx context.Context, r bus.TenantScoped) (bus.Written[bus.ServiceKeyCreated], error) {
			return write(w, ctx, func() (bus.ServiceKeyCreated, []tenants.Change, error) {
				k, secret, cs, err := st.CreateServiceKey(ctx, r.TenantID, now())
				return bus.ServiceKeyCreated{Key: k, Secret: secret}, cs, err
			})
		}),
		bus.OpServiceKeyList: handle(w, bus.OpServiceKeyList, func(ctx context.Context, r bus.TenantScoped) ([]tenants.ServiceKey, error) {
			if err := st.RequireTenant(ctx, r.TenantID); err != nil {
				return nil, err
			}
			return nonNil(st.ListServiceKeys(ctx, r.TenantID))
		}),
		bus.OpServiceKeyRevoke: handle(w, bus.OpServiceKeyRevoke, func(ctx context.Context, r bus.TenantScoped) (bus.Written[tenants.ServiceKey], error) {
			return write(w, ctx, func() (tenants.ServiceKey, []tenants.Change, error) {
				return st.RevokeServiceKey(ctx, r.TenantID, r.ID, now())
			})
		}),
		bus.OpAuditList: handle(w, bus.OpAuditList, func(ctx context.Context, q tenants.AuditQuery) (tenants.AuditPage, error) {
			return st.ListAudit(ctx, q)
		}),
		bus.OpAuditGet: handle(w, bus.OpAuditGet, func(ctx context.Context, r bus.AuditGet) (tenants.AuditEntry, error) {
			return st.GetAuditEntry(ctx, r.TenantID, r.ID, r.AllTenants)
		}),
		bus.OpServiceKeyUsed: handle(w, bus.OpServiceKeyUsed, func(ctx context.Context, r bus.ServiceKeyUsed) (none, error) {
			if r.V != bus.WireVersion {
				return none{}, errs.Errorf(errs.Invalid, "service key use report: wire version %d", r.V)
			}
			return none{}, st.RecordServiceKeyUse(ctx, r.Used)
		}),
		bus.OpSetupOffer: handle(w, bus.OpSetupOffer, func(ctx context.Context, r bus.SetupOffer) (bus.SetupOffered, error) {
			if r.V != bus.WireVersion {
				return bus.SetupOffered{}, errs.Errorf(errs.Invalid, "setup offer: wire version %d", r.V)
			}
			// Under the writer, so an offer and a claim never interleave.
			w.writeMu.Lock()
			defer w.writeMu.Unlock()
			open, err := st.OfferSetup(ctx, r.TokenHash)
			return bus.SetupOffered{Open: open}, err
		}),
		bus.OpSetupClaim: handle(w, bus.OpSetupClaim, func(ctx context.Context, r bus.SetupClaim) (bus.Written[bus.UserRecord], error) {
			if r.V != bus.WireVersion {
				return bus.Written[bus.UserRecord]{}, errs.Errorf(errs.Invalid, "setup claim: wire version %d", r.V)
			}
			if r.CheckOnly {
				return bus.Written[bus.UserRecord]{}, st.CheckSetup(ctx, r.Token)
			}
			// Checked and hashed before the writer is taken; the commit
			// checks the token again.
			p, err := st.PrepareSetupClaim(ctx, r.Token, r.Email, r.Password)
			if err != nil {
				return bus.Written[bus.UserRecord]{}, err
			}
			return write(w, ctx, func() (bus.UserRecord, []tenants.Change, error) {
				u, cs, err := st.CommitSetupClaim(ctx, p, now())
				return bus.UserRecord{User: u, SessionVersion: u.SessionVersion}, cs, err
			})
		}),
	}
	for op, h := range ops {
		if err := add(bus.ConfigPrefix+"."+op, "config_"+safeName(op), h); err != nil {
			return err
		}
	}
	return nil
}

// signIn checks a dashboard user's email and password here, so that no
// password hash ever leaves the worker, and answers the user without it.
// An unknown email costs as much as a wrong password and answers the same
// (errs.Unauthenticated). A right password of a suspended tenant's user
// answers TenantSuspended; any other records the sign-in's time.
func (w *Worker) signIn(ctx context.Context, r bus.SignIn) (bus.UserRecord, error) {
	u, err := w.store.Authenticate(ctx, r.Email, r.Password)
	if err != nil {
		return bus.UserRecord{}, err
	}
	rec := bus.UserRecord{User: u, SessionVersion: u.SessionVersion}
	if u.TenantID != "" {
		t, err := w.store.GetTenant(ctx, u.TenantID)
		if err != nil {
			return bus.UserRecord{}, err
		}
		rec.TenantSuspended = t.Suspended()
	}
	if !rec.TenantSuspended {
		if err := w.store.RecordSignIn(ctx, u.ID, w.cfg.Now()); err != nil {
			w.log.Warn("last sign-in time not recorded", "user", u.ID, "err", err)
		}
	}
	return rec, nil
}

// announceUser tells every server a new user's session version, so the
// user's first session is accepted everywhere.
func (w *Worker) announceUser(ctx context.Context, id string) error {
	_, err := write(w, ctx, func() (none, []tenants.Change, error) {
		cs, err := w.store.AnnounceUser(ctx, id)
		return none{}, cs, err
	})
	return err
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
				if err := w.store.PurgeTenantData(ctx, p.tenantID); err != nil && ctx.Err() == nil {
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

func nonNil[T any](s []T, err error) ([]T, error) {
	if s == nil && err == nil {
		s = []T{}
	}
	return s, err
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
