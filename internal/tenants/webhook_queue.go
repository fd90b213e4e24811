package tenants

// The delivery loop's side of the outbox (webhooks.go): which endpoints
// and ordering keys are due, the first pending delivery of each, the
// outcome of each attempt, and pruning what was sent.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// DeliveryQueue is what the delivery loop (internal/worker/webhook)
// reads and records. Get it from Store.DeliveryQueue.
type DeliveryQueue struct {
	*core
	// head is Head's statement, prepared once: the delivery loop runs it
	// for every delivery.
	head struct {
		once sync.Once
		stmt *sql.Stmt
		err  error
	}
}

// Secrets answers the secrets an endpoint's deliveries are signed
// with at now: its secret and, within a rotation's overlap, the previous
// one.
func (s *DeliveryQueue) Secrets(ctx context.Context, webhookID string, now time.Time) ([]string, error) {
	sealer, err := s.webhookSealer()
	if err != nil {
		return nil, err
	}
	var cur, old []byte
	var oldUntil int64
	err = s.db.QueryRowContext(ctx, `SELECT secret, old_secret, old_secret_until FROM webhooks WHERE id = ? AND deleted_at = 0`, webhookID).Scan(&cur, &old, &oldUntil)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errs.Errorf(errs.NotFound, "webhook not found")
	}
	if err != nil {
		return nil, fmt.Errorf("read webhook secret: %w", err)
	}
	plain, err := sealer.Open(cur)
	if err != nil {
		return nil, fmt.Errorf("open webhook secret: %w", err)
	}
	out := []string{string(plain)}
	if old != nil && toMS(now) < oldUntil {
		if p, err := sealer.Open(old); err == nil {
			out = append(out, string(p))
		}
	}
	return out, nil
}

