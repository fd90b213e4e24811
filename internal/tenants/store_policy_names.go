package tenants

// Reads of a tenant's policies sized for the pages that only name them:
// the overview counts them, analytics lists their names in a menu. Reading
// every policy with its tiers for that cost a tenant with a thousand
// policies about a hundred thousand allocations per page.

import (
	"context"
	"encoding/json"
	"fmt"
)

// MaxPolicyNameIDs bounds the ids of one PolicyStore.Names lookup.
const MaxPolicyNameIDs = 1000

// PolicyName is a policy's id and name.
type PolicyName struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Names returns the ids and names of the tenant's policies by name;
// with ids, only those of them that are the tenant's (another tenant's or
// unknown ids are left out). At most MaxPolicyNameIDs ids.
func (s *PolicyStore) Names(ctx context.Context, tenantID string, ids []string) ([]PolicyName, error) {
	if len(ids) > MaxPolicyNameIDs {
		return nil, invalid("ids", "at most %d ids", MaxPolicyNameIDs)
	}
	query, args := `SELECT id, name FROM policies WHERE tenant_id = ?`, []any{tenantID}
	if len(ids) > 0 {
		raw, err := json.Marshal(ids)
		if err != nil {
			return nil, fmt.Errorf("encode policy ids: %w", err)
		}
		query += ` AND id IN (SELECT value FROM json_each(?))`
		args = append(args, string(raw))
	}
	out, err := queryAll(ctx, s.db, func(sc scanner) (PolicyName, error) {
		var p PolicyName
		err := sc.Scan(&p.ID, &p.Name)
		return p, err
	}, query+` ORDER BY name`, args...)
	if err != nil {
		return nil, fmt.Errorf("name policies: %w", err)
	}
	if out == nil {
		out = []PolicyName{}
	}
	return out, nil
}

// Count counts the tenant's policies.
func (s *PolicyStore) Count(ctx context.Context, tenantID string) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM policies WHERE tenant_id = ?`, tenantID).Scan(&n); err != nil {
		return 0, fmt.Errorf("count policies: %w", err)
	}
	return n, nil
}
