// Package reserve keeps reservations: checks that took an estimate from a
// caller's buckets ("reserve": n) and are settled later with the amount the
// request really used (POST /v1/settle), the LLM-token case.
//
// The estimate is consumed when the check is decided, as a check of that
// cost would be, so a reservation nobody settles simply stands at its
// estimate once it expires: nothing has to run at expiry for the buckets
// to be right. A settle gives back (actual < estimate) or charges
// (actual > estimate, up to the reservation's cap) the difference.
//
// The worker is the only writer of reservations (the SQLite store here);
// servers create and settle them through it, so a settle is idempotent
// across every server: the first settle of a reservation records its
// actual amount, and a repeated one with the same amount answers as the
// first did without touching a bucket again.
package reserve

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// Bounds.
const (
	// MaxUnits bounds an estimate, a cap and an actual amount, as a check's
	// cost is bounded.
	MaxUnits = 1_000_000
	// DefaultTTL is how long a reservation waits for its settle when the
	// check names no reserve_ttl; MaxTTL is the longest it may ask.
	DefaultTTL = 15 * time.Minute
	MinTTL     = time.Second
	MaxTTL     = 24 * time.Hour
	// MaxOpen is the most open (unsettled, unexpired) reservations one
	// tenant may hold: each is a row the worker writes, and one tenant's
	// flood of them must not grow the database without bound.
	MaxOpen = 100_000
	// MaxBatch is the most reservations recorded together (CreateAll,
	// Cancel): a check batch's size.
	MaxBatch = 1000
	// Keep is how long a settled or expired reservation is remembered, so
	// that a repeated settle answers as the first did (or says it expired)
	// rather than not_found.
	Keep = 7 * 24 * time.Hour
)

// States of a reservation.
const (
	StateOpen    = "open"
	StateSettled = "settled"
	StateExpired = "expired"
	// StateCancelled is a reservation given back before its id reached
	// the caller (Cancel).
	StateCancelled = "cancelled"
)

// Hold is where a reservation's units were taken: the bucket, and what a
// server needs to find the same limits when it settles (the engine's
// decision key parts).
type Hold struct {
	BucketKey    string `json:"bucket_key"`
	PolicyID     string `json:"policy_id"`
	Policy       string `json:"policy"` // the policy's name
	Tier         string `json:"tier"`
	KeyID        string `json:"key_id,omitempty"` // the key whose own limits decided
	IdentityKind string `json:"identity_kind"`
	IdentityID   string `json:"identity_id"`
}

