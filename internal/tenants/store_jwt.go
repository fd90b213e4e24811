package tenants

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// JWTIssuerStore keeps a tenant's JWT issuers. Get it from
// Store.JWTIssuers.
type JWTIssuerStore struct{ *core }

const jwtIssuerColumns = `id, tenant_id, issuer, audiences, jwks_url, jwks, algorithms, claims, created_at, updated_at`

func scanJWTIssuer(sc scanner) (JWTIssuer, error) {
	var iss JWTIssuer
	var audiences, jwks, algorithms, claims string
	var created, updated int64
	if err := sc.Scan(&iss.ID, &iss.TenantID, &iss.Issuer, &audiences, &iss.JWKSURL, &jwks, &algorithms, &claims, &created, &updated); err != nil {
		return JWTIssuer{}, err
	}
	if jwks != "" {
		iss.JWKS = json.RawMessage(jwks)
	}
	for _, c := range []struct {
		src string
		dst any
	}{{audiences, &iss.Audiences}, {algorithms, &iss.Algorithms}, {claims, &iss.Claims}} {
		if err := json.Unmarshal([]byte(c.src), c.dst); err != nil {
			return JWTIssuer{}, fmt.Errorf("jwt issuer %s: %w", iss.ID, err)
		}
	}
	iss.CreatedAt, iss.UpdatedAt = fromMS(created), fromMS(updated)
	return iss, nil
}

// jwtIssuerArgs are iss's columns after id and tenant_id, in order.
func jwtIssuerArgs(iss JWTIssuer) []any {
	audiences, _ := json.Marshal(iss.Audiences)
	algorithms, _ := json.Marshal(iss.Algorithms)
	claims, _ := json.Marshal(iss.Claims)
	return []any{iss.Issuer, string(audiences), iss.JWKSURL, string(iss.JWKS), string(algorithms), string(claims), toMS(iss.CreatedAt), toMS(iss.UpdatedAt)}
}

// Create adds an issuer to a tenant. Every field is validated; an "iss"
// the tenant already has is refused, naming the field issuer.
func (s *JWTIssuerStore) Create(ctx context.Context, tenantID string, b JWTIssuerBody, now time.Time) (JWTIssuer, []Change, error) {
	now = normTime(now)
	iss := JWTIssuer{TenantID: tenantID}
	if err := b.Apply(&iss); err != nil {
		return JWTIssuer{}, nil, err
	}
	iss.ID, iss.CreatedAt, iss.UpdatedAt = NewID(IDJWTIssuer), now, now
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		if err := requireTenant(ctx, tx, tenantID); err != nil {
			return nil, err
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM jwt_issuers WHERE tenant_id = ?`, tenantID).Scan(&n); err != nil {
			return nil, fmt.Errorf("count jwt issuers: %w", err)
		}
		if n >= MaxJWTIssuers {
			return nil, errs.Errorf(errs.Conflict, "jwt issuers: this tenant has %d issuers, the most it may have; delete one first", MaxJWTIssuers)
		}
		if err := s.checkUnique(ctx, tx, iss); err != nil {
			return nil, err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO jwt_issuers (`+jwtIssuerColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			append([]any{iss.ID, iss.TenantID}, jwtIssuerArgs(iss)...)...)
		if err != nil {
			return nil, fmt.Errorf("create jwt issuer: %w", err)
		}
		err = recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: now, Action: ActionCreated, ObjectType: AuditJWTIssuer,
			ObjectID: iss.ID, ObjectName: iss.Issuer, Changes: created(jwtIssuerFields(iss))})
		if err != nil {
			return nil, err
		}
		return []Change{{Kind: ChangeJWTIssuer, TenantID: tenantID, JWTIssuer: &iss}}, nil
	})
	if err != nil {
		return JWTIssuer{}, nil, err
	}
	return iss, changes, nil
}

// checkUnique refuses a second issuer of the tenant with the same "iss":
// a token's "iss" selects one issuer.
func (s *JWTIssuerStore) checkUnique(ctx context.Context, tx *sql.Tx, iss JWTIssuer) error {
	var other string
	err := tx.QueryRowContext(ctx, `SELECT id FROM jwt_issuers WHERE tenant_id = ? AND issuer = ? AND id <> ?`, iss.TenantID, iss.Issuer, iss.ID).Scan(&other)
	switch {
	case err == sql.ErrNoRows:
		return nil
	case err != nil:
		return fmt.Errorf("read jwt issuers: %w", err)
	}
	return invalid("issuer", "this tenant already has an issuer %q (%s)", iss.Issuer, other)
}

