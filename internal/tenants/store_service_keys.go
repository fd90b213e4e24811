package tenants

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// ServiceKeyStore issues and revokes tenants' service keys and records
// when servers last saw them. Get it from Store.ServiceKeys.
type ServiceKeyStore struct{ *core }

const serviceKeyColumns = `id, tenant_id, prefix, hash, created_at, revoked_at, last_used_at`

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

// KeyUse is the last minute a server saw a service key.
type KeyUse struct {
	ID string    `json:"id"`
	At time.Time `json:"at"`
}

// Create issues another service key for a tenant (for rotation)
// and returns its plain text once.
func (s *ServiceKeyStore) Create(ctx context.Context, tenantID string, now time.Time) (ServiceKey, string, []Change, error) {
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

// List returns a tenant's service keys, oldest first, revoked
// ones included.
func (s *ServiceKeyStore) List(ctx context.Context, tenantID string) ([]ServiceKey, error) {
	out, err := queryAll(ctx, s.db, scanServiceKey,
		`SELECT `+serviceKeyColumns+` FROM service_keys WHERE tenant_id = ? ORDER BY created_at, id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list service keys: %w", err)
	}
	return out, nil
}

// Revoke revokes one of a tenant's service keys. Revoking a
// revoked key changes nothing and returns no changes. The tenant's last
// active key is refused with errs.Conflict: a tenant without one could not
// call the API again, so a roll creates the new key first.
func (s *ServiceKeyStore) Revoke(ctx context.Context, tenantID, id string, now time.Time) (ServiceKey, []Change, error) {
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

// RecordUse stores the last-use times servers report, keeping
// the later of the stored and the reported one (reports from several
// servers arrive in any order). Unknown ids are ignored. It changes nothing
// servers hold.
func (s *ServiceKeyStore) RecordUse(ctx context.Context, uses []KeyUse) error {
	if len(uses) == 0 {
		return nil
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, `UPDATE service_keys SET last_used_at = MAX(COALESCE(last_used_at, 0), ?) WHERE id = ?`)
		if err != nil {
			return fmt.Errorf("record service key use: %w", err)
		}
		defer st.Close()
		for _, u := range uses {
			if _, err := st.ExecContext(ctx, toMS(u.At), u.ID); err != nil {
				return fmt.Errorf("record service key use: %w", err)
			}
		}
		return nil
	})
}
