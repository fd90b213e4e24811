package worker

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/sqlitedb"
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
	m := sqlitedb.NewMultiRow(tx, `INSERT INTO buckets (key, tenant_id, part, state, full_at, seq, updated_at) VALUES`, 7,
		`ON CONFLICT (part, key) DO UPDATE SET state = excluded.state, full_at = excluded.full_at, seq = excluded.seq, updated_at = excluded.updated_at
	WHERE excluded.seq > buckets.seq`)
	for _, r := range rows {
		if err := m.Add(r.rec.Key, r.rec.TenantID, r.part, r.bin, r.rec.FullAt, int64(r.seq), now); err != nil {
			m.Flush()
			return err
		}
	}
	return m.Flush()
}
