// Package configsvc is the worker's implementation of the services of
// package service over SQLite: every config read and write the front doors
// ask for, with the audit and the change records the store keeps. The
// worker serves it over NATS, one operation of bus's table per method;
// tests may call it in process.
//
// It owns the order of config writes: one at a time, each announced
// (Hooks.Announce) before the next commits, so servers see versions one
// by one. It must never read or write the streams, the buckets or the
// analytics tables, except through the hooks the worker gives it.
package configsvc

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Hooks are what a write does beyond the config tables; each may be nil.
type Hooks struct {
	// Announce tells every server a committed write's changes; it runs
	// before the next write commits.
	Announce func(changes []tenants.Change)
	// TenantDeleted runs after a tenant's delete committed (the worker
	// purges its late buckets and counters).
	TenantDeleted func(tenantID string)
	// BucketsReset runs within a bucket reset's write, after the reset
	// committed and before it is announced (the worker deletes the reset
	// buckets, so that a server hydrating later does not load them).
	BucketsReset func(ctx context.Context, changes []tenants.Change)
	// CheckWebhookURL checks where a webhook URL points before it is
	// stored (the worker refuses loopback, private and link-local
	// addresses unless the operator allows them).
	CheckWebhookURL func(ctx context.Context, url string) error
	// WebhookQueued tells the delivery loop a delivery is due now.
	WebhookQueued func()
	// ServersWithoutConcurrency names the live servers that cannot
	// compile a concurrency limit (of a version before it), read from
	// what servers announce; none when every server can. A write that
	// holds a concurrency limit asks it, and is refused while any is
	// named or when it answers an error. Nil: every server can.
	ServersWithoutConcurrency func(ctx context.Context) ([]string, error)
}

// Service is every config service over one store.
type Service struct {
	store *tenants.Store
	now   func() time.Time
	hooks Hooks
	log   *slog.Logger
	// writeMu keeps commit order and announcement order the same.
	writeMu sync.Mutex
}

// New returns the services over st; now stamps the writes.
func New(st *tenants.Store, now func() time.Time, hooks Hooks, log *slog.Logger) *Service {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{store: st, now: now, hooks: hooks, log: log}
}

// Services answers s as package service's services.
func (s *Service) Services() service.Services {
	return service.Services{
		Tenants: tenantSvc{s}, Policies: policySvc{s}, Keys: keySvc{s}, ServiceKeys: serviceKeySvc{s},
		Users: userSvc{s}, Blocks: blockSvc{s}, Buckets: bucketSvc{s}, Audit: auditSvc{s}, Setup: setupSvc{s},
		Webhooks: webhookSvc{s}, JWTIssuers: jwtIssuerSvc{s}, Customers: customerSvc{s},
	}
}

// Write runs one config write and announces its changes: the worker's own
// writes (the operator bootstrap) go through it too, so that every write
// takes its turn.
func Write[T any](s *Service, fn func() (T, []tenants.Change, error)) (service.Written[T], error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	res, changes, err := fn()
	if err != nil {
		return service.Written[T]{}, err
	}
	out := service.Written[T]{Result: res}
	if len(changes) > 0 {
		out.Version = changes[0].Version
		if s.hooks.Announce != nil {
			s.hooks.Announce(changes)
		}
	}
	return out, nil
}

// AnnounceUser tells every server a user's session version, so that the
// user's first session is accepted everywhere.
func (s *Service) AnnounceUser(ctx context.Context, id string) error {
	_, err := Write(s, func() (service.None, []tenants.Change, error) {
		cs, err := s.store.Users().Announce(ctx, id)
		return service.None{}, cs, err
	})
	return err
}

// nonNil answers an empty list rather than nil, so that lists encode as [].
func nonNil[T any](l []T, err error) ([]T, error) {
	if l == nil && err == nil {
		l = []T{}
	}
	return l, err
}

type tenantSvc struct{ s *Service }

func (t tenantSvc) Create(ctx context.Context, name, ownerEmail, ownerPassword string) (service.Written[service.TenantCreated], error) {
	return t.s.CreateTenant(ctx, name, ownerEmail, ownerPassword, false)
}

