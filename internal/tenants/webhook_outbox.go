package tenants

// The outbox's bounds per tenant. Each tenant's deliveries are counted in
// webhook_outbox (rows and payload bytes, all kept and those pending),
// kept exact by triggers on webhook_deliveries, so an enqueue checks its
// tenant's bounds with one lookup. Past a bound, in the enqueue's
// transaction:
//   - pending past OutboxLimits.PendingRows or PendingBytes: the tenant's
//     oldest pending delivery is dropped: failed, marked dropped, its
//     payload cleared, and counted in webhook_outbox.dropped (which the
//     worker turns into a metric and a warning). The tenant sees it in the
//     deliveries list with status "dropped".
//   - kept past Rows or Bytes: the tenant's oldest delivered, failed or
//     dropped delivery is deleted.
// Each drop or deletion is paid for by an insert, so the work stays linear
// in what the tenant enqueues, and one tenant's outbox never grows past its
// bounds whatever it does. One enqueue drops or deletes at most
// boundSteps rows, so that an outbox far over its bounds (one that grew
// before they existed, or whose bounds were just lowered) comes back
// within them over the next enqueues rather than in one long transaction.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// OutboxLimits bound one tenant's webhook outbox.
type OutboxLimits struct {
	// Rows and Bytes bound the deliveries kept, in any status.
	Rows, Bytes int64
	// PendingRows and PendingBytes bound those not yet sent.
	PendingRows, PendingBytes int64
}

// DefaultOutboxLimits are every tenant's bounds unless the operator set
// others for it (Outbox.SetLimits).
var DefaultOutboxLimits = OutboxLimits{Rows: 100_000, Bytes: 64 << 20, PendingRows: 10_000, PendingBytes: 16 << 20}

// or answers l with each zero field taken from d.
func (l OutboxLimits) or(d OutboxLimits) OutboxLimits {
	pick := func(v, def int64) int64 {
		if v > 0 {
			return v
		}
		return def
	}
	return OutboxLimits{Rows: pick(l.Rows, d.Rows), Bytes: pick(l.Bytes, d.Bytes),
		PendingRows: pick(l.PendingRows, d.PendingRows), PendingBytes: pick(l.PendingBytes, d.PendingBytes)}
}

// SetLimits sets a tenant's outbox bounds; a zero field
// takes the default. Pending bounds above the kept ones are refused.
func (s *Outbox) SetLimits(ctx context.Context, tenantID string, l OutboxLimits) error {
	if e := l.or(DefaultOutboxLimits); e.Rows < 1 || e.Bytes < 1 || e.PendingRows > e.Rows || e.PendingBytes > e.Bytes ||
		l.Rows < 0 || l.Bytes < 0 || l.PendingRows < 0 || l.PendingBytes < 0 {
		return invalid("limits", "pending bounds must be positive and at most the bounds of what is kept")
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if err := requireTenant(ctx, tx, tenantID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `
			INSERT INTO webhook_outbox (tenant_id, max_rows, max_bytes, max_pending_rows, max_pending_bytes) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (tenant_id) DO UPDATE SET max_rows = excluded.max_rows, max_bytes = excluded.max_bytes,
				max_pending_rows = excluded.max_pending_rows, max_pending_bytes = excluded.max_pending_bytes`,
			tenantID, l.Rows, l.Bytes, l.PendingRows, l.PendingBytes)
		if err != nil {
			return fmt.Errorf("webhook outbox limits: %w", err)
		}
		return nil
	})
}

// OutboxUsage is one tenant's outbox as counted.
type OutboxUsage struct {
	Rows, Bytes, PendingRows, PendingBytes int64
	// Dropped is how many pending deliveries were dropped, ever.
	Dropped int64
	Limits  OutboxLimits
}

// Usage answers a tenant's outbox counts and bounds.
func (s *Outbox) Usage(ctx context.Context, tenantID string) (OutboxUsage, error) {
	u, _, err := outboxUsage(ctx, s.db, tenantID)
	return u, err
}

func outboxUsage(ctx context.Context, q querier, tenantID string) (OutboxUsage, bool, error) {
	var u OutboxUsage
	var l OutboxLimits
	err := q.QueryRowContext(ctx, `
		SELECT rows, bytes, pending_rows, pending_bytes, dropped, max_rows, max_bytes, max_pending_rows, max_pending_bytes
		FROM webhook_outbox WHERE tenant_id = ?`, tenantID).
		Scan(&u.Rows, &u.Bytes, &u.PendingRows, &u.PendingBytes, &u.Dropped, &l.Rows, &l.Bytes, &l.PendingRows, &l.PendingBytes)
	if errors.Is(err, sql.ErrNoRows) {
		return OutboxUsage{Limits: DefaultOutboxLimits}, false, nil
	}
	if err != nil {
		return OutboxUsage{}, false, fmt.Errorf("webhook outbox: %w", err)
	}
	u.Limits = l.or(DefaultOutboxLimits)
	return u, true, nil
}

