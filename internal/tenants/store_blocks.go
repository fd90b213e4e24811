package tenants

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// BlockStore keeps the blocks of identities in tenants. Blocks are the
// operator's: its methods are not tenant-scoped. Get it from Store.Blocks.
type BlockStore struct{ *core }

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

// Create blocks an identity in a tenant; b's ID and CreatedAt are
// ignored. A missing tenant answers errs.NotFound.
func (s *BlockStore) Create(ctx context.Context, b Block, now time.Time) (Block, []Change, error) {
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
		if err := s.checkRoom(ctx, tx, b.TenantID, CapBlocks); err != nil {
			return nil, err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO blocks (`+blockColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			b.ID, b.TenantID, b.Identity.Kind, b.Identity.ID, b.Reason, optMS(b.ExpiresAt), toMS(b.CreatedAt))
		if err != nil {
			return nil, fmt.Errorf("create block: %w", err)
		}
		err = recordAudit(ctx, tx, AuditEntry{TenantID: b.TenantID, At: now, Action: ActionCreated, ObjectType: AuditBlock,
			ObjectID: b.ID, ObjectName: identityText(b.Identity), Changes: created(blockFields(b))})
		if err != nil {
			return nil, err
		}
		return []Change{{Kind: ChangeBlock, TenantID: b.TenantID, Block: &b}}, nil
	})
	if err != nil {
		return Block{}, nil, err
	}
	return b, changes, nil
}

// List returns the blocks of one tenant, or of all tenants when
// tenantID is "", newest first.
func (s *BlockStore) List(ctx context.Context, tenantID string) ([]Block, error) {
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

// Get returns one block.
func (s *BlockStore) Get(ctx context.Context, id string) (Block, error) {
	return queryOne(ctx, s.db, scanBlock, "block not found", `SELECT `+blockColumns+` FROM blocks WHERE id = ?`, id)
}

// Delete lifts a block. With tenantID set, another tenant's block
// answers errs.NotFound as a missing one does; the operator passes "".
func (s *BlockStore) Delete(ctx context.Context, tenantID, id string, now time.Time) ([]Change, error) {
	return s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		q, args := `SELECT `+blockColumns+` FROM blocks WHERE id = ?`, []any{id}
		if tenantID != "" {
			q, args = q+` AND tenant_id = ?`, append(args, tenantID)
		}
		b, err := queryOne(ctx, tx, scanBlock, "block not found", q, args...)
		if err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM blocks WHERE id = ?`, id); err != nil {
			return nil, fmt.Errorf("delete block: %w", err)
		}
		err = recordAudit(ctx, tx, AuditEntry{TenantID: b.TenantID, At: normTime(now), Action: ActionDeleted, ObjectType: AuditBlock,
			ObjectID: b.ID, ObjectName: identityText(b.Identity), Changes: diffFields(blockFields(b), nil)})
		if err != nil {
			return nil, err
		}
		return []Change{{Kind: ChangeBlockDeleted, TenantID: b.TenantID, ID: id}}, nil
	})
}

// PurgeExpired deletes the blocks that expired at or before now, so
// they stop taking room in every server's snapshot.
func (s *BlockStore) PurgeExpired(ctx context.Context, now time.Time) ([]Change, error) {
	now = normTime(now)
	return s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		gone, err := queryAll(ctx, tx, scanBlock, `DELETE FROM blocks WHERE expires_at IS NOT NULL AND expires_at <= ? RETURNING `+blockColumns, toMS(now))
		if err != nil {
			return nil, fmt.Errorf("purge blocks: %w", err)
		}
		changes := make([]Change, 0, len(gone))
		for _, b := range gone {
			err := recordAudit(ctx, tx, AuditEntry{TenantID: b.TenantID, At: now, Action: ActionExpired, ObjectType: AuditBlock,
				ObjectID: b.ID, ObjectName: identityText(b.Identity), Changes: diffFields(blockFields(b), nil)})
			if err != nil {
				return nil, err
			}
			changes = append(changes, Change{Kind: ChangeBlockDeleted, TenantID: b.TenantID, ID: b.ID})
		}
		return changes, nil
	})
}
