package tenants

// Webhooks: a tenant's HTTPS endpoints, and the outbox of what is sent to
// them.
//
// Every event is a row of webhook_deliveries written in the transaction of
// the change that caused it: a key created or revoked and a config change
// from recordAudit, a quota crossing from the worker's batch of the quota
// stream, a top offender from the worker's minute check. What commits is
// sent; what rolls back never is. The worker's delivery loop
// (internal/worker/webhook) reads the outbox, and is its only other writer.
//
// Order per key: deliveries of one endpoint share an ordering key (the
// consumer key's id for key and quota events, "tenant" otherwise); only the
// first pending one of an endpoint and key, by (available_at, id), is
// attempted, so an event never overtakes an older one of its key. Each
// endpoint and key with deliveries pending has one row in webhook_queues,
// due when its first delivery is, which is what the loop reads.
//
// Secrets are stored sealed (WebhookSealer) and leave the store in clear
// only twice: in the answer to the write that made them, and to the
// delivery loop, which signs with them.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// Webhook event types.
const (
	EventKeyCreated     = "key.created"
	EventKeyRevoked     = "key.revoked"
	EventConfigChanged  = "config.changed"
	EventTopOffender    = "caller.top_offender"
	EventQuotaThreshold = "quota.threshold"
	EventQuotaReset     = "quota.reset"
)

// WebhookEvents lists every event type, in the order lists show them.
var WebhookEvents = []string{EventQuotaThreshold, EventQuotaReset, EventTopOffender, EventKeyCreated, EventKeyRevoked, EventConfigChanged}

// Webhook bounds.
const (
	// MaxWebhooks is the most endpoints one tenant may have.
	MaxWebhooks = 20
	// MaxWebhookURL is the longest endpoint URL.
	MaxWebhookURL = 2048
	// MaxWebhookDescription is the longest description.
	MaxWebhookDescription = 200
	// MaxWebhookThresholds is the most thresholds one endpoint may pick.
	MaxWebhookThresholds = 10
	// MaxWebhookPayload is the largest event body. A config change whose
	// audit entry is larger is sent without its field changes
	// ("changes_truncated": true); the audit log has them.
	MaxWebhookPayload = 64 << 10
	// WebhookOrderTenant is the ordering key of events about no consumer
	// key.
	WebhookOrderTenant = "tenant"
	// DefaultDeliveryPage and MaxDeliveryPage bound a page of deliveries.
	DefaultDeliveryPage = 50
	MaxDeliveryPage     = 200
)

// DefaultWebhookThresholds are the percents of a quota an endpoint hears
// about when it picks none.
var DefaultWebhookThresholds = []int{80, 100}

// Delivery statuses.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
	// DeliveryDropped is a delivery dropped, unsent, to keep its tenant's
	// outbox within its bounds (OutboxLimits); its payload is not kept.
	DeliveryDropped = "dropped"
)

