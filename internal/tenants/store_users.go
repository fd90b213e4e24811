package tenants

// The lifecycle of dashboard logins and service keys after they are made.
//
// A user's session version lives in users.session_version and in every
// server's config cache; each session token carries the version it was
// issued with. A change of password, email or role moves the version, and
// removing a user deletes it, in a config write (the version of the config
// moves too), so every server refuses the user's older sessions as soon as
// it applies the announced change.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

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

// UserStore keeps dashboard logins: a tenant's owners and members and
// the operator's, their passwords, emails, roles and sessions. Get it
// from Store.Users.
type UserStore struct{ *core }

const userColumns = `id, COALESCE(tenant_id, ''), email, password_hash, role, created_at, session_version, last_login_at`

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

func scanUserSession(sc scanner) (UserSession, error) {
	var u UserSession
	err := sc.Scan(&u.ID, &u.TenantID, &u.Version)
	return u, err
}

func userSessionChange(u User) Change {
	return Change{Kind: ChangeUserSession, TenantID: u.TenantID, UserSession: &UserSession{ID: u.ID, TenantID: u.TenantID, Version: u.SessionVersion}}
}

// Get returns one user, password hash included.
func (s *UserStore) Get(ctx context.Context, id string) (User, error) {
	return queryOne(ctx, s.db, scanUser, "user not found", `SELECT `+userColumns+` FROM users WHERE id = ?`, id)
}

// Announce returns the change that tells servers a user's current
// session version, in a config write of its own. Writes that create users
// (UserStore.Create, OperatorStore.Ensure) are followed by it, so a new user's first
// session is known everywhere.
func (s *UserStore) Announce(ctx context.Context, id string) ([]Change, error) {
	return s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		u, err := queryOne(ctx, tx, scanUser, "user not found", `SELECT `+userColumns+` FROM users WHERE id = ?`, id)
		if err != nil {
			return nil, err
		}
		return []Change{userSessionChange(u)}, nil
	})
}

