package sqlitedb

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func autoVacuum(t *testing.T, db *sql.DB) int {
	t.Helper()
	var mode int
	if err := db.QueryRow(`PRAGMA auto_vacuum`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	return mode
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// fill inserts n rows of 4 KiB into a scratch table, in one transaction.
func fill(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS scratch (id INTEGER PRIMARY KEY, body BLOB NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, err := tx.Exec(`INSERT INTO scratch (body) VALUES (randomblob(4096))`); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// A new database is incremental from its first page; deleting rows and
// running IncrementalVacuum shrinks the file on disk.
func TestIncrementalVacuumShrinksTheFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sluice.db")
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if m := autoVacuum(t, db); m != autoVacuumIncremental {
		t.Fatalf("a new database has auto_vacuum %d, want %d (incremental)", m, autoVacuumIncremental)
	}
	fill(t, db, 2000) // ~8 MiB
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	full := fileSize(t, path)
	if full < 8<<20 {
		t.Fatalf("file is %d bytes after filling, want at least 8 MiB", full)
	}
	if _, err := db.Exec(`DELETE FROM scratch`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	if got := fileSize(t, path); got < full {
		t.Fatalf("file shrank to %d bytes before any vacuum; the test would prove nothing", got)
	}
	st, err := IncrementalVacuum(ctx, db, 1)
	if err != nil {
		t.Fatal(err)
	}
	if st.FreePages < 2000 || st.FreedPages != st.FreePages {
		t.Fatalf("vacuum stats %+v: want every one of at least 2000 free pages freed", st)
	}
	after := fileSize(t, path)
	if after > full/8 {
		t.Fatalf("file is %d bytes after vacuum, was %d: want it to shrink to under an eighth", after, full)
	}
	if wal := fileSize(t, path+"-wal"); wal != 0 {
		t.Fatalf("WAL is %d bytes after the vacuum's checkpoint, want 0", wal)
	}
	// Below the threshold nothing is done.
	fill(t, db, 10)
	if _, err := db.Exec(`DELETE FROM scratch`); err != nil {
		t.Fatal(err)
	}
	st, err = IncrementalVacuum(ctx, db, 1000)
	if err != nil || st.FreedPages != 0 || st.FreePages == 0 {
		t.Fatalf("below the threshold: %+v, %v; want free pages left alone", st, err)
	}
}

// A database made before auto-vacuum is converted once, with a log line,
// keeps its rows, and then shrinks like a new one.
func TestOlderDatabaseIsConvertedOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sluice.db")
	old, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	fill(t, old, 1000)
	if m := autoVacuum(t, old); m != 0 {
		t.Fatalf("the old database has auto_vacuum %d, want 0", m)
	}
	old.Close()

	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if m := autoVacuum(t, db); m != 0 {
		t.Fatalf("Open alone changed auto_vacuum to %d; only the conversion may (it rewrites the file)", m)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if err := ConvertIncrementalVacuum(ctx, db, log); err != nil {
		t.Fatal(err)
	}
	if m := autoVacuum(t, db); m != autoVacuumIncremental {
		t.Fatalf("after conversion auto_vacuum is %d", m)
	}
	if !strings.Contains(logs.String(), "converted the SQLite file to incremental auto-vacuum") {
		t.Fatalf("no conversion log line in %q", logs.String())
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM scratch`).Scan(&n); err != nil || n != 1000 {
		t.Fatalf("rows after conversion: %d, %v", n, err)
	}
	logs.Reset()
	if err := ConvertIncrementalVacuum(ctx, db, log); err != nil || logs.Len() != 0 {
		t.Fatalf("second conversion: %v, logged %q; want nothing done", err, logs.String())
	}

	if _, err := db.Exec(`DELETE FROM scratch`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	before := fileSize(t, path)
	if _, err := IncrementalVacuum(ctx, db, 1); err != nil {
		t.Fatal(err)
	}
	if after := fileSize(t, path); after > before/4 {
		t.Fatalf("converted file: %d bytes after vacuum, %d before", after, before)
	}
}
