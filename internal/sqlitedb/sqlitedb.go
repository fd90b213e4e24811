// Package sqlitedb opens Sluice's SQLite database and brings its schema up
// to date. Only the worker opens the database; servers never do.
package sqlitedb

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	"github.com/pressly/goose/v3"

	"github.com/mattn/go-sqlite3"

	"github.com/sluicehq/sluice/migrations"
)

// driverName is the SQLite driver with Sluice's connection hook.
const driverName = "sqlite3_sluice"

func init() {
	sql.Register(driverName, &sqlite3.SQLiteDriver{ConnectHook: connectHook})
}

func connectHook(c *sqlite3.SQLiteConn) error {
	{
		// Checkpoint the WAL every 64 MiB instead of every 4 MiB: under a
		// flood of new callers the worker rewrites the same B-tree pages
		// many times between checkpoints, and each checkpoint copies a
		// page once however often it changed. Durability is unchanged: a
		// committed transaction is in the WAL either way.
		if _, err := c.Exec(`PRAGMA wal_autocheckpoint = 16384`, nil); err != nil {
			return err
		}
		// Read pages through a memory map of up to 4 GiB instead of a copy
		// per read: with millions of buckets the B-trees outgrow the page
		// cache. Writes still go through the WAL.
		if _, err := c.Exec(`PRAGMA mmap_size = 4294967296`, nil); err != nil {
			return err
		}
		// sluice_fold lower-cases text as Go does: SQLite's lower() and
		// LIKE fold ASCII only, and a filter typed in the dashboard must
		// match the same keys whichever side compares.
		return c.RegisterFunc(FoldFunc, strings.ToLower, true)
	}
}

// FoldFunc is the SQL function, on every connection Open makes, that
// lower-cases its argument with strings.ToLower.
const FoldFunc = "sluice_fold"

// Open opens (creating if needed) the SQLite file at path with Sluice's
// per-connection pragmas, applies pending migrations, and refuses a database
// whose schema is newer than this binary knows.
//
// The database and its WAL and shared-memory files are made 0600 whatever
// the umask (restrictFiles).
//
// Writers use BEGIN IMMEDIATE (_txlock=immediate) so that two transactions
// never deadlock upgrading a read lock; WAL lets readers run beside them.
func Open(ctx context.Context, path string) (*sql.DB, error) {
	return open(ctx, path, func(dsn string) *sql.DB {
		db, _ := sql.Open(driverName, dsn) // fails only for an unknown driver
		return db
	})
}

func open(ctx context.Context, path string, opener func(dsn string) *sql.DB) (*sql.DB, error) {
	tuneMalloc()
	if err := restrictFiles(path); err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_busy_timeout", "5000")
	q.Set("_foreign_keys", "on")
	q.Set("_synchronous", "NORMAL")
	q.Set("_txlock", "immediate")
	// A new file frees the pages of deleted rows for reuse and, with
	// IncrementalVacuum, gives them back to the file system; an older
	// file is converted once by ConvertIncrementalVacuum.
	q.Set("_auto_vacuum", "incremental")
	// A 128 MiB page cache per connection (SQLite's default is 2 MiB):
	// the worker's writer touches pages all over the bucket and counter
	// B-trees, and with the small default a flood of new callers spends
	// its time reading back pages it just evicted. Memory is taken only as
	// pages are used.
	q.Set("_cache_size", "-131072")
	db := opener("file:" + path + "?" + q.Encode())
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	if err := Migrate(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// Migrate applies every pending migration in order, one transaction each,
// recording them in goose's version table.
func Migrate(ctx context.Context, db *sql.DB) error {
	p, err := goose.NewProvider(goose.DialectSQLite3, db, migrations.FS)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	current, err := p.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("migrations: read schema version: %w", err)
	}
	sources := p.ListSources()
	known := int64(0)
	if len(sources) > 0 {
		known = sources[len(sources)-1].Version
	}
	if current > known {
		return fmt.Errorf("migrations: database schema is at version %d but this binary knows only up to %d; upgrade Sluice", current, known)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return nil
}
