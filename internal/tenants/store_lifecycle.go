package tenants

// A tenant's lifecycle after creation: the operator suspends, resumes or
// deletes it.
//
// Suspending keeps every row and is undone by resuming. It is announced as
// a ChangeTenant carrying SuspendedAt, on which every server refuses the
// tenant's service keys (403), and it moves the session version of each of
// the tenant's users, so their dashboard sessions end on every server in
// the same config version. Sign-in is refused while the tenant stays
// suspended (the worker says so with the user record). Resuming clears
// SuspendedAt; the users sign in again.
//
// Deleting removes the tenant and, by the schema's ON DELETE CASCADE, its
// users, service and consumer keys, policies and blocks, and in the same
// transaction its persisted buckets and analytics. It is announced as one
// ChangeUserDeleted per user (their sessions end) and a
// ChangeTenantDeleted, on which servers drop everything of the tenant.

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Suspend suspends a tenant. Suspending a suspended tenant changes
// nothing and returns no changes.
func (s *TenantStore) Suspend(ctx context.Context, id string, now time.Time) (Tenant, []Change, error) {
	now = normTime(now)
	var t Tenant
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		var err error
		if t, err = queryOne(ctx, tx, scanTenant, "tenant not found", `SELECT `+tenantColumns+` FROM tenants WHERE id = ?`, id); err != nil {
			return nil, err
		}
		if t.Suspended() {
			return nil, nil
		}
		t.SuspendedAt = &now
		if _, err := tx.ExecContext(ctx, `UPDATE tenants SET suspended_at = ? WHERE id = ?`, toMS(now), id); err != nil {
			return nil, fmt.Errorf("suspend tenant: %w", err)
		}
		// Every session of the tenant's users ends with this version.
		users, err := queryAll(ctx, tx, scanUser, `
			UPDATE users SET session_version = session_version + 1 WHERE tenant_id = ?
			RETURNING `+userColumns, id)
		if err != nil {
			return nil, fmt.Errorf("suspend tenant: end sessions: %w", err)
		}
		cs := []Change{tenantChange(t)}
		for _, u := range users {
			cs = append(cs, userSessionChange(u))
		}
		return cs, nil
	})
	if err != nil {
		return Tenant{}, nil, err
	}
	return t, changes, nil
}

// Resume lifts a tenant's suspension. Resuming an active tenant
// changes nothing and returns no changes.
func (s *TenantStore) Resume(ctx context.Context, id string) (Tenant, []Change, error) {
	var t Tenant
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		var err error
		if t, err = queryOne(ctx, tx, scanTenant, "tenant not found", `SELECT `+tenantColumns+` FROM tenants WHERE id = ?`, id); err != nil {
			return nil, err
		}
		if !t.Suspended() {
			return nil, nil
		}
		t.SuspendedAt = nil
		if _, err := tx.ExecContext(ctx, `UPDATE tenants SET suspended_at = NULL WHERE id = ?`, id); err != nil {
			return nil, fmt.Errorf("resume tenant: %w", err)
		}
		return []Change{tenantChange(t)}, nil
	})
	if err != nil {
		return Tenant{}, nil, err
	}
	return t, changes, nil
}

// Delete deletes a tenant and everything it owns: configuration,
// users, persisted buckets and analytics. An unknown id answers
// errs.NotFound. Bucket states and counters still in flight from servers
// when it commits may land afterwards; PurgeData removes them.
func (s *TenantStore) Delete(ctx context.Context, id string) (Tenant, []Change, error) {
	var t Tenant
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		var err error
		if t, err = queryOne(ctx, tx, scanTenant, "tenant not found", `SELECT `+tenantColumns+` FROM tenants WHERE id = ?`, id); err != nil {
			return nil, err
		}
		userIDs, err := queryAll(ctx, tx, func(sc scanner) (string, error) {
			var uid string
			return uid, sc.Scan(&uid)
		}, `SELECT id FROM users WHERE tenant_id = ? ORDER BY id`, id)
		if err != nil {
			return nil, fmt.Errorf("delete tenant: %w", err)
		}
		// Users, keys, policies and blocks go with the row (ON DELETE CASCADE).
		if _, err := tx.ExecContext(ctx, `DELETE FROM tenants WHERE id = ?`, id); err != nil {
			return nil, fmt.Errorf("delete tenant: %w", err)
		}
		if err := purgeTenantData(ctx, tx, id); err != nil {
			return nil, err
		}
		var cs []Change
		for _, uid := range userIDs {
			cs = append(cs, Change{Kind: ChangeUserDeleted, TenantID: id, ID: uid})
		}
		return append(cs, Change{Kind: ChangeTenantDeleted, TenantID: id, ID: id}), nil
	})
	if err != nil {
		return Tenant{}, nil, err
	}
	return t, changes, nil
}

// PurgeData deletes the persisted buckets and analytics of a tenant
// that no longer exists: the worker runs it again a little after a delete,
// for the states and counters servers had in flight. A tenant that exists
// is left alone.
func (s *TenantStore) PurgeData(ctx context.Context, id string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		ok, err := exists(ctx, tx, `SELECT 1 FROM tenants WHERE id = ?`, id)
		if err != nil || ok {
			return err
		}
		return purgeTenantData(ctx, tx, id)
	})
}

// BucketPartitions is bus.Partitions, the number of bucket-key partitions
// (this package cannot import bus; a bus test keeps the two equal).
const BucketPartitions = 64

// purgeTenantData deletes a tenant's buckets, counters, rollups and daily
// usage. Bucket keys start with "<tenant id>/" and the table is clustered
// on (part, key), so each partition's rows of the tenant are one range: no
// full scan.
func purgeTenantData(ctx context.Context, tx *sql.Tx, id string) error {
	lo, hi := id+"/", id+"0" // '0' follows '/'
	for part := range BucketPartitions {
		if _, err := tx.ExecContext(ctx, `DELETE FROM buckets WHERE part = ? AND key >= ? AND key < ?`, part, lo, hi); err != nil {
			return fmt.Errorf("delete tenant buckets: %w", err)
		}
		// And the states staged for the partition, not yet merged into
		// buckets (one range per run).
		if _, err := tx.ExecContext(ctx, `DELETE FROM bucket_runs WHERE run IN (SELECT run FROM bucket_run_ids) AND part = ? AND key >= ? AND key < ?`, part, lo, hi); err != nil {
			return fmt.Errorf("delete tenant buckets: %w", err)
		}
	}
	for _, q := range []string{`DELETE FROM counters WHERE tenant_id = ?`, `DELETE FROM counter_rollups WHERE tenant_id = ?`, `DELETE FROM usage_daily WHERE tenant_id = ?`} {
		if _, err := tx.ExecContext(ctx, q, id); err != nil {
			return fmt.Errorf("delete tenant analytics: %w", err)
		}
	}
	return nil
}
