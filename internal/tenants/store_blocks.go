package tenants

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// Blocks are the operator's; their methods are not tenant-scoped.

const blockColumns = `id, tenant_id, identity_kind, identity_id, reason, expires_at, created_at`

func scanBlock(sc scanner) (Block, error) {
	var b Block
	var expires sql.NullInt64
	var created int64
	if err := sc.Scan(&b.ID, &b.TenantID, &b.Identity.Kind, &b.Identity.ID, &b.Reason, &expires, &created); err != nil {
		return Block{}, err
	}
	b.ExpiresAt, b.CreatedAt = fromOptMS(expires), fromMS(created)
	return b, nil
}

// CreateBlock blocks an identity in a tenant; b's ID and CreatedAt are
// ignored. A missing tenant answers errs.NotFound.
func (s *Store) CreateBlock(ctx context.Context, b Block, now time.Time) (Block, []Change, error) {
	now = normTime(now)
	b.ExpiresAt = normOptTime(b.ExpiresAt)
	if err := b.Validate(now); err != nil {
		return Block{}, nil, err
	}
	b.Identity = NormalizeIdentity(b.Identity)
	b.ID, b.CreatedAt = NewID(IDBlock), now
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		if err := requireTenant(ctx, tx, b.TenantID); err != nil {
			return nil, err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO blocks (`+blockColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			b.ID, b.TenantID, b.Identity.Kind, b.Identity.ID, b.Reason, optMS(b.ExpiresAt), toMS(b.CreatedAt))
		if err != nil {
			return nil, fmt.Errorf("create block: %w", err)
		}
		return []Change{{Kind: ChangeBlock, TenantID: b.TenantID, Block: &b}}, nil
	})
	if err != nil {
		return Block{}, nil, err
	}
	return b, changes, nil
}

// ListBlocks returns the blocks of one tenant, or of all tenants when
// tenantID is "", newest first.
func (s *Store) ListBlocks(ctx context.Context, tenantID string) ([]Block, error) {
	q := `SELECT ` + blockColumns + ` FROM blocks ORDER BY created_at DESC, id`
	var args []any
	if tenantID != "" {
		q = `SELECT ` + blockColumns + ` FROM blocks WHERE tenant_id = ? ORDER BY created_at DESC, id`
		args = append(args, tenantID)
	}
	out, err := queryAll(ctx, s.db, scanBlock, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list blocks: %w", err)
	}
	return out, nil
}

// GetBlock returns one block.
func (s *Store) GetBlock(ctx context.Context, id string) (Block, error) {
	return queryOne(ctx, s.db, scanBlock, "block not found", `SELECT `+blockColumns+` FROM blocks WHERE id = ?`, id)
}

// DeleteBlock lifts a block.
func (s *Store) DeleteBlock(ctx context.Context, id string) ([]Change, error) {
	return s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		var tenantID string
		err := tx.QueryRowContext(ctx, `DELETE FROM blocks WHERE id = ? RETURNING tenant_id`, id).Scan(&tenantID)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, errs.Errorf(errs.NotFound, "block not found")
		}
		if err != nil {
			return nil, fmt.Errorf("delete block: %w", err)
		}
		return []Change{{Kind: ChangeBlockDeleted, TenantID: tenantID, ID: id}}, nil
	})
}

// PurgeExpiredBlocks deletes the blocks that expired at or before now, so
// they stop taking room in every server's snapshot.
func (s *Store) PurgeExpiredBlocks(ctx context.Context, now time.Time) ([]Change, error) {
	return s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		type gone struct{ id, tenantID string }
		rows, err := queryAll(ctx, tx, func(sc scanner) (gone, error) {
			var g gone
			err := sc.Scan(&g.id, &g.tenantID)
			return g, err
		}, `DELETE FROM blocks WHERE expires_at IS NOT NULL AND expires_at <= ? RETURNING id, tenant_id`, toMS(now))
		if err != nil {
			return nil, fmt.Errorf("purge blocks: %w", err)
		}
		changes := make([]Change, 0, len(rows))
		for _, g := range rows {
			changes = append(changes, Change{Kind: ChangeBlockDeleted, TenantID: g.tenantID, ID: g.id})
		}
		return changes, nil
	})
}
