package tenants

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

const policyColumns = `id, tenant_id, name, method, path, query, consistency, shadow, tiers, unlisted_tiers, descriptor, created_at, updated_at`

// PolicyStore keeps a tenant's policies, answers their names and counts
// (store_policy_names.go), and announces the bucket resets that name
// them. Get it from Store.Policies.
type PolicyStore struct{ *core }

func scanPolicy(sc scanner) (Policy, error) {
	var p Policy
	var query, tiers, descriptor string
	var created, updated int64
	if err := sc.Scan(&p.ID, &p.TenantID, &p.Name, &p.Method, &p.Path, &query, &p.Consistency, &p.Shadow, &tiers, &p.UnlistedTiers, &descriptor, &created, &updated); err != nil {
		return Policy{}, err
	}
	if descriptor != "" {
		p.Descriptor = new(DescriptorRule)
		if err := json.Unmarshal([]byte(descriptor), p.Descriptor); err != nil {
			return Policy{}, fmt.Errorf("policy %s: descriptor column: %w", p.ID, err)
		}
	}
	if err := json.Unmarshal([]byte(query), &p.Query); err != nil {
		return Policy{}, fmt.Errorf("policy %s: query column: %w", p.ID, err)
	}
	if len(p.Query) == 0 {
		p.Query = nil
	}
	if err := json.Unmarshal([]byte(tiers), &p.Tiers); err != nil {
		return Policy{}, fmt.Errorf("policy %s: tiers column: %w", p.ID, err)
	}
	p.CreatedAt = fromMS(created)
	p.UpdatedAt = fromMS(updated)
	return p, nil
}

func policyChange(p Policy) Change {
	return Change{Kind: ChangePolicy, TenantID: p.TenantID, Policy: &p}
}

// checkPolicyName answers errs.Conflict when another policy of the tenant
// (any but exceptID) has this name.
func checkPolicyName(ctx context.Context, q querier, tenantID, name, exceptID string) error {
	taken, err := exists(ctx, q, `SELECT 1 FROM policies WHERE tenant_id = ? AND name = ? AND id != ?`, tenantID, name, exceptID)
	if err != nil {
		return fmt.Errorf("check policy name: %w", err)
	}
	if taken {
		return errs.Errorf(errs.Conflict, "a policy named %q already exists", name)
	}
	return nil
}

