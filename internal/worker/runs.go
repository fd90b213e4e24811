package worker

// Staged runs. The state stream's bucket states are not upserted into
// buckets where they belong, but appended to bucket_runs as one run per
// transaction, and merged into buckets later, one partition per
// transaction.
//
// Why: a flood of callers scattered over a buckets table larger than the
// page cache dirties about one B-tree page per row written in place, so
// the WAL carries some 4 KiB per bucket and the writer managed 16-20k
// rows/s at 3M buckets. A run is written in (part, key) order under a run
// number higher than any before, so it is appended at the right edge of
// bucket_runs' B-tree. A partition merged later writes each of its pages
// once for every state staged for it since its last merge.
//
// Reading. A key's state is its newest (highest seq) row in buckets or in
// any run that bucket_run_ids lists. Every reader (hydration pages, buckets
// by key) asks both tables in one statement, so it reads one snapshot; a
// merge moving rows from one table to the other in between is never half
// seen.
//
// Merging a partition copies its rows of every run into buckets (a newer
// seq wins, as for any upsert), deletes them from the runs, and drops the
// ids of the runs left empty, all in one transaction. The merge policy
// (mergeDue) keeps the work per staged row small during a flood and the
// runs few for readers: while the stream is busy, a partition is merged
// once it has staged mergeRatio times as many rows as buckets holds for it
// (so a merge rewrites each page for several new rows, and a flood into a
// small table merges early, while that is cheap); everything is merged
// once the stream has been quiet for a moment; and the oldest runs are
// merged when there are more than maxRuns.
//
// The sweep merges a partition in the same transaction as it deletes
// full buckets from it: a stale redelivery waiting in a run (older than
// the row being swept) must never bring a swept bucket back.

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tick"
)

// A run's partitions are a bit set in one uint64.
var _ [64 - bus.Partitions]struct{}

const (
	// maxRuns is how many runs readers may have to look a partition up
	// in before the oldest are merged whatever their size.
	maxRuns = 256
	// mergeRatio is how many times the rows buckets holds for a partition
	// it must have staged to be merged while the stream is busy.
	mergeRatio = 4
	// mergeMinRows is how many rows a partition stages before a merge is
	// worth its transaction while the stream is busy.
	mergeMinRows = 4096
	// mergeQuiet is how long the state stream must have committed nothing
	// before every staged row is merged.
	mergeQuiet = 2 * time.Second
)

// stagedRuns is the worker's account of bucket_runs: which partitions each
// run still holds rows of, and how many rows each partition has staged
// and holds in buckets. It is rebuilt from the database when the worker
// becomes active (load), and kept by stage and merge after each commit.
//
// A run enters the account within its transaction, before COMMIT, while
// the transaction holds the one writer, so no merge can miss it. If the
// COMMIT then fails, the account counts rows that are not there: that only
// costs an empty merge later. Only a merge drops a run.
type stagedRuns struct {
	mu         sync.Mutex
	loaded     bool
	next       int64                  // the next run number
	runs       map[int64]uint64       // run -> partitions it holds rows of
	staged     [bus.Partitions]int    // rows staged per partition
	table      [bus.Partitions]int    // rows in buckets per partition
	lastStage  time.Time              // when the last run committed
	counted    uint64                 // partitions whose table count is known
	mergedRows atomic.Uint64          // rows merged so far
	merging    [bus.Partitions]bool   // a merge of the partition is under way
	stagedG    prometheus.Gauge       // sluice_worker_bucket_rows_staged
	runsG      prometheus.Gauge       // sluice_worker_bucket_runs
	merged     prometheus.Counter     // sluice_worker_bucket_rows_merged_total
	mergeTime  prometheus.Counter     // sluice_worker_bucket_merge_seconds_total
	mergeErrs  *prometheus.CounterVec // sluice_worker_bucket_merge_failures_total
}

func newStagedRuns() *stagedRuns {
	return &stagedRuns{
		runs:      map[int64]uint64{},
		stagedG:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_worker_bucket_rows_staged", Help: "Bucket states committed to staged runs and not yet merged into the buckets table."}),
		runsG:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_worker_bucket_runs", Help: "Staged runs that still hold bucket states."}),
		merged:    prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_worker_bucket_rows_merged_total", Help: "Staged bucket states merged into the buckets table."}),
		mergeTime: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_worker_bucket_merge_seconds_total", Help: "Time spent merging staged runs into the buckets table."}),
		mergeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_bucket_merge_failures_total", Help: "Merges of a partition's staged runs that failed (and are retried), by reason."}, []string{"reason"}),
	}
}