// CreateTenant is Tenants.Create, and with demo the demo tenant of
// cmd/server --demo (tenants.Tenant.Demo), which no front door makes.
func (s *Service) CreateTenant(ctx context.Context, name, ownerEmail, ownerPassword string, demo bool) (service.Written[service.TenantCreated], error) {
	// The owner's password is hashed before the writer is taken.
	nt, err := s.store.Tenants().Prepare(ctx, name, ownerEmail, ownerPassword)
	if err != nil {
		return service.Written[service.TenantCreated]{}, err
	}
	nt.Demo = demo
	return Write(s, func() (service.TenantCreated, []tenants.Change, error) {
		tn, key, cs, err := s.store.Tenants().Commit(ctx, nt, s.now())
		return service.TenantCreated{Tenant: tn, ServiceKey: key}, cs, err
	})
}

func (t tenantSvc) Open(ctx context.Context, id string) (tenants.TenantSummary, error) {
	return t.s.store.Tenants().RecordOpened(ctx, id, t.s.now())
}

func (t tenantSvc) List(ctx context.Context) ([]tenants.TenantSummary, error) {
	return t.s.store.Tenants().List(ctx)
}

func (t tenantSvc) Get(ctx context.Context, id string) (tenants.TenantSummary, error) {
	return t.s.store.Tenants().Summary(ctx, id)
}

func (t tenantSvc) Suspend(ctx context.Context, id string) (service.Written[tenants.Tenant], error) {
	return Write(t.s, func() (tenants.Tenant, []tenants.Change, error) {
		return t.s.store.Tenants().Suspend(ctx, id, t.s.now())
	})
}

func (t tenantSvc) SetTimeZone(ctx context.Context, id, zone string) (service.Written[tenants.Tenant], error) {
	return Write(t.s, func() (tenants.Tenant, []tenants.Change, error) {
		return t.s.store.Tenants().SetTimeZone(ctx, id, zone, t.s.now())
	})
}

func (t tenantSvc) Resume(ctx context.Context, id string) (service.Written[tenants.Tenant], error) {
	return Write(t.s, func() (tenants.Tenant, []tenants.Change, error) {
		return t.s.store.Tenants().Resume(ctx, id)
	})
}

func (t tenantSvc) Delete(ctx context.Context, id string) (service.Written[tenants.Tenant], error) {
	res, err := Write(t.s, func() (tenants.Tenant, []tenants.Change, error) {
		return t.s.store.Tenants().Delete(ctx, id)
	})
	if err == nil && t.s.hooks.TenantDeleted != nil {
		t.s.hooks.TenantDeleted(id)
	}
	return res, err
}

type policySvc struct{ s *Service }

func (p policySvc) Create(ctx context.Context, tenantID string, pol tenants.Policy) (service.Written[tenants.Policy], error) {
	if err := p.s.checkPolicyConcurrency(ctx, pol); err != nil {
		return service.Written[tenants.Policy]{}, err
	}
	return Write(p.s, func() (tenants.Policy, []tenants.Change, error) {
		return p.s.store.Policies().Create(ctx, tenantID, pol, p.s.now())
	})
}

func (p policySvc) Update(ctx context.Context, tenantID, id string, pol tenants.Policy) (service.Written[tenants.Policy], error) {
	if err := p.s.checkPolicyConcurrency(ctx, pol); err != nil {
		return service.Written[tenants.Policy]{}, err
	}
	return Write(p.s, func() (tenants.Policy, []tenants.Change, error) {
		return p.s.store.Policies().Update(ctx, tenantID, id, pol, p.s.now())
	})
}

func (p policySvc) Get(ctx context.Context, tenantID, id string) (tenants.Policy, error) {
	return p.s.store.Policies().Get(ctx, tenantID, id)
}

func (p policySvc) List(ctx context.Context, tenantID string) ([]tenants.Policy, error) {
	return nonNil(p.s.store.Policies().List(ctx, tenantID))
}

func (p policySvc) Names(ctx context.Context, tenantID string, ids []string) (service.PolicyNameList, error) {
	if err := p.s.store.Tenants().Require(ctx, tenantID); err != nil {
		return service.PolicyNameList{}, err
	}
	n, err := p.s.store.Policies().Count(ctx, tenantID)
	if err != nil {
		return service.PolicyNameList{}, err
	}
	ps, err := p.s.store.Policies().Names(ctx, tenantID, ids)
	return service.PolicyNameList{Total: n, Policies: ps}, err
}

func (p policySvc) Count(ctx context.Context, tenantID string) (int, error) {
	if err := p.s.store.Tenants().Require(ctx, tenantID); err != nil {
		return 0, err
	}
	return p.s.store.Policies().Count(ctx, tenantID)
}