// Webhook is one endpoint of a tenant. Its secret is never part of it.
type Webhook struct {
	ID          string   `json:"id"`
	TenantID    string   `json:"tenant_id"`
	URL         string   `json:"url"`
	Description string   `json:"description"`
	Events      []string `json:"events"`
	Thresholds  []int    `json:"thresholds"`
	// SecretPrefix is the first characters of the signing secret, to
	// tell secrets apart.
	SecretPrefix string `json:"secret_prefix"`
	// PreviousSecretUntil is, after a rotation, when deliveries stop
	// being signed with the previous secret too.
	PreviousSecretUntil *time.Time `json:"previous_secret_until,omitempty"`
	// CreatedBy is the id of the dashboard user who added the endpoint;
	// empty when a service key, the operator or an unknown actor did.
	CreatedBy string `json:"created_by,omitempty"`
	// Paused, when set, says why the endpoint gets no events and its
	// pending deliveries are held (PausedCreatorRemoved); an owner
	// resumes it (WebhookBody.Paused).
	Paused    string    `json:"paused,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// PausedCreatorRemoved is why an endpoint is paused when the dashboard
// user who added it was removed from the tenant: an owner looks at where
// it points and resumes it, or deletes it.
const PausedCreatorRemoved = "creator_removed"

// PausedByOwner is why an endpoint is paused when an owner paused it.
const PausedByOwner = "paused"

// Wants reports whether w subscribes to event.
func (w Webhook) Wants(event string) bool { return slices.Contains(w.Events, event) }

// WebhookBody is a webhook as clients write it: every field is optional
// in an update; a create needs url. Events default to all of them,
// thresholds to DefaultWebhookThresholds.
type WebhookBody struct {
	URL         *string   `json:"url,omitempty"`
	Description *string   `json:"description,omitempty"`
	Events      *[]string `json:"events,omitempty"`
	Thresholds  *[]int    `json:"thresholds,omitempty"`
	// Paused false resumes a paused endpoint; true pauses it by hand.
	Paused *bool `json:"paused,omitempty"`
}

// WebhookCreated is a new endpoint, or one whose secret was rotated, with
// its secret, shown only then.
type WebhookCreated struct {
	Webhook Webhook `json:"webhook"`
	Secret  string  `json:"secret"`
}

// WebhookStore keeps a tenant's endpoints and their secrets, and the
// deliveries the tenant sees and resends. Get it from Store.Webhooks.
type WebhookStore struct{ *core }

// Outbox writes the events endpoints are sent, beside the change that
// caused them, and bounds each tenant's outbox (webhook_outbox.go). Get it
// from Store.Outbox.
type Outbox struct{ *core }

// WebhookSealer seals the signing secrets the store keeps, so that a copy
// of the database alone does not reveal them.
type WebhookSealer interface {
	Seal(plain []byte) ([]byte, error)
	Open(sealed []byte) ([]byte, error)
}

// SetWebhookSealer sets the sealer of webhook secrets; webhook writes
// fail without one.
func (s *Store) SetWebhookSealer(ws WebhookSealer) { s.sealer.Store(&ws) }

func (s *core) webhookSealer() (WebhookSealer, error) {
	p := s.sealer.Load()
	if p == nil || *p == nil {
		return nil, errs.Errorf(errs.Unavailable, "Webhooks are not available: the worker has no key to seal their secrets.")
	}
	return *p, nil
}

// ValidateWebhookURL checks an endpoint URL's form: HTTPS, a host, no
// user or password, no fragment. Where the host points is the worker's
// to check (it resolves it).
func ValidateWebhookURL(raw string) (*url.URL, error) {
	return validateHTTPSURL("url", raw, MaxWebhookURL)
}

// validateHTTPSURL checks the form of an https URL Sluice connects to, in
// the field it names: a host, no credentials, no fragment, a valid port.
func validateHTTPSURL(field, raw string, maxLen int) (*url.URL, error) {
	if raw == "" {
		return nil, invalid(field, "required")
	}
	if len(raw) > maxLen {
		return nil, invalid(field, "longer than %d characters", maxLen)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, invalid(field, "not a URL")
	case u.Scheme != "https":
		return nil, invalid(field, "must be https")
	case u.Host == "" || u.Hostname() == "":
		return nil, invalid(field, "must name a host")
	case u.User != nil:
		return nil, invalid(field, "must not hold a user name or password")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return nil, invalid(field, "must not have a fragment")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, invalid(field, "port must be between 1 and 65535")
		}
	}
	return u, nil
}

// apply validates b over w (a new webhook's defaults, or the stored one).
func (b WebhookBody) apply(w *Webhook) error {
	if b.URL != nil {
		if _, err := ValidateWebhookURL(*b.URL); err != nil {
			return err
		}
		w.URL = *b.URL
	}
	if b.Description != nil {
		if len(*b.Description) > MaxWebhookDescription {
			return invalid("description", "longer than %d characters", MaxWebhookDescription)
		}
		w.Description = *b.Description
	}
	if b.Events != nil {
		if len(*b.Events) == 0 {
			return invalid("events", "must name at least one of %s", strings.Join(WebhookEvents, ", "))
		}
		var evs []string
		for _, e := range *b.Events {
			if !slices.Contains(WebhookEvents, e) {
				return invalid("events", "unknown event %q; known: %s", truncate(e, 64), strings.Join(WebhookEvents, ", "))
			}
			if !slices.Contains(evs, e) {
				evs = append(evs, e)
			}
		}
		w.Events = evs
	}
	if b.Thresholds != nil {
		ts := slices.Clone(*b.Thresholds)
		if len(ts) == 0 || len(ts) > MaxWebhookThresholds {
			return invalid("thresholds", "must hold 1 to %d percents", MaxWebhookThresholds)
		}
		for _, t := range ts {
			if t < 1 || t > 100 {
				return invalid("thresholds", "%d is not a whole percent between 1 and 100", t)
			}
		}
		slices.Sort(ts)
		w.Thresholds = slices.Compact(ts)
	}
	return nil
}

// NewWebhookSecret returns a signing secret in the Standard Webhooks form:
// "whsec_" and 32 random bytes in base64.
func NewWebhookSecret() string {
	b := make([]byte, 32)
	rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

func secretPrefix(secret string) string { return secret[:min(len(secret), len("whsec_")+4)] }

const webhookColumns = `id, tenant_id, url, description, events, thresholds, secret_prefix, old_secret_until, created_by, paused, created_at, updated_at`

func scanWebhook(sc scanner) (Webhook, error) {
	var w Webhook
	var events, thresholds string
	var oldUntil, created, updated int64
	if err := sc.Scan(&w.ID, &w.TenantID, &w.URL, &w.Description, &events, &thresholds, &w.SecretPrefix, &oldUntil, &w.CreatedBy, &w.Paused, &created, &updated); err != nil {
		return Webhook{}, err
	}
	if err := json.Unmarshal([]byte(events), &w.Events); err != nil {
		return Webhook{}, fmt.Errorf("webhook %s: events column: %w", w.ID, err)
	}
	if err := json.Unmarshal([]byte(thresholds), &w.Thresholds); err != nil {
		return Webhook{}, fmt.Errorf("webhook %s: thresholds column: %w", w.ID, err)
	}
	if oldUntil > 0 {
		t := fromMS(oldUntil)
		w.PreviousSecretUntil = &t
	}
	w.CreatedAt, w.UpdatedAt = fromMS(created), fromMS(updated)
	return w, nil
}

func getWebhook(ctx context.Context, q querier, tenantID, id string) (Webhook, error) {
	return queryOne(ctx, q, scanWebhook, "webhook not found",
		`SELECT `+webhookColumns+` FROM webhooks WHERE id = ? AND tenant_id = ? AND deleted_at = 0`, id, tenantID)
}

func webhookFields(w Webhook) []field {
	ts := make([]string, len(w.Thresholds))
	for i, t := range w.Thresholds {
		ts[i] = strconv.Itoa(t)
	}
	return []field{
		{"url", w.URL}, {"description", w.Description},
		{"events", strings.Join(w.Events, ", ")}, {"thresholds", strings.Join(ts, ", ")},
	}
}

// Create adds an endpoint to the tenant and answers it with its
// secret. b.URL must already have been checked for where it points.
func (s *WebhookStore) Create(ctx context.Context, tenantID string, b WebhookBody, now time.Time) (WebhookCreated, error) {
	now = normTime(now)
	w := Webhook{ID: NewID("wh_"), TenantID: tenantID, Events: slices.Clone(WebhookEvents), Thresholds: slices.Clone(DefaultWebhookThresholds),
		CreatedAt: now, UpdatedAt: now}
	if b.URL == nil {
		return WebhookCreated{}, invalid("url", "required")
	}
	if err := b.apply(&w); err != nil {
		return WebhookCreated{}, err
	}
	if b.Paused != nil && *b.Paused {
		w.Paused = PausedByOwner
	}
	secret, sealed, err := s.newWebhookSecret()
	if err != nil {
		return WebhookCreated{}, err
	}
	w.SecretPrefix = secretPrefix(secret)
	events, _ := toJSON(w.Events)
	thresholds, _ := toJSON(w.Thresholds)
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if err := requireTenant(ctx, tx, tenantID); err != nil {
			return err
		}
		var err error
		if w.CreatedBy, err = requireWebhookOwner(ctx, tx, tenantID); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM webhooks WHERE tenant_id = ? AND deleted_at = 0`, tenantID).Scan(&n); err != nil {
			return fmt.Errorf("count webhooks: %w", err)
		}
		if n >= MaxWebhooks {
			return errs.Errorf(errs.Conflict, "webhooks: this tenant has %d endpoints, the most it may have; delete one first", MaxWebhooks)
		}
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO webhooks (id, tenant_id, url, description, events, thresholds, secret, secret_prefix, created_by, paused, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			w.ID, tenantID, w.URL, w.Description, events, thresholds, sealed, w.SecretPrefix, w.CreatedBy, w.Paused, toMS(now), toMS(now)); err != nil {
			return fmt.Errorf("create webhook: %w", err)
		}
		return recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: now, Action: ActionCreated, ObjectType: AuditWebhook,
			ObjectID: w.ID, ObjectName: w.URL, Changes: created(webhookFields(w))})
	})
	if err != nil {
		return WebhookCreated{}, err
	}
	return WebhookCreated{Webhook: w, Secret: secret}, nil
}

