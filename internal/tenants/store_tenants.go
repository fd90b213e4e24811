package tenants

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

const (
	tenantColumns     = `id, name, created_at, suspended_at, demo, time_zone`
	serviceKeyColumns = `id, tenant_id, prefix, hash, created_at, revoked_at, last_used_at`
	userColumns       = `id, COALESCE(tenant_id, ''), email, password_hash, role, created_at, session_version, last_login_at`
)

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

func scanServiceKey(sc scanner) (ServiceKey, error) {
	var k ServiceKey
	var created int64
	var revoked, used sql.NullInt64
	if err := sc.Scan(&k.ID, &k.TenantID, &k.Prefix, &k.Hash, &created, &revoked, &used); err != nil {
		return ServiceKey{}, err
	}
	k.CreatedAt = fromMS(created)
	k.RevokedAt = fromOptMS(revoked)
	k.LastUsedAt = fromOptMS(used)
	return k, nil
}

func scanServiceKeyRecord(sc scanner) (ServiceKeyRecord, error) {
	k, err := scanServiceKey(sc)
	return ServiceKeyRecord{k}, err
}

func scanUser(sc scanner) (User, error) {
	var u User
	var created int64
	var login sql.NullInt64
	if err := sc.Scan(&u.ID, &u.TenantID, &u.Email, &u.PasswordHash, &u.Role, &created, &u.SessionVersion, &login); err != nil {
		return User{}, err
	}
	u.CreatedAt = fromMS(created)
	u.LastLoginAt = fromOptMS(login)
	return u, nil
}

// NewTenant is a tenant checked and its owner's password hashed
// (PrepareTenant), ready for CommitTenant.
type NewTenant struct {
	name  string
	owner User // without ID, tenant or times
	// Demo marks the tenant as made by --demo (Tenant.Demo).
	Demo bool
}