// Update patches one issuer of a tenant; another tenant's answers
// errs.NotFound.
func (s *JWTIssuerStore) Update(ctx context.Context, tenantID, id string, b JWTIssuerBody, now time.Time) (JWTIssuer, []Change, error) {
	now = normTime(now)
	var out JWTIssuer
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		old, err := s.get(ctx, tx, tenantID, id)
		if err != nil {
			return nil, err
		}
		iss := old
		if err := b.Apply(&iss); err != nil {
			return nil, err
		}
		iss.UpdatedAt = now
		if err := s.checkUnique(ctx, tx, iss); err != nil {
			return nil, err
		}
		_, err = tx.ExecContext(ctx, `UPDATE jwt_issuers SET issuer = ?, audiences = ?, jwks_url = ?, jwks = ?, algorithms = ?, claims = ?, created_at = ?, updated_at = ? WHERE id = ?`,
			append(jwtIssuerArgs(iss), iss.ID)...)
		if err != nil {
			return nil, fmt.Errorf("update jwt issuer: %w", err)
		}
		err = recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: now, Action: ActionUpdated, ObjectType: AuditJWTIssuer,
			ObjectID: iss.ID, ObjectName: iss.Issuer, Changes: diffFields(jwtIssuerFields(old), jwtIssuerFields(iss))})
		if err != nil {
			return nil, err
		}
		out = iss
		return []Change{{Kind: ChangeJWTIssuer, TenantID: tenantID, JWTIssuer: &iss}}, nil
	})
	if err != nil {
		return JWTIssuer{}, nil, err
	}
	return out, changes, nil
}

// Get returns one issuer of a tenant.
func (s *JWTIssuerStore) Get(ctx context.Context, tenantID, id string) (JWTIssuer, error) {
	return s.get(ctx, s.db, tenantID, id)
}

func (s *JWTIssuerStore) get(ctx context.Context, q querier, tenantID, id string) (JWTIssuer, error) {
	return queryOne(ctx, q, scanJWTIssuer, "jwt issuer not found",
		`SELECT `+jwtIssuerColumns+` FROM jwt_issuers WHERE id = ? AND tenant_id = ?`, id, tenantID)
}

// List returns a tenant's issuers, oldest first.
func (s *JWTIssuerStore) List(ctx context.Context, tenantID string) ([]JWTIssuer, error) {
	out, err := queryAll(ctx, s.db, scanJWTIssuer, `SELECT `+jwtIssuerColumns+` FROM jwt_issuers WHERE tenant_id = ? ORDER BY created_at, id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list jwt issuers: %w", err)
	}
	return out, nil
}

// Delete removes one issuer of a tenant: its tokens answer invalid_token
// from then on.
func (s *JWTIssuerStore) Delete(ctx context.Context, tenantID, id string, now time.Time) ([]Change, error) {
	return s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		iss, err := s.get(ctx, tx, tenantID, id)
		if err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM jwt_issuers WHERE id = ?`, id); err != nil {
			return nil, fmt.Errorf("delete jwt issuer: %w", err)
		}
		err = recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: normTime(now), Action: ActionDeleted, ObjectType: AuditJWTIssuer,
			ObjectID: iss.ID, ObjectName: iss.Issuer, Changes: diffFields(jwtIssuerFields(iss), nil)})
		if err != nil {
			return nil, err
		}
		return []Change{{Kind: ChangeJWTIssuerDeleted, TenantID: tenantID, ID: id}}, nil
	})
}

func jwtIssuerFields(iss JWTIssuer) []field {
	keys := iss.JWKSURL
	if keys == "" {
		keys = "inline key set"
	}
	return []field{
		{"issuer", iss.Issuer},
		{"audiences", strings.Join(iss.Audiences, ", ")},
		{"keys", keys},
		{"algorithms", strings.Join(iss.Algorithms, ", ")},
		{"subject claim", iss.Claims.Subject},
		{"tier claim", iss.Claims.Tier},
	}
}
