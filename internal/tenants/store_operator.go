package tenants

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// OperatorStore keeps the platform operator's login and token as the
// worker is configured at start. Get it from Store.Operator.
type OperatorStore struct{ *core }

// Ensure makes the operator login the one configured at start:
// it creates the login with this email, or sets its password if it
// changed, and deletes every other operator login, so changing
// SLUICE_OPERATOR_EMAIL retires the previous address. The changes to
// announce say so: a retired login is a deleted user (every server ends its
// sessions), and a new password moves the operator's session version (its
// older sessions end). A start that changes nothing returns no change. An
// email that belongs to a tenant's user answers errs.Conflict and changes
// nothing.
func (s *OperatorStore) Ensure(ctx context.Context, email, password string, now time.Time) (User, []Change, error) {
	if err := ValidateEmail(email); err != nil {
		return User{}, nil, err
	}
	if err := ValidatePassword(password); err != nil {
		return User{}, nil, err
	}
	email = NormalizeEmail(email)
	u, err := userByEmail(ctx, s.db, email)
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

// TokenHash returns the stored hash of the operator token, or ""
// if none is set.
func (s *OperatorStore) TokenHash(ctx context.Context) (string, error) {
	return setting(ctx, s.db, settingOperatorTokenHash)
}

// SetTokenHash stores the operator token's hash. With onlyIfAbsent
// it does nothing when a hash is already stored (a first start generates a
// token; later starts keep it). Storing the hash already stored is not a
// change either. set reports whether the hash was written, in which case
// change is the one to announce.
func (s *OperatorStore) SetTokenHash(ctx context.Context, hash string, onlyIfAbsent bool, now time.Time) (set bool, change Change, err error) {
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
