package sqlitedb

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// rssAnon reads the process's anonymous resident memory.
func rssAnon(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status here")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "RssAnon:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Skip("no RssAnon in /proc/self/status")
	return 0
}

// SQLite's page cache, filled by a large write and read back on several
// connections, is handed back to the system once the connections close
// and the C heap is released: the process does not keep it resident.
func TestReleasedPageCacheLeavesResidentMemory(t *testing.T) {
	if runtime.GOOS != "linux" || !ReadCHeap().Known {
		t.Skip("glibc on Linux only")
	}
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	before := rssAnon(t)
	if _, err := db.ExecContext(ctx, `CREATE TABLE big (id INTEGER PRIMARY KEY, v BLOB)`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40000 {
		if _, err := tx.ExecContext(ctx, `INSERT INTO big (id, v) VALUES (?, randomblob(1000))`, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// Read it all on connections of their own, at once.
	db.SetMaxOpenConns(4)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			var n int64
			errs <- db.QueryRowContext(ctx, `SELECT sum(length(v)) FROM big`).Scan(&n)
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	peak := ReadCHeap()
	runtime.GC()
	held := rssAnon(t)
	db.Close()
	ReleaseMemory()
	runtime.GC()
	after := rssAnon(t)
	t.Logf("anonymous memory %d MiB before, %d MiB with SQLite holding %d MiB, %d MiB after the release", before>>20, held>>20, peak.SQLite>>20, after>>20)
	if peak.SQLite < 40<<20 {
		t.Fatalf("SQLite held only %d MiB: the test did not fill its page cache", peak.SQLite>>20)
	}
	// Most of what SQLite held leaves resident memory.
	if held-after < peak.SQLite*3/4 {
		t.Errorf("anonymous memory fell by %d MiB after the release, SQLite had held %d MiB: the page cache stayed resident", (held-after)>>20, peak.SQLite>>20)
	}
}