// Get answers one of the tenant's endpoints.
func (s *WebhookStore) Get(ctx context.Context, tenantID, id string) (Webhook, error) {
	return getWebhook(ctx, s.db, tenantID, id)
}

// List answers the tenant's endpoints, oldest first.
func (s *WebhookStore) List(ctx context.Context, tenantID string) ([]Webhook, error) {
	if err := requireTenant(ctx, s.db, tenantID); err != nil {
		return nil, err
	}
	out, err := queryAll(ctx, s.db, scanWebhook, `SELECT `+webhookColumns+` FROM webhooks WHERE tenant_id = ? AND deleted_at = 0 ORDER BY created_at, id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	if out == nil {
		out = []Webhook{}
	}
	return out, nil
}

// Update changes an endpoint's fields that b sets. A new URL must
// already have been checked for where it points.
func (s *WebhookStore) Update(ctx context.Context, tenantID, id string, b WebhookBody, now time.Time) (Webhook, error) {
	now = normTime(now)
	var w Webhook
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		actor, err := requireWebhookOwner(ctx, tx, tenantID)
		if err != nil {
			return err
		}
		if w, err = getWebhook(ctx, tx, tenantID, id); err != nil {
			return err
		}
		before := w
		if err := b.apply(&w); err != nil {
			return err
		}
		changes := diffFields(webhookFields(before), webhookFields(w))
		if b.Paused != nil {
			switch {
			case *b.Paused && w.Paused == "":
				w.Paused = PausedByOwner
			case !*b.Paused && w.Paused != "":
				// Whoever resumes it vouches for where it points.
				w.Paused, w.CreatedBy = "", actor
			}
			if w.Paused != before.Paused {
				changes = append(changes, FieldChange{Field: "paused", Before: before.Paused, After: w.Paused})
			}
		}
		if len(changes) == 0 {
			w = before
			return nil
		}
		w.UpdatedAt = now
		events, _ := toJSON(w.Events)
		thresholds, _ := toJSON(w.Thresholds)
		if _, err := tx.ExecContext(ctx, `
			UPDATE webhooks SET url = ?, description = ?, events = ?, thresholds = ?, paused = ?, created_by = ?, updated_at = ?
			WHERE id = ? AND tenant_id = ?`,
			w.URL, w.Description, events, thresholds, w.Paused, w.CreatedBy, toMS(now), id, tenantID); err != nil {
			return fmt.Errorf("update webhook: %w", err)
		}
		return recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: now, Action: ActionUpdated, ObjectType: AuditWebhook,
			ObjectID: w.ID, ObjectName: w.URL, Changes: changes})
	})
	return w, err
}

// Delete removes an endpoint with its deliveries, pending ones
// included: it is gone at once, and its deliveries are deleted afterwards
// in batches (DeliveryQueue.PurgeDeleted), so that a long backlog does not make
// one long write transaction.
func (s *WebhookStore) Delete(ctx context.Context, tenantID, id string, now time.Time) (Webhook, error) {
	now = normTime(now)
	var w Webhook
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := requireWebhookOwner(ctx, tx, tenantID); err != nil {
			return err
		}
		var err error
		if w, err = getWebhook(ctx, tx, tenantID, id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE webhooks SET deleted_at = ? WHERE id = ? AND tenant_id = ?`, max(toMS(now), 1), id, tenantID); err != nil {
			return fmt.Errorf("delete webhook: %w", err)
		}
		return recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: now, Action: ActionDeleted, ObjectType: AuditWebhook,
			ObjectID: w.ID, ObjectName: w.URL})
	})
	return w, err
}