// PrepareTenant checks a new tenant's fields, refuses a taken name or
// owner email (errs.Conflict) and hashes the owner's password, holding no
// lock: the slow half of CreateTenant.
func (s *Store) PrepareTenant(ctx context.Context, name, ownerEmail, ownerPassword string) (NewTenant, error) {
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
func (s *Store) refuseTaken(ctx context.Context, name, email string) error {
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

// CreateTenant creates a tenant, its owner's dashboard login and its first
// service key, whose plain text is returned once. Its changes announce all
// three (the owner as a UserSession). A taken tenant name or
// owner email answers errs.Conflict.
func (s *Store) CreateTenant(ctx context.Context, name, ownerEmail, ownerPassword string, now time.Time) (Tenant, string, []Change, error) {
	nt, err := s.PrepareTenant(ctx, name, ownerEmail, ownerPassword)
	if err != nil {
		return Tenant{}, "", nil, err
	}
	return s.CommitTenant(ctx, nt, now)
}

// CommitTenant creates a tenant PrepareTenant prepared (see CreateTenant).
// A name or email taken meanwhile answers errs.Conflict.
func (s *Store) CommitTenant(ctx context.Context, nt NewTenant, now time.Time) (Tenant, string, []Change, error) {
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

// GetTenant returns one tenant.
func (s *Store) GetTenant(ctx context.Context, id string) (Tenant, error) {
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

// ListTenants returns every tenant by name, with the number of its
// policies, active (unrevoked) consumer and service keys, and users.
func (s *Store) ListTenants(ctx context.Context) ([]TenantSummary, error) {
	out, err := queryAll(ctx, s.db, scanTenantSummary, tenantSummarySelect+` ORDER BY t.name`)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return out, nil
}

// GetTenantSummary returns one tenant with the sizes of its configuration,
// as ListTenants counts them.
func (s *Store) GetTenantSummary(ctx context.Context, id string) (TenantSummary, error) {
	return queryOne(ctx, s.db, scanTenantSummary, "tenant not found", tenantSummarySelect+` WHERE t.id = ?`, id)
}

// Service keys.

func insertServiceKey(ctx context.Context, tx *sql.Tx, k ServiceKey) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO service_keys (id, tenant_id, prefix, hash, created_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?)`,
		k.ID, k.TenantID, k.Prefix, k.Hash, toMS(k.CreatedAt), optMS(k.RevokedAt))
	if err != nil {
		return fmt.Errorf("create service key: %w", err)
	}
	return nil
}

func serviceKeyChange(k ServiceKey) Change {
	return Change{Kind: ChangeServiceKey, TenantID: k.TenantID, ServiceKey: &ServiceKeyRecord{k}}
}

// CreateServiceKey issues another service key for a tenant (for rotation)
// and returns its plain text once.
func (s *Store) CreateServiceKey(ctx context.Context, tenantID string, now time.Time) (ServiceKey, string, []Change, error) {
	plain, prefix, hash, err := GenerateKey(KindServiceKey)
	if err != nil {
		return ServiceKey{}, "", nil, err
	}
	k := ServiceKey{ID: NewID(IDServiceKey), TenantID: tenantID, Prefix: prefix, Hash: hash, CreatedAt: normTime(now)}
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		if err := requireTenant(ctx, tx, tenantID); err != nil {
			return nil, err
		}
		if err := s.checkRoom(ctx, tx, tenantID, CapServiceKeys); err != nil {
			return nil, err
		}
		if err := insertServiceKey(ctx, tx, k); err != nil {
			return nil, err
		}
		err := recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: k.CreatedAt, Action: ActionCreated, ObjectType: AuditServiceKey,
			ObjectID: k.ID, ObjectName: keyName(k.Prefix), Changes: created([]field{{"prefix", keyName(k.Prefix)}})})
		if err != nil {
			return nil, err
		}
		return []Change{serviceKeyChange(k)}, nil
	})
	if err != nil {
		return ServiceKey{}, "", nil, err
	}
	return k, plain, changes, nil
}

// ListServiceKeys returns a tenant's service keys, oldest first, revoked
// ones included.
func (s *Store) ListServiceKeys(ctx context.Context, tenantID string) ([]ServiceKey, error) {
	out, err := queryAll(ctx, s.db, scanServiceKey,
		`SELECT `+serviceKeyColumns+` FROM service_keys WHERE tenant_id = ? ORDER BY created_at, id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list service keys: %w", err)
	}
	return out, nil
}

// RevokeServiceKey revokes one of a tenant's service keys. Revoking a
// revoked key changes nothing and returns no changes. The tenant's last
// active key is refused with errs.Conflict: a tenant without one could not
// call the API again, so a roll creates the new key first.
func (s *Store) RevokeServiceKey(ctx context.Context, tenantID, id string, now time.Time) (ServiceKey, []Change, error) {
	now = normTime(now)
	var k ServiceKey
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		var err error
		k, err = queryOne(ctx, tx, scanServiceKey, "service key not found",
			`SELECT `+serviceKeyColumns+` FROM service_keys WHERE id = ? AND tenant_id = ?`, id, tenantID)
		if err != nil || k.RevokedAt != nil {
			return nil, err
		}
		others, err := exists(ctx, tx, `SELECT 1 FROM service_keys WHERE tenant_id = ? AND id != ? AND revoked_at IS NULL`, tenantID, id)
		if err != nil {
			return nil, fmt.Errorf("revoke service key: %w", err)
		}
		if !others {
			return nil, errs.Errorf(errs.Conflict, "this is the tenant's last active service key; create another one first, then revoke this one")
		}
		k.RevokedAt = &now
		if _, err := tx.ExecContext(ctx, `UPDATE service_keys SET revoked_at = ? WHERE id = ? AND tenant_id = ?`,
			toMS(now), id, tenantID); err != nil {
			return nil, fmt.Errorf("revoke service key: %w", err)
		}
		err = recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: now, Action: ActionRevoked, ObjectType: AuditServiceKey,
			ObjectID: k.ID, ObjectName: keyName(k.Prefix), Changes: []FieldChange{{Field: "status", Before: "active", After: "revoked"}}})
		if err != nil {
			return nil, err
		}
		return []Change{serviceKeyChange(k)}, nil
	})
	if err != nil {
		return ServiceKey{}, nil, err
	}
	return k, changes, nil
}

// Users. Dashboard logins are not part of what servers hold, so these
// writes do not move the config version.

