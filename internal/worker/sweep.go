package worker

import (
	"context"
	"database/sql"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tenants"
)

// bucketSweeper deletes persisted buckets that are full again and, when
// the worker is idle, gives memory back (releaseIfIdle).
type bucketSweeper struct {
	db      *sql.DB
	store   *tenants.Store
	runs    *stagedRuns
	staging *runWriter
	now     func() time.Time
	ackWait time.Duration
	log     *slog.Logger
	// pruneApplied prunes the streams' applied-sequence log, first in
	// each sweep.
	pruneApplied func(context.Context)
	// written is how many rows the streams have written so far.
	written func() uint64

	// rowsAtSweep and releasedAt are releaseIfIdle's, under releaseMu.
	releaseMu   sync.Mutex
	rowsAtSweep uint64
	releasedAt  time.Time
}

// Sweep sizes: each round reads up to sweepRead sweepable keys (a read,
// beside the writer), then deletes them sweepChunk at a time, each chunk
// its own short write transaction.
const (
	sweepRead  = 50000
	sweepChunk = 2000
)

// sweep deletes persisted buckets that are full again, once no redelivery
// of an older state can arrive for them (a few AckWaits after their last
// write), and prunes the applied-sequence log. Deletions queue with stream
// batches and config writes for the one writer, in short transactions; each
// re-checks its rows' condition, so a bucket written again meanwhile stays.
func (bs *bucketSweeper) sweep(ctx context.Context) {
	bs.pruneApplied(ctx)
	now := bs.now()
	fullBy, quietSince := now.UnixNano(), now.Add(-6*bs.ackWait).UnixNano()
	if !bs.runs.isLoaded() {
		// Not active (a test, or a standby): nothing stages meanwhile.
		if err := bs.runs.load(ctx, bs.db); err != nil {
			bs.log.Error("bucket sweep failed", "err", err)
			return
		}
	}
	var deleted int64
	for ctx.Err() == nil {
		keys, err := bs.sweepable(ctx, fullBy, quietSince)
		if err != nil {
			bs.log.Error("bucket sweep failed", "err", err)
			return
		}
		more := len(keys) == sweepRead // another round may find more
		// A chunk is one partition's keys: a partition with states staged
		// is merged in the same transaction first (runs.go), so that no
		// stale staged state outlives the row it would bring back.
		slices.SortFunc(keys, func(a, b bucketID) int { return a.part - b.part })
		for len(keys) > 0 && ctx.Err() == nil {
			p := keys[0].part
			n := 1
			for n < len(keys) && n < sweepChunk && keys[n].part == p {
				n++
			}
			chunk := keys[:n]
			keys = keys[n:]
			var merged *mergeResult
			var chunkDeleted int64
			start := time.Now()
			err := bs.store.WriteTx(ctx, func(tx *sql.Tx) error {
				merged, chunkDeleted = nil, 0
				if bs.runs.dirty()&(1<<p) != 0 {
					m, err := bs.staging.mergeTx(ctx, tx, p)
					if err != nil {
						return err
					}
					merged = &m
				}
				st, err := tx.PrepareContext(ctx, `DELETE FROM buckets WHERE part = ? AND key = ? AND full_at <= ? AND updated_at <= ?`)
				if err != nil {
					return err
				}
				defer st.Close()
				for _, k := range chunk {
					res, err := st.ExecContext(ctx, k.part, k.key, fullBy, quietSince)
					if err != nil {
						return err
					}
					n, _ := res.RowsAffected()
					chunkDeleted += n
				}
				return nil
			})
			if err != nil {
				bs.log.Error("bucket sweep failed", "err", err)
				return
			}
			if merged != nil {
				bs.runs.mergeDone(p, *merged, time.Since(start))
			}
			deleted += chunkDeleted
			bs.runs.swept(p, int(chunkDeleted))
		}
		if !more {
			break
		}
	}
	if deleted > 0 {
		bs.log.Debug("bucket sweep", "deleted", deleted)
	}
	bs.releaseIfIdle(deleted)
}

// releaseIfIdle gives memory back after a burst: when neither the streams
// nor the sweep wrote anything since the last sweep, it closes the idle
// SQLite connections (each keeps a page cache of up to 128 MiB) and hands
// the C heap's free pages and the Go heap's back to the system; again
// every releaseEvery while the worker stays idle, for a connection that
// was in use the first time (a read) and has kept its cache since. A busy
// worker keeps its warm caches.
func (bs *bucketSweeper) releaseIfIdle(swept int64) {
	bs.releaseMu.Lock()
	defer bs.releaseMu.Unlock()
	written := bs.written() + bs.runs.mergedRows.Load()
	idle := written == bs.rowsAtSweep && swept == 0
	bs.rowsAtSweep = written
	if !idle {
		bs.releasedAt = time.Time{}
		return
	}
	if !bs.releasedAt.IsZero() && time.Since(bs.releasedAt) < releaseEvery {
		return
	}
	bs.releasedAt = time.Now()
	// Under the writer's semaphore, so that no write transaction holds a
	// connection's cache meanwhile. The last connection is never closed
	// here: Run holds one.
	err := bs.store.Exclusive(context.Background(), func() error {
		bs.db.SetMaxIdleConns(0) // closes the idle connections now
		bs.db.SetMaxIdleConns(maxIdleConns)
		sqlitedb.ReleaseMemory()
		return nil
	})
	// The Go heap too: its scavenger hands freed memory back only slowly,
	// and an idle worker has nothing better to do with one collection.
	debug.FreeOSMemory()
	if err == nil {
		bs.log.Debug("idle: SQLite connections closed and memory released")
	}
}

// releaseEvery is how often an idle worker gives memory back again.
const releaseEvery = time.Minute

// maxIdleConns is database/sql's default, restored after releaseIfIdle.
const maxIdleConns = 2

// bucketID is a persisted bucket's primary key.
type bucketID struct {
	part int
	key  string
}

// sweepable reads up to sweepRead keys of buckets the sweep may delete.
func (bs *bucketSweeper) sweepable(ctx context.Context, fullBy, quietSince int64) ([]bucketID, error) {
	rows, err := bs.db.QueryContext(ctx, `SELECT part, key FROM buckets WHERE full_at <= ? AND updated_at <= ? LIMIT ?`, fullBy, quietSince, sweepRead)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []bucketID
	for rows.Next() {
		var k bucketID
		if err := rows.Scan(&k.part, &k.key); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}
