package worker

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
)

// upsertBucketSQL writes one bucket row unless the row holds a newer state
// (a higher stream sequence). A bucket that is full again is written too
// (not deleted), so that its sequence keeps older redeliveries out; the
// sweep deletes it later.
const upsertBucketSQL = `INSERT INTO buckets (key, tenant_id, part, state, full_at, seq, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (part, key) DO UPDATE SET state = excluded.state, full_at = excluded.full_at, seq = excluded.seq, updated_at = excluded.updated_at
	WHERE excluded.seq > buckets.seq`

// upsertBucket writes rec with the statement of upsertBucketSQL; buf is
// scratch space for the state's binary form (bus.AppendState), returned for
// reuse.
func upsertBucket(st *sql.Stmt, buf []byte, rec *bus.BucketRecord, seq uint64, now int64) ([]byte, error) {
	buf = bus.AppendState(buf[:0], rec.Limits, rec.States)
	_, err := st.Exec(rec.Key, rec.TenantID, bus.Partition([]byte(rec.Key)), buf, rec.FullAt, int64(seq), now)
	return buf, err
}

// WriteBuckets stores bucket records as the worker persists them from the
// state stream, in transactions of up to 50 000 rows, with sequence 0 (any
// state from the stream replaces them). It is for tools that prepare a data
// directory without replaying traffic, such as the scale benchmark; the
// worker must not be running on db.
func WriteBuckets(ctx context.Context, db *sql.DB, recs []bus.BucketRecord, now time.Time) error {
	for len(recs) > 0 {
		n := min(len(recs), 50000)
		if err := writeBucketTx(ctx, db, recs[:n], now.UnixNano()); err != nil {
			return err
		}
		recs = recs[n:]
	}
	return nil
}

func writeBucketTx(ctx context.Context, db *sql.DB, recs []bus.BucketRecord, now int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	st, err := tx.PrepareContext(ctx, upsertBucketSQL)
	if err != nil {
		return err
	}
	defer st.Close()
	var buf []byte
	for i := range recs {
		if buf, err = upsertBucket(st, buf, &recs[i], 0, now); err != nil {
			return fmt.Errorf("write bucket %q: %w", recs[i].Key, err)
		}
	}
	return tx.Commit()
}

// rowsPerStatement is how many rows one multi-row INSERT writes: one
// statement per row spends most of its time crossing into SQLite, and 64
// rows of 8 values stay far below SQLite's bound on parameters.
const rowsPerStatement = 64

// multiRow writes rows within a transaction with INSERT statements of
// rowsPerStatement rows each: head is the statement up to VALUES, tail what
// follows the rows (ON CONFLICT …). A statement may not write the same row
// twice, so callers add each key once.
type multiRow struct {
	tx         *sql.Tx
	head, tail string
	cols       int
	full       *sql.Stmt // prepared on first use
	args       []any
}

func newMultiRow(tx *sql.Tx, head string, cols int, tail string) *multiRow {
	return &multiRow{tx: tx, head: head, tail: tail, cols: cols, args: make([]any, 0, cols*rowsPerStatement)}
}

func (m *multiRow) sql(rows int) string {
	one := "(?" + strings.Repeat(", ?", m.cols-1) + ")"
	return m.head + " " + one + strings.Repeat(", "+one, rows-1) + "\n" + m.tail
}

// add queues one row and writes a statement's worth once there are enough.
// The values must stay unchanged until the statement has run.
func (m *multiRow) add(vals ...any) error {
	m.args = append(m.args, vals...)
	if len(m.args) < m.cols*rowsPerStatement {
		return nil
	}
	if m.full == nil {
		var err error
		if m.full, err = m.tx.Prepare(m.sql(rowsPerStatement)); err != nil {
			return err
		}
	}
	_, err := m.full.Exec(m.args...)
	m.args = m.args[:0]
	return err
}

// flush writes the queued rows and closes the prepared statement; m may be
// used again after it.
func (m *multiRow) flush() error {
	if m.full != nil {
		defer m.full.Close()
		m.full = nil
	}
	if len(m.args) == 0 {
		return nil
	}
	_, err := m.tx.Exec(m.sql(len(m.args)/m.cols), m.args...)
	m.args = m.args[:0]
	return err
}

// bucketRow is a bucket record in its stored form: its state's binary
// encoding and its partition, computed before the writer is taken.
type bucketRow struct {
	rec  *bus.BucketRecord
	seq  uint64
	bin  []byte
	part int
}

// bucketRows encodes a batch's buckets (none when b is nil).
func bucketRows(b *bus.StateBatch) []bucketRow {
	if b == nil {
		return []bucketRow{}
	}
	out := make([]bucketRow, len(b.Buckets))
	for i := range b.Buckets {
		rec := &b.Buckets[i]
		out[i] = bucketRow{rec: rec, bin: bus.AppendState(nil, rec.Limits, rec.States), part: bus.Partition([]byte(rec.Key))}
	}
	return out
}

// writeBucketRows upserts bucket rows with upsertBucketSQL's rule, many per
// statement, each with its own sequence.
func writeBucketRows(tx *sql.Tx, rows []bucketRow, now int64) error {
	m := newMultiRow(tx, `INSERT INTO buckets (key, tenant_id, part, state, full_at, seq, updated_at) VALUES`, 7,
		`ON CONFLICT (part, key) DO UPDATE SET state = excluded.state, full_at = excluded.full_at, seq = excluded.seq, updated_at = excluded.updated_at
	WHERE excluded.seq > buckets.seq`)
	for _, r := range rows {
		if err := m.add(r.rec.Key, r.rec.TenantID, r.part, r.bin, r.rec.FullAt, int64(r.seq), now); err != nil {
			m.flush()
			return err
		}
	}
	return m.flush()
}