func (p policySvc) Delete(ctx context.Context, tenantID, id string) (service.Written[service.None], error) {
	return Write(p.s, func() (service.None, []tenants.Change, error) {
		cs, err := p.s.store.Policies().Delete(ctx, tenantID, id, p.s.now())
		return service.None{}, cs, err
	})
}

type keySvc struct{ s *Service }

func (k keySvc) Create(ctx context.Context, r service.KeyCreate) (service.Written[service.KeyCreated], error) {
	if err := tenants.ValidateBillingAnchor("billing_anchor", r.BillingAnchor); err != nil {
		return service.Written[service.KeyCreated]{}, err
	}
	if err := k.s.checkOverridesConcurrency(ctx, r.Overrides); err != nil {
		return service.Written[service.KeyCreated]{}, err
	}
	return Write(k.s, func() (service.KeyCreated, []tenants.Change, error) {
		key, secret, cs, err := k.s.store.Keys().Issue(ctx, tenants.NewKey{TenantID: r.TenantID, Name: r.Name, Tier: r.Tier,
			ExpiresAt: r.ExpiresAt, Overrides: r.Overrides, BillingAnchor: r.BillingAnchor, CustomerID: r.CustomerID}, k.s.now())
		return service.KeyCreated{Key: key, Secret: secret}, cs, err
	})
}

func (k keySvc) Get(ctx context.Context, tenantID, id string) (tenants.ConsumerKey, error) {
	return k.s.store.Keys().Get(ctx, tenantID, id)
}

func (k keySvc) List(ctx context.Context, tenantID string) ([]tenants.ConsumerKey, error) {
	return nonNil(k.s.store.Keys().List(ctx, tenantID))
}

func (k keySvc) Page(ctx context.Context, q tenants.KeyQuery) (tenants.KeyPage, error) {
	if err := k.s.store.Tenants().Require(ctx, q.TenantID); err != nil {
		return tenants.KeyPage{}, err
	}
	return k.s.store.Keys().Page(ctx, q)
}

func (k keySvc) Names(ctx context.Context, tenantID string, ids []string) (map[string]string, error) {
	return k.s.store.Keys().Names(ctx, tenantID, ids)
}

func (k keySvc) Count(ctx context.Context, tenantID string) (tenants.KeyCounts, error) {
	if err := k.s.store.Tenants().Require(ctx, tenantID); err != nil {
		return tenants.KeyCounts{}, err
	}
	return k.s.store.Keys().Count(ctx, tenantID)
}

func (k keySvc) Update(ctx context.Context, tenantID, id string, p tenants.KeyPatch) (service.Written[tenants.ConsumerKey], error) {
	if p.Overrides != nil {
		if err := k.s.checkOverridesConcurrency(ctx, *p.Overrides); err != nil {
			return service.Written[tenants.ConsumerKey]{}, err
		}
	}
	return Write(k.s, func() (tenants.ConsumerKey, []tenants.Change, error) {
		return k.s.store.Keys().Update(ctx, tenantID, id, p, k.s.now())
	})
}

func (k keySvc) Revoke(ctx context.Context, tenantID, id string) (service.Written[tenants.ConsumerKey], error) {
	return Write(k.s, func() (tenants.ConsumerKey, []tenants.Change, error) {
		return k.s.store.Keys().Revoke(ctx, tenantID, id, k.s.now())
	})
}

type serviceKeySvc struct{ s *Service }

func (k serviceKeySvc) Create(ctx context.Context, tenantID string) (service.Written[service.ServiceKeyCreated], error) {
	return Write(k.s, func() (service.ServiceKeyCreated, []tenants.Change, error) {
		key, secret, cs, err := k.s.store.ServiceKeys().Create(ctx, tenantID, k.s.now())
		return service.ServiceKeyCreated{Key: key, Secret: secret}, cs, err
	})
}

func (k serviceKeySvc) List(ctx context.Context, tenantID string) ([]tenants.ServiceKey, error) {
	if err := k.s.store.Tenants().Require(ctx, tenantID); err != nil {
		return nil, err
	}
	return nonNil(k.s.store.ServiceKeys().List(ctx, tenantID))
}

func (k serviceKeySvc) Revoke(ctx context.Context, tenantID, id string) (service.Written[tenants.ServiceKey], error) {
	return Write(k.s, func() (tenants.ServiceKey, []tenants.Change, error) {
		return k.s.store.ServiceKeys().Revoke(ctx, tenantID, id, k.s.now())
	})
}

