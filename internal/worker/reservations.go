package worker

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"time"

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

// reservationLedger records, settles and sweeps reservations (a check's
// "reserve", POST /v1/settle). Each tenant's are limited first (writes),
// and writes are committed in groups through writeTx, the store's one
// writer; stale fences a settle's difference to its bucket's owner
// (partitionTerms.stale).
type reservationLedger struct {
	db      *sql.DB
	writeTx func(context.Context, func(*sql.Tx) error) error
	writes  *tenantWrites
	stale   func(partition int, term uint64) bool
	now     func() time.Time
	log     *slog.Logger
}

// create records rs, one tenant's, all or none, in the next
// group and waits for its commit.
func (l *reservationLedger) create(ctx context.Context, rs []reserve.Reservation) error {
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
	if err := l.writes.limits.take(tenant, writeReserve, len(rs), l.now()); err != nil {
		return err
	}
	_, err := l.writes.reservations.do(ctx, tenant, rs)
	return err
}

// settle settles s: from a read when that answers it, else in
// the next group.
func (l *reservationLedger) settle(ctx context.Context, s reserve.Settle) (reserve.Settled, error) {
	if err := l.writes.limits.take(s.TenantID, writeSettle, 1, l.now()); err != nil {
		return reserve.Settled{}, err
	}
	out, write, err := l.readSettle(ctx, s)
	if err != nil || !write {
		return out, err
	}
	return l.writes.settles.do(ctx, s.TenantID, s)
}

// readSettle is reserve.Check, one at a time: settles arrive by the
// thousand, and reads side by side would each take a connection of their
// own, opened and closed again past the pool's few idle ones (opening one
// costs far more than the read).
func (l *reservationLedger) readSettle(ctx context.Context, s reserve.Settle) (reserve.Settled, bool, error) {
	select {
	case l.writes.settleReads <- struct{}{}:
	case <-ctx.Done():
		return reserve.Settled{}, false, ctx.Err()
	}
	defer func() { <-l.writes.settleReads }()
	return reserve.Check(ctx, l.db, s)
}

// runGroups commits reservations and settles in groups until ctx ends.
func (l *reservationLedger) runGroups(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		l.writes.reservations.run(ctx, l.writeTx, func(n int, err error) {
			l.log.Warn("reservations not recorded; their checks give the estimates back", "reservations", n, "err", err)
		})
	})
	wg.Go(func() {
		l.writes.settles.run(ctx, l.writeTx, func(n int, err error) {
			l.log.Warn("settles not recorded; their callers may retry them", "settles", n, "err", err)
		})
	})
	wg.Wait()
}

// sweepBatch bounds one reservation sweep transaction.
const sweepBatch = 5000

// sweep closes the reservations that expired unsettled (they
// stand at their estimate, which their check took already) and forgets
// closed ones after reserve.Keep. A backlog larger than a batch is worked
// off batch by batch, each its own short transaction.
func (l *reservationLedger) sweep(ctx context.Context) {
	now := l.now()
	var expired, deleted int64
	for ctx.Err() == nil {
		var e, d int64
		err := l.writeTx(ctx, func(tx *sql.Tx) error {
			var err error
			e, d, err = reserve.Sweep(ctx, tx, now, reserve.Keep, sweepBatch)
			return err
		})
		if err != nil {
			if ctx.Err() == nil {
				l.log.Warn("reservation sweep failed; will retry", "expired", expired, "forgotten", deleted, "err", err)
			}
			return
		}
		expired, deleted = expired+e, deleted+d
		if e < sweepBatch && d < sweepBatch {
			break
		}
	}
	if expired > 0 || deleted > 0 {
		l.log.Info("reservations swept", "expired_at_estimate", expired, "forgotten", deleted)
	}
}

// markApplied answers a bucket's owner asking to apply a settle's
// difference (reserve.MarkApplied), fenced by the partition's term: an
// owner whose partition another server has loaded since is refused, so it
// leaves the difference to the new owner. It runs under the writer, as the
// term raises do, so the two are ordered.
func (l *reservationLedger) markApplied(ctx context.Context, a reserve.Apply) (reserve.Applying, error) {
	var out reserve.Applying
	err := l.writeTx(ctx, func(tx *sql.Tx) error {
		if l.stale(a.Partition, a.Term) {
			out.Fenced = true
			return nil
		}
		var err error
		out, err = reserve.MarkApplied(ctx, tx, a)
		return err
	})
	return out, err
}
