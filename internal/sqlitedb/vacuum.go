package sqlitedb

// Space comes back. Rows leave Sluice's database all the time (buckets that
// are full again, analytics past their retention), and SQLite keeps freed
// pages in the file for reuse: without auto-vacuum a file only ever grows.
// Sluice's files use auto_vacuum=INCREMENTAL: freed pages are listed at the
// end of the file and IncrementalVacuum (run periodically by the worker)
// cuts them off. In WAL mode the main file shrinks when the checkpoint
// copies the shorter database back, so IncrementalVacuum checkpoints too.

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"
)

// Auto-vacuum modes, as PRAGMA auto_vacuum reports them.
const autoVacuumIncremental = 2

// ConvertIncrementalVacuum makes an existing database incremental
// auto-vacuum once, with VACUUM (which rewrites the whole file, so it may
// take a while on a large one and needs that much free disk). A database
// that already is one is left alone. It logs the conversion.
func ConvertIncrementalVacuum(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var mode int
	if err := conn.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil {
		return fmt.Errorf("read auto_vacuum: %w", err)
	}
	if mode == autoVacuumIncremental {
		return nil
	}
	before, _ := fileBytes(ctx, conn)
	start := time.Now()
	log.Info("converting the SQLite file to incremental auto-vacuum (once; rewrites the file)", "bytes", before)
	if _, err := conn.ExecContext(ctx, `PRAGMA auto_vacuum = INCREMENTAL`); err != nil {
		return fmt.Errorf("set auto_vacuum: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `VACUUM`); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	if err := conn.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil || mode != autoVacuumIncremental {
		return fmt.Errorf("auto_vacuum is %d after VACUUM, not incremental (%v)", mode, err)
	}
	after, _ := fileBytes(ctx, conn)
	log.Info("converted the SQLite file to incremental auto-vacuum", "bytes_before", before, "bytes_after", after, "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// VacuumStats says what IncrementalVacuum found and did.
type VacuumStats struct {
	FreePages  int64 // free pages before
	FreedPages int64 // pages given back to the file system
	PageSize   int64
}

// IncrementalVacuum gives free pages back to the file system when at least
// minFree of them are waiting, a few thousand at a time so that no single
// write transaction holds the database long, then checkpoints the WAL so
// that the main file shrinks. A database without incremental auto-vacuum
// frees nothing.
func IncrementalVacuum(ctx context.Context, db *sql.DB, minFree int64) (VacuumStats, error) {
	var st VacuumStats
	if err := db.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&st.FreePages); err != nil {
		return st, err
	}
	if err := db.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&st.PageSize); err != nil {
		return st, err
	}
	if st.FreePages == 0 || st.FreePages < minFree {
		return st, nil
	}
	left := st.FreePages
	for left > 0 && ctx.Err() == nil {
		// incremental_vacuum frees one page per step of its statement, so
		// its rows are read to the end.
		rows, err := db.QueryContext(ctx, fmt.Sprintf(`PRAGMA incremental_vacuum(%d)`, min(left, 4096)))
		if err != nil {
			return st, err
		}
		for rows.Next() {
		}
		if err := rows.Close(); err != nil {
			return st, err
		}
		var now int64
		if err := db.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&now); err != nil {
			return st, err
		}
		if now >= left {
			break // nothing moved: not an incremental database
		}
		left = now
	}
	st.FreedPages = st.FreePages - left
	if st.FreedPages > 0 {
		// TRUNCATE also empties the WAL, which a large transaction may have grown.
		rows, err := db.QueryContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
		if err != nil {
			return st, err
		}
		for rows.Next() {
		}
		if err := rows.Close(); err != nil {
			return st, err
		}
	}
	return st, ctx.Err()
}

func fileBytes(ctx context.Context, conn *sql.Conn) (int64, error) {
	var pages, size int64
	if err := conn.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		return 0, err
	}
	if err := conn.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&size); err != nil {
		return 0, err
	}
	return pages * size, nil
}