type userSvc struct{ s *Service }

// SignIn checks the password here, so that no password hash ever leaves
// the worker, and answers the user without it. An unknown email costs as
// much as a wrong password and answers the same (errs.Unauthenticated). A
// right password of a suspended tenant's user answers TenantSuspended; any
// other records the sign-in's time.
func (u userSvc) SignIn(ctx context.Context, email, password string) (service.UserRecord, error) {
	st := u.s.store
	usr, err := st.Users().Authenticate(ctx, email, password)
	if err != nil {
		return service.UserRecord{}, err
	}
	rec := service.UserRecord{User: usr, SessionVersion: usr.SessionVersion}
	if usr.TenantID != "" {
		t, err := st.Tenants().Get(ctx, usr.TenantID)
		if err != nil {
			return service.UserRecord{}, err
		}
		rec.TenantSuspended = t.Suspended()
	}
	if !rec.TenantSuspended {
		if err := st.Users().RecordSignIn(ctx, usr.ID, u.s.now()); err != nil {
			u.s.log.Warn("last sign-in time not recorded", "user", usr.ID, "err", err)
		}
	}
	return rec, nil
}

func (u userSvc) Create(ctx context.Context, r service.UserCreate) (tenants.User, error) {
	usr, err := u.s.store.Users().Create(ctx, r.TenantID, r.Email, r.Password, r.Role, u.s.now())
	if err != nil {
		return usr, err
	}
	return usr, u.s.AnnounceUser(ctx, usr.ID)
}

func (u userSvc) List(ctx context.Context, tenantID string) ([]tenants.User, error) {
	return nonNil(u.s.store.Users().List(ctx, tenantID))
}

func (u userSvc) SetRole(ctx context.Context, tenantID, id, role string) (service.Written[tenants.User], error) {
	return Write(u.s, func() (tenants.User, []tenants.Change, error) {
		return u.s.store.Users().SetRole(ctx, tenantID, id, role, u.s.now())
	})
}

func (u userSvc) Delete(ctx context.Context, tenantID, id string) (service.Written[tenants.User], error) {
	return Write(u.s, func() (tenants.User, []tenants.Change, error) {
		return u.s.store.Users().Delete(ctx, tenantID, id, u.s.now())
	})
}

func (u userSvc) ChangePassword(ctx context.Context, id, current, next string) (service.Written[service.UserRecord], error) {
	// Checked and hashed before the writer is taken; the write goes ahead
	// only if the password checked is still the stored one.
	p, err := u.s.store.Users().PreparePasswordChange(ctx, id, current, next)
	if err != nil {
		return service.Written[service.UserRecord]{}, err
	}
	return Write(u.s, func() (service.UserRecord, []tenants.Change, error) {
		usr, cs, err := u.s.store.Users().CommitPasswordChange(ctx, p, u.s.now())
		return service.UserRecord{User: usr, SessionVersion: usr.SessionVersion}, cs, err
	})
}

func (u userSvc) ChangeEmail(ctx context.Context, id, password, email string) (service.Written[service.UserRecord], error) {
	c, err := u.s.store.Users().PrepareEmailChange(ctx, id, password, email)
	if err != nil {
		return service.Written[service.UserRecord]{}, err
	}
	return Write(u.s, func() (service.UserRecord, []tenants.Change, error) {
		usr, cs, err := u.s.store.Users().CommitEmailChange(ctx, c, u.s.now())
		return service.UserRecord{User: usr, SessionVersion: usr.SessionVersion}, cs, err
	})
}

func (u userSvc) EndSessions(ctx context.Context, id string) (service.Written[service.UserRecord], error) {
	return Write(u.s, func() (service.UserRecord, []tenants.Change, error) {
		usr, cs, err := u.s.store.Users().EndSessions(ctx, id, u.s.now())
		return service.UserRecord{User: usr, SessionVersion: usr.SessionVersion}, cs, err
	})
}

type blockSvc struct{ s *Service }

func (b blockSvc) Create(ctx context.Context, blk tenants.Block) (service.Written[tenants.Block], error) {
	return Write(b.s, func() (tenants.Block, []tenants.Change, error) {
		return b.s.store.Blocks().Create(ctx, blk, b.s.now())
	})
}

func (b blockSvc) List(ctx context.Context, tenantID string) ([]tenants.Block, error) {
	return nonNil(b.s.store.Blocks().List(ctx, tenantID))
}