func insertUser(ctx context.Context, tx *sql.Tx, u User) error {
	taken, err := exists(ctx, tx, `SELECT 1 FROM users WHERE email = ?`, u.Email)
	if err != nil {
		return fmt.Errorf("create user: %w", err)
	}
	if taken {
		return errs.Errorf(errs.Conflict, "a user with this email already exists")
	}
	var tenant any
	if u.TenantID != "" {
		tenant = u.TenantID
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO users (id, tenant_id, email, password_hash, role, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		u.ID, tenant, u.Email, u.PasswordHash, u.Role, toMS(u.CreatedAt))
	if err != nil {
		return fmt.Errorf("create user: %w", err)
	}
	return nil
}

// CreateUser adds a dashboard login to a tenant with role RoleOwner or
// RoleMember. A taken email answers errs.Conflict. It announces nothing:
// the worker follows it with AnnounceUser.
func (s *Store) CreateUser(ctx context.Context, tenantID, email, password, role string, now time.Time) (User, error) {
	if role != RoleOwner && role != RoleMember {
		return User{}, invalid("role", "must be owner or member")
	}
	if err := ValidateEmail(email); err != nil {
		return User{}, err
	}
	if err := ValidatePassword(password); err != nil {
		return User{}, err
	}
	// Refuse what cannot succeed before the slow hash.
	if err := requireTenant(ctx, s.db, tenantID); err != nil {
		return User{}, err
	}
	// The members cap before the email, here as in the write: a full
	// tenant answers the same for every address.
	if err := s.checkRoom(ctx, s.db, tenantID, CapMembers); err != nil {
		return User{}, err
	}
	if err := s.refuseTaken(ctx, "", NormalizeEmail(email)); err != nil {
		return User{}, err
	}
	hash, err := s.hashPassword(ctx, password)
	if err != nil {
		return User{}, err
	}
	u := User{ID: NewID(IDUser), TenantID: tenantID, Email: NormalizeEmail(email), PasswordHash: hash, Role: role, CreatedAt: normTime(now), SessionVersion: 1}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if err := requireTenant(ctx, tx, tenantID); err != nil {
			return err
		}
		// Before the email check: a full tenant answers the same for
		// every address, so the cap says nothing of who has a login.
		if err := s.checkRoom(ctx, tx, tenantID, CapMembers); err != nil {
			return err
		}
		if err := insertUser(ctx, tx, u); err != nil {
			return err
		}
		return recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: u.CreatedAt, Action: ActionInvited, ObjectType: AuditUser,
			ObjectID: u.ID, ObjectName: u.Email, Changes: created([]field{{"email", u.Email}, {"role", u.Role}})})
	})
	if err != nil {
		return User{}, err
	}
	return u, nil
}

