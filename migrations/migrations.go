// Package migrations holds Sluice's SQLite schema as numbered, append-only
// SQL files. They are embedded in the binaries and applied in order by
// internal/sqlitedb, each in its own transaction.
package migrations

import "embed"

// FS holds the migration files (NNNN_name.sql, goose format).
//
//go:embed *.sql
var FS embed.FS