// newWebhookSecret makes an endpoint's secret and seals it for storage.
func (s *WebhookStore) newWebhookSecret() (secret string, sealed []byte, err error) {
	sealer, err := s.webhookSealer()
	if err != nil {
		return "", nil, err
	}
	secret = NewWebhookSecret()
	if sealed, err = sealer.Seal([]byte(secret)); err != nil {
		return "", nil, fmt.Errorf("seal webhook secret: %w", err)
	}
	return secret, sealed, nil
}

// RotateSecret gives an endpoint a new secret and answers it. For
// overlap after it, deliveries are signed with the new and the previous
// secret, so that the receiver can switch at its own pace.
func (s *WebhookStore) RotateSecret(ctx context.Context, tenantID, id string, overlap time.Duration, now time.Time) (WebhookCreated, error) {
	now = normTime(now)
	secret, sealed, err := s.newWebhookSecret()
	if err != nil {
		return WebhookCreated{}, err
	}
	var w Webhook
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := requireWebhookOwner(ctx, tx, tenantID); err != nil {
			return err
		}
		var err error
		if w, err = getWebhook(ctx, tx, tenantID, id); err != nil {
			return err
		}
		until := now.Add(overlap)
		if _, err := tx.ExecContext(ctx, `
			UPDATE webhooks SET old_secret = secret, old_secret_until = ?, secret = ?, secret_prefix = ?, updated_at = ?
			WHERE id = ? AND tenant_id = ?`, toMS(until), sealed, secretPrefix(secret), toMS(now), id, tenantID); err != nil {
			return fmt.Errorf("rotate webhook secret: %w", err)
		}
		w.PreviousSecretUntil, w.SecretPrefix, w.UpdatedAt = &until, secretPrefix(secret), now
		return recordAudit(ctx, tx, AuditEntry{TenantID: tenantID, At: now, Action: ActionRotated, ObjectType: AuditWebhook,
			ObjectID: w.ID, ObjectName: w.URL, Changes: []FieldChange{{Field: "secret", Before: "…", After: w.SecretPrefix + "…"}}})
	})
	if err != nil {
		return WebhookCreated{}, err
	}
	return WebhookCreated{Webhook: w, Secret: secret}, nil
}

// Event is the body of every delivery.
type Event struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      any       `json:"data"`
}

// outboxEvent is one event to enqueue for the endpoints that want it.
type outboxEvent struct {
	tenantID string
	event    string
	orderKey string
	// dedupe, when set, makes the event once per endpoint whatever how
	// many times it is enqueued.
	dedupe    string
	at        time.Time // the event's time
	available time.Time // not sent before
	data      any
}

