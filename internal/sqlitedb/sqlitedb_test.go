package sqlitedb

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Open on a real file: the schema is created, the pragmas hold on every
// connection, reopening is a no-op, and a schema newer than the binary is
// refused rather than written to.
func TestOpenMigratesAndRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sluice.db")
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
	}
	var fk int
	if err := db.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk); err != nil || fk != 1 {
		t.Fatalf("foreign_keys = %d, %v; want 1", fk, err)
	}
	for _, table := range []string{"buckets", "counters", "stream_applied"} {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&n); err != nil || n != 1 {
			t.Fatalf("table %s: %d, %v", table, n, err)
		}
	}
	var version int64
	if err := db.QueryRowContext(ctx, `SELECT max(version_id) FROM goose_db_version`).Scan(&version); err != nil || version < 1 {
		t.Fatalf("schema version %d, %v", version, err)
	}
	db.Close()

	// Reopening applies nothing new and keeps the data.
	db, err = Open(ctx, path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES (?, 1)`, version+1); err != nil {
		t.Fatal(err)
	}
	db.Close()

	// A database a newer Sluice has migrated is not touched by this one.
	if _, err := Open(ctx, path); err == nil || !strings.Contains(err.Error(), "upgrade Sluice") {
		t.Fatalf("opening a newer schema: %v, want a refusal that says to upgrade", err)
	}
}

// The database holds password and key hashes: it and its WAL and
// shared-memory files are 0600 even with a umask of 0 in a world-writable
// directory, and a database left 0644 by an older version is tightened.
func TestOpenFilesAreOwnerOnly(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := func(path string) {
		t.Helper()
		db, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, `INSERT INTO settings (key, value) VALUES ('perm_test', 'x') ON CONFLICT (key) DO UPDATE SET value = 'y'`); err != nil {
			t.Fatal(err)
		}
		for _, suffix := range []string{"", "-wal", "-shm"} {
			fi, err := os.Stat(path + suffix)
			if err != nil {
				t.Fatalf("%s: %v", suffix, err)
			}
			if mode := fi.Mode().Perm(); mode != 0o600 {
				t.Errorf("%s%s has mode %o, want 600", filepath.Base(path), suffix, mode)
			}
		}
	}
	check(filepath.Join(dir, "sluice.db"))

	legacy := filepath.Join(dir, "legacy.db")
	if err := os.WriteFile(legacy, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	check(legacy)
}