// updateUser runs set (an UPDATE of the user's row) and moves the user's
// session version in the same transaction, returning the user as stored.
func updateUser(ctx context.Context, tx *sql.Tx, id string, set string, args ...any) (User, error) {
	q := `UPDATE users SET session_version = session_version + 1`
	if set != "" {
		q += ", " + set
	}
	res, err := tx.ExecContext(ctx, q+` WHERE id = ?`, append(args, id)...)
	if err != nil {
		return User{}, fmt.Errorf("update user: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return User{}, errs.Errorf(errs.NotFound, "user not found")
	}
	return queryOne(ctx, tx, scanUser, "user not found", `SELECT `+userColumns+` FROM users WHERE id = ?`, id)
}

// checkCurrentPassword refuses a change made without the user's current
// password, naming the field so a form can put the message beside it. It
// returns the user as read, whose PasswordHash is the hash checked.
func (s *UserStore) checkCurrentPassword(ctx context.Context, id, current string) (User, error) {
	u, err := s.Get(ctx, id)
	if err != nil {
		return User{}, err
	}
	ok, err := s.checkPassword(ctx, u.PasswordHash, current)
	if err != nil {
		return User{}, err
	}
	if !ok {
		return User{}, invalid("current_password", "is not your current password")
	}
	return u, nil
}

// stillChecked refuses a write whose password check no longer holds: the
// user's password changed (or the user went) after it was checked.
func stillChecked(ctx context.Context, tx *sql.Tx, id, checkedHash string) error {
	var cur string
	err := tx.QueryRowContext(ctx, `SELECT password_hash FROM users WHERE id = ?`, id).Scan(&cur)
	if errors.Is(err, sql.ErrNoRows) {
		return errs.Errorf(errs.NotFound, "user not found")
	}
	if err != nil {
		return fmt.Errorf("read user: %w", err)
	}
	if cur != checkedHash {
		return invalid("current_password", "is not your current password")
	}
	return nil
}

// PasswordChange is a change of password whose current password was
// checked and whose new one is hashed (UserStore.PreparePasswordChange), ready for
// CommitPasswordChange.
type PasswordChange struct {
	user    User   // as read when checked
	newHash string // the new password's
}

// PreparePasswordChange checks a user's current password and hashes the
// new one, holding no lock: the slow half of ChangePassword.
func (s *UserStore) PreparePasswordChange(ctx context.Context, id, current, next string) (PasswordChange, error) {
	if err := validatePassword("new_password", next); err != nil {
		return PasswordChange{}, err
	}
	u, err := s.checkCurrentPassword(ctx, id, current)
	if err != nil {
		return PasswordChange{}, err
	}
	hash, err := s.hashPassword(ctx, next)
	if err != nil {
		return PasswordChange{}, err
	}
	return PasswordChange{user: u, newHash: hash}, nil
}

// CommitPasswordChange sets the prepared password and ends every session
// of the user (the session version moves). A password changed since it was
// checked answers as a wrong current password.
func (s *UserStore) CommitPasswordChange(ctx context.Context, p PasswordChange, now time.Time) (User, []Change, error) {
	if p.newHash == "" {
		return User{}, nil, errors.New("change password: not prepared")
	}
	var u User
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		if err := stillChecked(ctx, tx, p.user.ID, p.user.PasswordHash); err != nil {
			return nil, err
		}
		var err error
		if u, err = updateUser(ctx, tx, p.user.ID, `password_hash = ?`, p.newHash); err != nil {
			return nil, err
		}
		err = recordAudit(ctx, tx, userEntry(u, now, ActionPasswordChanged, []FieldChange{{Field: "password", After: "changed"}}))
		if err != nil {
			return nil, err
		}
		return []Change{userSessionChange(u)}, nil
	})
	if err != nil {
		return User{}, nil, err
	}
	return u, changes, nil
}

// ChangePassword sets a user's password after checking the current one,
// and ends every session of theirs (the session version moves).
func (s *UserStore) ChangePassword(ctx context.Context, id, current, next string, now time.Time) (User, []Change, error) {
	p, err := s.PreparePasswordChange(ctx, id, current, next)
	if err != nil {
		return User{}, nil, err
	}
	return s.CommitPasswordChange(ctx, p, now)
}

// EndSessions ends every session of a user (sign out everywhere) by
// moving their session version.
func (s *UserStore) EndSessions(ctx context.Context, id string, now time.Time) (User, []Change, error) {
	var u User
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		var err error
		if u, err = updateUser(ctx, tx, id, ""); err != nil {
			return nil, err
		}
		if err = recordAudit(ctx, tx, userEntry(u, now, ActionSessionsEnded, nil)); err != nil {
			return nil, err
		}
		return []Change{userSessionChange(u)}, nil
	})
	if err != nil {
		return User{}, nil, err
	}
	return u, changes, nil
}

// EmailChange is a change of email whose password was checked
// (UserStore.PrepareEmailChange), ready for CommitEmailChange.
type EmailChange struct {
	user  User // as read when checked
	email string
}

// PrepareEmailChange checks the user's password for a change of email,
// holding no lock: the slow half of ChangeEmail. The password is checked
// before the email is looked up, so that only the user's password tells
// whether an address is taken.
func (s *UserStore) PrepareEmailChange(ctx context.Context, id, password, email string) (EmailChange, error) {
	if err := ValidateEmail(email); err != nil {
		return EmailChange{}, err
	}
	u, err := s.checkCurrentPassword(ctx, id, password)
	if err != nil {
		return EmailChange{}, err
	}
	return EmailChange{user: u, email: NormalizeEmail(email)}, nil
}

