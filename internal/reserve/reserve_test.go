package reserve_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tenants"
)

var t0 = time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC)

func newStore(t *testing.T) (*tenants.Store, string) {
	t.Helper()
	db, err := sqlitedb.Open(context.Background(), filepath.Join(t.TempDir(), "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st := tenants.NewStore(db)
	tn, _, _, err := st.Tenants().Create(context.Background(), "llm", "o@llm.test", "correct horse battery", t0)
	if err != nil {
		t.Fatal(err)
	}
	return st, tn.ID
}

func tx[T any](t *testing.T, st *tenants.Store, fn func(ctx context.Context, tx *sql.Tx) (T, error)) (T, error) {
	t.Helper()
	var out T
	err := st.WriteTx(context.Background(), func(tx *sql.Tx) error {
		var err error
		out, err = fn(context.Background(), tx)
		return err
	})
	return out, err
}

func create(t *testing.T, st *tenants.Store, r reserve.Reservation) error {
	_, err := tx(t, st, func(ctx context.Context, tx *sql.Tx) (struct{}, error) {
		return struct{}{}, reserve.Create(ctx, tx, r, 0)
	})
	return err
}

func settle(t *testing.T, st *tenants.Store, s reserve.Settle) (reserve.Settled, error) {
	return tx(t, st, func(ctx context.Context, tx *sql.Tx) (reserve.Settled, error) { return reserve.Do(ctx, tx, s) })
}

func sample(tenant, id string, ttl time.Duration) reserve.Reservation {
	return reserve.Reservation{ID: id, TenantID: tenant, Reserved: 30, Cap: 50, CreatedAt: t0, ExpiresAt: t0.Add(ttl),
		Hold: reserve.Hold{BucketKey: tenant + "/pol/key:k1", PolicyID: "pol", Policy: "tokens", Tier: "pro", IdentityKind: "key", IdentityID: "k1"}}
}

// A settle is recorded once; a repeat replays it, another amount
// conflicts, a reopened one settles again, and the sweep expires what was
// never settled and forgets closed ones after Keep.
func TestSettleLifecycle(t *testing.T) {
	st, tn := newStore(t)
	if err := create(t, st, sample(tn, "rsv_a", time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := create(t, st, sample(tn, "rsv_b", time.Minute)); err != nil {
		t.Fatal(err)
	}
	s, err := settle(t, st, reserve.Settle{TenantID: tn, ID: "rsv_a", Actual: 45, At: t0.Add(time.Second)})
	if err != nil || s.Replayed || s.Reservation.Difference() != 15 || s.Reservation.Hold.BucketKey != tn+"/pol/key:k1" {
		t.Fatalf("first settle: %+v, %v", s, err)
	}
	if s, err = settle(t, st, reserve.Settle{TenantID: tn, ID: "rsv_a", Actual: 45, At: t0.Add(2 * time.Second)}); err != nil || !s.Replayed {
		t.Fatalf("repeat: %+v, %v", s, err)
	}
	if _, err = settle(t, st, reserve.Settle{TenantID: tn, ID: "rsv_a", Actual: 44, At: t0}); errs.Code(err) != errs.Conflict {
		t.Fatalf("another amount: %v", err)
	}
	if _, err = settle(t, st, reserve.Settle{TenantID: tn, ID: "rsv_b", Actual: 51, At: t0}); errs.Code(err) != errs.Invalid || !strings.HasPrefix(errs.Message(err), "actual:") {
		t.Fatalf("over the cap: %v", err)
	}
	if _, err = settle(t, st, reserve.Settle{TenantID: "other", ID: "rsv_b", Actual: 1, At: t0}); errs.Code(err) != errs.NotFound {
		t.Fatalf("another tenant's: %v", err)
	}
	// Reopened (its difference could not be applied), it settles anew.
	if _, err := tx(t, st, func(ctx context.Context, tx *sql.Tx) (int, error) { return 0, reserve.Reopen(ctx, tx, tn, "rsv_a") }); err != nil {
		t.Fatal(err)
	}
	if s, err = settle(t, st, reserve.Settle{TenantID: tn, ID: "rsv_a", Actual: 10, At: t0.Add(3 * time.Second)}); err != nil || s.Replayed || s.Reservation.Difference() != -20 {
		t.Fatalf("after reopening: %+v, %v", s, err)
	}

	// rsv_b expires unsettled: a settle after its expiry is refused, and
	// the sweep closes it at its estimate.
	if _, err = settle(t, st, reserve.Settle{TenantID: tn, ID: "rsv_b", Actual: 1, At: t0.Add(time.Minute)}); errs.Code(err) != errs.Conflict || !strings.Contains(errs.Message(err), "estimate of 30") {
		t.Fatalf("after expiry: %v", err)
	}
	sweep := func(at time.Time) [2]int64 {
		n, err := tx(t, st, func(ctx context.Context, tx *sql.Tx) ([2]int64, error) {
			e, d, err := reserve.Sweep(ctx, tx, at, reserve.Keep, 1000)
			return [2]int64{e, d}, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := sweep(t0.Add(2 * time.Minute)); n != [2]int64{1, 0} {
		t.Fatalf("sweep: expired and forgot %v, want [1 0]", n)
	}
	if _, err = settle(t, st, reserve.Settle{TenantID: tn, ID: "rsv_b", Actual: 1, At: t0.Add(3 * time.Minute)}); errs.Code(err) != errs.Conflict {
		t.Fatalf("an expired reservation: %v", err)
	}
	if n := sweep(t0.Add(reserve.Keep + 2*time.Minute)); n != [2]int64{0, 2} {
		t.Fatalf("sweep after Keep: %v, want [0 2]", n)
	}
	if _, err = settle(t, st, reserve.Settle{TenantID: tn, ID: "rsv_a", Actual: 10, At: t0}); errs.Code(err) != errs.NotFound {
		t.Fatalf("a forgotten reservation: %v", err)
	}
}

// A tenant holds at most MaxOpen open reservations; settling or expiry
// frees room. The count is kept in the writing transactions.
func TestOpenReservationsCapped(t *testing.T) {
	st, tn := newStore(t)
	ctx := context.Background()
	// Fill to one below the cap directly, as a long-running tenant would.
	if err := st.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO reservation_counts (tenant_id, open) VALUES (?, ?)`, tn, reserve.MaxOpen-1)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := create(t, st, sample(tn, "rsv_last", time.Minute)); err != nil {
		t.Fatal(err)
	}
	err := create(t, st, sample(tn, "rsv_over", time.Minute))
	if errs.Code(err) != errs.Conflict || !strings.HasPrefix(errs.Message(err), "reserve:") {
		t.Fatalf("over the cap: %v", err)
	}
	if _, err := settle(t, st, reserve.Settle{TenantID: tn, ID: "rsv_last", Actual: 1, At: t0}); err != nil {
		t.Fatal(err)
	}
	if err := create(t, st, sample(tn, "rsv_over", time.Minute)); err != nil {
		t.Fatalf("after a settle freed room: %v", err)
	}
}

// A batch of reservations is recorded whole or not at all: one that would
// take the tenant past its cap writes none of them, and the count stays.
// Cancel closes what was recorded and leaves a tombstone for what was
// not, so that a late record of it stays cancelled; neither settles.
func TestCreateAllAndCancel(t *testing.T) {
	st, tn := newStore(t)
	open := func() int64 {
		t.Helper()
		n, err := tx(t, st, func(ctx context.Context, tx *sql.Tx) (int64, error) {
			var n int64
			err := tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(open), 0) FROM reservation_counts WHERE tenant_id = ?`, tn).Scan(&n)
			return n, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	createAll := func(max int, rs ...reserve.Reservation) error {
		_, err := tx(t, st, func(ctx context.Context, tx *sql.Tx) (struct{}, error) {
			return struct{}{}, reserve.CreateAll(ctx, tx, rs, max)
		})
		return err
	}
	a, b, c := sample(tn, "rsv_a", time.Minute), sample(tn, "rsv_b", time.Minute), sample(tn, "rsv_c", time.Minute)
	if err := createAll(4, a, b); err != nil || open() != 2 {
		t.Fatalf("two under a cap of 4: %v, open %d", err, open())
	}
	c2, d := sample(tn, "rsv_c2", time.Minute), sample(tn, "rsv_d", time.Minute)
	err := createAll(4, c, c2, d)
	if errs.Code(err) != errs.Conflict || !strings.HasPrefix(errs.Message(err), "reserve:") {
		t.Fatalf("three more past a cap of 4: %v", err)
	}
	if open() != 2 {
		t.Fatalf("a refused batch counted: open %d", open())
	}
	for _, id := range []string{"rsv_c", "rsv_c2", "rsv_d"} {
		if _, err := settle(t, st, reserve.Settle{TenantID: tn, ID: id, Actual: 1, At: t0}); errs.Code(err) != errs.NotFound {
			t.Fatalf("%s of a refused batch: %v, want not found", id, err)
		}
	}
	// a is recorded, c is not yet: both are cancelled; c's late record
	// leaves it cancelled and uncounted.
	if _, err := tx(t, st, func(ctx context.Context, tx *sql.Tx) (struct{}, error) {
		return struct{}{}, reserve.Cancel(ctx, tx, []reserve.Reservation{a, c}, t0)
	}); err != nil {
		t.Fatal(err)
	}
	if open() != 1 {
		t.Fatalf("after cancelling one of two open: open %d", open())
	}
	if err := createAll(0, c); err != nil || open() != 1 {
		t.Fatalf("a late record of a cancelled reservation: %v, open %d", err, open())
	}
	for _, id := range []string{"rsv_a", "rsv_c"} {
		if _, err := settle(t, st, reserve.Settle{TenantID: tn, ID: id, Actual: 1, At: t0}); errs.Code(err) != errs.NotFound {
			t.Fatalf("settling cancelled %s: %v, want not found", id, err)
		}
	}
	if s, err := settle(t, st, reserve.Settle{TenantID: tn, ID: "rsv_b", Actual: 1, At: t0}); err != nil || s.Replayed {
		t.Fatalf("the batch's other reservation: %+v, %v", s, err)
	}
	if open() != 0 {
		t.Fatalf("after settling the last: open %d", open())
	}
}

// A settle's difference is marked applied by the first owner that asks; its
// own repeat (its answer was lost) is answered yes again, another owner or
// the same node under another term no. A settle stays Unapplied until the
// mark, so a repeated settle knows to apply it; an open or unknown
// reservation has nothing to apply.
func TestMarkApplied(t *testing.T) {
	st, tn := newStore(t)
	if err := create(t, st, sample(tn, "rsv_m", time.Minute)); err != nil {
		t.Fatal(err)
	}
	mark := func(id, node string, term uint64) reserve.Applying {
		t.Helper()
		a, err := tx(t, st, func(ctx context.Context, tx *sql.Tx) (reserve.Applying, error) {
			return reserve.MarkApplied(ctx, tx, reserve.Apply{TenantID: tn, ID: id, Partition: 3, Term: term, Node: node})
		})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := mark("rsv_m", "a", 5); a.Yes {
		t.Fatal("an open reservation marked applied")
	}
	if a := mark("rsv_none", "a", 5); a.Yes {
		t.Fatal("an unknown reservation marked applied")
	}
	s, err := settle(t, st, reserve.Settle{TenantID: tn, ID: "rsv_m", Actual: 10, At: t0})
	if err != nil || !s.Reservation.Unapplied {
		t.Fatalf("a fresh settle: %+v, %v (want unapplied)", s, err)
	}
	if s, err = settle(t, st, reserve.Settle{TenantID: tn, ID: "rsv_m", Actual: 10, At: t0}); err != nil || !s.Replayed || !s.Reservation.Unapplied {
		t.Fatalf("a repeat before any owner applied it: %+v, %v", s, err)
	}
	steps := []struct {
		node string
		term uint64
		yes  bool
	}{{"a", 5, true}, {"a", 5, true}, {"b", 6, false}, {"a", 6, false}, {"a", 5, true}}
	for _, s := range steps {
		if a := mark("rsv_m", s.node, s.term); a.Yes != s.yes {
			t.Fatalf("%s@%d: yes = %v, want %v", s.node, s.term, a.Yes, s.yes)
		}
	}
	if s, err = settle(t, st, reserve.Settle{TenantID: tn, ID: "rsv_m", Actual: 10, At: t0}); err != nil || !s.Replayed || s.Reservation.Unapplied {
		t.Fatalf("a repeat once applied: %+v, %v", s, err)
	}
}
