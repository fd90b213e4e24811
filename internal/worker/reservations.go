package worker

import (
	"context"
	"database/sql"

	"github.com/sluicehq/sluice/internal/reserve"
)

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