// CommitEmailChange sets the prepared email and ends every session of the
// user. The same email changes nothing. A taken email answers
// errs.Conflict; a password changed since it was checked answers as a
// wrong one.
func (s *UserStore) CommitEmailChange(ctx context.Context, c EmailChange, now time.Time) (User, []Change, error) {
	if c.email == "" {
		return User{}, nil, errors.New("change email: not prepared")
	}
	cur := c.user
	if cur.Email == c.email {
		return cur, nil, nil
	}
	var u User
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		if err := stillChecked(ctx, tx, cur.ID, cur.PasswordHash); err != nil {
			return nil, err
		}
		taken, err := exists(ctx, tx, `SELECT 1 FROM users WHERE email = ? AND id != ?`, c.email, cur.ID)
		if err != nil {
			return nil, fmt.Errorf("change email: %w", err)
		}
		if taken {
			return nil, errs.Errorf(errs.Conflict, "a user with this email already exists")
		}
		if u, err = updateUser(ctx, tx, cur.ID, `email = ?`, c.email); err != nil {
			return nil, err
		}
		err = recordAudit(ctx, tx, userEntry(u, now, ActionEmailChanged, []FieldChange{{Field: "email", Before: cur.Email, After: u.Email}}))
		if err != nil {
			return nil, err
		}
		return []Change{userSessionChange(u)}, nil
	})
	if err != nil {
		return User{}, nil, err
	}
	return u, changes, nil
}

// ChangeEmail sets the email a user signs in with, after checking their
// password, and ends every session of theirs. A taken email answers
// errs.Conflict.
func (s *UserStore) ChangeEmail(ctx context.Context, id, password, email string, now time.Time) (User, []Change, error) {
	c, err := s.PrepareEmailChange(ctx, id, password, email)
	if err != nil {
		return User{}, nil, err
	}
	return s.CommitEmailChange(ctx, c, now)
}

// tenantUser reads one of a tenant's users; another tenant's user, or the
// operator, answers errs.NotFound.
func tenantUser(ctx context.Context, tx *sql.Tx, tenantID, id string) (User, error) {
	return queryOne(ctx, tx, scanUser, "member not found", `SELECT `+userColumns+` FROM users WHERE id = ? AND tenant_id = ?`, id, tenantID)
}

// otherOwner reports whether the tenant has an owner besides id.
func otherOwner(ctx context.Context, tx *sql.Tx, tenantID, id string) (bool, error) {
	ok, err := exists(ctx, tx, `SELECT 1 FROM users WHERE tenant_id = ? AND id != ? AND role = ?`, tenantID, id, RoleOwner)
	if err != nil {
		return false, fmt.Errorf("find owners: %w", err)
	}
	return ok, nil
}

// SetRole makes one of a tenant's users an owner or a member and ends
// their sessions, so the new role applies at once. Setting the role a user
// already has changes nothing. The tenant's last owner cannot become a
// member (errs.Conflict): nobody could manage its members any more.
func (s *UserStore) SetRole(ctx context.Context, tenantID, id, role string, now time.Time) (User, []Change, error) {
	if role != RoleOwner && role != RoleMember {
		return User{}, nil, invalid("role", "must be owner or member")
	}
	var u User
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		var err error
		if u, err = tenantUser(ctx, tx, tenantID, id); err != nil || u.Role == role {
			return nil, err
		}
		if u.Role == RoleOwner {
			ok, err := otherOwner(ctx, tx, tenantID, id)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, errs.Errorf(errs.Conflict, "this is the tenant's only owner; make another member an owner first")
			}
		}
		before := u.Role
		if u, err = updateUser(ctx, tx, id, `role = ?`, role); err != nil {
			return nil, err
		}
		err = recordAudit(ctx, tx, userEntry(u, now, ActionRoleChanged, []FieldChange{{Field: "role", Before: before, After: u.Role}}))
		if err != nil {
			return nil, err
		}
		return []Change{userSessionChange(u)}, nil
	})
	if err != nil {
		return User{}, nil, err
	}
	return u, changes, nil
}