func (r *stagedRuns) collectors() []prometheus.Collector {
	return []prometheus.Collector{r.stagedG, r.runsG, r.merged, r.mergeTime, r.mergeErrs}
}

// load rebuilds the account of runs from the database, before the worker
// stages any: one pass over bucket_runs' primary key.
func (r *stagedRuns) load(ctx context.Context, db *sql.DB) error {
	runs := map[int64]uint64{}
	var staged [bus.Partitions]int
	var next int64 = 1
	rows, err := db.QueryContext(ctx, `SELECT run, part, count(*) FROM bucket_runs GROUP BY run, part`)
	if err != nil {
		return fmt.Errorf("read staged runs: %w", err)
	}
	for rows.Next() {
		var run int64
		var part, n int
		if err := rows.Scan(&run, &part, &n); err != nil {
			rows.Close()
			return fmt.Errorf("read staged runs: %w", err)
		}
		if part < 0 || part >= bus.Partitions {
			continue
		}
		runs[run] |= 1 << part
		staged[part] += n
		next = max(next, run+1)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read staged runs: %w", err)
	}
	// Run numbers are never reused while listed, even for runs left empty.
	var maxID sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT max(run) FROM bucket_run_ids`).Scan(&maxID); err != nil {
		return fmt.Errorf("read staged runs: %w", err)
	}
	if maxID.Valid {
		next = max(next, maxID.Int64+1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs, r.staged, r.next, r.loaded, r.counted = runs, staged, next, true, 0
	r.publish()
	return nil
}

// uncounted returns a partition that has staged enough rows to be merged
// by size but whose rows in buckets are not counted yet, or -1. Counts are
// taken when first needed (one range of the primary key each), so a
// worker starting over millions of buckets does not read them all first.
func (r *stagedRuns) uncounted() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, n := range r.staged {
		if n >= mergeMinRows && r.counted&(1<<p) == 0 && !r.merging[p] {
			return p
		}
	}
	return -1
}

// swept accounts for rows the sweep deleted from partition p.
func (r *stagedRuns) swept(p, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.table[p] = max(r.table[p]-n, 0)
}

// countTable counts partition p's rows in buckets.
func (r *stagedRuns) countTable(ctx context.Context, db *sql.DB, p int) error {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM buckets WHERE part = ?`, p).Scan(&n); err != nil {
		return fmt.Errorf("count buckets: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.merging[p] {
		r.table[p] = n
		r.counted |= 1 << p
	}
	return nil
}

// publish updates the gauges; r.mu is held.
func (r *stagedRuns) publish() {
	r.stagedG.Set(float64(r.total()))
	r.runsG.Set(float64(len(r.runs)))
}

// total is how many rows are staged; r.mu is held.
func (r *stagedRuns) total() int {
	total := 0
	for _, n := range r.staged {
		total += n
	}
	return total
}

// stagedRows is how many rows are staged and not yet merged.
func (r *stagedRuns) stagedRows() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total()
}

// count returns how many runs hold rows.
func (r *stagedRuns) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs)
}

// reserve returns a new run number.
func (r *stagedRuns) reserve() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	run := r.next
	r.next++
	return run
}

// stageRows appends rows (sorted by part, key, one per key) to run within
// tx and lists the run, returning how many rows each partition got.
func stageRows(tx *sql.Tx, run int64, rows []bucketRow, now int64) ([bus.Partitions]int, error) {
	var counts [bus.Partitions]int
	if len(rows) == 0 {
		return counts, nil
	}
	if _, err := tx.Exec(`INSERT INTO bucket_run_ids (run) VALUES (?)`, run); err != nil {
		return counts, err
	}
	m := sqlitedb.NewMultiRow(tx, `INSERT INTO bucket_runs (run, part, key, tenant_id, state, full_at, seq, updated_at) VALUES`, 8, ``)
	runV, nowV := any(run), any(now) // boxed once, not per row
	for _, row := range rows {
		if err := m.Add(runV, row.part, row.rec.Key, row.rec.TenantID, row.bin, row.rec.FullAt, int64(row.seq), nowV); err != nil {
			m.Flush()
			return counts, err
		}
		counts[row.part]++
	}
	return counts, m.Flush()
}

// runWriter stages stream batches' bucket states in runs and merges the
// runs into buckets, keeping runs, the account of both, up to date.
type runWriter struct {
	runs    *stagedRuns
	db      *sql.DB
	writeTx func(context.Context, func(*sql.Tx) error) error
	now     func() time.Time
	log     *slog.Logger
}

