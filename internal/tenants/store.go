package tenants

// The store is used by the worker, the only process that opens SQLite.
//
// Every write runs in one transaction (BEGIN IMMEDIATE, from the DSN's
// _txlock) that also increments settings.config_version when it changes
// configuration servers hold, and returns the Changes to announce. Writes
// through one Store are also serialized by a semaphore, so they queue in Go
// instead of in SQLite's busy handler; the busy timeout still covers other
// writers of the same file. User writes change nothing servers hold and
// leave the version alone, so servers never see a version with no change;
// those that move a user's session version (store_users.go) are config
// writes, since every server checks sessions against it.
//
// Tenant isolation: every method acting on a tenant's object takes the
// tenant id and puts it in the WHERE clause; another tenant's id answers
// exactly as a missing one does.
//
// Times are stored as INTEGER unix milliseconds and returned in UTC, so a
// value read back equals what was returned at write time.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// Settings keys.
const (
	settingConfigVersion     = "config_version"
	settingOperatorTokenHash = "operator_token_hash"
)

// Store reads and writes the configuration in SQLite. It is safe for
// concurrent use. Its own methods are what spans aggregates; each
// aggregate's reads and writes are on the store its accessor returns
// (doc.go).
type Store struct {
	*core
	tenants     *TenantStore
	serviceKeys *ServiceKeyStore
	users       *UserStore
	operator    *OperatorStore
	setup       *SetupStore
	keys        *KeyStore
	policies    *PolicyStore
	blocks      *BlockStore
	webhooks    *WebhookStore
	jwtIssuers  *JWTIssuerStore
	customers   *CustomerStore
	outbox      *Outbox
	queue       *DeliveryQueue
	audit       *AuditLog
}

// core is what every store of one database shares: the handle, the one
// writer, and the settings writes are checked against.
type core struct {
	db        *sql.DB
	write     chan struct{} // a one-slot semaphore held for each write transaction
	passwords *passwordGate // bounds argon2id work (passwords.go)
	caps      atomic.Pointer[Caps]
	sealer    atomic.Pointer[WebhookSealer] // seals webhook secrets (webhooks.go)
}

// NewStore returns a Store over db, which must have been opened with
// sqlitedb.Open (schema migrated, foreign keys on, immediate transactions).
func NewStore(db *sql.DB) *Store {
	c := &core{db: db, write: make(chan struct{}, 1), passwords: newPasswordGate(PasswordSlots, PasswordQueue)}
	return &Store{core: c, tenants: &TenantStore{c}, serviceKeys: &ServiceKeyStore{c}, users: &UserStore{c},
		operator: &OperatorStore{c}, setup: &SetupStore{c}, keys: &KeyStore{c}, policies: &PolicyStore{c}, blocks: &BlockStore{c},
		webhooks: &WebhookStore{c}, jwtIssuers: &JWTIssuerStore{c}, customers: &CustomerStore{c}, outbox: &Outbox{c}, queue: &DeliveryQueue{core: c}, audit: &AuditLog{c}}
}

// Tenants returns the store of tenants.
func (s *Store) Tenants() *TenantStore { return s.tenants }

// ServiceKeys returns the store of tenants' service keys.
func (s *Store) ServiceKeys() *ServiceKeyStore { return s.serviceKeys }

// Users returns the store of dashboard logins.
func (s *Store) Users() *UserStore { return s.users }

// Operator returns the store of the operator's login and token.
func (s *Store) Operator() *OperatorStore { return s.operator }

// Setup returns the store of the first-run setup link.
func (s *Store) Setup() *SetupStore { return s.setup }

// Keys returns the store of consumer keys.
func (s *Store) Keys() *KeyStore { return s.keys }

// Policies returns the store of policies.
func (s *Store) Policies() *PolicyStore { return s.policies }

// Blocks returns the store of blocks.
func (s *Store) Blocks() *BlockStore { return s.blocks }

// JWTIssuers returns the store of tenants' JWT issuers.
func (s *Store) JWTIssuers() *JWTIssuerStore { return s.jwtIssuers }

// Customers returns the store of tenants' customers.
func (s *Store) Customers() *CustomerStore { return s.customers }

// Webhooks returns the store of webhook endpoints.
func (s *Store) Webhooks() *WebhookStore { return s.webhooks }

// Outbox returns the webhook outbox that events are written to.
func (s *Store) Outbox() *Outbox { return s.outbox }

// DeliveryQueue returns the webhook deliveries as the delivery loop reads
// them.
func (s *Store) DeliveryQueue() *DeliveryQueue { return s.queue }

// Audit returns the audit log.
func (s *Store) Audit() *AuditLog { return s.audit }

// querier is what *sql.DB and *sql.Tx have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// scanner is what *sql.Row and *sql.Rows have in common.
type scanner interface{ Scan(dest ...any) error }

// inTx runs fn in a write transaction and commits it if fn succeeds.
func (s *core) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	select {
	case s.write <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.write }()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// WriteTx runs fn in a write transaction under the store's semaphore and
// commits it if fn succeeds. The worker runs all its other SQLite writes
// (stream batches, the sweep, pruning) through it, so every write of the
// process queues in Go and none waits in SQLite's busy handler.
func (s *Store) WriteTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.inTx(ctx, fn)
}

