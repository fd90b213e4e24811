package tenants

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

const consumerKeyColumns = `id, tenant_id, name, tier, prefix, hash, overrides, expires_at, revoked_at, created_at, updated_at, billing_anchor, customer_id`

// KeyStore keeps a tenant's consumer keys: issues, changes and revokes
// them, and reads them whole or by the page (store_key_pages.go). Get it
// from Store.Keys.
type KeyStore struct{ *core }

func scanConsumerKey(sc scanner) (ConsumerKey, error) {
	var k ConsumerKey
	var overrides string
	var expires, revoked sql.NullInt64
	var created, updated int64
	var customer sql.NullString
	if err := sc.Scan(&k.ID, &k.TenantID, &k.Name, &k.Tier, &k.Prefix, &k.Hash, &overrides, &expires, &revoked, &created, &updated, &k.BillingAnchor, &customer); err != nil {
		return ConsumerKey{}, err
	}
	k.CustomerID = customer.String
	if err := json.Unmarshal([]byte(overrides), &k.Overrides); err != nil {
		return ConsumerKey{}, fmt.Errorf("consumer key %s: overrides column: %w", k.ID, err)
	}
	if len(k.Overrides) == 0 {
		k.Overrides = nil
	}
	k.ExpiresAt, k.RevokedAt = fromOptMS(expires), fromOptMS(revoked)
	k.CreatedAt, k.UpdatedAt = fromMS(created), fromMS(updated)
	return k, nil
}

func scanConsumerKeyRecord(sc scanner) (ConsumerKeyRecord, error) {
	k, err := scanConsumerKey(sc)
	return ConsumerKeyRecord{k}, err
}

func consumerKeyChange(k ConsumerKey) Change {
	return Change{Kind: ChangeConsumerKey, TenantID: k.TenantID, ConsumerKey: &ConsumerKeyRecord{k}}
}

func overridesJSON(o map[string]Limits) (string, error) {
	if o == nil {
		o = map[string]Limits{}
	}
	s, err := toJSON(o)
	if err != nil {
		return "", fmt.Errorf("encode overrides: %w", err)
	}
	return s, nil
}

// checkOverridePolicies answers errs.Invalid when an override names no
// policy of the tenant: most likely a typo the client wants to hear about.
func checkOverridePolicies(ctx context.Context, q querier, tenantID string, overrides map[string]Limits) error {
	for _, name := range sortedKeys(overrides) {
		ok, err := exists(ctx, q, `SELECT 1 FROM policies WHERE tenant_id = ? AND name = ?`, tenantID, name)
		if err != nil {
			return fmt.Errorf("check overrides: %w", err)
		}
		if !ok {
			return invalid("overrides."+name, "no policy has this name")
		}
	}
	return nil
}

// Create issues a consumer key in the tenant and returns it with
// its plain text, shown once. Overrides must name the tenant's policies.
func (s *KeyStore) Create(ctx context.Context, tenantID, name, tier string, expiresAt *time.Time, overrides map[string]Limits, now time.Time) (ConsumerKey, string, []Change, error) {
	return s.Issue(ctx, NewKey{TenantID: tenantID, Name: name, Tier: tier, ExpiresAt: expiresAt, Overrides: overrides}, now)
}

// NewKey is what a client sets on a consumer key it creates.
type NewKey struct {
	TenantID, Name, Tier string
	ExpiresAt            *time.Time
	Overrides            map[string]Limits
	BillingAnchor        int
	// CustomerID, when set, must be one of the tenant's customers.
	CustomerID string
}