// ListUsers returns a tenant's dashboard logins, oldest first.
func (s *Store) ListUsers(ctx context.Context, tenantID string) ([]User, error) {
	out, err := queryAll(ctx, s.db, scanUser,
		`SELECT `+userColumns+` FROM users WHERE tenant_id = ? ORDER BY created_at, id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return out, nil
}

// UserByEmail returns the user signing in with email, password hash
// included; errs.NotFound if there is none.
func (s *Store) UserByEmail(ctx context.Context, email string) (User, error) {
	return queryOne(ctx, s.db, scanUser, "user not found",
		`SELECT `+userColumns+` FROM users WHERE email = ?`, NormalizeEmail(email))
}

// Authenticate returns the user whose email and password these are, or
// errs.Unauthenticated without saying which was wrong. An unknown email
// costs as much time as a wrong password.
func (s *Store) Authenticate(ctx context.Context, email, password string) (User, error) {
	wrong := errs.Errorf(errs.Unauthenticated, "wrong email or password")
	if len(email) > maxEmailLength || len(password) > maxPasswordBytes {
		return User{}, wrong // no account has these: nothing to learn from the time
	}
	u, err := s.UserByEmail(ctx, email)
	hash := u.PasswordHash
	switch {
	case errs.Is(err, errs.NotFound):
		hash = dummyPasswordHash()
	case err != nil:
		return User{}, err
	}
	ok, cerr := s.checkPassword(ctx, hash, password)
	switch {
	case cerr != nil:
		return User{}, cerr
	case err != nil || !ok:
		return User{}, wrong
	}
	return u, nil
}

// EnsureOperator makes the operator login the one configured at start:
// it creates the login with this email, or sets its password if it
// changed, and deletes every other operator login, so changing
// SLUICE_OPERATOR_EMAIL retires the previous address. The changes to
// announce say so: a retired login is a deleted user (every server ends its
// sessions), and a new password moves the operator's session version (its
// older sessions end). A start that changes nothing returns no change. An
// email that belongs to a tenant's user answers errs.Conflict and changes
// nothing.
func (s *Store) EnsureOperator(ctx context.Context, email, password string, now time.Time) (User, []Change, error) {
	if err := ValidateEmail(email); err != nil {
		return User{}, nil, err
	}
	if err := ValidatePassword(password); err != nil {
		return User{}, nil, err
	}
	email = NormalizeEmail(email)
	u, err := s.UserByEmail(ctx, email)
	switch {
	case err == nil && u.Role != RoleOperator:
		return User{}, nil, errs.Errorf(errs.Conflict, "a tenant user already has this email")
	case err != nil && !errs.Is(err, errs.NotFound):
		return User{}, nil, err
	}
	// Hash before the write lock, and only when the password changes:
	// argon2id is deliberately slow.
	hash := ""
	same := false
	if err == nil {
		if same, err = s.checkPassword(ctx, u.PasswordHash, password); err != nil {
			return User{}, nil, err
		}
	}
	if !same {
		if hash, err = s.hashPassword(ctx, password); err != nil {
			return User{}, nil, err
		}
	}
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		var cs []Change
		cur, err := queryOne(ctx, tx, scanUser, "user not found", `SELECT `+userColumns+` FROM users WHERE email = ?`, email)
		switch {
		case errs.Is(err, errs.NotFound):
			if hash == "" { // deleted since it was read (only at a start racing another)
				if hash, err = HashPassword(password); err != nil {
					return nil, err
				}
			}
			u = User{ID: NewID(IDUser), Email: email, PasswordHash: hash, Role: RoleOperator, CreatedAt: normTime(now), SessionVersion: 1}
			if err := insertUser(ctx, tx, u); err != nil {
				return nil, err
			}
			err := recordAudit(ctx, tx, AuditEntry{At: normTime(now), Action: ActionCreated, ObjectType: AuditOperator,
				ObjectID: u.ID, ObjectName: u.Email, Changes: created([]field{{"login", u.Email}})})
			if err != nil {
				return nil, err
			}
			cs = append(cs, userSessionChange(u))
		case err != nil:
			return nil, err
		case cur.Role != RoleOperator:
			return nil, errs.Errorf(errs.Conflict, "a tenant user already has this email")
		default:
			u = cur
			if hash != "" {
				if u, err = updateUser(ctx, tx, u.ID, "password_hash = ?", hash); err != nil {
					return nil, err
				}
				err := recordAudit(ctx, tx, AuditEntry{At: normTime(now), Action: ActionPasswordChanged, ObjectType: AuditOperator,
					ObjectID: u.ID, ObjectName: u.Email, Changes: []FieldChange{{Field: "password", After: "changed"}}})
				if err != nil {
					return nil, err
				}
				cs = append(cs, userSessionChange(u))
			}
		}
		retired, err := queryAll(ctx, tx, scanUser, `DELETE FROM users WHERE role = ? AND id <> ? RETURNING `+userColumns, RoleOperator, u.ID)
		if err != nil {
			return nil, fmt.Errorf("retire previous operator logins: %w", err)
		}
		for _, r := range retired {
			err := recordAudit(ctx, tx, AuditEntry{At: normTime(now), Action: ActionRemoved, ObjectType: AuditOperator,
				ObjectID: r.ID, ObjectName: r.Email, Changes: []FieldChange{{Field: "login", Before: r.Email}}})
			if err != nil {
				return nil, err
			}
			cs = append(cs, Change{Kind: ChangeUserDeleted, ID: r.ID})
		}
		return cs, nil
	})
	if err != nil {
		return User{}, nil, err
	}
	return u, changes, nil
}

// OperatorTokenHash returns the stored hash of the operator token, or ""
// if none is set.
func (s *Store) OperatorTokenHash(ctx context.Context) (string, error) {
	return setting(ctx, s.db, settingOperatorTokenHash)
}

// SetOperatorTokenHash stores the operator token's hash. With onlyIfAbsent
// it does nothing when a hash is already stored (a first start generates a
// token; later starts keep it). Storing the hash already stored is not a
// change either. set reports whether the hash was written, in which case
// change is the one to announce.
func (s *Store) SetOperatorTokenHash(ctx context.Context, hash string, onlyIfAbsent bool, now time.Time) (set bool, change Change, err error) {
	if hash == "" {
		return false, Change{}, errors.New("set operator token: empty hash")
	}
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		cur, err := setting(ctx, tx, settingOperatorTokenHash)
		if err != nil {
			return nil, err
		}
		if cur == hash || (cur != "" && onlyIfAbsent) {
			return nil, nil
		}
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO settings (key, value) VALUES (?, ?)
			ON CONFLICT (key) DO UPDATE SET value = excluded.value`, settingOperatorTokenHash, hash); err != nil {
			return nil, fmt.Errorf("set operator token: %w", err)
		}
		action := ActionCreated
		if cur != "" {
			action = ActionUpdated
		}
		// The token's hash is a secret too: the entry says only that it changed.
		err = recordAudit(ctx, tx, AuditEntry{At: normTime(now), Action: action, ObjectType: AuditOperator,
			ObjectID: "operator_token", ObjectName: "token", Changes: []FieldChange{{Field: "token", After: "changed"}}})
		if err != nil {
			return nil, err
		}
		return []Change{{Kind: ChangeOperatorToken, OperatorTokenHash: hash}}, nil
	})
	if err != nil || len(changes) == 0 {
		return false, Change{}, err
	}
	return true, changes[0], nil
}
