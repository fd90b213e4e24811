// Package servicetest is an in-memory implementation of every service of
// package service, for handler tests that need no NATS and no worker. It
// keeps each tenant's objects apart and answers errs.NotFound for another
// tenant's, as the worker does, but validates nothing beyond that: tests
// of validation and of what SQLite stores go through the worker.
package servicetest

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Memory holds tenants, their policies, keys, users and blocks in maps.
// The zero value is not ready: use New.
type Memory struct {
	mu       sync.Mutex
	now      func() time.Time
	version  int64
	next     int
	tenants  map[string]*tenants.Tenant
	policies map[string]tenants.Policy
	keys     map[string]tenants.ConsumerKey
	svcKeys  map[string]tenants.ServiceKey
	users    map[string]tenants.User
	secrets  map[string][32]byte // user id → SHA-256 of the password
	blocks   map[string]tenants.Block
	reserved map[string]reserve.Reservation // by tenant id + "/" + id
	webhooks map[string]tenants.Webhook
	// deliveries are each endpoint's, oldest first (AddDelivery).
	deliveries map[string][]tenants.WebhookDelivery
	issuers    map[string]tenants.JWTIssuer
	customers  map[string]tenants.Customer
	// SignIns counts sign-in attempts, for tests of what reaches the
	// worker.
	SignIns int
}

// New returns an empty Memory whose objects are stamped with now.
func New(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{
		now: now, tenants: map[string]*tenants.Tenant{}, policies: map[string]tenants.Policy{},
		keys: map[string]tenants.ConsumerKey{}, svcKeys: map[string]tenants.ServiceKey{},
		users: map[string]tenants.User{}, secrets: map[string][32]byte{}, blocks: map[string]tenants.Block{},
		reserved: map[string]reserve.Reservation{},
		webhooks: map[string]tenants.Webhook{}, deliveries: map[string][]tenants.WebhookDelivery{},
		issuers: map[string]tenants.JWTIssuer{}, customers: map[string]tenants.Customer{},
	}
}

// Services answers m as every service.
func (m *Memory) Services() service.Services {
	return service.Services{
		Tenants: memTenants{m}, Policies: memPolicies{m}, Keys: memKeys{m}, ServiceKeys: memServiceKeys{m},
		Users: memUsers{m}, Blocks: memBlocks{m}, Buckets: memBuckets{m}, Reservations: memReservations{m}, Audit: memAudit{m}, Analytics: memAnalytics{},
		Setup: memSetup{}, Webhooks: memWebhooks{m}, JWTIssuers: memJWTIssuers{m}, Customers: memCustomers{m},
	}
}

// AddTenant adds a tenant as it is (its id included).
func (m *Memory) AddTenant(t tenants.Tenant) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tenants[t.ID] = &t
}

// AddUser adds a dashboard user with a password; an empty tenant id is
// the operator.
func (m *Memory) AddUser(u tenants.User, password string) tenants.User {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u.ID == "" {
		u.ID = m.id("usr")
	}
	if u.SessionVersion == 0 {
		u.SessionVersion = 1
	}
	u.CreatedAt = m.now()
	m.users[u.ID] = u
	m.secrets[u.ID] = sha256.Sum256([]byte(password))
	return u
}

// id makes a new object id; m.mu must be held.
func (m *Memory) id(prefix string) string {
	m.next++
	return fmt.Sprintf("%s_%d", prefix, m.next)
}

// written commits a write: the config version moves. m.mu must be held.
func written[T any](m *Memory, v T) service.Written[T] {
	m.version++
	return service.Written[T]{Result: v, Version: m.version}
}

func notFound(what string) error { return errs.Errorf(errs.NotFound, "%s not found", what) }

// tenant answers a tenant that exists; m.mu must be held.
func (m *Memory) tenant(id string) (*tenants.Tenant, error) {
	t, ok := m.tenants[id]
	if !ok {
		return nil, notFound("tenant")
	}
	return t, nil
}

func (m *Memory) summary(t *tenants.Tenant) tenants.TenantSummary {
	s := tenants.TenantSummary{Tenant: *t}
	for _, p := range m.policies {
		if p.TenantID == t.ID {
			s.Policies++
		}
	}
	for _, k := range m.keys {
		if k.TenantID == t.ID {
			s.ConsumerKeys++
		}
	}
	for _, k := range m.svcKeys {
		if k.TenantID == t.ID {
			s.ServiceKeys++
		}
	}
	for _, u := range m.users {
		if u.TenantID == t.ID {
			s.Users++
		}
	}
	return s
}