// outboxBounds is bound's statements, prepared at first use.
type outboxBounds struct {
	oldestPending, drop, counted, oldestDone *sql.Stmt
	refresh                                  *queueRefresh
}

func (b *outboxBounds) close() {
	for _, st := range []*sql.Stmt{b.oldestPending, b.drop, b.counted, b.oldestDone} {
		if st != nil {
			st.Close()
		}
	}
	if b.refresh != nil {
		b.refresh.close()
	}
}

func prepareOutboxBounds(ctx context.Context, tx *sql.Tx) (*outboxBounds, error) {
	b := &outboxBounds{}
	var err error
	prep := func(dst **sql.Stmt, query string) {
		if err == nil {
			*dst, err = tx.PrepareContext(ctx, query)
		}
	}
	prep(&b.oldestPending, `
		SELECT id, webhook_id, order_key FROM webhook_deliveries INDEXED BY webhook_deliveries_tenant_pending
		WHERE tenant_id = ? AND status = 'pending' ORDER BY id LIMIT 1`)
	prep(&b.drop, `
		UPDATE webhook_deliveries SET status = 'failed', dropped = 1, payload = x'', next_at = 0, done_at = ?, last_error = ?
		WHERE id = ? AND status = 'pending'`)
	prep(&b.counted, `UPDATE webhook_outbox SET dropped = dropped + 1 WHERE tenant_id = ?`)
	prep(&b.oldestDone, `
		DELETE FROM webhook_deliveries WHERE id = (
			SELECT id FROM webhook_deliveries INDEXED BY webhook_deliveries_tenant_done
			WHERE tenant_id = ? AND status <> 'pending' ORDER BY id LIMIT 1)`)
	if err == nil {
		b.refresh, err = prepareQueueRefresh(ctx, tx)
	}
	if err != nil {
		b.close()
		return nil, fmt.Errorf("webhook outbox bounds: %w", err)
	}
	return b, nil
}

// boundSteps is the most rows one enqueue drops or deletes: enough for a
// 64 KiB event to make room among the smallest ones.
const boundSteps = 1024

// bound brings the tenant's outbox back within its bounds (see the top of
// this file), by at most boundSteps rows.
func (q *outboxWriter) bound(ctx context.Context, tenantID string, now time.Time) error {
	for range boundSteps {
		u, ok, err := outboxUsage(ctx, q.tx, tenantID)
		if err != nil || !ok {
			return err
		}
		l := u.Limits
		pendingOver := u.PendingRows > l.PendingRows || u.PendingBytes > l.PendingBytes
		keptOver := u.Rows > l.Rows || u.Bytes > l.Bytes
		if !pendingOver && !keptOver {
			return nil
		}
		if q.bounds == nil {
			if q.bounds, err = prepareOutboxBounds(ctx, q.tx); err != nil {
				return err
			}
		}
		b := q.bounds
		if pendingOver {
			var id int64
			var webhookID, orderKey string
			if err := b.oldestPending.QueryRowContext(ctx, tenantID).Scan(&id, &webhookID, &orderKey); err != nil {
				return fmt.Errorf("webhook outbox: oldest pending: %w", err)
			}
			why := fmt.Sprintf("dropped unsent: this tenant's webhook outbox was full (at most %d deliveries or %d MiB pending); the oldest pending made room for new events",
				l.PendingRows, l.PendingBytes>>20)
			if _, err := b.drop.ExecContext(ctx, toMS(now), why, id); err != nil {
				return fmt.Errorf("webhook outbox: drop: %w", err)
			}
			if _, err := b.counted.ExecContext(ctx, tenantID); err != nil {
				return fmt.Errorf("webhook outbox: drop: %w", err)
			}
			if err := b.refresh.refresh(ctx, webhookID, orderKey); err != nil {
				return err
			}
			continue
		}
		res, err := b.oldestDone.ExecContext(ctx, tenantID)
		if err != nil {
			return fmt.Errorf("webhook outbox: delete oldest: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			// Only pending deliveries are left, within their bounds,
			// which are at most these.
			return errs.Errorf(errs.Internal, "webhook outbox of tenant %s: over its bounds with nothing to delete", tenantID)
		}
	}
	return nil
}
