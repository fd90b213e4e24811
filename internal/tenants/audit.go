package tenants

// The audit log: who changed what in the configuration, and when.
//
// Every config write records its entries with recordAudit inside its own
// write transaction, so an entry commits exactly when its change does (and
// rides in the same record of the standby's replication log). A write that
// fails, or that changes nothing (revoking a revoked key, an empty patch),
// records nothing.
//
// The actor travels in the context rather than as a parameter of every
// write: it is request metadata that the server sets once where the request
// is authenticated, the NATS request carries (bus.ActorHeader), and the
// worker puts back into the context before calling the store. Writes the
// worker makes on its own (the operator bootstrap, expired blocks) have no
// actor in their context and are recorded as Sluice's.
//
// Entries never hold secrets: keys appear by prefix, passwords only as
// "changed".

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// Actor kinds.
const (
	ActorUser       = "user"        // a tenant's dashboard user
	ActorOperator   = "operator"    // the operator's token or dashboard login
	ActorServiceKey = "service_key" // a tenant's server, by service key
	ActorSystem     = "system"      // Sluice itself (start-up, expiry)
	ActorUnknown    = "unknown"     // a server that did not say who acted
)

// Actor is who made a config change.
type Actor struct {
	Kind string `json:"kind"`
	// ID is the user's or the service key's id, when known.
	ID string `json:"id,omitempty"`
	// Label is how people know the actor: an email, a service key's
	// prefix ("sk_AbC12…"), "operator".
	Label string `json:"label"`
}

// String is the actor as the audit log shows it.
func (a Actor) String() string {
	switch a.Kind {
	case ActorServiceKey:
		return "service key " + a.Label
	case ActorOperator:
		if a.Label == "" || a.Label == ActorOperator {
			return "operator"
		}
		return "operator " + a.Label
	case ActorSystem:
		return "Sluice"
	}
	if a.Label == "" {
		return a.Kind
	}
	return a.Label
}

// UserActor is a dashboard user acting: the operator's login or a tenant's
// user.
func UserActor(id, email, role string) Actor {
	if role == RoleOperator {
		return Actor{Kind: ActorOperator, ID: id, Label: email}
	}
	return Actor{Kind: ActorUser, ID: id, Label: email}
}

// OperatorTokenActor is the operator acting with the operator token.
func OperatorTokenActor() Actor { return Actor{Kind: ActorOperator, Label: ActorOperator} }

// ServiceKeyActor is a tenant's server acting with a service key, known by
// the key's prefix (the secret itself is never recorded).
func ServiceKeyActor(key string) Actor {
	return Actor{Kind: ActorServiceKey, Label: key[:min(len(key), prefixLength)] + "…"}
}

var systemActor = Actor{Kind: ActorSystem, Label: "sluice"}

type actorKey struct{}

// WithActor returns ctx carrying the actor of the config writes made with it.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorFrom returns the actor ctx carries; ok is false when there is none.
func ActorFrom(ctx context.Context) (Actor, bool) {
	a, ok := ctx.Value(actorKey{}).(Actor)
	return a, ok
}

// Audited object types.
const (
	AuditTenant      = "tenant"
	AuditPolicy      = "policy"
	AuditConsumerKey = "consumer_key"
	AuditServiceKey  = "service_key"
	AuditUser        = "user"
	AuditBlock       = "block"
	AuditBucket      = "bucket"
	AuditOperator    = "operator"
	AuditWebhook     = "webhook"
	AuditJWTIssuer   = "jwt_issuer"
	AuditCustomer    = "customer"
)

// AuditObjectTypes lists the object types, in the order filters show them.
var AuditObjectTypes = []string{AuditPolicy, AuditConsumerKey, AuditServiceKey, AuditUser, AuditBlock, AuditBucket, AuditWebhook, AuditJWTIssuer, AuditCustomer, AuditTenant, AuditOperator}

// Audited actions.
const (
	ActionCreated         = "created"
	ActionUpdated         = "updated"
	ActionDeleted         = "deleted"
	ActionRevoked         = "revoked"
	ActionReset           = "reset"
	ActionInvited         = "invited"
	ActionRoleChanged     = "role_changed"
	ActionRemoved         = "removed"
	ActionPasswordChanged = "password_changed"
	ActionEmailChanged    = "email_changed"
	ActionSessionsEnded   = "sessions_ended"
	ActionExpired         = "expired"
	ActionRotated         = "secret_rotated"
)