// sorted answers the values of objs that keep says to, by id.
func sorted[T any](objs map[string]T, keep func(T) bool) []T {
	ids := make([]string, 0, len(objs))
	for id, o := range objs {
		if keep(o) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := make([]T, 0, len(ids))
	for _, id := range ids {
		out = append(out, objs[id])
	}
	return out
}

// tenantOf is an object's tenant, for the lookups below.
type tenantOf[T any] func(T) string

func policyTenant(p tenants.Policy) string         { return p.TenantID }
func keyTenant(k tenants.ConsumerKey) string       { return k.TenantID }
func serviceKeyTenant(k tenants.ServiceKey) string { return k.TenantID }
func userTenant(u tenants.User) string             { return u.TenantID }

// get answers the tenant's object id in objs, or errs.NotFound naming
// what: another tenant's object is not found either.
func get[T any](m *Memory, objs map[string]T, of tenantOf[T], what, tenantID, id string) (T, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return lookup(objs, of, what, tenantID, id)
}

// lookup is get with m.mu held.
func lookup[T any](objs map[string]T, of tenantOf[T], what, tenantID, id string) (T, error) {
	o, ok := objs[id]
	if !ok || of(o) != tenantID {
		var zero T
		return zero, notFound(what)
	}
	return o, nil
}

// change lets fn change the tenant's object id in objs, stores it and
// commits the write.
func change[T any](m *Memory, objs map[string]T, of tenantOf[T], what, tenantID, id string, fn func(*T)) (service.Written[T], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, err := lookup(objs, of, what, tenantID, id)
	if err != nil {
		return service.Written[T]{}, err
	}
	fn(&o)
	objs[id] = o
	return written(m, o), nil
}

// remove deletes the tenant's object id from objs and commits the write.
func remove[T any](m *Memory, objs map[string]T, of tenantOf[T], what, tenantID, id string) (service.Written[T], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, err := lookup(objs, of, what, tenantID, id)
	if err != nil {
		return service.Written[T]{}, err
	}
	delete(objs, id)
	return written(m, o), nil
}

type memTenants struct{ m *Memory }

func (s memTenants) Create(_ context.Context, name, ownerEmail, ownerPassword string) (service.Written[service.TenantCreated], error) {
	m := s.m
	m.mu.Lock()
	t := &tenants.Tenant{ID: m.id("ten"), Name: name, CreatedAt: m.now()}
	m.tenants[t.ID] = t
	key := tenants.ServiceKey{ID: m.id("sk"), TenantID: t.ID, Prefix: "sk_test", CreatedAt: m.now()}
	m.svcKeys[key.ID] = key
	m.mu.Unlock()
	m.AddUser(tenants.User{TenantID: t.ID, Email: ownerEmail, Role: tenants.RoleOwner}, ownerPassword)
	m.mu.Lock()
	defer m.mu.Unlock()
	return written(m, service.TenantCreated{Tenant: *t, ServiceKey: "sk_test_" + key.ID}), nil
}

func (s memTenants) List(context.Context) ([]tenants.TenantSummary, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []tenants.TenantSummary{}
	for _, t := range sorted(m.tenants, func(*tenants.Tenant) bool { return true }) {
		out = append(out, m.summary(t))
	}
	return out, nil
}

func (s memTenants) Get(_ context.Context, id string) (tenants.TenantSummary, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.tenant(id)
	if err != nil {
		return tenants.TenantSummary{}, err
	}
	return m.summary(t), nil
}

func (s memTenants) Suspend(_ context.Context, id string) (service.Written[tenants.Tenant], error) {
	return s.setSuspended(id, true)
}

func (s memTenants) Resume(_ context.Context, id string) (service.Written[tenants.Tenant], error) {
	return s.setSuspended(id, false)
}

func (s memTenants) setSuspended(id string, suspended bool) (service.Written[tenants.Tenant], error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.tenant(id)
	if err != nil {
		return service.Written[tenants.Tenant]{}, err
	}
	t.SuspendedAt = nil
	if suspended {
		at := m.now()
		t.SuspendedAt = &at
	}
	return written(m, *t), nil
}

func (s memTenants) SetTimeZone(_ context.Context, id, zone string) (service.Written[tenants.Tenant], error) {
	if err := tenants.ValidateTimeZone("time_zone", zone); err != nil {
		return service.Written[tenants.Tenant]{}, err
	}
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.tenant(id)
	if err != nil {
		return service.Written[tenants.Tenant]{}, err
	}
	t.TimeZone = zone
	return written(m, *t), nil
}

func (s memTenants) Delete(_ context.Context, id string) (service.Written[tenants.Tenant], error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.tenant(id)
	if err != nil {
		return service.Written[tenants.Tenant]{}, err
	}
	delete(m.tenants, id)
	return written(m, *t), nil
}

func (s memTenants) Open(ctx context.Context, id string) (tenants.TenantSummary, error) {
	return s.Get(ctx, id)
}

type memPolicies struct{ m *Memory }

func (s memPolicies) Create(_ context.Context, tenantID string, p tenants.Policy) (service.Written[tenants.Policy], error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.tenant(tenantID); err != nil {
		return service.Written[tenants.Policy]{}, err
	}
	p.ID, p.TenantID, p.CreatedAt = m.id("pol"), tenantID, m.now()
	m.policies[p.ID] = p
	return written(m, p), nil
}

func (s memPolicies) Update(_ context.Context, tenantID, id string, p tenants.Policy) (service.Written[tenants.Policy], error) {
	return change(s.m, s.m.policies, policyTenant, "policy", tenantID, id, func(o *tenants.Policy) {
		p.ID, p.TenantID, p.CreatedAt = id, tenantID, o.CreatedAt
		*o = p
	})
}

func (s memPolicies) Get(_ context.Context, tenantID, id string) (tenants.Policy, error) {
	return get(s.m, s.m.policies, policyTenant, "policy", tenantID, id)
}

func (s memPolicies) List(_ context.Context, tenantID string) ([]tenants.Policy, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	return sorted(m.policies, func(p tenants.Policy) bool { return p.TenantID == tenantID }), nil
}

func (s memPolicies) Names(ctx context.Context, tenantID string, ids []string) (service.PolicyNameList, error) {
	ps, _ := s.List(ctx, tenantID)
	l := service.PolicyNameList{Total: len(ps), Policies: []tenants.PolicyName{}}
	for _, p := range ps {
		if len(ids) == 0 || slices.Contains(ids, p.ID) {
			l.Policies = append(l.Policies, tenants.PolicyName{ID: p.ID, Name: p.Name})
		}
	}
	slices.SortFunc(l.Policies, func(a, b tenants.PolicyName) int { return cmp.Compare(a.Name, b.Name) })
	return l, nil
}

func (s memPolicies) Count(ctx context.Context, tenantID string) (int, error) {
	ps, err := s.List(ctx, tenantID)
	return len(ps), err
}

func (s memPolicies) Delete(_ context.Context, tenantID, id string) (service.Written[service.None], error) {
	w, err := remove(s.m, s.m.policies, policyTenant, "policy", tenantID, id)
	return service.Written[service.None]{Version: w.Version}, err
}

type memKeys struct{ m *Memory }

func (s memKeys) Create(_ context.Context, k service.KeyCreate) (service.Written[service.KeyCreated], error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.tenant(k.TenantID); err != nil {
		return service.Written[service.KeyCreated]{}, err
	}
	if err := m.requireCustomer(k.TenantID, k.CustomerID); err != nil {
		return service.Written[service.KeyCreated]{}, err
	}
	now := m.now()
	key := tenants.ConsumerKey{ID: m.id("key"), TenantID: k.TenantID, Name: k.Name, Tier: k.Tier, Prefix: "ck_test",
		Overrides: k.Overrides, ExpiresAt: k.ExpiresAt, BillingAnchor: k.BillingAnchor, CustomerID: k.CustomerID, CreatedAt: now, UpdatedAt: now}
	m.keys[key.ID] = key
	return written(m, service.KeyCreated{Key: key, Secret: "ck_test_" + key.ID}), nil
}

func (s memKeys) Get(_ context.Context, tenantID, id string) (tenants.ConsumerKey, error) {
	return get(s.m, s.m.keys, keyTenant, "key", tenantID, id)
}

func (s memKeys) List(_ context.Context, tenantID string) ([]tenants.ConsumerKey, error) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return sorted(s.m.keys, func(k tenants.ConsumerKey) bool { return k.TenantID == tenantID }), nil
}