// Reservation is one reserved estimate.
type Reservation struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	Hold
	Reserved  int64      `json:"reserved"`
	Cap       int64      `json:"cap"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	State     string     `json:"state"`
	Actual    *int64     `json:"actual,omitempty"`
	SettledAt *time.Time `json:"settled_at,omitempty"`
	// Unapplied marks a settled reservation whose difference is not known
	// to have reached its buckets (the apply failed, or its answer was
	// lost): a repeated settle applies it, and the bucket's owner applies
	// a settle's difference once (its id is the same for every retry).
	// A worker that predates it never sets it.
	Unapplied bool `json:"unapplied,omitempty"`
}

// Settle asks to settle reservation ID of a tenant with Actual units at At.
type Settle struct {
	TenantID string    `json:"tenant_id"`
	ID       string    `json:"id"`
	Actual   int64     `json:"actual"`
	At       time.Time `json:"at"`
}

// Settled answers a settle: the reservation as it now stands, and whether
// this settle repeated one recorded before (the buckets were adjusted by
// the first unless Reservation.Unapplied says the first never landed).
type Settled struct {
	Reservation Reservation `json:"reservation"`
	Replayed    bool        `json:"replayed"`
}

// Difference is what settling r at its actual amount changes in its
// buckets: positive charges more, negative gives back.
func (r Reservation) Difference() int64 {
	if r.Actual == nil {
		return 0
	}
	return *r.Actual - r.Reserved
}

// ValidateRequest checks a check's reservation, its defaults filled (cap
// the estimate, ttl DefaultTTL), naming the field.
func ValidateRequest(field string, reserved, cap int64, ttl time.Duration) error {
	switch {
	case reserved < 1 || reserved > MaxUnits:
		return errs.Errorf(errs.Invalid, "%sreserve: must be an integer between 1 and %d", field, MaxUnits)
	case cap < reserved || cap > MaxUnits:
		return errs.Errorf(errs.Invalid, "%sreserve_cap: must be at least reserve (%d) and at most %d", field, reserved, MaxUnits)
	case ttl < MinTTL || ttl > MaxTTL:
		return errs.Errorf(errs.Invalid, "%sreserve_ttl: must be between 1s and 24h", field)
	}
	return nil
}

// Create records an open reservation in tx, refusing a tenant that holds
// max open ones already (MaxOpen when max is 0).
func Create(ctx context.Context, tx *sql.Tx, r Reservation, max int) error {
	return CreateAll(ctx, tx, []Reservation{r}, max)
}

// CreateAll records open reservations of one tenant in tx, all or none: a
// tenant whose open reservations would pass max (MaxOpen when max is 0)
// is refused before anything is written. A reservation cancelled before
// it was recorded (Cancel) stays cancelled and is not counted.
func CreateAll(ctx context.Context, tx *sql.Tx, rs []Reservation, max int) error {
	if len(rs) == 0 {
		return nil
	}
	if max <= 0 {
		max = MaxOpen
	}
	tenant := rs[0].TenantID
	for _, r := range rs {
		if r.TenantID != tenant {
			return errs.Errorf(errs.Invalid, "reservations: of more than one tenant")
		}
	}
	var open int64
	err := tx.QueryRowContext(ctx, `SELECT open FROM reservation_counts WHERE tenant_id = ?`, tenant).Scan(&open)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("count reservations: %w", err)
	}
	if open+int64(len(rs)) > int64(max) {
		if len(rs) == 1 {
			return errs.Errorf(errs.Conflict, "reserve: the tenant holds %d open reservations, the most it may; settle some first", max)
		}
		return errs.Errorf(errs.Conflict, "reserve: the tenant holds %d open reservations of the %d it may, too many for %d more; settle some first", open, max, len(rs))
	}
	var added int64
	for _, r := range rs {
		res, err := tx.ExecContext(ctx, `INSERT INTO reservations (tenant_id, id, bucket_key, policy_id, policy, tier, key_id,
			identity_kind, identity_id, reserved, cap, created_at, expires_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)
			ON CONFLICT (tenant_id, id) DO NOTHING`,
			r.TenantID, r.ID, r.BucketKey, r.PolicyID, r.Policy, r.Tier, r.KeyID, r.IdentityKind, r.IdentityID,
			r.Reserved, r.Cap, r.CreatedAt.UnixMilli(), r.ExpiresAt.UnixMilli())
		if err != nil {
			return fmt.Errorf("record reservation: %w", err)
		}
		n, _ := res.RowsAffected()
		added += n
	}
	if added == 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO reservation_counts (tenant_id, open) VALUES (?, ?)
		ON CONFLICT (tenant_id) DO UPDATE SET open = open + excluded.open`, tenant, added); err != nil {
		return fmt.Errorf("count reservations: %w", err)
	}
	return nil
}