func (b blockSvc) Delete(ctx context.Context, tenantID, id string) (service.Written[service.None], error) {
	return Write(b.s, func() (service.None, []tenants.Change, error) {
		cs, err := b.s.store.Blocks().Delete(ctx, tenantID, id, b.s.now())
		return service.None{}, cs, err
	})
}

type bucketSvc struct{ s *Service }

func (b bucketSvc) Reset(ctx context.Context, tenantID, policy string, id tenants.Identity) (service.Written[service.None], error) {
	return Write(b.s, func() (service.None, []tenants.Change, error) {
		cs, err := b.s.store.Policies().ResetBuckets(ctx, tenantID, policy, id, b.s.now())
		if err == nil && b.s.hooks.BucketsReset != nil {
			b.s.hooks.BucketsReset(ctx, cs)
		}
		return service.None{}, cs, err
	})
}

type auditSvc struct{ s *Service }

func (a auditSvc) List(ctx context.Context, q tenants.AuditQuery) (tenants.AuditPage, error) {
	return a.s.store.Audit().List(ctx, q)
}

func (a auditSvc) Get(ctx context.Context, g service.AuditGet) (tenants.AuditEntry, error) {
	return a.s.store.Audit().Get(ctx, g.TenantID, g.ID, g.AllTenants)
}

type setupSvc struct{ s *Service }

func (u setupSvc) Offer(ctx context.Context, tokenHash string) (bool, error) {
	// Under the writer, so that an offer and a claim never interleave.
	u.s.writeMu.Lock()
	defer u.s.writeMu.Unlock()
	return u.s.store.Setup().Offer(ctx, tokenHash)
}

func (u setupSvc) Check(ctx context.Context, token string) error {
	return u.s.store.Setup().Check(ctx, token)
}

func (u setupSvc) Claim(ctx context.Context, token, email, password string) (service.Written[service.UserRecord], error) {
	// Checked and hashed before the writer is taken; the commit checks the
	// token again.
	p, err := u.s.store.Setup().PrepareClaim(ctx, token, email, password)
	if err != nil {
		return service.Written[service.UserRecord]{}, err
	}
	return Write(u.s, func() (service.UserRecord, []tenants.Change, error) {
		usr, cs, err := u.s.store.Setup().CommitClaim(ctx, p, u.s.now())
		return service.UserRecord{User: usr, SessionVersion: usr.SessionVersion}, cs, err
	})
}

// WebhookRotationOverlap is how long after a rotation deliveries are
// signed with the previous secret too.
const WebhookRotationOverlap = 24 * time.Hour

type webhookSvc struct{ s *Service }

// checkURL checks the form of b's URL, then where it points.
func (w webhookSvc) checkURL(ctx context.Context, b tenants.WebhookBody) error {
	if b.URL == nil {
		return nil
	}
	if _, err := tenants.ValidateWebhookURL(*b.URL); err != nil {
		return err
	}
	if w.s.hooks.CheckWebhookURL == nil {
		return nil
	}
	return w.s.hooks.CheckWebhookURL(ctx, *b.URL)
}

func (w webhookSvc) Create(ctx context.Context, tenantID string, b tenants.WebhookBody) (tenants.WebhookCreated, error) {
	if b.URL == nil {
		return tenants.WebhookCreated{}, errs.Errorf(errs.Invalid, "url: required")
	}
	if err := w.checkURL(ctx, b); err != nil {
		return tenants.WebhookCreated{}, err
	}
	return w.s.store.Webhooks().Create(ctx, tenantID, b, w.s.now())
}

func (w webhookSvc) List(ctx context.Context, tenantID string) ([]tenants.Webhook, error) {
	return w.s.store.Webhooks().List(ctx, tenantID)
}

func (w webhookSvc) Get(ctx context.Context, tenantID, id string) (tenants.Webhook, error) {
	return w.s.store.Webhooks().Get(ctx, tenantID, id)
}

func (w webhookSvc) Update(ctx context.Context, tenantID, id string, b tenants.WebhookBody) (tenants.Webhook, error) {
	// Another tenant's endpoint is not found, before its URL is looked up.
	if _, err := w.s.store.Webhooks().Get(ctx, tenantID, id); err != nil {
		return tenants.Webhook{}, err
	}
	if err := w.checkURL(ctx, b); err != nil {
		return tenants.Webhook{}, err
	}
	wh, err := w.s.store.Webhooks().Update(ctx, tenantID, id, b, w.s.now())
	if err == nil && b.Paused != nil && !*b.Paused && w.s.hooks.WebhookQueued != nil {
		// A resumed endpoint's pending deliveries are due now.
		w.s.hooks.WebhookQueued()
	}
	return wh, err
}