// Page answers the tenant's keys in id order; it filters by tier and
// revocation only.
func (s memKeys) Page(ctx context.Context, q tenants.KeyQuery) (tenants.KeyPage, error) {
	all, _ := s.List(ctx, q.TenantID)
	page := tenants.KeyPage{Keys: []tenants.ConsumerKey{}, Offset: q.Offset, Limit: q.Limit, Total: len(all)}
	for _, k := range all {
		switch {
		case k.RevokedAt != nil && !q.IncludeRevoked:
			page.HiddenRevoked++
		case q.Tier != "" && k.Tier != q.Tier:
		case q.CustomerID != "" && k.CustomerID != q.CustomerID:
		default:
			page.Matched++
			if page.Matched > q.Offset && (q.Limit == 0 || len(page.Keys) < q.Limit) {
				page.Keys = append(page.Keys, k)
			}
		}
	}
	return page, nil
}

func (s memKeys) Names(ctx context.Context, tenantID string, ids []string) (map[string]string, error) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	names := map[string]string{}
	for _, id := range ids {
		if k, err := lookup(s.m.keys, keyTenant, "key", tenantID, id); err == nil {
			names[id] = k.Name
		}
	}
	return names, nil
}

func (s memKeys) Count(ctx context.Context, tenantID string) (tenants.KeyCounts, error) {
	all, _ := s.List(ctx, tenantID)
	c := tenants.KeyCounts{Total: len(all)}
	for _, k := range all {
		if k.RevokedAt != nil {
			c.Revoked++
		}
	}
	return c, nil
}