// tenantWebhooks answers the tenant's endpoints as the outbox needs them:
// those not deleted or paused.
func tenantWebhooks(ctx context.Context, tx *sql.Tx, tenantID string) ([]Webhook, error) {
	ws, err := queryAll(ctx, tx, scanWebhook, `SELECT `+webhookColumns+` FROM webhooks WHERE tenant_id = ? AND deleted_at = 0 AND paused = ''`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("webhooks of tenant: %w", err)
	}
	return ws, nil
}

// enqueue writes ev for w, unless its dedupe key was enqueued for w
// before, and makes the endpoint's queue for the key due. It reports
// whether a delivery was written.
func enqueue(ctx context.Context, tx *sql.Tx, w Webhook, ev outboxEvent, now time.Time) (bool, error) {
	q := outboxWriter{tx: tx}
	defer q.close()
	return q.enqueue(ctx, w, ev, now)
}

// outboxWriter writes deliveries in one transaction, its two statements
// prepared at first use and kept for the rest: a batch of quota crossings
// writes hundreds.
type outboxWriter struct {
	tx              *sql.Tx
	delivery, queue *sql.Stmt
	bounds          *outboxBounds // webhook_outbox.go
}

func (q *outboxWriter) close() {
	for _, st := range []*sql.Stmt{q.delivery, q.queue} {
		if st != nil {
			st.Close()
		}
	}
	if q.bounds != nil {
		q.bounds.close()
	}
}

// enqueue writes ev's delivery to w, unless its dedupe key is written
// already; it reports whether it wrote one.
func (q *outboxWriter) enqueue(ctx context.Context, w Webhook, ev outboxEvent, now time.Time) (bool, error) {
	body, err := json.Marshal(Event{Type: ev.event, Timestamp: ev.at.UTC(), Data: ev.data})
	if err != nil {
		return false, fmt.Errorf("encode event: %w", err)
	}
	if len(body) > MaxWebhookPayload {
		return false, fmt.Errorf("event %s of %d bytes is larger than %d", ev.event, len(body), MaxWebhookPayload)
	}
	var dedupe any
	if ev.dedupe != "" {
		dedupe = ev.dedupe
	}
	if q.delivery == nil {
		if q.delivery, err = q.tx.PrepareContext(ctx, `
			INSERT OR IGNORE INTO webhook_deliveries (msg_id, webhook_id, tenant_id, event, order_key, dedupe, payload, created_at, available_at, next_at, status)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending')`); err != nil {
			return false, fmt.Errorf("enqueue webhook delivery: %w", err)
		}
		if q.queue, err = q.tx.PrepareContext(ctx, `
			INSERT INTO webhook_queues (webhook_id, order_key, next_at) VALUES (?, ?, ?)
			ON CONFLICT (webhook_id, order_key) DO UPDATE SET next_at = MIN(next_at, excluded.next_at)`); err != nil {
			return false, fmt.Errorf("enqueue webhook delivery: queue: %w", err)
		}
	}
	avail := max(toMS(ev.available), toMS(now))
	res, err := q.delivery.ExecContext(ctx, NewID("msg_"), w.ID, w.TenantID, ev.event, ev.orderKey, dedupe, body, toMS(now), avail, avail)
	if err != nil {
		return false, fmt.Errorf("enqueue webhook delivery: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	if _, err = q.queue.ExecContext(ctx, w.ID, ev.orderKey, avail); err != nil {
		return false, fmt.Errorf("enqueue webhook delivery: queue: %w", err)
	}
	return true, q.bound(ctx, w.TenantID, now)
}

// keyEventData is a consumer key as its events describe it: never its
// secret.
type keyEventData struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Prefix string `json:"prefix"`
	Tier   string `json:"tier"`
}

// enqueueAuditEvents writes the deliveries an audit entry causes, in its
// transaction: config.changed with the entry, and key.created or
// key.revoked for a consumer key's.
func enqueueAuditEvents(ctx context.Context, tx *sql.Tx, e AuditEntry) error {
	if e.TenantID == "" {
		return nil
	}
	ws, err := tenantWebhooks(ctx, tx, e.TenantID)
	if err != nil || len(ws) == 0 {
		return err
	}
	var keyEvent string
	if e.ObjectType == AuditConsumerKey {
		switch e.Action {
		case ActionCreated:
			keyEvent = EventKeyCreated
		case ActionRevoked:
			keyEvent = EventKeyRevoked
		}
	}
	var keyData *keyEventData
	if keyEvent != "" {
		var d keyEventData
		err := tx.QueryRowContext(ctx, `SELECT id, name, prefix, tier FROM consumer_keys WHERE id = ? AND tenant_id = ?`, e.ObjectID, e.TenantID).
			Scan(&d.ID, &d.Name, &d.Prefix, &d.Tier)
		if err != nil {
			return fmt.Errorf("key event: %w", err)
		}
		keyData = &d
	}
	entry := any(e)
	if b, _ := json.Marshal(e); len(b) > MaxWebhookPayload-1024 {
		type truncated struct {
			AuditEntry
			ChangesTruncated bool `json:"changes_truncated"`
		}
		t := truncated{AuditEntry: e, ChangesTruncated: true}
		t.Changes = []FieldChange{}
		entry = t
	}
	for _, w := range ws {
		if w.Wants(EventConfigChanged) {
			ev := outboxEvent{tenantID: e.TenantID, event: EventConfigChanged, orderKey: WebhookOrderTenant, at: e.At, data: entry}
			if _, err := enqueue(ctx, tx, w, ev, e.At); err != nil {
				return err
			}
		}
		if keyData != nil && w.Wants(keyEvent) {
			ev := outboxEvent{tenantID: e.TenantID, event: keyEvent, orderKey: keyData.ID, at: e.At, data: keyData}
			if _, err := enqueue(ctx, tx, w, ev, e.At); err != nil {
				return err
			}
		}
	}
	return nil
}