// stage appends rows (sorted by part, key, one per key) to a new run within
// tx and returns how many it wrote.
func (rw *runWriter) stage(tx *sql.Tx, rows []bucketRow) (int, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	run := rw.runs.reserve()
	counts, err := stageRows(tx, run, rows, rw.now().UnixNano())
	if err != nil {
		return 0, err
	}
	rw.runs.add(run, counts, rw.now())
	return len(rows), nil
}

// add accounts for a run written by a transaction about to commit.
func (r *stagedRuns) add(run int64, counts [bus.Partitions]int, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var set uint64
	for p, n := range counts {
		if n > 0 {
			set |= 1 << p
			r.staged[p] += n
		}
	}
	if set != 0 {
		r.runs[run] = set
		r.lastStage = at
	}
	r.publish()
}

// dirty returns the partitions with rows staged (or being merged), as a
// bit set.
func (r *stagedRuns) dirty() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var set uint64
	for _, s := range r.runs {
		set |= s
	}
	for p, m := range r.merging {
		if m {
			set |= 1 << p
		}
	}
	return set
}

// isLoaded reports whether the account has been read from the database.
func (r *stagedRuns) isLoaded() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loaded
}

// mergeDue picks the next partition to merge and why, or -1. While the
// stream is busy it picks the partition with the most rows staged among
// those that have staged mergeRatio times the rows buckets holds for them
// (and mergeMinRows); when there are too many runs, a partition of the
// oldest; once the stream is quiet, any partition with rows staged.
func (r *stagedRuns) mergeDue(now time.Time) (int, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.loaded || len(r.runs) == 0 {
		return -1, ""
	}
	best, why := -1, ""
	for p, n := range r.staged {
		if r.counted&(1<<p) == 0 || r.merging[p] || n < max(mergeRatio*r.table[p], mergeMinRows) {
			continue
		}
		if best < 0 || n > r.staged[best] {
			best, why = p, "size"
		}
	}
	if best >= 0 {
		return best, why
	}
	if len(r.runs) > maxRuns {
		oldest := slices.Min(mapKeys(r.runs))
		if set := r.runs[oldest]; set != 0 {
			return bits.TrailingZeros64(set), "runs"
		}
	}
	if now.Sub(r.lastStage) >= mergeQuiet {
		var dirty uint64
		for _, set := range r.runs {
			dirty |= set
		}
		if dirty != 0 {
			return bits.TrailingZeros64(dirty), "quiet"
		}
	}
	return -1, ""
}

func mapKeys(m map[int64]uint64) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// mergeSQL moves one partition's staged rows into buckets: rows of one key
// in several runs come in seq order, so the newest is written last, and a
// row buckets already holds with a higher seq stays.
const mergeSQL = `INSERT INTO buckets (key, tenant_id, part, state, full_at, seq, updated_at)
	SELECT key, tenant_id, part, state, full_at, seq, updated_at FROM bucket_runs
	WHERE run IN (SELECT run FROM bucket_run_ids) AND part = ? ORDER BY key, seq
	ON CONFLICT (part, key) DO UPDATE SET tenant_id = excluded.tenant_id, state = excluded.state, full_at = excluded.full_at,
		seq = excluded.seq, updated_at = excluded.updated_at
	WHERE excluded.seq > buckets.seq`

// mergeEverything merges every staged row into buckets within tx, for the
// rare moments that need buckets alone (a stream made anew); the caller
// reloads the account after commit (stagedRuns.load).
func mergeEverything(ctx context.Context, tx *sql.Tx) error {
	for p := range bus.Partitions {
		if _, err := tx.ExecContext(ctx, mergeSQL, p); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM bucket_runs`); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM bucket_run_ids`)
	return err
}

// mergePartition merges partition p's staged rows into buckets in one
// transaction and returns how many rows it moved.
func (rw *runWriter) mergePartition(ctx context.Context, p int) (int, error) {
	r := rw.runs
	r.mu.Lock()
	if r.merging[p] {
		r.mu.Unlock()
		return 0, nil
	}
	r.merging[p] = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.merging[p] = false
		r.mu.Unlock()
	}()

	start := time.Now()
	var m mergeResult
	err := rw.writeTx(ctx, func(tx *sql.Tx) (err error) {
		m, err = rw.mergeTx(ctx, tx, p)
		return err
	})
	if err != nil {
		return 0, err
	}
	r.mergeDone(p, m, time.Since(start))
	return m.moved, nil
}

// mergeResult is what a merge of one partition did, for the account.
type mergeResult struct {
	seen         []int64 // the runs accounted for when it began
	stagedBefore int     // the partition's staged rows then
	moved        int     // rows moved
}

