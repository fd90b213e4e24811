package worker

import (
	"context"
	"database/sql"
	"sync"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/reserve"
)

// Reservations and settles are committed in groups (groups.go), each
// tenant's limited first (writelimit.go). A settle is read before it is
// queued: one that writes nothing (an unknown or foreign reservation, a
// replay, one settled with another amount, an expired one) is answered
// from the read, without a turn of the writer.
const (
	maxReserveBatch = 1000
	// maxGroupPerTenant bounds one tenant's queued writes of each kind,
	// maxGroupQueued all tenants'.
	maxGroupPerTenant = 2 * maxReserveBatch
	maxGroupQueued    = 8 * maxReserveBatch
)

// tenantWrites is how the worker takes tenants' small, frequent writes:
// each tenant's limited (writelimit.go), reservations and settles queued
// per tenant and committed in groups (groups.go).
type tenantWrites struct {
	limits      *writeLimiter
	configTurns *tenantTurns
	// reservations are a check's or a batch's, recorded all or none.
	reservations *groupQueue[[]reserve.Reservation, none]
	settles      *groupQueue[reserve.Settle, reserve.Settled]
	settleReads  chan struct{} // one slot: a settle's read (readSettle)
}

// newTenantWrites makes the queues; maxOpen is the tenants' cap on open
// reservations (the store's caps, read at each group).
func newTenantWrites(l WriteLimits, maxOpen func() int) tenantWrites {
	return tenantWrites{
		limits:      newWriteLimiter(l),
		configTurns: newTenantTurns(maxConfigInFlight, maxConfigWaiting),
		reservations: newGroupQueue("reservation", maxReserveBatch, maxGroupPerTenant, maxGroupQueued,
			func(ctx context.Context, tx *sql.Tx, rs []reserve.Reservation) (none, error) {
				return none{}, reserve.CreateAll(ctx, tx, rs, maxOpen())
			}),
		settles:     newGroupQueue("settle", maxReserveBatch, maxGroupPerTenant, maxGroupQueued, reserve.Do),
		settleReads: make(chan struct{}, 1),
	}
}

// createReservations records rs, one tenant's, all or none, in the next
// group and waits for its commit.
func (w *Worker) createReservations(ctx context.Context, rs []reserve.Reservation) error {
	if len(rs) == 0 {
		return nil
	}
	if len(rs) > reserve.MaxBatch {
		return errs.Errorf(errs.Invalid, "reservations: more than %d in one batch", reserve.MaxBatch)
	}
	tenant := rs[0].TenantID
	for _, r := range rs[1:] {
		if r.TenantID != tenant {
			return errs.Errorf(errs.Invalid, "reservations: one tenant's in one batch")
		}
	}
	if err := w.writes.limits.take(tenant, writeReserve, len(rs), w.cfg.Now()); err != nil {
		return err
	}
	_, err := w.writes.reservations.do(ctx, tenant, rs)
	return err
}

// settleReservation settles s: from a read when that answers it, else in
// the next group.
func (w *Worker) settleReservation(ctx context.Context, s reserve.Settle) (reserve.Settled, error) {
	if err := w.writes.limits.take(s.TenantID, writeSettle, 1, w.cfg.Now()); err != nil {
		return reserve.Settled{}, err
	}
	out, write, err := w.readSettle(ctx, s)
	if err != nil || !write {
		return out, err
	}
	return w.writes.settles.do(ctx, s.TenantID, s)
}

// readSettle is reserve.Check, one at a time: settles arrive by the
// thousand, and reads side by side would each take a connection of their
// own, opened and closed again past the pool's few idle ones (opening one
// costs far more than the read).
func (w *Worker) readSettle(ctx context.Context, s reserve.Settle) (reserve.Settled, bool, error) {
	select {
	case w.writes.settleReads <- struct{}{}:
	case <-ctx.Done():
		return reserve.Settled{}, false, ctx.Err()
	}
	defer func() { <-w.writes.settleReads }()
	return reserve.Check(ctx, w.db, s)
}

// groupLoops commits reservations and settles in groups until ctx ends.
func (w *Worker) groupLoops(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		w.writes.reservations.run(ctx, w.store.WriteTx, func(n int, err error) {
			w.log.Warn("reservations not recorded; their checks give the estimates back", "reservations", n, "err", err)
		})
	})
	wg.Go(func() {
		w.writes.settles.run(ctx, w.store.WriteTx, func(n int, err error) {
			w.log.Warn("settles not recorded; their callers may retry them", "settles", n, "err", err)
		})
	})
	wg.Wait()
}

// sweepBatch bounds one reservation sweep transaction.
const sweepBatch = 5000

// sweepReservations closes the reservations that expired unsettled (they
// stand at their estimate, which their check took already) and forgets
// closed ones after reserve.Keep. A backlog larger than a batch is worked
// off batch by batch, each its own short transaction.
func (w *Worker) sweepReservations(ctx context.Context) {
	now := w.cfg.Now()
	var expired, deleted int64
	for ctx.Err() == nil {
		var e, d int64
		err := w.store.WriteTx(ctx, func(tx *sql.Tx) error {
			var err error
			e, d, err = reserve.Sweep(ctx, tx, now, reserve.Keep, sweepBatch)
			return err
		})
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("reservation sweep failed; will retry", "expired", expired, "forgotten", deleted, "err", err)
			}
			return
		}
		expired, deleted = expired+e, deleted+d
		if e < sweepBatch && d < sweepBatch {
			break
		}
	}
	if expired > 0 || deleted > 0 {
		w.log.Info("reservations swept", "expired_at_estimate", expired, "forgotten", deleted)
	}
}

// markSettleApplied answers a bucket's owner asking to apply a settle's
// difference (reserve.MarkApplied), fenced by the partition's term: an
// owner whose partition another server has loaded since is refused, so it
// leaves the difference to the new owner. It runs under the writer, as the
// term raises do, so the two are ordered.
func (w *Worker) markSettleApplied(ctx context.Context, a reserve.Apply) (reserve.Applying, error) {
	var out reserve.Applying
	err := w.store.WriteTx(ctx, func(tx *sql.Tx) error {
		if w.terms.stale(a.Partition, a.Term) {
			out.Fenced = true
			return nil
		}
		var err error
		out, err = reserve.MarkApplied(ctx, tx, a)
		return err
	})
	return out, err
}