// QuotaCrossing is one decision that moved a consumer key's use of one
// calendar limit from Before to After units (Before < After), in the
// period [PeriodStart, PeriodEnd): servers send it on the quota stream
// (bus.QuotaBatch) as it is, and the store finds each threshold t
// (percent) with Before < t·Quota/100 ≤ After.
type QuotaCrossing struct {
	TenantID    string `json:"t"`
	KeyID       string `json:"k"`
	Policy      string `json:"p"`  // the policy's name
	Limit       string `json:"l"`  // the limit's name ("" for a tier's only limit)
	Calendar    string `json:"c"`  // day, week, month or year
	Quota       int64  `json:"q"`  // the limit
	Before      int64  `json:"b"`  // units used before the decision
	After       int64  `json:"a"`  // units used after it
	PeriodStart int64  `json:"ps"` // unix seconds
	PeriodEnd   int64  `json:"pe"` // unix seconds
	At          int64  `json:"at"` // unix nanoseconds of the decision
}

// periodStart, periodEnd and at are c's instants as times, in UTC.
func (c *QuotaCrossing) periodStart() time.Time { return time.Unix(c.PeriodStart, 0).UTC() }
func (c *QuotaCrossing) periodEnd() time.Time   { return time.Unix(c.PeriodEnd, 0).UTC() }
func (c *QuotaCrossing) at() time.Time          { return time.Unix(0, c.At).UTC() }

// quotaEventData is the data of quota.threshold and quota.reset.
type quotaEventData struct {
	KeyID       string    `json:"key_id"`
	Policy      string    `json:"policy"`
	Limit       string    `json:"limit"`
	Calendar    string    `json:"calendar"`
	Threshold   int       `json:"threshold,omitempty"`
	Used        int64     `json:"used,omitempty"`
	Quota       int64     `json:"quota"`
	PeriodStart time.Time `json:"period_start"`
	PeriodEnd   time.Time `json:"period_end"`
}

// ThresholdUnits is the use at which t percent of quota is reached: the
// smallest whole number of units at or above t·quota/100.
func ThresholdUnits(t int, quota int64) int64 {
	return int64(math.Ceil(float64(t) * float64(quota) / 100))
}

// EnqueueQuotaCrossings writes, in tx, a quota.threshold delivery for each
// threshold of each endpoint a crossing passed, and for a crossing that
// reached the whole quota a quota.reset delivery due at the period's end.
// Each is written once per endpoint, key, policy, limit, period and
// threshold however many times it is reported (several servers, a stream
// redelivery). It answers how many deliveries were written.
func (s *Outbox) EnqueueQuotaCrossings(ctx context.Context, tx *sql.Tx, cs []QuotaCrossing, now time.Time) (int, error) {
	q := outboxWriter{tx: tx}
	defer q.close()
	byTenant := map[string][]Webhook{}
	written := 0
	for _, c := range cs {
		if c.Quota <= 0 || c.After <= c.Before {
			continue
		}
		ws, ok := byTenant[c.TenantID]
		if !ok {
			var err error
			if ws, err = tenantWebhooks(ctx, tx, c.TenantID); err != nil {
				return written, err
			}
			byTenant[c.TenantID] = ws
		}
		scope := c.KeyID + "/" + c.Policy + "/" + c.Limit + "/" + strconv.FormatInt(c.PeriodStart, 10)
		for _, w := range ws {
			if w.Wants(EventQuotaThreshold) {
				for _, t := range w.Thresholds {
					if u := ThresholdUnits(t, c.Quota); c.Before < u && u <= c.After {
						ev := outboxEvent{tenantID: c.TenantID, event: EventQuotaThreshold, orderKey: c.KeyID,
							dedupe: EventQuotaThreshold + "/" + scope + "/" + strconv.Itoa(t), at: c.at(),
							data: quotaEventData{KeyID: c.KeyID, Policy: c.Policy, Limit: c.Limit, Calendar: c.Calendar, Threshold: t,
								Used: c.After, Quota: c.Quota, PeriodStart: c.periodStart(), PeriodEnd: c.periodEnd()}}
						ok, err := q.enqueue(ctx, w, ev, now)
						if err != nil {
							return written, err
						}
						if ok {
							written++
						}
					}
				}
			}
			if w.Wants(EventQuotaReset) && c.Before < c.Quota && c.Quota <= c.After {
				ev := outboxEvent{tenantID: c.TenantID, event: EventQuotaReset, orderKey: c.KeyID,
					dedupe: EventQuotaReset + "/" + scope, at: c.periodEnd(), available: c.periodEnd(),
					data: quotaEventData{KeyID: c.KeyID, Policy: c.Policy, Limit: c.Limit, Calendar: c.Calendar,
						Quota: c.Quota, PeriodStart: c.periodStart(), PeriodEnd: c.periodEnd()}}
				ok, err := q.enqueue(ctx, w, ev, now)
				if err != nil {
					return written, err
				}
				if ok {
					written++
				}
			}
		}
	}
	return written, nil
}

