package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// What a recorded database ships, replayed on another file, gives the same
// rows; a refused commit leaves nothing; reads are not recorded.
func TestRecordedTransactionsReplay(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	rec := &Recorder{}
	src, err := OpenRecorded(ctx, filepath.Join(dir, "a.db"), rec)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := Open(ctx, filepath.Join(dir, "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	for _, db := range []*sql.DB{src, dst} {
		if _, err := db.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY, s TEXT, f REAL, b BLOB, at TEXT, n INTEGER)`); err != nil {
			t.Fatal(err)
		}
	}
	var shipped [][]Statement
	refuse := false
	rec.SetHook(func(stmts []Statement, exec func(string, ...any) (int64, error)) error {
		if refuse {
			return errors.New("refused")
		}
		shipped = append(shipped, stmts)
		return nil
	})
	at := time.Date(2026, 11, 23, 12, 0, 0, 123456789, time.UTC)
	tx, err := src.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM t`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO t (s, f, b, at, n) VALUES (?, ?, ?, ?, ?)`, "x", 0.1, []byte{0, 1}, at, nil); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO t (s, f) VALUES (?, ?) RETURNING id`, "y", 2.5).Scan(&id); err != nil {
		t.Fatal(err)
	}
	stmt, err := tx.PrepareContext(ctx, `UPDATE t SET f = f * 3 WHERE id = ?`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stmt.ExecContext(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if len(shipped) != 1 || len(shipped[0]) != 3 {
		t.Fatalf("shipped %v, want one transaction of three statements", shipped)
	}

	refuse = true
	tx, _ = src.BeginTx(ctx, nil)
	if _, err := tx.ExecContext(ctx, `DELETE FROM t`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err == nil {
		t.Fatal("a refused commit succeeded")
	}
	if _, err := src.ExecContext(ctx, `DELETE FROM t`); !errors.Is(err, ErrWriteOutsideTx) {
		t.Fatalf("a write outside a transaction: %v", err)
	}

	rtx, err := dst.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := Replay(ctx, rtx, shipped[0]); err != nil {
		t.Fatal(err)
	}
	if err := rtx.Commit(); err != nil {
		t.Fatal(err)
	}
	read := func(db *sql.DB) [][]any {
		rows, err := db.QueryContext(ctx, `SELECT id, s, f, b, at, n FROM t ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out [][]any
		for rows.Next() {
			v := make([]any, 6)
			p := make([]any, 6)
			for i := range v {
				p[i] = &v[i]
			}
			if err := rows.Scan(p...); err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return out
	}
	a, b := read(src), read(dst)
	if len(a) != 2 || !reflect.DeepEqual(a, b) {
		t.Fatalf("source %v, replica %v", a, b)
	}
}