// FieldChange is one field of an object before and after a change; Before
// is empty for a new object's fields, After for a removed one's.
type FieldChange struct {
	Field  string `json:"field"`
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
}

// AuditEntry is one config change.
type AuditEntry struct {
	ID int64 `json:"id"`
	// TenantID is the tenant the object belongs to; empty for the
	// platform's own settings (the operator's login and token).
	TenantID string `json:"tenant_id,omitempty"`
	// TenantName is filled when entries are listed for the operator.
	TenantName string        `json:"tenant_name,omitempty"`
	At         time.Time     `json:"at"`
	Actor      Actor         `json:"actor"`
	Action     string        `json:"action"`
	ObjectType string        `json:"object_type"`
	ObjectID   string        `json:"object_id"`
	ObjectName string        `json:"object_name"`
	Changes    []FieldChange `json:"changes"`
}

// recordAudit writes e in tx, the transaction of the change it describes,
// with the actor of ctx and the next id.
func recordAudit(ctx context.Context, tx *sql.Tx, e AuditEntry) error {
	a, ok := ActorFrom(ctx)
	if !ok {
		a = systemActor
	}
	if e.Changes == nil {
		e.Changes = []FieldChange{}
	}
	changes, err := json.Marshal(e.Changes)
	if err != nil {
		return fmt.Errorf("audit: encode changes: %w", err)
	}
	// One writer at a time (the store's semaphore), so the next id cannot
	// be taken twice; passing it as an argument keeps the replayed
	// statement deterministic on a standby.
	var last int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM audit_log`).Scan(&last); err != nil {
		return fmt.Errorf("audit: next id: %w", err)
	}
	_, err = tx.ExecContext(ctx, `
		INSERT INTO audit_log (id, tenant_id, at, actor_kind, actor_id, actor_label, action, object_type, object_id, object_name, changes)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		last+1, e.TenantID, toMS(e.At), a.Kind, a.ID, a.Label, e.Action, e.ObjectType, e.ObjectID, e.ObjectName, string(changes))
	if err != nil {
		return fmt.Errorf("audit: record: %w", err)
	}
	// The webhooks this change causes commit with it (webhooks.go).
	e.ID, e.Actor = last+1, a
	return enqueueAuditEvents(ctx, tx, e)
}

// AuditQuery selects a page of entries, newest first.
type AuditQuery struct {
	// TenantID keeps one tenant's entries. AllTenants must be set to read
	// every tenant's (the operator), so that a forgotten tenant id can
	// never list other tenants' entries.
	TenantID   string `json:"tenant_id,omitempty"`
	AllTenants bool   `json:"all_tenants,omitempty"`
	// ObjectType and Actor (an actor's label) filter when set.
	ObjectType string `json:"object_type,omitempty"`
	Actor      string `json:"actor,omitempty"`
	// Before, when above 0, is the id of the last entry of the previous
	// page: the page holds older entries only.
	Before int64 `json:"before,omitempty"`
	// Limit is the page size: 1–200, 50 when 0.
	Limit int `json:"limit,omitempty"`
}

// DefaultAuditPage and MaxAuditPage bound AuditQuery.Limit.
const (
	DefaultAuditPage = 50
	MaxAuditPage     = 200
)

// AuditPage is one page of entries and the cursor of the next, 0 when this
// is the last.
type AuditPage struct {
	Entries []AuditEntry `json:"entries"`
	Next    int64        `json:"next,omitempty"`
}

// Validate checks the query's fields, naming the one at fault.
func (q AuditQuery) Validate() error {
	switch {
	case q.TenantID == "" && !q.AllTenants:
		return invalid("tenant_id", "required")
	case q.Limit < 0 || q.Limit > MaxAuditPage:
		return invalid("limit", "must be between 1 and %d", MaxAuditPage)
	case q.Before < 0:
		return invalid("before", "must be a positive entry id")
	case q.ObjectType != "" && !knownObjectType(q.ObjectType):
		return invalid("object_type", "must be one of %s", strings.Join(AuditObjectTypes, ", "))
	case len(q.Actor) > 320:
		return invalid("actor", "too long")
	}
	return nil
}

func knownObjectType(t string) bool {
	for _, k := range AuditObjectTypes {
		if k == t {
			return true
		}
	}
	return false
}