// TenantsWanting answers the tenants with an endpoint that wants event.
func (s *Outbox) TenantsWanting(ctx context.Context, event string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT w.tenant_id FROM webhooks w, json_each(w.events) e WHERE w.deleted_at = 0 AND w.paused = '' AND e.value = ?`, event)
	if err != nil {
		return nil, fmt.Errorf("webhook tenants: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// TopOffender is a caller in a tenant's top offenders.
type TopOffender struct {
	Identity Identity `json:"identity"`
	Rank     int      `json:"rank"`
	Denied   int64    `json:"denied"`
	Allowed  int64    `json:"allowed"`
}

// topOffenderData is the data of caller.top_offender.
type topOffenderData struct {
	TopOffender
	WindowStart time.Time `json:"window_start"`
	WindowEnd   time.Time `json:"window_end"`
}

// TopOffenderQuiet is how long a caller announced as a top offender is
// not announced again.
const TopOffenderQuiet = 24 * time.Hour

// EnqueueTopOffenders writes a caller.top_offender delivery for each
// offender not announced within TopOffenderQuiet, to the tenant's
// endpoints that want it, and answers how many callers were announced.
func (s *Outbox) EnqueueTopOffenders(ctx context.Context, tenantID string, offenders []TopOffender, from, now time.Time) (int, error) {
	now = normTime(now)
	n := 0
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		ws, err := tenantWebhooks(ctx, tx, tenantID)
		if err != nil {
			return err
		}
		for _, o := range offenders {
			id := o.Identity.Kind + ":" + o.Identity.ID
			var last int64
			err := tx.QueryRowContext(ctx, `SELECT notified_at FROM webhook_offenders WHERE tenant_id = ? AND identity = ?`, tenantID, id).Scan(&last)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("top offender: %w", err)
			}
			if err == nil && toMS(now)-last < TopOffenderQuiet.Milliseconds() {
				continue
			}
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO webhook_offenders (tenant_id, identity, notified_at) VALUES (?, ?, ?)
				ON CONFLICT (tenant_id, identity) DO UPDATE SET notified_at = excluded.notified_at`, tenantID, id, toMS(now)); err != nil {
				return fmt.Errorf("top offender: %w", err)
			}
			n++
			for _, w := range ws {
				if !w.Wants(EventTopOffender) {
					continue
				}
				ev := outboxEvent{tenantID: tenantID, event: EventTopOffender, orderKey: WebhookOrderTenant, at: now,
					data: topOffenderData{TopOffender: o, WindowStart: from.UTC(), WindowEnd: now}}
				if _, err := enqueue(ctx, tx, w, ev, now); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return n, err
}

// WebhookDelivery is one event sent, or to send, to one endpoint.
type WebhookDelivery struct {
	// ID is the delivery's webhook-id header: a resend keeps it, so that
	// the receiver can tell it has seen the event.
	ID            string          `json:"id"`
	WebhookID     string          `json:"webhook_id"`
	Event         string          `json:"event"`
	Status        string          `json:"status"`
	Attempts      int             `json:"attempts"`
	ResponseCode  int             `json:"response_code,omitempty"`
	LatencyMS     int64           `json:"latency_ms"`
	LastError     string          `json:"last_error,omitempty"`
	CreatedAt     time.Time       `json:"created_at"`
	LastAttemptAt *time.Time      `json:"last_attempt_at,omitempty"`
	NextAttemptAt *time.Time      `json:"next_attempt_at,omitempty"`
	Payload       json.RawMessage `json:"payload"`
}

// DeliveryQuery selects a page of an endpoint's deliveries, newest first.
type DeliveryQuery struct {
	TenantID  string `json:"tenant_id"`
	WebhookID string `json:"webhook_id"`
	// Before, when above 0, is the previous page's Next.
	Before int64 `json:"before,omitempty"`
	// Limit is 1–MaxDeliveryPage, DefaultDeliveryPage when 0.
	Limit int `json:"limit,omitempty"`
}