// Delete removes one of a tenant's users; their sessions end on every
// server with the announced change, and the webhook endpoints they added
// are paused (webhook_lifecycle.go). The tenant's last owner cannot be
// removed (errs.Conflict).
func (s *UserStore) Delete(ctx context.Context, tenantID, id string, now time.Time) (User, []Change, error) {
	var u User
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		var err error
		if u, err = tenantUser(ctx, tx, tenantID, id); err != nil {
			return nil, err
		}
		if u.Role == RoleOwner {
			ok, err := otherOwner(ctx, tx, tenantID, id)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, errs.Errorf(errs.Conflict, "this is the tenant's only owner and cannot be removed")
			}
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM users WHERE id = ? AND tenant_id = ?`, id, tenantID); err != nil {
			return nil, fmt.Errorf("delete user: %w", err)
		}
		if err := pauseWebhooksOf(ctx, tx, tenantID, id, now); err != nil {
			return nil, err
		}
		err = recordAudit(ctx, tx, userEntry(u, now, ActionRemoved, []FieldChange{{Field: "email", Before: u.Email}, {Field: "role", Before: u.Role}}))
		if err != nil {
			return nil, err
		}
		return []Change{{Kind: ChangeUserDeleted, TenantID: tenantID, ID: id}}, nil
	})
	if err != nil {
		return User{}, nil, err
	}
	return u, changes, nil
}

// userEntry is the audit entry of a change to a user's login: a tenant's
// user's in its tenant's log, the operator's in the platform's.
func userEntry(u User, now time.Time, action string, changes []FieldChange) AuditEntry {
	typ := AuditUser
	if u.Role == RoleOperator {
		typ = AuditOperator
	}
	return AuditEntry{TenantID: u.TenantID, At: normTime(now), Action: action, ObjectType: typ, ObjectID: u.ID, ObjectName: u.Email, Changes: changes}
}

// RecordSignIn stores when a user last signed in. It changes nothing
// servers hold.
func (s *UserStore) RecordSignIn(ctx context.Context, id string, at time.Time) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE users SET last_login_at = ? WHERE id = ?`, toMS(at), id); err != nil {
			return fmt.Errorf("record sign-in: %w", err)
		}
		return nil
	})
}

// Create adds a dashboard login to a tenant with role RoleOwner or
// RoleMember. A taken email answers errs.Conflict. It announces nothing:
// the worker follows it with Announce.
func (s *UserStore) Create(ctx context.Context, tenantID, email, password, role string, now time.Time) (User, error) {
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

// List returns a tenant's dashboard logins, oldest first.
func (s *UserStore) List(ctx context.Context, tenantID string) ([]User, error) {
	out, err := queryAll(ctx, s.db, scanUser,
		`SELECT `+userColumns+` FROM users WHERE tenant_id = ? ORDER BY created_at, id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return out, nil
}

// ByEmail returns the user signing in with email, password hash
// included; errs.NotFound if there is none.
func (s *UserStore) ByEmail(ctx context.Context, email string) (User, error) {
	return userByEmail(ctx, s.db, email)
}

func userByEmail(ctx context.Context, q querier, email string) (User, error) {
	return queryOne(ctx, q, scanUser, "user not found",
		`SELECT `+userColumns+` FROM users WHERE email = ?`, NormalizeEmail(email))
}

// Authenticate returns the user whose email and password these are, or
// errs.Unauthenticated without saying which was wrong. An unknown email
// costs as much time as a wrong password.
func (s *UserStore) Authenticate(ctx context.Context, email, password string) (User, error) {
	wrong := errs.Errorf(errs.Unauthenticated, "wrong email or password")
	if len(email) > maxEmailLength || len(password) > maxPasswordBytes {
		return User{}, wrong // no account has these: nothing to learn from the time
	}
	u, err := s.ByEmail(ctx, email)
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