// mergeTx merges partition p's staged rows into buckets within tx, which
// holds the one writer; mergeDone accounts for it once tx commits.
func (rw *runWriter) mergeTx(ctx context.Context, tx *sql.Tx, p int) (mergeResult, error) {
	r := rw.runs
	// The runs this merge empties of p, and those whose only partition
	// left is p. Read under the writer, so every committed run is
	// accounted for; runs staged after this merge keep p.
	var m mergeResult
	var emptied []int64
	r.mu.Lock()
	m.stagedBefore = r.staged[p]
	for run, set := range r.runs {
		m.seen = append(m.seen, run)
		if set&^(1<<p) == 0 {
			emptied = append(emptied, run)
		}
	}
	r.mu.Unlock()
	if _, err := tx.ExecContext(ctx, mergeSQL, p); err != nil {
		return m, err
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM bucket_runs WHERE run IN (SELECT run FROM bucket_run_ids) AND part = ?`, p)
	if err != nil {
		return m, err
	}
	n, _ := res.RowsAffected()
	m.moved = int(n)
	slices.Sort(emptied)
	for len(emptied) > 0 {
		chunk := emptied[:min(len(emptied), 500)]
		emptied = emptied[len(chunk):]
		if _, err := tx.ExecContext(ctx, `DELETE FROM bucket_run_ids WHERE run IN (`+intList(chunk)+`)`); err != nil {
			return m, err
		}
	}
	return m, nil
}

// mergeDone accounts for a committed merge of partition p.
func (r *stagedRuns) mergeDone(p int, m mergeResult, took time.Duration) {
	r.mu.Lock()
	for _, run := range m.seen {
		if set := r.runs[run] &^ (1 << p); set == 0 {
			delete(r.runs, run)
		} else {
			r.runs[run] = set
		}
	}
	// The rows moved were new keys or newer states of keys buckets held:
	// counting them all keeps an upper bound of the table without a scan.
	r.staged[p] = max(r.staged[p]-m.stagedBefore, 0)
	r.table[p] += m.moved
	r.publish()
	r.mu.Unlock()
	r.merged.Add(float64(m.moved))
	r.mergedRows.Add(uint64(m.moved))
	r.mergeTime.Add(took.Seconds())
}

func intList(xs []int64) string {
	var b strings.Builder
	for i, x := range xs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(x, 10))
	}
	return b.String()
}

// MergeAll merges every partition's staged rows into buckets, for tools
// and tests that read the buckets table alone.
func (w *Worker) MergeAll(ctx context.Context) error {
	for p := range bus.Partitions {
		if _, err := w.staging.mergePartition(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// mergeLoop merges staged runs as mergeDue says, until ctx ends. Progress
// is logged at INFO every 10 s while a backlog of staged rows is being
// merged, and failures at WARN with a metric; a failed merge changed
// nothing and is tried again.
func (rw *runWriter) mergeLoop(ctx context.Context) {
	r := rw.runs
	// A worker that stops being active (a standby again) reloads the
	// account when it is active once more: the other worker staged and
	// merged meanwhile.
	defer func() {
		r.mu.Lock()
		r.loaded = false
		r.mu.Unlock()
	}()
	var (
		lastLog   time.Time
		mergedLog int
		busy      bool
	)
	tick.Every(ctx, 100*time.Millisecond, func() {
		for ctx.Err() == nil {
			if p := r.uncounted(); p >= 0 {
				if err := r.countTable(ctx, rw.db, p); err != nil {
					if ctx.Err() == nil {
						r.mergeErrs.WithLabelValues("count").Inc()
						rw.log.Warn("counting a partition's buckets failed; merges by size wait, retrying", "partition", p, "err", err)
						sleepCtx(ctx, time.Second)
					}
					break
				}
				continue
			}
			p, why := r.mergeDue(rw.now())
			if p < 0 {
				if busy {
					busy = false
					rw.log.Info("staged bucket states merged", "rows_merged", mergedLog)
					mergedLog = 0
				}
				break
			}
			n, err := rw.mergePartition(ctx, p)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				reason := "error"
				if diskFull(err) {
					reason = "disk_full"
				}
				r.mergeErrs.WithLabelValues(reason).Inc()
				rw.log.Warn("merging staged bucket states failed; they stay staged (and read) and are merged again later",
					"partition", p, "reason", why, "err", err)
				sleepCtx(ctx, time.Second)
				break
			}
			mergedLog += n
			busy = true
			if now := time.Now(); now.Sub(lastLog) >= 10*time.Second {
				lastLog = now
				rw.log.Info("merging staged bucket states", "rows_merged", mergedLog, "rows_staged", r.stagedRows(), "runs", r.count(), "reason", why)
			}
		}
	})
}