// Create validates p, fills its defaults, and stores it as a new
// policy of the tenant; p's ID, TenantID and times are ignored. A name the
// tenant already uses answers errs.Conflict.
func (s *PolicyStore) Create(ctx context.Context, tenantID string, p Policy, now time.Time) (Policy, []Change, error) {
	p.Normalize()
	if err := p.Validate(); err != nil {
		return Policy{}, nil, err
	}
	now = normTime(now)
	p.ID, p.TenantID, p.CreatedAt, p.UpdatedAt = NewID(IDPolicy), tenantID, now, now
	query, tiers, descriptor, err := policyJSON(p)
	if err != nil {
		return Policy{}, nil, err
	}
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		if err := requireTenant(ctx, tx, tenantID); err != nil {
			return nil, err
		}
		if err := s.checkRoom(ctx, tx, tenantID, CapPolicies); err != nil {
			return nil, err
		}
		if err := s.checkPolicyLimits(p); err != nil {
			return nil, err
		}
		if err := checkPolicyName(ctx, tx, tenantID, p.Name, ""); err != nil {
			return nil, err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO policies (`+policyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			p.ID, p.TenantID, p.Name, p.Method, p.Path, query, p.Consistency, p.Shadow, tiers, p.UnlistedTiers, descriptor, toMS(p.CreatedAt), toMS(p.UpdatedAt))
		if err != nil {
			return nil, fmt.Errorf("create policy: %w", err)
		}
		err = recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: now, Action: ActionCreated,
			ObjectType: AuditPolicy, ObjectID: p.ID, ObjectName: p.Name, Changes: created(policyFields(p))})
		if err != nil {
			return nil, err
		}
		return []Change{policyChange(p)}, nil
	})
	if err != nil {
		return Policy{}, nil, err
	}
	return p, changes, nil
}

func policyJSON(p Policy) (query, tiers, descriptor string, err error) {
	q := p.Query
	if q == nil {
		q = map[string]string{}
	}
	if query, err = toJSON(q); err != nil {
		return "", "", "", fmt.Errorf("encode policy query: %w", err)
	}
	ts := p.Tiers
	if ts == nil {
		ts = map[string]Limits{}
	}
	if tiers, err = toJSON(ts); err != nil {
		return "", "", "", fmt.Errorf("encode policy tiers: %w", err)
	}
	if p.Descriptor != nil {
		if descriptor, err = toJSON(p.Descriptor); err != nil {
			return "", "", "", fmt.Errorf("encode policy descriptor: %w", err)
		}
	}
	return query, tiers, descriptor, nil
}

// Get returns one of the tenant's policies.
func (s *PolicyStore) Get(ctx context.Context, tenantID, id string) (Policy, error) {
	return getPolicy(ctx, s.db, tenantID, id)
}

func getPolicy(ctx context.Context, q querier, tenantID, id string) (Policy, error) {
	return queryOne(ctx, q, scanPolicy, "policy not found",
		`SELECT `+policyColumns+` FROM policies WHERE id = ? AND tenant_id = ?`, id, tenantID)
}

// List returns the tenant's policies by name.
func (s *PolicyStore) List(ctx context.Context, tenantID string) ([]Policy, error) {
	out, err := queryAll(ctx, s.db, scanPolicy,
		`SELECT `+policyColumns+` FROM policies WHERE tenant_id = ? ORDER BY name`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list policies: %w", err)
	}
	return out, nil
}

// Update replaces every field a client sets on the tenant's policy
// id with p's, keeping its ID and CreatedAt.
func (s *PolicyStore) Update(ctx context.Context, tenantID, id string, p Policy, now time.Time) (Policy, []Change, error) {
	p.Normalize()
	if err := p.Validate(); err != nil {
		return Policy{}, nil, err
	}
	now = normTime(now)
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		cur, err := getPolicy(ctx, tx, tenantID, id)
		if err != nil {
			return nil, err
		}
		if err := s.checkPolicyLimits(p); err != nil {
			return nil, err
		}
		if err := checkPolicyName(ctx, tx, tenantID, p.Name, id); err != nil {
			return nil, err
		}
		p.ID, p.TenantID, p.CreatedAt, p.UpdatedAt = cur.ID, cur.TenantID, cur.CreatedAt, now
		query, tiers, descriptor, err := policyJSON(p)
		if err != nil {
			return nil, err
		}
		_, err = tx.ExecContext(ctx, `
			UPDATE policies SET name = ?, method = ?, path = ?, query = ?, consistency = ?, shadow = ?, tiers = ?, unlisted_tiers = ?, descriptor = ?, updated_at = ?
			WHERE id = ? AND tenant_id = ?`,
			p.Name, p.Method, p.Path, query, p.Consistency, p.Shadow, tiers, p.UnlistedTiers, descriptor, toMS(now), id, tenantID)
		if err != nil {
			return nil, fmt.Errorf("update policy: %w", err)
		}
		err = recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: now, Action: ActionUpdated,
			ObjectType: AuditPolicy, ObjectID: p.ID, ObjectName: p.Name, Changes: diffFields(policyFields(cur), policyFields(p))})
		if err != nil {
			return nil, err
		}
		return []Change{policyChange(p)}, nil
	})
	if err != nil {
		return Policy{}, nil, err
	}
	return p, changes, nil
}

// Delete deletes one of the tenant's policies. Consumer key
// overrides naming it stay, inert, and apply again if a policy of that
// name is created. The audit entry keeps the deleted policy's fields.
func (s *PolicyStore) Delete(ctx context.Context, tenantID, id string, now time.Time) ([]Change, error) {
	return s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		cur, err := getPolicy(ctx, tx, tenantID, id)
		if err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM policies WHERE id = ? AND tenant_id = ?`, id, tenantID); err != nil {
			return nil, fmt.Errorf("delete policy: %w", err)
		}
		err = recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: normTime(now), Action: ActionDeleted,
			ObjectType: AuditPolicy, ObjectID: id, ObjectName: cur.Name, Changes: diffFields(policyFields(cur), nil)})
		if err != nil {
			return nil, err
		}
		return []Change{{Kind: ChangePolicyDeleted, TenantID: tenantID, ID: id}}, nil
	})
}

// ResetBuckets announces that one identity's buckets for the tenant's
// policy (by name, as POST /v1/buckets/reset names it) are to be refilled.
// Nothing here is stored but the version; the servers' caches act on the
// change and their next state flush replaces the persisted buckets.
func (s *PolicyStore) ResetBuckets(ctx context.Context, tenantID, policyName string, id Identity, now time.Time) ([]Change, error) {
	if policyName == "" {
		return nil, invalid("policy", "required")
	}
	if err := ValidateIdentity("identity", id); err != nil {
		return nil, err
	}
	id = NormalizeIdentity(id)
	return s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		var policyID string
		err := tx.QueryRowContext(ctx, `SELECT id FROM policies WHERE tenant_id = ? AND name = ?`, tenantID, policyName).Scan(&policyID)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, errs.Errorf(errs.NotFound, "policy not found")
		}
		if err != nil {
			return nil, fmt.Errorf("reset buckets: %w", err)
		}
		err = recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: normTime(now), Action: ActionReset,
			ObjectType: AuditBucket, ObjectID: policyID, ObjectName: policyName,
			Changes: []FieldChange{{Field: "caller", After: identityText(id)}}})
		if err != nil {
			return nil, err
		}
		return []Change{{Kind: ChangeBucketReset, TenantID: tenantID,
			BucketReset: &BucketReset{PolicyID: policyID, Policy: policyName, Identity: id}}}, nil
	})
}
