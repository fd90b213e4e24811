package tenants

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

const tenantColumns = `id, name, created_at, suspended_at, demo, time_zone`

func scanTenant(sc scanner) (Tenant, error) {
	var t Tenant
	var created int64
	var suspended sql.NullInt64
	if err := sc.Scan(&t.ID, &t.Name, &created, &suspended, &t.Demo, &t.TimeZone); err != nil {
		return Tenant{}, err
	}
	t.CreatedAt = fromMS(created)
	t.SuspendedAt = fromOptMS(suspended)
	return t, nil
}

// TenantStore creates tenants with their owner and first service key,
// reads them, and suspends, resumes and deletes them. Get it from
// Store.Tenants.
type TenantStore struct{ *core }

// NewTenant is a tenant checked and its owner's password hashed
// (TenantStore.Prepare), ready for TenantStore.Commit.
type NewTenant struct {
	name  string
	owner User // without ID, tenant or times
	// Demo marks the tenant as made by --demo (Tenant.Demo).
	Demo bool
}

// Prepare checks a new tenant's fields, refuses a taken name or
// owner email (errs.Conflict) and hashes the owner's password, holding no
// lock: the slow half of Create.
func (s *TenantStore) Prepare(ctx context.Context, name, ownerEmail, ownerPassword string) (NewTenant, error) {
	if err := ValidateNewTenant(name, ownerEmail, ownerPassword); err != nil {
		return NewTenant{}, err
	}
	email := NormalizeEmail(ownerEmail)
	if err := s.refuseTaken(ctx, name, email); err != nil {
		return NewTenant{}, err
	}
	pwHash, err := s.hashPassword(ctx, ownerPassword)
	if err != nil {
		return NewTenant{}, err
	}
	return NewTenant{name: name, owner: User{Email: email, PasswordHash: pwHash, Role: RoleOwner, SessionVersion: 1}}, nil
}

// refuseTaken answers errs.Conflict for a taken tenant name (when name is
// not empty) or email, with the messages the writes give.
func (s *core) refuseTaken(ctx context.Context, name, email string) error {
	if name != "" {
		taken, err := exists(ctx, s.db, `SELECT 1 FROM tenants WHERE name = ?`, name)
		if err != nil {
			return fmt.Errorf("find tenant: %w", err)
		}
		if taken {
			return errs.Errorf(errs.Conflict, "a tenant named %q already exists", name)
		}
	}
	taken, err := exists(ctx, s.db, `SELECT 1 FROM users WHERE email = ?`, email)
	if err != nil {
		return fmt.Errorf("find user: %w", err)
	}
	if taken {
		return errs.Errorf(errs.Conflict, "a user with this email already exists")
	}
	return nil
}

// Create creates a tenant, its owner's dashboard login and its first
// service key, whose plain text is returned once. Its changes announce all
// three (the owner as a UserSession). A taken tenant name or
// owner email answers errs.Conflict.
func (s *TenantStore) Create(ctx context.Context, name, ownerEmail, ownerPassword string, now time.Time) (Tenant, string, []Change, error) {
	nt, err := s.Prepare(ctx, name, ownerEmail, ownerPassword)
	if err != nil {
		return Tenant{}, "", nil, err
	}
	return s.Commit(ctx, nt, now)
}

