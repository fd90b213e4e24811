package worker

// What the worker does once configsvc has committed a config change
// (configsvc.Hooks): announce it to the servers, purge a deleted tenant's
// late data, and delete a reset identity's persisted buckets.

import (
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/tenants"
)

func (w *Worker) announce(changes []tenants.Change) {
	data, err := json.Marshal(bus.ChangeMsg{V: bus.WireVersion, Changes: changes})
	if err != nil {
		w.log.Error("encode config change", "err", err)
		return
	}
	// Core NATS: a server that misses this notices the version gap (or its
	// periodic version check does) and resynchronises from a snapshot.
	if err := w.nc.Publish(bus.ChangesSubject, data); err != nil {
		w.log.Warn("announce config change failed; servers will resynchronise", "version", changes[0].Version, "err", err)
	}
	for _, c := range changes {
		w.log.Info("config change committed", "version", c.Version, "kind", c.Kind, "tenant", c.TenantID)
	}
}

// purgeDelays are when, after a tenant is deleted, its buckets and
// analytics are deleted again: servers may have had states and counters of
// it in flight (flushed every 200 ms and 1 s, applied within about a
// second), which land after the delete committed.
var purgeDelays = []time.Duration{10 * time.Second, 2 * time.Minute}

// dataPurger deletes the persisted data committed config changes leave
// behind: a deleted tenant's late buckets and counters, and a reset
// identity's buckets.
type dataPurger struct {
	queue chan string // deleted tenants whose late data to purge (run)
	store *tenants.Store
	log   *slog.Logger
}

func newDataPurger(store *tenants.Store, log *slog.Logger) *dataPurger {
	return &dataPurger{queue: make(chan string, 64), store: store, log: log}
}

// later asks run to delete a deleted tenant's late buckets and counters.
func (dp *dataPurger) later(tenantID string) {
	select {
	case dp.queue <- tenantID:
	default:
		dp.log.Warn("purge queue full; a deleted tenant's late data stays until it expires", "tenant", tenantID)
	}
}

// run runs the purges later asked for, at purgeDelays after each delete,
// until ctx ends.
func (dp *dataPurger) run(ctx context.Context) {
	type due struct {
		tenantID string
		at       time.Time
	}
	var pending []due
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-dp.queue:
			for _, d := range purgeDelays {
				pending = append(pending, due{id, time.Now().Add(d)})
			}
		case now := <-tick.C:
			rest := pending[:0]
			for _, p := range pending {
				if now.Before(p.at) {
					rest = append(rest, p)
					continue
				}
				if err := dp.store.Tenants().PurgeData(ctx, p.tenantID); err != nil && ctx.Err() == nil {
					dp.log.Warn("purge deleted tenant's late data", "tenant", p.tenantID, "err", err)
				}
			}
			pending = rest
		}
	}
}

// resetBuckets removes a reset identity's persisted buckets, so a
// server hydrating later does not bring the old consumption back.
func (dp *dataPurger) resetBuckets(ctx context.Context, cs []tenants.Change) {
	for _, c := range cs {
		if c.BucketReset == nil {
			continue
		}
		key := bus.BucketKey(c.TenantID, c.BucketReset.PolicyID, c.BucketReset.Identity.Kind, c.BucketReset.Identity.ID)
		part := bus.Partition([]byte(key))
		err := dp.store.WriteTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `DELETE FROM buckets WHERE part = ? AND key = ?`, part, key); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `DELETE FROM bucket_runs WHERE run IN (SELECT run FROM bucket_run_ids) AND part = ? AND key = ?`, part, key)
			return err
		})
		if err != nil {
			dp.log.Error("delete reset bucket", "key", key, "err", err)
		}
	}
}