// DeliveryPage is a page of deliveries and the cursor of the next, 0 when
// this is the last.
type DeliveryPage struct {
	Deliveries []WebhookDelivery `json:"deliveries"`
	Next       int64             `json:"next,omitempty"`
}

const deliveryColumns = `id, msg_id, webhook_id, event, status, attempts, response_code, latency_ms, last_error, created_at, last_attempt_at, next_at, available_at, payload, dropped`

func scanDelivery(sc scanner) (int64, WebhookDelivery, error) {
	var d WebhookDelivery
	var rowID, created, last, next, avail int64
	var payload []byte
	var dropped bool
	if err := sc.Scan(&rowID, &d.ID, &d.WebhookID, &d.Event, &d.Status, &d.Attempts, &d.ResponseCode, &d.LatencyMS, &d.LastError,
		&created, &last, &next, &avail, &payload, &dropped); err != nil {
		return 0, WebhookDelivery{}, err
	}
	if dropped {
		d.Status = DeliveryDropped
	}
	d.CreatedAt = fromMS(created)
	if last > 0 {
		t := fromMS(last)
		d.LastAttemptAt = &t
	}
	if d.Status == DeliveryPending {
		t := fromMS(max(next, avail))
		d.NextAttemptAt = &t
	}
	d.Payload = payload
	return rowID, d, nil
}

// Deliveries answers a page of one of the tenant's endpoints'
// deliveries, newest first.
func (s *WebhookStore) Deliveries(ctx context.Context, q DeliveryQuery) (DeliveryPage, error) {
	switch {
	case q.Limit < 0 || q.Limit > MaxDeliveryPage:
		return DeliveryPage{}, invalid("limit", "must be between 1 and %d", MaxDeliveryPage)
	case q.Before < 0:
		return DeliveryPage{}, invalid("before", "must be a cursor of a previous page")
	}
	if q.Limit == 0 {
		q.Limit = DefaultDeliveryPage
	}
	if _, err := getWebhook(ctx, s.db, q.TenantID, q.WebhookID); err != nil {
		return DeliveryPage{}, err
	}
	before := int64(math.MaxInt64)
	if q.Before > 0 {
		before = q.Before
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE webhook_id = ? AND id < ? ORDER BY id DESC LIMIT ?`,
		q.WebhookID, before, q.Limit+1)
	if err != nil {
		return DeliveryPage{}, fmt.Errorf("list deliveries: %w", err)
	}
	defer rows.Close()
	page := DeliveryPage{Deliveries: []WebhookDelivery{}}
	var last int64
	for rows.Next() {
		id, d, err := scanDelivery(rows)
		if err != nil {
			return DeliveryPage{}, err
		}
		if len(page.Deliveries) == q.Limit {
			page.Next = last
			break
		}
		page.Deliveries = append(page.Deliveries, d)
		last = id
	}
	return page, rows.Err()
}

// Resend sends a delivery again, with the same id: one that
// was delivered or failed starts a new retry schedule; a pending one is
// attempted now.
func (s *WebhookStore) Resend(ctx context.Context, tenantID, webhookID, deliveryID string, now time.Time) (WebhookDelivery, error) {
	now = normTime(now)
	var d WebhookDelivery
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := requireWebhookOwner(ctx, tx, tenantID); err != nil {
			return err
		}
		if _, err := getWebhook(ctx, tx, tenantID, webhookID); err != nil {
			return err
		}
		var orderKey string
		var dropped bool
		err := tx.QueryRowContext(ctx, `SELECT order_key, dropped FROM webhook_deliveries WHERE msg_id = ? AND webhook_id = ?`, deliveryID, webhookID).Scan(&orderKey, &dropped)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.Errorf(errs.NotFound, "delivery not found")
		}
		if err != nil {
			return fmt.Errorf("resend delivery: %w", err)
		}
		if dropped {
			return errs.Errorf(errs.Conflict, "this delivery was dropped when the tenant's webhook outbox was full; its event is no longer kept")
		}
		// A resent delivery takes its place after what is already
		// pending for its key (available_at orders them).
		if _, err := tx.ExecContext(ctx, `
			UPDATE webhook_deliveries SET status = 'pending', step = 0, done_at = 0, next_at = ?,
				available_at = CASE WHEN status = 'pending' THEN available_at ELSE ? END
			WHERE msg_id = ?`, toMS(now), toMS(now), deliveryID); err != nil {
			return fmt.Errorf("resend delivery: %w", err)
		}
		ob := outboxWriter{tx: tx}
		defer ob.close()
		if err := ob.bound(ctx, tenantID, now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO webhook_queues (webhook_id, order_key, next_at) VALUES (?, ?, ?)
			ON CONFLICT (webhook_id, order_key) DO UPDATE SET next_at = MIN(next_at, excluded.next_at)`, webhookID, orderKey, toMS(now)); err != nil {
			return fmt.Errorf("resend delivery: %w", err)
		}
		_, d, err = scanDelivery(tx.QueryRowContext(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE msg_id = ?`, deliveryID))
		return err
	})
	return d, err
}
