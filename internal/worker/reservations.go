package worker

import (
	"context"
	"database/sql"
	"sync"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/reserve"
)

// Reservation writes are committed in groups: each reserving check (or
// batch of checks) waits for its rows, and under load one transaction
// carries every reservation that arrived meanwhile (up to about
// maxReserveBatch), so a tenant's burst of reservations costs the
// worker's other writes a few transactions, not one each. A batch's
// reservations are recorded all or none (reserve.CreateAll).
const maxReserveBatch = 1000

type reserveReq struct {
	rs   []reserve.Reservation
	done chan error
}

type reserveBatcher struct {
	in chan reserveReq
	// mu orders sends against the loop's start and end: a request is
	// queued only while a loop runs (a worker's loop runs once per term as
	// the active worker), and the loop answers what is queued when it ends.
	mu      sync.Mutex
	running bool
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
	b := &w.reservations
	req := reserveReq{rs: rs, done: make(chan error, 1)}
	b.mu.Lock()
	queued := false
	if b.running {
		select {
		case b.in <- req:
			queued = true
		default: // full: the loop is a whole group behind
		}
	}
	b.mu.Unlock()
	if !queued {
		return errs.Errorf(errs.Unavailable, "The worker cannot record a reservation now; try again shortly.")
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reserveLoop commits reservations in groups until ctx ends.
func (w *Worker) reserveLoop(ctx context.Context) {
	b := &w.reservations
	b.mu.Lock()
	b.running = true
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.running = false
		for {
			select {
			case q := <-b.in:
				q.done <- errs.Errorf(errs.Unavailable, "The worker is stopping; try again shortly.")
			default:
				return
			}
		}
	}()
	batch := make([]reserveReq, 0, maxReserveBatch)
	for {
		batch = batch[:0]
		n := 0
		select {
		case <-ctx.Done():
			return
		case r := <-b.in:
			batch = append(batch, r)
			n += len(r.rs)
		}
	more:
		for n < maxReserveBatch {
			select {
			case r := <-b.in:
				batch = append(batch, r)
				n += len(r.rs)
			default:
				break more
			}
		}
		results := make([]error, len(batch))
		max := w.store.Caps().OpenReservations
		err := w.store.WriteTx(ctx, func(tx *sql.Tx) error {
			for i, q := range batch {
				// A refusal (the tenant's cap) writes nothing and is that
				// request's answer; any other error fails the group.
				if err := reserve.CreateAll(ctx, tx, q.rs, max); err != nil {
					if errs.Code(err) != errs.Conflict {
						return err
					}
					results[i] = err
				}
			}
			return nil
		})
		if err != nil {
			w.log.Warn("reservations not recorded; their checks give the estimates back", "reservations", n, "err", err)
		}
		for i, q := range batch {
			if err != nil {
				q.done <- err
			} else {
				q.done <- results[i]
			}
		}
	}
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