func (s memKeys) Update(_ context.Context, tenantID, id string, p tenants.KeyPatch) (service.Written[tenants.ConsumerKey], error) {
	now := s.m.now()
	if p.CustomerID != nil {
		s.m.mu.Lock()
		err := s.m.requireCustomer(tenantID, *p.CustomerID)
		s.m.mu.Unlock()
		if err != nil {
			return service.Written[tenants.ConsumerKey]{}, err
		}
	}
	return change(s.m, s.m.keys, keyTenant, "key", tenantID, id, func(k *tenants.ConsumerKey) {
		if p.CustomerID != nil {
			k.CustomerID = *p.CustomerID
		}
		if p.Name != nil {
			k.Name = *p.Name
		}
		if p.Tier != nil {
			k.Tier = *p.Tier
		}
		if p.ExpiresAt != nil {
			k.ExpiresAt = p.ExpiresAt
		}
		if p.ClearExpiry {
			k.ExpiresAt = nil
		}
		if p.BillingAnchor != nil {
			k.BillingAnchor = *p.BillingAnchor
		}
		if p.Overrides != nil {
			k.Overrides = *p.Overrides
		}
		k.UpdatedAt = now
	})
}

func (s memKeys) Revoke(_ context.Context, tenantID, id string) (service.Written[tenants.ConsumerKey], error) {
	at := s.m.now()
	return change(s.m, s.m.keys, keyTenant, "key", tenantID, id, func(k *tenants.ConsumerKey) { k.RevokedAt = &at })
}

type memServiceKeys struct{ m *Memory }

func (s memServiceKeys) Create(_ context.Context, tenantID string) (service.Written[service.ServiceKeyCreated], error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.tenant(tenantID); err != nil {
		return service.Written[service.ServiceKeyCreated]{}, err
	}
	k := tenants.ServiceKey{ID: m.id("sk"), TenantID: tenantID, Prefix: "sk_test", CreatedAt: m.now()}
	m.svcKeys[k.ID] = k
	return written(m, service.ServiceKeyCreated{Key: k, Secret: "sk_test_" + k.ID}), nil
}

func (s memServiceKeys) List(_ context.Context, tenantID string) ([]tenants.ServiceKey, error) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return sorted(s.m.svcKeys, func(k tenants.ServiceKey) bool { return k.TenantID == tenantID }), nil
}

func (s memServiceKeys) Revoke(_ context.Context, tenantID, id string) (service.Written[tenants.ServiceKey], error) {
	at := s.m.now()
	return change(s.m, s.m.svcKeys, serviceKeyTenant, "service key", tenantID, id, func(k *tenants.ServiceKey) { k.RevokedAt = &at })
}

type memUsers struct{ m *Memory }

