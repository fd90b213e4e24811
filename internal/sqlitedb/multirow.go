package sqlitedb

import (
	"database/sql"
	"strings"
)

// RowsPerStatement is how many rows one multi-row INSERT writes: one
// statement per row spends most of its time crossing into SQLite, and 64
// rows of 8 values stay far below SQLite's bound on parameters.
const RowsPerStatement = 64

// MultiRow writes rows within a transaction with INSERT statements of
// RowsPerStatement rows each: head is the statement up to VALUES, tail what
// follows the rows (ON CONFLICT …). A statement may not write the same row
// twice, so callers add each key once.
type MultiRow struct {
	tx         *sql.Tx
	head, tail string
	cols       int
	full       *sql.Stmt // prepared on first use
	args       []any
}

// NewMultiRow starts a MultiRow within tx.
func NewMultiRow(tx *sql.Tx, head string, cols int, tail string) *MultiRow {
	return &MultiRow{tx: tx, head: head, tail: tail, cols: cols, args: make([]any, 0, cols*RowsPerStatement)}
}

func (m *MultiRow) sql(rows int) string {
	one := "(?" + strings.Repeat(", ?", m.cols-1) + ")"
	return m.head + " " + one + strings.Repeat(", "+one, rows-1) + "\n" + m.tail
}

// Add queues one row and writes a statement's worth once there are enough.
// The values must stay unchanged until the statement has run.
func (m *MultiRow) Add(vals ...any) error {
	m.args = append(m.args, vals...)
	if len(m.args) < m.cols*RowsPerStatement {
		return nil
	}
	if m.full == nil {
		var err error
		if m.full, err = m.tx.Prepare(m.sql(RowsPerStatement)); err != nil {
			return err
		}
	}
	_, err := m.full.Exec(m.args...)
	m.args = m.args[:0]
	return err
}

// Flush writes the queued rows and closes the prepared statement; m may be
// used again after it.
func (m *MultiRow) Flush() error {
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