// Exclusive runs fn holding the store's write semaphore, for writes that
// are not one transaction (SQLite's incremental vacuum).
func (s *Store) Exclusive(ctx context.Context, fn func() error) error {
	select {
	case s.write <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.write }()
	return fn()
}

// writeConfig runs fn in a write transaction. When fn returns changes, the
// config version is incremented once in the same transaction and stamped
// on all of them.
func (s *core) writeConfig(ctx context.Context, fn func(tx *sql.Tx) ([]Change, error)) ([]Change, error) {
	var out []Change
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		changes, err := fn(tx)
		if err != nil || len(changes) == 0 {
			return err
		}
		v, err := bumpVersion(ctx, tx)
		if err != nil {
			return err
		}
		for i := range changes {
			changes[i].Version = v
		}
		out = changes
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func bumpVersion(ctx context.Context, tx *sql.Tx) (int64, error) {
	var v int64
	err := tx.QueryRowContext(ctx, `
		INSERT INTO settings (key, value) VALUES (?, '1')
		ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1
		RETURNING CAST(value AS INTEGER)`, settingConfigVersion).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("bump config version: %w", err)
	}
	return v, nil
}

// ConfigVersion returns the version of the last committed config write
// (0 before the first).
func (s *Store) ConfigVersion(ctx context.Context) (int64, error) {
	return configVersion(ctx, s.db)
}

func configVersion(ctx context.Context, q querier) (int64, error) {
	var v int64
	err := q.QueryRowContext(ctx, `SELECT CAST(value AS INTEGER) FROM settings WHERE key = ?`, settingConfigVersion).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read config version: %w", err)
	}
	return v, nil
}

func setting(ctx context.Context, q querier, key string) (string, error) {
	var v string
	err := q.QueryRowContext(ctx, `SELECT value FROM settings WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read setting %s: %w", key, err)
	}
	return v, nil
}

// Snapshot returns everything servers need, read in one transaction so it
// is consistent with its Version.
func (s *Store) Snapshot(ctx context.Context) (Snapshot, error) {
	var snap Snapshot
	// A write transaction only because the DSN makes every transaction
	// immediate; it writes nothing.
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if snap.Version, err = configVersion(ctx, tx); err != nil {
			return err
		}
		if snap.OperatorTokenHash, err = setting(ctx, tx, settingOperatorTokenHash); err != nil {
			return err
		}
		if snap.Tenants, err = queryAll(ctx, tx, scanTenant, `SELECT `+tenantColumns+` FROM tenants ORDER BY id`); err != nil {
			return err
		}
		if snap.ServiceKeys, err = queryAll(ctx, tx, scanServiceKeyRecord, `SELECT `+serviceKeyColumns+` FROM service_keys ORDER BY id`); err != nil {
			return err
		}
		if snap.ConsumerKeys, err = queryAll(ctx, tx, scanConsumerKeyRecord, `SELECT `+consumerKeyColumns+` FROM consumer_keys ORDER BY id`); err != nil {
			return err
		}
		if snap.Policies, err = queryAll(ctx, tx, scanPolicy, `SELECT `+policyColumns+` FROM policies ORDER BY id`); err != nil {
			return err
		}
		if snap.Blocks, err = queryAll(ctx, tx, scanBlock, `SELECT `+blockColumns+` FROM blocks ORDER BY id`); err != nil {
			return err
		}
		if snap.JWTIssuers, err = queryAll(ctx, tx, scanJWTIssuer, `SELECT `+jwtIssuerColumns+` FROM jwt_issuers ORDER BY id`); err != nil {
			return err
		}
		if snap.Customers, err = queryAll(ctx, tx, scanCustomerRecord, `SELECT `+customerColumns+` FROM customers ORDER BY id`); err != nil {
			return err
		}
		snap.Users, err = queryAll(ctx, tx, scanUserSession, `SELECT id, COALESCE(tenant_id, ''), session_version FROM users ORDER BY id`)
		return err
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	return snap, nil
}

// queryAll runs a query and scans every row with scan.
func queryAll[T any](ctx context.Context, q querier, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// queryOne scans the single row of a query, answering errs.NotFound with
// notFound when there is none.
func queryOne[T any](ctx context.Context, q querier, scan func(scanner) (T, error), notFound, query string, args ...any) (T, error) {
	v, err := scan(q.QueryRowContext(ctx, query, args...))
	if errors.Is(err, sql.ErrNoRows) {
		var zero T
		return zero, errs.Errorf(errs.NotFound, "%s", notFound)
	}
	return v, err
}

func exists(ctx context.Context, q querier, query string, args ...any) (bool, error) {
	var one int
	err := q.QueryRowContext(ctx, query, args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func requireTenant(ctx context.Context, q querier, tenantID string) error {
	ok, err := exists(ctx, q, `SELECT 1 FROM tenants WHERE id = ?`, tenantID)
	if err != nil {
		return fmt.Errorf("find tenant: %w", err)
	}
	if !ok {
		return errs.Errorf(errs.NotFound, "tenant not found")
	}
	return nil
}

// Time and JSON column helpers.

func toMS(t time.Time) int64 { return t.UnixMilli() }

func fromMS(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// normTime returns t as the store will return it: UTC, whole milliseconds.
func normTime(t time.Time) time.Time { return fromMS(toMS(t)) }

func normOptTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	n := normTime(*t)
	return &n
}

func optMS(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: toMS(*t), Valid: true}
}

func fromOptMS(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMS(v.Int64)
	return &t
}

func toJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