// Drops answers, per tenant that ever had a delivery dropped,
// how many were.
func (s *DeliveryQueue) Drops(ctx context.Context) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT tenant_id, dropped FROM webhook_outbox WHERE dropped > 0`)
	if err != nil {
		return nil, fmt.Errorf("webhook outbox drops: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

// DueQueue is an endpoint's ordering key whose first delivery may be due.
type DueQueue struct {
	WebhookID, OrderKey string
}

// DueEndpoint is an endpoint with a queue due.
type DueEndpoint struct {
	WebhookID, TenantID string
}

// DueEndpoints answers the endpoints, not deleted or paused, with
// a queue due at now, by tenant. It reads one row per endpoint
// (webhooks.next_due), however many queues each has.
func (s *DeliveryQueue) DueEndpoints(ctx context.Context, now time.Time) ([]DueEndpoint, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT id, tenant_id FROM webhooks INDEXED BY webhooks_due
		WHERE next_due IS NOT NULL AND deleted_at = 0 AND paused = '' AND next_due <= ?
		ORDER BY tenant_id, id`, toMS(now))
	if err != nil {
		return nil, fmt.Errorf("due webhook endpoints: %w", err)
	}
	defer rows.Close()
	var out []DueEndpoint
	for rows.Next() {
		var e DueEndpoint
		if err := rows.Scan(&e.WebhookID, &e.TenantID); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// DueQueues answers up to limit of an endpoint's queues due at
// now, the longest due first: it reads limit rows of the endpoint's index
// (webhook_id, next_at), whatever the endpoint's backlog.
func (s *DeliveryQueue) DueQueues(ctx context.Context, webhookID string, now time.Time, limit int) ([]DueQueue, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT order_key FROM webhook_queues INDEXED BY webhook_queues_endpoint
		WHERE webhook_id = ? AND next_at <= ? ORDER BY next_at LIMIT ?`, webhookID, toMS(now), limit)
	if err != nil {
		return nil, fmt.Errorf("due webhook queues: %w", err)
	}
	defer rows.Close()
	var out []DueQueue
	for rows.Next() {
		q := DueQueue{WebhookID: webhookID}
		if err := rows.Scan(&q.OrderKey); err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// OutboxDelivery is a delivery as the delivery loop sends it.
type OutboxDelivery struct {
	RowID     int64
	MsgID     string
	WebhookID string
	TenantID  string
	OrderKey  string
	Event     string
	URL       string
	Payload   []byte
	// Step is how many attempts of its current retry schedule were made.
	Step int
	// Due is when it may be attempted.
	Due time.Time
}

// Head answers the first pending delivery of an endpoint's ordering
// key; ok is false when there is none.
func (s *DeliveryQueue) Head(ctx context.Context, q DueQueue) (d OutboxDelivery, ok bool, err error) {
	qh := &s.head
	qh.once.Do(func() {
		qh.stmt, qh.err = s.db.PrepareContext(context.Background(), `
			SELECT d.id, d.msg_id, d.webhook_id, d.tenant_id, d.order_key, d.event, w.url, d.payload, d.step, d.next_at, d.available_at
			FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id AND w.deleted_at = 0 AND w.paused = ''
			WHERE d.webhook_id = ? AND d.order_key = ? AND d.status = 'pending'
			ORDER BY d.available_at, d.id LIMIT 1`)
	})
	if qh.err != nil {
		return d, false, fmt.Errorf("webhook queue head: %w", qh.err)
	}
	var next, avail int64
	err = qh.stmt.QueryRowContext(ctx, q.WebhookID, q.OrderKey).
		Scan(&d.RowID, &d.MsgID, &d.WebhookID, &d.TenantID, &d.OrderKey, &d.Event, &d.URL, &d.Payload, &d.Step, &next, &avail)
	if errors.Is(err, sql.ErrNoRows) {
		return d, false, nil
	}
	if err != nil {
		return d, false, fmt.Errorf("webhook queue head: %w", err)
	}
	d.Due = fromMS(max(next, avail))
	return d, true, nil
}

// Attempt is the outcome of one attempt to send a delivery.
type Attempt struct {
	RowID     int64
	WebhookID string
	OrderKey  string
	At        time.Time
	Code      int // the response's status, 0 without one
	Latency   time.Duration
	Err       string // why it failed, "" when delivered
	Delivered bool
	// Retry is when to try again; zero when the delivery failed for good
	// (or was delivered).
	Retry time.Time
}

// RecordAttempts writes attempts' outcomes in one transaction and sets
// each one's queue due at its next delivery, or removes the queue when
// none is left.
func (s *DeliveryQueue) RecordAttempts(ctx context.Context, as []Attempt) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		update, err := tx.PrepareContext(ctx, `
			UPDATE webhook_deliveries SET status = ?, attempts = attempts + 1, step = step + 1, last_attempt_at = ?,
				response_code = ?, latency_ms = ?, last_error = ?, next_at = CASE WHEN ? > 0 THEN ? ELSE next_at END, done_at = ?
			WHERE id = ? AND status = 'pending'`)
		if err != nil {
			return fmt.Errorf("record webhook attempt: %w", err)
		}
		defer update.Close()
		q, err := prepareQueueRefresh(ctx, tx)
		if err != nil {
			return err
		}
		defer q.close()
		for _, a := range as {
			status, next, done := DeliveryPending, toMS(a.Retry), int64(0)
			switch {
			case a.Delivered:
				status, next, done = DeliveryDelivered, 0, toMS(a.At)
			case a.Retry.IsZero():
				status, next, done = DeliveryFailed, 0, toMS(a.At)
			}
			if _, err := update.ExecContext(ctx, status, toMS(a.At), a.Code, a.Latency.Milliseconds(), truncate(a.Err, 500), next, next, done, a.RowID); err != nil {
				return fmt.Errorf("record webhook attempt: %w", err)
			}
			if err := q.refresh(ctx, a.WebhookID, a.OrderKey); err != nil {
				return err
			}
		}
		return nil
	})
}

// queueRefresh is refreshQueue's statements, prepared for a batch.
type queueRefresh struct{ head, del, set *sql.Stmt }

func prepareQueueRefresh(ctx context.Context, tx *sql.Tx) (*queueRefresh, error) {
	var q queueRefresh
	var err error
	if q.head, err = tx.PrepareContext(ctx, `
		SELECT next_at, available_at FROM webhook_deliveries
		WHERE webhook_id = ? AND order_key = ? AND status = 'pending' ORDER BY available_at, id LIMIT 1`); err != nil {
		return nil, fmt.Errorf("webhook queue: %w", err)
	}
	if q.del, err = tx.PrepareContext(ctx, `DELETE FROM webhook_queues WHERE webhook_id = ? AND order_key = ?`); err != nil {
		q.close()
		return nil, fmt.Errorf("webhook queue: %w", err)
	}
	if q.set, err = tx.PrepareContext(ctx, `UPDATE webhook_queues SET next_at = ? WHERE webhook_id = ? AND order_key = ?`); err != nil {
		q.close()
		return nil, fmt.Errorf("webhook queue: %w", err)
	}
	return &q, nil
}

func (q *queueRefresh) close() {
	for _, st := range []*sql.Stmt{q.head, q.del, q.set} {
		if st != nil {
			st.Close()
		}
	}
}

// refresh sets a queue due when its first pending delivery is, or removes
// it when none is left.
func (q *queueRefresh) refresh(ctx context.Context, webhookID, orderKey string) error {
	var next, avail int64
	err := q.head.QueryRowContext(ctx, webhookID, orderKey).Scan(&next, &avail)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = q.del.ExecContext(ctx, webhookID, orderKey)
		return err
	}
	if err != nil {
		return fmt.Errorf("webhook queue: %w", err)
	}
	_, err = q.set.ExecContext(ctx, max(next, avail), webhookID, orderKey)
	return err
}

// refreshQueue is queueRefresh.refresh for one queue.
func refreshQueue(ctx context.Context, tx *sql.Tx, webhookID, orderKey string) error {
	q, err := prepareQueueRefresh(ctx, tx)
	if err != nil {
		return err
	}
	defer q.close()
	return q.refresh(ctx, webhookID, orderKey)
}

// Refresh sets a queue due when its first pending delivery
// is (the loop found it due early), or removes it when it is empty.
func (s *DeliveryQueue) Refresh(ctx context.Context, q DueQueue) error {
	return s.inTx(ctx, func(tx *sql.Tx) error { return refreshQueue(ctx, tx, q.WebhookID, q.OrderKey) })
}

// Pending counts the deliveries not yet delivered or failed,
// from the tenants' outbox counts.
func (s *DeliveryQueue) Pending(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(pending_rows), 0) FROM webhook_outbox`).Scan(&n)
	return n, err
}

// Prune deletes up to batch deliveries delivered or
// failed before cut, and offenders' announcements older than a day, and
// answers how many deliveries went.
func (s *DeliveryQueue) Prune(ctx context.Context, cut, now time.Time, batch int) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
			DELETE FROM webhook_deliveries WHERE id IN (
				SELECT id FROM webhook_deliveries WHERE status <> 'pending' AND done_at < ? ORDER BY done_at, id LIMIT ?)`, toMS(cut), batch)
		if err != nil {
			return fmt.Errorf("prune deliveries: %w", err)
		}
		n, _ = res.RowsAffected()
		_, err = tx.ExecContext(ctx, `DELETE FROM webhook_offenders WHERE notified_at < ?`, toMS(now.Add(-TopOffenderQuiet)))
		return err
	})
	return n, err
}