// Cancel closes reservations whose estimates were given back before their
// ids reached the caller (a batch that failed part-way): an open one is
// closed as cancelled; one not recorded yet, whose record may still be on
// its way, is recorded cancelled so that its late Create leaves it so. A
// settled or expired one is left as it is. A cancelled reservation is
// unknown to Do, as its id was never answered.
func Cancel(ctx context.Context, tx *sql.Tx, rs []Reservation, at time.Time) error {
	ms := at.UnixMilli()
	for _, r := range rs {
		res, err := tx.ExecContext(ctx, `UPDATE reservations SET state = 'cancelled', settled_at = ? WHERE tenant_id = ? AND id = ? AND state = 'open'`,
			ms, r.TenantID, r.ID)
		if err != nil {
			return fmt.Errorf("cancel reservation: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			if err := countClosed(ctx, tx, r.TenantID, 1); err != nil {
				return err
			}
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO reservations (tenant_id, id, bucket_key, policy_id, policy, tier, key_id,
			identity_kind, identity_id, reserved, cap, created_at, expires_at, state, settled_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,'cancelled',?)
			ON CONFLICT (tenant_id, id) DO NOTHING`,
			r.TenantID, r.ID, r.BucketKey, r.PolicyID, r.Policy, r.Tier, r.KeyID, r.IdentityKind, r.IdentityID,
			r.Reserved, r.Cap, r.CreatedAt.UnixMilli(), r.ExpiresAt.UnixMilli(), ms); err != nil {
			return fmt.Errorf("cancel reservation: %w", err)
		}
	}
	return nil
}

// Do settles a reservation in tx: the first settle records the actual
// amount; one repeating it answers Replayed. A reservation of another
// tenant is not found, as an unknown one.
func Do(ctx context.Context, tx *sql.Tx, s Settle) (Settled, error) {
	r, err := get(ctx, tx, s.TenantID, s.ID)
	if err != nil {
		return Settled{}, err
	}
	if out, write, err := decide(r, s); err != nil || !write {
		return out, err
	}
	at := time.UnixMilli(s.At.UnixMilli()).UTC()
	if _, err := tx.ExecContext(ctx, `UPDATE reservations SET state = 'settled', actual = ?, settled_at = ? WHERE tenant_id = ? AND id = ?`,
		s.Actual, at.UnixMilli(), r.TenantID, r.ID); err != nil {
		return Settled{}, fmt.Errorf("settle reservation: %w", err)
	}
	if err := countClosed(ctx, tx, r.TenantID, 1); err != nil {
		return Settled{}, err
	}
	r.State, r.Actual, r.SettledAt, r.Unapplied = StateSettled, &s.Actual, &at, true
	return Settled{Reservation: r}, nil
}

// Apply asks to apply a settled reservation's difference: the bucket's
// owner asks it before it changes the bucket, naming itself (By: its node
// and the partition's term), so that it applies the difference only when
// the answer is yes. Partition and Term let the worker fence an owner that
// has lost the partition (Term 0: a single server or a local-mode policy,
// not fenced).
type Apply struct {
	TenantID  string `json:"tenant_id"`
	ID        string `json:"id"`
	Partition int    `json:"partition"`
	Term      uint64 `json:"term"`
	Node      string `json:"node"`
}

// Applying answers an Apply: Yes when this owner is the one to apply the
// difference (the first to ask, or the same owner asking again after its
// answer was lost); no when another did, or when there is nothing to apply
// (the reservation is no longer settled). Fenced: the asking owner has lost
// the partition; the next owner applies it.
type Applying struct {
	Yes    bool `json:"yes"`
	Fenced bool `json:"fenced,omitempty"`
}

func (a Apply) by() string { return a.Node + "@" + strconv.FormatUint(a.Term, 10) }

// MarkApplied records in tx that a's owner applies a settled reservation's
// difference, once: the first owner to ask is answered yes, and so is its
// own repeat; any other no. A reservation that is not settled (unknown,
// open, expired, reopened by an older server) is answered no: there is
// nothing to apply.
func MarkApplied(ctx context.Context, tx *sql.Tx, a Apply) (Applying, error) {
	var state, by string
	var applied bool
	err := tx.QueryRowContext(ctx, `SELECT state, applied, applied_by FROM reservations WHERE tenant_id = ? AND id = ?`, a.TenantID, a.ID).
		Scan(&state, &applied, &by)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Applying{}, nil
	case err != nil:
		return Applying{}, fmt.Errorf("read reservation: %w", err)
	case state != StateSettled:
		return Applying{}, nil
	case applied:
		return Applying{Yes: by == a.by()}, nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE reservations SET applied = 1, applied_by = ? WHERE tenant_id = ? AND id = ?`,
		a.by(), a.TenantID, a.ID); err != nil {
		return Applying{}, fmt.Errorf("mark settle applied: %w", err)
	}
	return Applying{Yes: true}, nil
}

// Check answers a settle from a read of q when the settle writes nothing:
// an unknown or foreign reservation, a replay, one settled with another
// amount, an expired one or an actual amount past the cap. Otherwise write
// is true and the settle is Do's, in a write transaction, which reads the
// reservation again.
func Check(ctx context.Context, q Querier, s Settle) (out Settled, write bool, err error) {
	r, err := get(ctx, q, s.TenantID, s.ID)
	if err != nil {
		return Settled{}, false, err
	}
	return decide(r, s)
}

// Querier is what *sql.DB and *sql.Tx have in common that Check needs.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// decide answers settle s of reservation r when it writes nothing, else
// says it must be written.
func decide(r Reservation, s Settle) (Settled, bool, error) {
	switch r.State {
	case StateSettled:
		if *r.Actual != s.Actual {
			return Settled{}, false, errs.Errorf(errs.Conflict, "reservation: already settled with actual %d at %s", *r.Actual, r.SettledAt.Format(time.RFC3339))
		}
		return Settled{Reservation: r, Replayed: true}, false, nil
	case StateExpired:
		return Settled{}, false, expired(r)
	case StateCancelled:
		return Settled{}, false, notFound()
	}
	if s.Actual < 0 || s.Actual > r.Cap {
		if r.Cap == r.Reserved {
			return Settled{}, false, errs.Errorf(errs.Invalid, "actual: must be between 0 and the reservation's cap of %d (the estimate; a check may raise the cap with reserve_cap)", r.Cap)
		}
		return Settled{}, false, errs.Errorf(errs.Invalid, "actual: must be between 0 and the reservation's cap of %d", r.Cap)
	}
	if !s.At.Before(r.ExpiresAt) {
		return Settled{}, false, expired(r) // the sweep closes it
	}
	return Settled{}, true, nil
}

// Reopen undoes a settle whose difference could not be applied to the
// buckets, so that the caller's retry settles it again. Servers no longer
// ask for it (a failed apply stays recorded and Unapplied); the worker
// still serves it for servers of the previous version during an upgrade.
func Reopen(ctx context.Context, tx *sql.Tx, tenantID, id string) error {
	res, err := tx.ExecContext(ctx, `UPDATE reservations SET state = 'open', actual = NULL, settled_at = NULL
		WHERE tenant_id = ? AND id = ? AND state = 'settled' AND applied = 0`, tenantID, id)
	if err != nil {
		return fmt.Errorf("reopen reservation: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return countClosed(ctx, tx, tenantID, -1)
	}
	return nil
}

// Sweep closes the open reservations that expired by now (they stand at
// their estimate) and forgets closed ones older than keep. It does at most
// limit of each, so one sweep's transaction stays short; it answers how
// many it expired and deleted.
func Sweep(ctx context.Context, tx *sql.Tx, now time.Time, keep time.Duration, limit int) (expiredN, deleted int64, err error) {
	rows, err := tx.QueryContext(ctx, `SELECT tenant_id, id, expires_at FROM reservations
		WHERE state = 'open' AND expires_at <= ? ORDER BY expires_at LIMIT ?`, now.UnixMilli(), limit)
	if err != nil {
		return 0, 0, fmt.Errorf("find expired reservations: %w", err)
	}
	type due struct {
		tenant, id string
		at         int64
	}
	var ds []due
	for rows.Next() {
		var d due
		if err := rows.Scan(&d.tenant, &d.id, &d.at); err != nil {
			rows.Close()
			return 0, 0, err
		}
		ds = append(ds, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	for _, d := range ds {
		if err := expire(ctx, tx, d.tenant, d.id, time.UnixMilli(d.at)); err != nil {
			return expiredN, 0, err
		}
		expiredN++
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM reservations WHERE (tenant_id, id) IN (SELECT tenant_id, id FROM reservations
		WHERE state <> 'open' AND settled_at <= ? LIMIT ?)`, now.Add(-keep).UnixMilli(), limit)
	if err != nil {
		return expiredN, 0, fmt.Errorf("forget old reservations: %w", err)
	}
	deleted, _ = res.RowsAffected()
	return expiredN, deleted, nil
}

// expire closes one open reservation at its estimate.
func expire(ctx context.Context, tx *sql.Tx, tenantID, id string, at time.Time) error {
	res, err := tx.ExecContext(ctx, `UPDATE reservations SET state = 'expired', settled_at = ? WHERE tenant_id = ? AND id = ? AND state = 'open'`,
		at.UnixMilli(), tenantID, id)
	if err != nil {
		return fmt.Errorf("expire reservation: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return countClosed(ctx, tx, tenantID, 1)
	}
	return nil
}

func countClosed(ctx context.Context, tx *sql.Tx, tenantID string, n int64) error {
	if _, err := tx.ExecContext(ctx, `UPDATE reservation_counts SET open = MAX(open - ?, 0) WHERE tenant_id = ?`, n, tenantID); err != nil {
		return fmt.Errorf("count reservations: %w", err)
	}
	return nil
}

func expired(r Reservation) error {
	return errs.Errorf(errs.Conflict, "reservation: expired at %s and stands at its estimate of %d", r.ExpiresAt.UTC().Format(time.RFC3339), r.Reserved)
}

func notFound() error {
	return errs.Errorf(errs.NotFound, "reservation: no such reservation (settled or expired ones are forgotten after %s)", "7 days")
}

func get(ctx context.Context, q Querier, tenantID, id string) (Reservation, error) {
	r := Reservation{ID: id, TenantID: tenantID}
	var created, expires int64
	var actual, settled sql.NullInt64
	var applied bool
	err := q.QueryRowContext(ctx, `SELECT bucket_key, policy_id, policy, tier, key_id, identity_kind, identity_id,
		reserved, cap, created_at, expires_at, state, actual, settled_at, applied FROM reservations WHERE tenant_id = ? AND id = ?`, tenantID, id).
		Scan(&r.BucketKey, &r.PolicyID, &r.Policy, &r.Tier, &r.KeyID, &r.IdentityKind, &r.IdentityID,
			&r.Reserved, &r.Cap, &created, &expires, &r.State, &actual, &settled, &applied)
	if errors.Is(err, sql.ErrNoRows) {
		return r, notFound()
	}
	if err != nil {
		return r, fmt.Errorf("read reservation: %w", err)
	}
	r.CreatedAt, r.ExpiresAt = time.UnixMilli(created).UTC(), time.UnixMilli(expires).UTC()
	if actual.Valid {
		a := actual.Int64
		r.Actual = &a
	}
	if settled.Valid {
		t := time.UnixMilli(settled.Int64).UTC()
		r.SettledAt = &t
	}
	r.Unapplied = r.State == StateSettled && !applied
	return r, nil
}