func (w webhookSvc) Delete(ctx context.Context, tenantID, id string) (tenants.Webhook, error) {
	return w.s.store.Webhooks().Delete(ctx, tenantID, id, w.s.now())
}

func (w webhookSvc) Rotate(ctx context.Context, tenantID, id string) (tenants.WebhookCreated, error) {
	return w.s.store.Webhooks().RotateSecret(ctx, tenantID, id, WebhookRotationOverlap, w.s.now())
}

func (w webhookSvc) Deliveries(ctx context.Context, q tenants.DeliveryQuery) (tenants.DeliveryPage, error) {
	return w.s.store.Webhooks().Deliveries(ctx, q)
}

func (w webhookSvc) Resend(ctx context.Context, tenantID, webhookID, deliveryID string) (tenants.WebhookDelivery, error) {
	d, err := w.s.store.Webhooks().Resend(ctx, tenantID, webhookID, deliveryID, w.s.now())
	if err == nil && w.s.hooks.WebhookQueued != nil {
		w.s.hooks.WebhookQueued()
	}
	return d, err
}

type jwtIssuerSvc struct{ s *Service }

func (j jwtIssuerSvc) Create(ctx context.Context, tenantID string, b tenants.JWTIssuerBody) (service.Written[tenants.JWTIssuer], error) {
	return Write(j.s, func() (tenants.JWTIssuer, []tenants.Change, error) {
		return j.s.store.JWTIssuers().Create(ctx, tenantID, b, j.s.now())
	})
}

func (j jwtIssuerSvc) List(ctx context.Context, tenantID string) ([]tenants.JWTIssuer, error) {
	if err := j.s.store.Tenants().Require(ctx, tenantID); err != nil {
		return nil, err
	}
	return nonNil(j.s.store.JWTIssuers().List(ctx, tenantID))
}

func (j jwtIssuerSvc) Get(ctx context.Context, tenantID, id string) (tenants.JWTIssuer, error) {
	return j.s.store.JWTIssuers().Get(ctx, tenantID, id)
}

func (j jwtIssuerSvc) Update(ctx context.Context, tenantID, id string, b tenants.JWTIssuerBody) (service.Written[tenants.JWTIssuer], error) {
	return Write(j.s, func() (tenants.JWTIssuer, []tenants.Change, error) {
		return j.s.store.JWTIssuers().Update(ctx, tenantID, id, b, j.s.now())
	})
}

func (j jwtIssuerSvc) Delete(ctx context.Context, tenantID, id string) (service.Written[service.None], error) {
	return Write(j.s, func() (service.None, []tenants.Change, error) {
		cs, err := j.s.store.JWTIssuers().Delete(ctx, tenantID, id, j.s.now())
		return service.None{}, cs, err
	})
}

type customerSvc struct{ s *Service }

func (c customerSvc) Create(ctx context.Context, tenantID string, b tenants.CustomerBody) (service.Written[tenants.Customer], error) {
	return Write(c.s, func() (tenants.Customer, []tenants.Change, error) {
		return c.s.store.Customers().Create(ctx, tenantID, b, c.s.now())
	})
}

func (c customerSvc) Page(ctx context.Context, q tenants.CustomerQuery) (tenants.CustomerPage, error) {
	if err := c.s.store.Tenants().Require(ctx, q.TenantID); err != nil {
		return tenants.CustomerPage{}, err
	}
	return c.s.store.Customers().Page(ctx, q)
}

func (c customerSvc) Get(ctx context.Context, tenantID, id string) (tenants.Customer, error) {
	return c.s.store.Customers().Get(ctx, tenantID, id)
}

func (c customerSvc) Update(ctx context.Context, tenantID, id string, b tenants.CustomerBody) (service.Written[tenants.Customer], error) {
	return Write(c.s, func() (tenants.Customer, []tenants.Change, error) {
		return c.s.store.Customers().Update(ctx, tenantID, id, b, c.s.now())
	})
}

func (c customerSvc) Delete(ctx context.Context, tenantID, id string) (service.Written[service.None], error) {
	return Write(c.s, func() (service.None, []tenants.Change, error) {
		cs, err := c.s.store.Customers().Delete(ctx, tenantID, id, c.s.now())
		return service.None{}, cs, err
	})
}