func (s memUsers) SignIn(_ context.Context, email, password string) (service.UserRecord, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	m.SignIns++
	sum := sha256.Sum256([]byte(password))
	for _, u := range m.users {
		want := m.secrets[u.ID]
		if u.Email == email && subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
			rec := service.UserRecord{User: u, SessionVersion: u.SessionVersion}
			if t, ok := m.tenants[u.TenantID]; ok && t.Suspended() {
				rec.TenantSuspended = true
			}
			return rec, nil
		}
	}
	return service.UserRecord{}, errs.Errorf(errs.Unauthenticated, "wrong email or password")
}

func (s memUsers) Create(_ context.Context, u service.UserCreate) (tenants.User, error) {
	s.m.mu.Lock()
	if _, err := s.m.tenant(u.TenantID); err != nil {
		s.m.mu.Unlock()
		return tenants.User{}, err
	}
	s.m.mu.Unlock()
	return s.m.AddUser(tenants.User{TenantID: u.TenantID, Email: u.Email, Role: u.Role}, u.Password), nil
}

func (s memUsers) List(_ context.Context, tenantID string) ([]tenants.User, error) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return sorted(s.m.users, func(u tenants.User) bool { return u.TenantID == tenantID }), nil
}

func (s memUsers) SetRole(_ context.Context, tenantID, id, role string) (service.Written[tenants.User], error) {
	return change(s.m, s.m.users, userTenant, "user", tenantID, id, func(u *tenants.User) {
		u.Role = role
		u.SessionVersion++
	})
}

func (s memUsers) Delete(_ context.Context, tenantID, id string) (service.Written[tenants.User], error) {
	w, err := remove(s.m, s.m.users, userTenant, "user", tenantID, id)
	if err == nil {
		s.m.mu.Lock()
		delete(s.m.secrets, id)
		s.m.mu.Unlock()
	}
	return w, err
}

// own changes the user's own record once password is right.
func (s memUsers) own(id, password string, change func(*tenants.User)) (service.Written[service.UserRecord], error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.users[id]
	if !ok {
		return service.Written[service.UserRecord]{}, notFound("user")
	}
	sum, want := sha256.Sum256([]byte(password)), m.secrets[id]
	if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
		return service.Written[service.UserRecord]{}, errs.Errorf(errs.Invalid, "password: wrong password")
	}
	change(&u)
	u.SessionVersion++
	m.users[id] = u
	return written(m, service.UserRecord{User: u, SessionVersion: u.SessionVersion}), nil
}

func (s memUsers) ChangePassword(_ context.Context, id, current, next string) (service.Written[service.UserRecord], error) {
	return s.own(id, current, func(*tenants.User) { s.m.secrets[id] = sha256.Sum256([]byte(next)) })
}

func (s memUsers) ChangeEmail(_ context.Context, id, password, email string) (service.Written[service.UserRecord], error) {
	return s.own(id, password, func(u *tenants.User) { u.Email = email })
}

func (s memUsers) EndSessions(_ context.Context, id string) (service.Written[service.UserRecord], error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.users[id]
	if !ok {
		return service.Written[service.UserRecord]{}, notFound("user")
	}
	u.SessionVersion++
	m.users[id] = u
	return written(m, service.UserRecord{User: u, SessionVersion: u.SessionVersion}), nil
}

type memBlocks struct{ m *Memory }

func (s memBlocks) Create(_ context.Context, b tenants.Block) (service.Written[tenants.Block], error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.tenant(b.TenantID); err != nil {
		return service.Written[tenants.Block]{}, err
	}
	b.ID, b.CreatedAt = m.id("blk"), m.now()
	m.blocks[b.ID] = b
	return written(m, b), nil
}

func (s memBlocks) List(_ context.Context, tenantID string) ([]tenants.Block, error) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return sorted(s.m.blocks, func(b tenants.Block) bool { return tenantID == "" || b.TenantID == tenantID }), nil
}

func (s memBlocks) Delete(_ context.Context, tenantID, id string) (service.Written[service.None], error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.blocks[id]; !ok || (tenantID != "" && b.TenantID != tenantID) {
		return service.Written[service.None]{}, notFound("block")
	}
	delete(m.blocks, id)
	return written(m, service.None{}), nil
}

type memReservations struct{ m *Memory }

func (s memReservations) Create(_ context.Context, r reserve.Reservation) error {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	r.State = reserve.StateOpen
	m.reserved[r.TenantID+"/"+r.ID] = r
	return nil
}

