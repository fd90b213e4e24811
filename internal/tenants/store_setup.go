package tenants

// The first-run setup link. While no operator login exists, a server may
// offer the hash of a random token it printed on its start-up banner; the
// store keeps the newest offer only (one setting), so a restart's link
// replaces the previous one. Whoever brings the token chooses the
// operator's email and password: the operator login is created and the
// hash deleted in one transaction, so a link works once, on every server.
// Once an operator login exists, offers are refused and nothing is stored.

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

const settingSetupTokenHash = "setup_token_hash"

// ErrSetupLinkDead is the answer to a setup token that is not the current
// one: used, replaced by a newer start's, or never offered. It does not
// say which.
var ErrSetupLinkDead = errs.Errorf(errs.Unauthenticated, "this setup link was used already or replaced by a newer one")

// SetupStore keeps the first-run setup link (above). Get it from
// Store.Setup.
type SetupStore struct{ *core }

func hasOperator(ctx context.Context, q querier) (bool, error) {
	return exists(ctx, q, `SELECT 1 FROM users WHERE role = ?`, RoleOperator)
}

// Offer stores hash as the setup token's while no operator login
// exists, replacing any earlier offer, and reports whether it did. With an
// operator login it stores nothing and deletes a stale offer.
func (s *SetupStore) Offer(ctx context.Context, hash string) (open bool, err error) {
	if len(hash) != len(HashToken("x")) {
		return false, errs.Errorf(errs.Invalid, "setup offer: not a token hash")
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		op, err := hasOperator(ctx, tx)
		if err != nil {
			return fmt.Errorf("setup offer: %w", err)
		}
		if op {
			_, err := tx.ExecContext(ctx, `DELETE FROM settings WHERE key = ?`, settingSetupTokenHash)
			return err
		}
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO settings (key, value) VALUES (?, ?)
			ON CONFLICT (key) DO UPDATE SET value = excluded.value`, settingSetupTokenHash, hash); err != nil {
			return fmt.Errorf("setup offer: %w", err)
		}
		open = true
		return nil
	})
	return open, err
}

// checkSetup answers nil if token is the current setup token and no
// operator login exists, ErrSetupLinkDead otherwise. The hashes are
// compared in constant time.
func checkSetup(ctx context.Context, q querier, token string) error {
	if token == "" || len(token) > maxSetupToken {
		return ErrSetupLinkDead
	}
	stored, err := setting(ctx, q, settingSetupTokenHash)
	if err != nil {
		return err
	}
	if stored == "" || subtle.ConstantTimeCompare([]byte(stored), []byte(HashToken(token))) != 1 {
		return ErrSetupLinkDead
	}
	op, err := hasOperator(ctx, q)
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	if op {
		return ErrSetupLinkDead
	}
	return nil
}

// maxSetupToken bounds what a setup token may make the store hash.
const maxSetupToken = 256

// Check reports whether token is a live setup link (nil) or not
// (ErrSetupLinkDead), changing nothing.
func (s *SetupStore) Check(ctx context.Context, token string) error {
	return checkSetup(ctx, s.db, token)
}

// SetupClaim is a setup claim checked and its password hashed
// (SetupStore.PrepareClaim), ready for SetupStore.CommitClaim.
type SetupClaim struct {
	token string
	user  User
}

// PrepareClaim checks a claim of the first-run setup link: the token
// first (a dead link costs no password hashing, ErrSetupLinkDead), then
// the email and password by the rules of OperatorStore.Ensure, and hashes the
// password, holding no lock.
func (s *SetupStore) PrepareClaim(ctx context.Context, token, email, password string) (SetupClaim, error) {
	if err := s.Check(ctx, token); err != nil {
		return SetupClaim{}, err
	}
	if err := ValidateEmail(email); err != nil {
		return SetupClaim{}, err
	}
	if err := ValidatePassword(password); err != nil {
		return SetupClaim{}, err
	}
	hash, err := s.hashPassword(ctx, password)
	if err != nil {
		return SetupClaim{}, err
	}
	return SetupClaim{token: token, user: User{Email: NormalizeEmail(email), PasswordHash: hash, Role: RoleOperator, SessionVersion: 1}}, nil
}

// CommitClaim creates the operator login a prepared claim names when
// its token is still the current setup token and no operator login exists
// (ErrSetupLinkDead otherwise), and deletes the token in the same
// transaction, so the link works once. An email that is a tenant user's
// answers errs.Conflict and leaves the link working. The change announces
// the new user's session version.
func (s *SetupStore) CommitClaim(ctx context.Context, c SetupClaim, now time.Time) (User, []Change, error) {
	if c.user.PasswordHash == "" {
		return User{}, nil, errors.New("setup claim: not prepared")
	}
	u := c.user
	u.ID, u.CreatedAt = NewID(IDUser), normTime(now)
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		// Again under the writer: another claim may have won meanwhile.
		if err := checkSetup(ctx, tx, c.token); err != nil {
			return nil, err
		}
		if err := insertUser(ctx, tx, u); err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM settings WHERE key = ?`, settingSetupTokenHash); err != nil {
			return nil, fmt.Errorf("setup: %w", err)
		}
		err := recordAudit(ctx, tx, AuditEntry{At: u.CreatedAt, Action: ActionCreated, ObjectType: AuditOperator,
			ObjectID: u.ID, ObjectName: u.Email, Changes: created([]field{{"login", u.Email}, {"by", "setup link"}})})
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

// Claim is PrepareClaim then CommitClaim.
func (s *SetupStore) Claim(ctx context.Context, token, email, password string, now time.Time) (User, []Change, error) {
	c, err := s.PrepareClaim(ctx, token, email, password)
	if err != nil {
		return User{}, nil, err
	}
	return s.CommitClaim(ctx, c, now)
}

// ActionOpened is the audit action of the operator opening a tenant's
// dashboard (TenantStore.RecordOpened).
const ActionOpened = "opened"