// AuditLog reads and prunes the audit log that every config write records
// into (recordAudit). Get it from Store.Audit.
type AuditLog struct{ *core }

const auditColumns = `a.id, a.tenant_id, COALESCE(t.name, ''), a.at, a.actor_kind, a.actor_id, a.actor_label, a.action, a.object_type, a.object_id, a.object_name, a.changes`

func scanAudit(sc scanner) (AuditEntry, error) {
	var e AuditEntry
	var at int64
	var changes string
	if err := sc.Scan(&e.ID, &e.TenantID, &e.TenantName, &at, &e.Actor.Kind, &e.Actor.ID, &e.Actor.Label, &e.Action, &e.ObjectType, &e.ObjectID, &e.ObjectName, &changes); err != nil {
		return AuditEntry{}, err
	}
	e.At = fromMS(at)
	if err := json.Unmarshal([]byte(changes), &e.Changes); err != nil {
		return AuditEntry{}, fmt.Errorf("audit entry %d: changes column: %w", e.ID, err)
	}
	return e, nil
}

// List returns one page of entries, newest first. Each filter is an
// equality on an indexed column followed by id, so a page costs the same
// however many entries there are.
func (s *AuditLog) List(ctx context.Context, q AuditQuery) (AuditPage, error) {
	if err := q.Validate(); err != nil {
		return AuditPage{}, err
	}
	if q.Limit == 0 {
		q.Limit = DefaultAuditPage
	}
	var where []string
	var args []any
	if !q.AllTenants || q.TenantID != "" {
		where, args = append(where, "a.tenant_id = ?"), append(args, q.TenantID)
	}
	if q.ObjectType != "" {
		where, args = append(where, "a.object_type = ?"), append(args, q.ObjectType)
	}
	if q.Actor != "" {
		where, args = append(where, "a.actor_label = ?"), append(args, q.Actor)
	}
	if q.Before > 0 {
		where, args = append(where, "a.id < ?"), append(args, q.Before)
	}
	query := `SELECT ` + auditColumns + ` FROM audit_log a LEFT JOIN tenants t ON t.id = a.tenant_id`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	// One more than the page tells whether there is a next page.
	query += ` ORDER BY a.id DESC LIMIT ?`
	args = append(args, q.Limit+1)
	entries, err := queryAll(ctx, s.db, scanAudit, query, args...)
	if err != nil {
		return AuditPage{}, fmt.Errorf("list audit log: %w", err)
	}
	page := AuditPage{Entries: entries}
	if len(entries) > q.Limit {
		page.Entries = entries[:q.Limit]
		page.Next = page.Entries[q.Limit-1].ID
	}
	if page.Entries == nil {
		page.Entries = []AuditEntry{}
	}
	return page, nil
}

// Get returns one entry of the tenant's (any tenant's with
// tenantID ""): another tenant's entry answers errs.NotFound as a missing
// one does.
func (s *AuditLog) Get(ctx context.Context, tenantID string, id int64, allTenants bool) (AuditEntry, error) {
	query := `SELECT ` + auditColumns + ` FROM audit_log a LEFT JOIN tenants t ON t.id = a.tenant_id WHERE a.id = ?`
	args := []any{id}
	if !allTenants {
		if tenantID == "" { // the platform's entries are the operator's alone
			return AuditEntry{}, errNoAuditEntry
		}
		query += ` AND a.tenant_id = ?`
		args = append(args, tenantID)
	}
	return queryOne(ctx, s.db, scanAudit, "audit entry not found", query, args...)
}

// Prune deletes the entries recorded before cut, oldest first, in
// transactions of at most batch rows, and returns how many it deleted.
func (s *AuditLog) Prune(ctx context.Context, cut time.Time, batch int) (int64, error) {
	var total int64
	for {
		var n int64
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE at < ? ORDER BY at LIMIT ?)`, toMS(cut), batch)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, fmt.Errorf("prune audit log: %w", err)
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}

// errNoAuditEntry is what a malformed entry id answers, as an unknown one.
var errNoAuditEntry = errs.Errorf(errs.NotFound, "audit entry not found")

// ParseAuditID reads an entry id from a URL; anything but a positive
// integer answers errs.NotFound, as an unknown id does.
func ParseAuditID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, errNoAuditEntry
	}
	return id, nil
}
