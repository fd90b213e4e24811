package worker

// Fencing tokens for cluster partitions (migration 0014).
//
// A server that takes a partition over loads it from the worker with
// bus.BucketsRequest.Acquire set. The worker first commits every state already
// in the stream (as for any first page), then raises the partition's term
// by one in its own write transaction, and answers the new term with the
// partition's buckets. The server stamps every state it decides for the
// partition with that term (bus.BucketRecord.Term). Stream batches are
// applied by the same one writer, in turn with the raises, and a state
// whose term is older than its partition's is dropped before it is staged
// (mergeState): a server that was cut off or paused while another took its
// partitions can publish its old states when it comes back, but they never
// overwrite what its successor loaded and decided. Term 0 is a state no
// owner decided (a single server, a local-mode policy): nothing fences it.
//
// The terms are in SQLite, so they survive restarts and reach a standby
// through the replication log; the in-memory copy is read at activation
// and changed only while the writer is held.

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
)

type partitionTerms struct {
	mu     sync.Mutex
	t      [bus.Partitions]uint64
	fenced prometheus.Counter
	// warned is when fenced states were last logged.
	warned time.Time
	// since counts the states fenced since then.
	since int
}

func newPartitionTerms() *partitionTerms {
	return &partitionTerms{fenced: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_worker_states_fenced_total",
		Help: "Bucket states refused because their partition term is older than the partition's: an owner that lost its lease published them after another server took the partition over.",
	})}
}

// load reads the terms from the database (at activation).
func (pt *partitionTerms) load(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, `SELECT part, term FROM partition_terms`)
	if err != nil {
		return fmt.Errorf("read partition terms: %w", err)
	}
	defer rows.Close()
	var t [bus.Partitions]uint64
	for rows.Next() {
		var p int
		var term int64
		if err := rows.Scan(&p, &term); err != nil {
			return fmt.Errorf("read partition terms: %w", err)
		}
		if p >= 0 && p < bus.Partitions {
			t[p] = uint64(term)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read partition terms: %w", err)
	}
	pt.mu.Lock()
	pt.t = t
	pt.mu.Unlock()
	return nil
}

func (pt *partitionTerms) get(p int) uint64 {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return pt.t[p]
}

// stale reports whether a state of partition p decided under term is
// older than the partition's term, and counts it if so. The writer must be
// held.
func (pt *partitionTerms) stale(p int, term uint64) bool {
	if term == 0 || p < 0 || p >= bus.Partitions {
		return false
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if term >= pt.t[p] {
		return false
	}
	pt.since++
	pt.fenced.Inc()
	return true
}

// report logs, at most every 10 s, how many states were fenced.
func (pt *partitionTerms) report(log *slog.Logger) {
	pt.mu.Lock()
	n := pt.since
	if n == 0 || time.Since(pt.warned) < 10*time.Second {
		pt.mu.Unlock()
		return
	}
	pt.since, pt.warned = 0, time.Now()
	pt.mu.Unlock()
	log.Info("refused bucket states of an older partition term: a server that lost its lease published them after another took the partition over", "states", n)
}

// raise gives partition p a new term, one more than any it had, for
// the acquisition that wrote lease, and returns it. It is one write
// transaction, so it is ordered with the stream batches: every batch
// applied after it is fenced by it. An acquisition no newer than the last
// one that raised p's term is refused: its request arrived late (its
// server gave up on it and may since have taken p again, under a newer
// lease and term), and raising the term for it would fence the current
// owner.
// writeTx is the store's one writer.
func (pt *partitionTerms) raise(ctx context.Context, writeTx func(context.Context, func(*sql.Tx) error) error, p int, lease bus.LeaseID) (uint64, error) {
	if p < 0 || p >= bus.Partitions {
		return 0, errs.Errorf(errs.Invalid, "partition %d out of range", p)
	}
	var term uint64
	err := writeTx(ctx, func(tx *sql.Tx) error {
		var stored, inc, rev int64
		err := tx.QueryRowContext(ctx, `SELECT term, lease_inc, lease_rev FROM partition_terms WHERE part = ?`, p).Scan(&stored, &inc, &rev)
		if err != nil && err != sql.ErrNoRows {
			return err
		}
		if last := (bus.LeaseID{Incarnation: inc, Revision: uint64(rev)}); err == nil && !lease.After(last) {
			return errs.Errorf(errs.Conflict, "partition %d was taken by a newer lease (%d/%d) than this one (%d/%d)", p, last.Incarnation, last.Revision, lease.Incarnation, lease.Revision)
		}
		pt.mu.Lock()
		term = max(pt.t[p], uint64(stored)) + 1
		pt.mu.Unlock()
		if _, err := tx.ExecContext(ctx, `INSERT INTO partition_terms (part, term, lease_inc, lease_rev) VALUES (?, ?, ?, ?)
			ON CONFLICT (part) DO UPDATE SET term = excluded.term, lease_inc = excluded.lease_inc, lease_rev = excluded.lease_rev`,
			p, int64(term), lease.Incarnation, int64(lease.Revision)); err != nil {
			return err
		}
		// Raised before COMMIT, while the writer is held: no batch can be
		// applied between the commit and the raise. A commit that fails
		// leaves the raise in memory only, which fences more, never less.
		pt.mu.Lock()
		pt.t[p] = term
		pt.mu.Unlock()
		return nil
	})
	if err != nil {
		if errs.Code(err) == errs.Conflict {
			return 0, err
		}
		return 0, fmt.Errorf("raise partition term: %w", err)
	}
	return term, nil
}
