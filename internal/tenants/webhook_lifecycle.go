package tenants

// Who may change a tenant's webhooks, what becomes of an endpoint whose
// creator leaves, and how a deleted endpoint's deliveries go.
//
// An endpoint decides where the tenant's events go, and its secret proves
// them genuine, so adding, changing, pausing, rotating, deleting and
// resending are the owners' (docs/API.md, "Webhooks"). A service key is
// the tenant's machine credential, which only owners make, and acts as an
// owner; members see endpoints and deliveries but change nothing.
//
// When a dashboard user is removed, the endpoints they added are paused
// (PausedCreatorRemoved) in the same transaction, with an audit entry each:
// they get no events and their pending deliveries wait, until an owner
// resumes them (which makes that owner their creator) or deletes them.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// requireWebhookOwner refuses a webhook change by a dashboard user who is
// not one of the tenant's owners, and answers the acting user's id ("" for
// another kind of actor).
func requireWebhookOwner(ctx context.Context, q querier, tenantID string) (string, error) {
	a, ok := ActorFrom(ctx)
	if !ok || a.Kind != ActorUser {
		return "", nil
	}
	var role string
	err := q.QueryRowContext(ctx, `SELECT role FROM users WHERE id = ? AND tenant_id = ?`, a.ID, tenantID).Scan(&role)
	switch {
	case errors.Is(err, sql.ErrNoRows) || err == nil && role != RoleOwner:
		return "", errs.Errorf(errs.Forbidden, "Only the tenant's owners may change webhooks.")
	case err != nil:
		return "", fmt.Errorf("webhook owner: %w", err)
	}
	return a.ID, nil
}

// pauseWebhooksOf pauses, in tx, the tenant's endpoints the user added,
// recording each pause in the audit log.
func pauseWebhooksOf(ctx context.Context, tx *sql.Tx, tenantID, userID string, now time.Time) error {
	ws, err := queryAll(ctx, tx, scanWebhook, `
		SELECT `+webhookColumns+` FROM webhooks INDEXED BY webhooks_created_by
		WHERE tenant_id = ? AND created_by = ? AND deleted_at = 0 AND paused = ''`, tenantID, userID)
	if err != nil {
		return fmt.Errorf("webhooks of a removed user: %w", err)
	}
	for _, w := range ws {
		if _, err := tx.ExecContext(ctx, `UPDATE webhooks SET paused = ?, updated_at = ? WHERE id = ?`, PausedCreatorRemoved, toMS(now), w.ID); err != nil {
			return fmt.Errorf("pause webhook: %w", err)
		}
		if err := recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: now, Action: ActionUpdated, ObjectType: AuditWebhook,
			ObjectID: w.ID, ObjectName: w.URL, Changes: []FieldChange{{Field: "paused", Before: "", After: PausedCreatorRemoved}}}); err != nil {
			return err
		}
	}
	return nil
}

// PurgeDeleted takes one step of removing deleted endpoints: up to
// batch deliveries of one of them, or once it has none, up to batch of its
// queues, or once it has none, the endpoint itself, in one transaction. It
// answers how many rows went, 0 when no deleted endpoint is left.
func (s *DeliveryQueue) PurgeDeleted(ctx context.Context, batch int) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var id string
		err := tx.QueryRowContext(ctx, `SELECT id FROM webhooks INDEXED BY webhooks_deleted WHERE deleted_at > 0 ORDER BY deleted_at, id LIMIT 1`).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("purge webhooks: %w", err)
		}
		for _, query := range []string{
			`DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries WHERE webhook_id = ? ORDER BY id LIMIT ?)`,
			`DELETE FROM webhook_queues WHERE rowid IN (SELECT rowid FROM webhook_queues WHERE webhook_id = ? ORDER BY next_at, order_key LIMIT ?)`,
			`DELETE FROM webhooks WHERE id = ? AND ? > 0`,
		} {
			res, err := tx.ExecContext(ctx, query, id, batch)
			if err != nil {
				return fmt.Errorf("purge webhooks: %w", err)
			}
			if n, _ = res.RowsAffected(); n > 0 {
				return nil
			}
		}
		return nil
	})
	return n, err
}