// Commit creates a tenant Prepare prepared (see Create).
// A name or email taken meanwhile answers errs.Conflict.
func (s *TenantStore) Commit(ctx context.Context, nt NewTenant, now time.Time) (Tenant, string, []Change, error) {
	if nt.owner.PasswordHash == "" {
		return Tenant{}, "", nil, errors.New("create tenant: not prepared")
	}
	name := nt.name
	now = normTime(now)
	plain, prefix, keyHash, err := GenerateKey(KindServiceKey)
	if err != nil {
		return Tenant{}, "", nil, err
	}
	t := Tenant{ID: NewID(IDTenant), Name: name, CreatedAt: now, Demo: nt.Demo, TimeZone: "UTC"}
	owner := nt.owner
	owner.ID, owner.TenantID, owner.CreatedAt = NewID(IDUser), t.ID, now
	key := ServiceKey{ID: NewID(IDServiceKey), TenantID: t.ID, Prefix: prefix, Hash: keyHash, CreatedAt: now}

	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		taken, err := exists(ctx, tx, `SELECT 1 FROM tenants WHERE name = ?`, name)
		if err != nil {
			return nil, fmt.Errorf("create tenant: %w", err)
		}
		if taken {
			return nil, errs.Errorf(errs.Conflict, "a tenant named %q already exists", name)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO tenants (id, name, created_at, demo) VALUES (?, ?, ?, ?)`,
			t.ID, t.Name, toMS(t.CreatedAt), t.Demo); err != nil {
			return nil, fmt.Errorf("create tenant: %w", err)
		}
		if err := insertUser(ctx, tx, owner); err != nil {
			return nil, err
		}
		if err := insertServiceKey(ctx, tx, key); err != nil {
			return nil, err
		}
		err = recordAudit(ctx, tx, AuditEntry{TenantID: t.ID, At: now, Action: ActionCreated, ObjectType: AuditTenant,
			ObjectID: t.ID, ObjectName: t.Name, Changes: created([]field{{"name", t.Name}, {"owner", owner.Email}, {"service key", keyName(key.Prefix)}})})
		if err != nil {
			return nil, err
		}
		return []Change{tenantChange(t), serviceKeyChange(key), userSessionChange(owner)}, nil
	})
	if err != nil {
		return Tenant{}, "", nil, err
	}
	return t, plain, changes, nil
}

func tenantChange(t Tenant) Change {
	return Change{Kind: ChangeTenant, TenantID: t.ID, Tenant: &t}
}

// Get returns one tenant.
func (s *TenantStore) Get(ctx context.Context, id string) (Tenant, error) {
	return queryOne(ctx, s.db, scanTenant, "tenant not found", `SELECT `+tenantColumns+` FROM tenants WHERE id = ?`, id)
}

const tenantSummarySelect = `
		SELECT t.id, t.name, t.created_at, t.suspended_at, t.demo, t.time_zone,
			(SELECT COUNT(*) FROM policies p WHERE p.tenant_id = t.id),
			(SELECT COUNT(*) FROM consumer_keys k WHERE k.tenant_id = t.id AND k.revoked_at IS NULL),
			(SELECT COUNT(*) FROM service_keys k WHERE k.tenant_id = t.id AND k.revoked_at IS NULL),
			(SELECT COUNT(*) FROM users u WHERE u.tenant_id = t.id)
		FROM tenants t`

func scanTenantSummary(sc scanner) (TenantSummary, error) {
	var t TenantSummary
	var created int64
	var suspended sql.NullInt64
	err := sc.Scan(&t.ID, &t.Name, &created, &suspended, &t.Demo, &t.TimeZone, &t.Policies, &t.ConsumerKeys, &t.ServiceKeys, &t.Users)
	t.CreatedAt = fromMS(created)
	t.SuspendedAt = fromOptMS(suspended)
	return t, err
}

// List returns every tenant by name, with the number of its
// policies, active (unrevoked) consumer and service keys, and users.
func (s *TenantStore) List(ctx context.Context) ([]TenantSummary, error) {
	out, err := queryAll(ctx, s.db, scanTenantSummary, tenantSummarySelect+` ORDER BY t.name`)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return out, nil
}

// Summary returns one tenant with the sizes of its configuration,
// as List counts them.
func (s *TenantStore) Summary(ctx context.Context, id string) (TenantSummary, error) {
	return queryOne(ctx, s.db, scanTenantSummary, "tenant not found", tenantSummarySelect+` WHERE t.id = ?`, id)
}

// RecordOpened records in the tenant's audit log that the actor of
// ctx (the operator) opened its dashboard, and returns the tenant. It is
// no config change: nothing is announced.
func (s *TenantStore) RecordOpened(ctx context.Context, tenantID string, now time.Time) (TenantSummary, error) {
	t, err := s.Summary(ctx, tenantID)
	if err != nil {
		return TenantSummary{}, err
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		return recordAudit(ctx, tx, AuditEntry{TenantID: t.ID, At: normTime(now), Action: ActionOpened, ObjectType: AuditTenant,
			ObjectID: t.ID, ObjectName: t.Name, Changes: []FieldChange{{Field: "dashboard", After: "opened by the operator"}}})
	})
	return t, err
}

// Require answers errs.NotFound for a tenant that does not exist.
func (s *TenantStore) Require(ctx context.Context, id string) error {
	return requireTenant(ctx, s.db, id)
}