// CreateAll records every reservation; Memory has no cap on them.
func (s memReservations) CreateAll(ctx context.Context, rs []reserve.Reservation) error {
	for _, r := range rs {
		if err := s.Create(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// Cancel forgets the reservations, as reserve.Do treats cancelled ones.
func (s memReservations) Cancel(_ context.Context, rs []reserve.Reservation) error {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rs {
		delete(m.reserved, r.TenantID+"/"+r.ID)
	}
	return nil
}

// Settle follows reserve.Do: the first settle records, a repeat with the
// same amount replays, an expired or unknown reservation is an error.
func (s memReservations) Settle(_ context.Context, q reserve.Settle) (reserve.Settled, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.reserved[q.TenantID+"/"+q.ID]
	switch {
	case !ok:
		return reserve.Settled{}, errs.Errorf(errs.NotFound, "reservation: no such reservation")
	case r.State == reserve.StateSettled && *r.Actual == q.Actual && r.Unapplied:
		return reserve.Settled{Reservation: r, Replayed: true}, nil
	case r.State == reserve.StateSettled && *r.Actual == q.Actual:
		return reserve.Settled{Reservation: r, Replayed: true}, nil
	case r.State == reserve.StateSettled:
		return reserve.Settled{}, errs.Errorf(errs.Conflict, "reservation: already settled with actual %d", *r.Actual)
	case !q.At.Before(r.ExpiresAt):
		return reserve.Settled{}, errs.Errorf(errs.Conflict, "reservation: expired")
	case q.Actual < 0 || q.Actual > r.Cap:
		return reserve.Settled{}, errs.Errorf(errs.Invalid, "actual: must be between 0 and the reservation's cap of %d", r.Cap)
	}
	a, at := q.Actual, q.At
	r.State, r.Actual, r.SettledAt, r.Unapplied = reserve.StateSettled, &a, &at, true
	m.reserved[q.TenantID+"/"+q.ID] = r
	return reserve.Settled{Reservation: r}, nil
}

// Applied marks a settled reservation as its owner's mark would
// (reserve.MarkApplied).
func (m *Memory) Applied(tenantID, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.reserved[tenantID+"/"+id]; ok && r.State == reserve.StateSettled {
		r.Unapplied = false
		m.reserved[tenantID+"/"+id] = r
	}
}

type memBuckets struct{ m *Memory }

// Reset only checks the tenant: Memory holds no buckets.
func (s memBuckets) Reset(_ context.Context, tenantID, _ string, _ tenants.Identity) (service.Written[service.None], error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.tenant(tenantID); err != nil {
		return service.Written[service.None]{}, err
	}
	return written(m, service.None{}), nil
}

// memAudit keeps no entries.
type memAudit struct{ m *Memory }

func (memAudit) List(context.Context, tenants.AuditQuery) (tenants.AuditPage, error) {
	return tenants.AuditPage{Entries: []tenants.AuditEntry{}}, nil
}

func (memAudit) Get(context.Context, service.AuditGet) (tenants.AuditEntry, error) {
	return tenants.AuditEntry{}, notFound("audit entry")
}

// memAnalytics has counted nothing.
type memAnalytics struct{}

func (memAnalytics) Timeseries(_ context.Context, q service.TimeseriesQuery) (service.Timeseries, error) {
	return service.Timeseries{From: q.From, To: q.To, Step: q.Step, Points: []service.TimeseriesPoint{}}, nil
}

func (memAnalytics) Top(context.Context, service.TopQuery) ([]service.TopEntry, error) {
	return []service.TopEntry{}, nil
}

func (memAnalytics) TopPolicies(context.Context, service.PolicyRankQuery) ([]service.PolicyRank, error) {
	return []service.PolicyRank{}, nil
}

func (memAnalytics) Usage(_ context.Context, q service.UsageQuery) (service.Usage, error) {
	group := q.Group
	if group == "" {
		group = service.UsageByKey
	}
	return service.Usage{From: q.From, To: q.To, Group: group, TimeZone: "UTC", Rows: []service.UsageRow{}}, nil
}

// memSetup has no setup link: an operator exists.
type memSetup struct{}

func (memSetup) Offer(context.Context, string) (bool, error) { return false, nil }

func (memSetup) Check(context.Context, string) error {
	return errs.Errorf(errs.Unauthenticated, "this setup link is no longer valid")
}

func (memSetup) Claim(context.Context, string, string, string) (service.Written[service.UserRecord], error) {
	return service.Written[service.UserRecord]{}, errs.Errorf(errs.Unauthenticated, "this setup link is no longer valid")
}