// Issue is Create with every field a client sets, all checked in the one
// transaction that writes the key: a bad field writes nothing.
func (s *KeyStore) Issue(ctx context.Context, nk NewKey, now time.Time) (ConsumerKey, string, []Change, error) {
	now = normTime(now)
	tenantID := nk.TenantID
	if len(nk.Overrides) == 0 {
		nk.Overrides = nil
	}
	k := ConsumerKey{TenantID: tenantID, Name: nk.Name, Tier: nk.Tier, Overrides: nk.Overrides, ExpiresAt: normOptTime(nk.ExpiresAt),
		BillingAnchor: nk.BillingAnchor, CustomerID: nk.CustomerID, CreatedAt: now, UpdatedAt: now}
	if err := k.Validate(now); err != nil {
		return ConsumerKey{}, "", nil, err
	}
	if err := ValidateBillingAnchor("billing_anchor", k.BillingAnchor); err != nil {
		return ConsumerKey{}, "", nil, err
	}
	plain, prefix, hash, err := GenerateKey(KindConsumerKey)
	if err != nil {
		return ConsumerKey{}, "", nil, err
	}
	k.ID, k.Prefix, k.Hash = NewID(IDConsumerKey), prefix, hash
	ov, err := overridesJSON(k.Overrides)
	if err != nil {
		return ConsumerKey{}, "", nil, err
	}
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		if err := requireTenant(ctx, tx, tenantID); err != nil {
			return nil, err
		}
		if err := s.checkRoom(ctx, tx, tenantID, CapConsumerKeys); err != nil {
			return nil, err
		}
		if err := checkOverridePolicies(ctx, tx, tenantID, k.Overrides); err != nil {
			return nil, err
		}
		if err := requireCustomer(ctx, tx, tenantID, k.CustomerID); err != nil {
			return nil, err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO consumer_keys (`+consumerKeyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			k.ID, k.TenantID, k.Name, k.Tier, k.Prefix, k.Hash, ov, optMS(k.ExpiresAt), optMS(k.RevokedAt), toMS(k.CreatedAt), toMS(k.UpdatedAt), k.BillingAnchor, optString(k.CustomerID))
		if err != nil {
			return nil, fmt.Errorf("create consumer key: %w", err)
		}
		err = recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: now, Action: ActionCreated, ObjectType: AuditConsumerKey,
			ObjectID: k.ID, ObjectName: consumerKeyName(k), Changes: created(consumerKeyFields(k))})
		if err != nil {
			return nil, err
		}
		return []Change{consumerKeyChange(k)}, nil
	})
	if err != nil {
		return ConsumerKey{}, "", nil, err
	}
	return k, plain, changes, nil
}

// Get returns one of the tenant's consumer keys.
func (s *KeyStore) Get(ctx context.Context, tenantID, id string) (ConsumerKey, error) {
	return getConsumerKey(ctx, s.db, tenantID, id)
}

func getConsumerKey(ctx context.Context, q querier, tenantID, id string) (ConsumerKey, error) {
	return queryOne(ctx, q, scanConsumerKey, "consumer key not found",
		`SELECT `+consumerKeyColumns+` FROM consumer_keys WHERE id = ? AND tenant_id = ?`, id, tenantID)
}

// List returns the tenant's consumer keys, oldest first,
// revoked and expired ones included.
func (s *KeyStore) List(ctx context.Context, tenantID string) ([]ConsumerKey, error) {
	out, err := queryAll(ctx, s.db, scanConsumerKey,
		`SELECT `+consumerKeyColumns+` FROM consumer_keys WHERE tenant_id = ? ORDER BY created_at, id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list consumer keys: %w", err)
	}
	return out, nil
}

// Update applies a patch to one of the tenant's consumer keys.
// An empty patch writes nothing and returns no changes.
func (s *KeyStore) Update(ctx context.Context, tenantID, id string, patch KeyPatch, now time.Time) (ConsumerKey, []Change, error) {
	now = normTime(now)
	if err := patch.Validate(now); err != nil {
		return ConsumerKey{}, nil, err
	}
	var k ConsumerKey
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		var err error
		if k, err = getConsumerKey(ctx, tx, tenantID, id); err != nil || patch.Empty() {
			return nil, err
		}
		before := consumerKeyFields(k)
		if patch.Name != nil {
			k.Name = *patch.Name
		}
		if patch.Tier != nil {
			k.Tier = *patch.Tier
		}
		if patch.ClearExpiry {
			k.ExpiresAt = nil
		} else if patch.ExpiresAt != nil {
			k.ExpiresAt = normOptTime(patch.ExpiresAt)
		}
		if patch.BillingAnchor != nil {
			k.BillingAnchor = *patch.BillingAnchor
		}
		if patch.CustomerID != nil {
			if err := requireCustomer(ctx, tx, tenantID, *patch.CustomerID); err != nil {
				return nil, err
			}
			k.CustomerID = *patch.CustomerID
		}
		if patch.Overrides != nil {
			k.Overrides = *patch.Overrides
			if len(k.Overrides) == 0 {
				k.Overrides = nil
			}
			if err := checkOverridePolicies(ctx, tx, tenantID, k.Overrides); err != nil {
				return nil, err
			}
		}
		k.UpdatedAt = now
		ov, err := overridesJSON(k.Overrides)
		if err != nil {
			return nil, err
		}
		_, err = tx.ExecContext(ctx, `
			UPDATE consumer_keys SET name = ?, tier = ?, overrides = ?, expires_at = ?, billing_anchor = ?, customer_id = ?, updated_at = ?
			WHERE id = ? AND tenant_id = ?`,
			k.Name, k.Tier, ov, optMS(k.ExpiresAt), k.BillingAnchor, optString(k.CustomerID), toMS(now), id, tenantID)
		if err != nil {
			return nil, fmt.Errorf("update consumer key: %w", err)
		}
		err = recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: now, Action: ActionUpdated, ObjectType: AuditConsumerKey,
			ObjectID: k.ID, ObjectName: consumerKeyName(k), Changes: diffFields(before, consumerKeyFields(k))})
		if err != nil {
			return nil, err
		}
		return []Change{consumerKeyChange(k)}, nil
	})
	if err != nil {
		return ConsumerKey{}, nil, err
	}
	return k, changes, nil
}

// Revoke revokes one of the tenant's consumer keys. Revoking a
// revoked key changes nothing and returns no changes.
func (s *KeyStore) Revoke(ctx context.Context, tenantID, id string, now time.Time) (ConsumerKey, []Change, error) {
	now = normTime(now)
	var k ConsumerKey
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		var err error
		if k, err = getConsumerKey(ctx, tx, tenantID, id); err != nil || k.RevokedAt != nil {
			return nil, err
		}
		k.RevokedAt, k.UpdatedAt = &now, now
		if _, err := tx.ExecContext(ctx, `UPDATE consumer_keys SET revoked_at = ?, updated_at = ? WHERE id = ? AND tenant_id = ?`,
			toMS(now), toMS(now), id, tenantID); err != nil {
			return nil, fmt.Errorf("revoke consumer key: %w", err)
		}
		err = recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: now, Action: ActionRevoked, ObjectType: AuditConsumerKey,
			ObjectID: k.ID, ObjectName: consumerKeyName(k), Changes: []FieldChange{{Field: "status", Before: "active", After: "revoked"}}})
		if err != nil {
			return nil, err
		}
		return []Change{consumerKeyChange(k)}, nil
	})
	if err != nil {
		return ConsumerKey{}, nil, err
	}
	return k, changes, nil
}
