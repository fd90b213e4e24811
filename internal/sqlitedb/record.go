package sqlitedb

// Statement recording, for a worker that keeps a standby. A database opened
// with OpenRecorded goes through a thin wrapper of the SQLite driver that
// notes every statement that may write (with its arguments) run inside a
// write transaction, and at COMMIT hands the list to the Recorder's hook
// before committing: the hook ships it (the replication log) and may refuse
// the commit, which is then rolled back. Replaying the same statements in
// the same order on a copy of the database gives the same rows, since
// Sluice's SQL has no time or random functions and no AUTOINCREMENT: every
// time and random value is an argument.
//
// Reads (SELECT, PRAGMA and the like) are not recorded. A statement that
// may write outside a transaction is refused while a hook is set: it could
// not be shipped before its own commit.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mattn/go-sqlite3"
)

// Statement is one recorded statement: its SQL, its arguments (int64,
// float64, bool, []byte, string, time.Time or nil) and whether it was run
// as a query (INSERT … RETURNING), which a replay runs the same way.
type Statement struct {
	Query string
	Args  []any
	Rows  bool
}

// CommitHook receives the statements of a write transaction about to
// commit. exec runs further statements in the same transaction, unrecorded
// (the replication position) and reports how many rows each changed. An
// error rolls the transaction back.
type CommitHook func(stmts []Statement, exec func(query string, args ...any) (int64, error)) error

// Recorder is where a recorded database reports its transactions. The zero
// value has no hook: transactions commit as usual.
type Recorder struct {
	hook atomic.Pointer[CommitHook]
}

// SetHook sets (or, with nil, clears) the hook called at each commit.
func (r *Recorder) SetHook(h CommitHook) {
	if h == nil {
		r.hook.Store(nil)
		return
	}
	r.hook.Store(&h)
}

type replayKey struct{}

// Replaying marks ctx for transactions that apply statements another
// process recorded: they are not recorded and commit without the hook.
func Replaying(ctx context.Context) context.Context {
	return context.WithValue(ctx, replayKey{}, true)
}

// ErrWriteOutsideTx is returned for a statement that may write, run outside
// a transaction while a hook is set.
var ErrWriteOutsideTx = errors.New("sqlitedb: a write outside a transaction cannot be replicated")

// OpenRecorded opens the database as Open does, recording its write
// transactions for rec.
func OpenRecorded(ctx context.Context, path string, rec *Recorder) (*sql.DB, error) {
	return open(ctx, path, func(dsn string) *sql.DB {
		return sql.OpenDB(&recConnector{dsn: dsn, rec: rec})
	})
}

type recConnector struct {
	dsn string
	rec *Recorder
}

var baseDriver = &sqlite3.SQLiteDriver{ConnectHook: connectHook}

func (c *recConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := baseDriver.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &recConn{SQLiteConn: conn.(*sqlite3.SQLiteConn), rec: c.rec}, nil
}

func (c *recConnector) Driver() driver.Driver { return baseDriver }

// recConn records on one connection; database/sql uses a connection from
// one goroutine at a time, and a transaction stays on its connection.
type recConn struct {
	*sqlite3.SQLiteConn
	rec *Recorder

	mu    sync.Mutex
	tx    *recTx // the open transaction, nil outside one
	stmts []Statement
}

func (c *recConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	inner, err := c.SQLiteConn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	t := &recTx{inner: inner, c: c, replay: ctx.Value(replayKey{}) != nil}
	c.mu.Lock()
	c.tx, c.stmts = t, nil
	c.mu.Unlock()
	return t, nil
}

func (c *recConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// note records a statement that may write. Outside a transaction it is
// refused while a hook is set.
func (c *recConn) note(query string, args []driver.NamedValue, rows bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tx == nil {
		if c.rec.hook.Load() != nil {
			return ErrWriteOutsideTx
		}
		return nil
	}
	if c.tx.replay {
		return nil
	}
	vals := make([]any, len(args))
	for i, a := range args {
		if b, ok := a.Value.([]byte); ok {
			a.Value = append([]byte(nil), b...)
		}
		vals[i] = a.Value
	}
	c.stmts = append(c.stmts, Statement{Query: query, Args: vals, Rows: rows})
	return nil
}

func (c *recConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if mayWrite(query) {
		if err := c.note(query, args, false); err != nil {
			return nil, err
		}
	}
	return c.SQLiteConn.ExecContext(ctx, query, args)
}

func (c *recConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if mayWrite(query) {
		if err := c.note(query, args, true); err != nil {
			return nil, err
		}
	}
	return c.SQLiteConn.QueryContext(ctx, query, args)
}

func (c *recConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	s, err := c.SQLiteConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	ss := s.(*sqlite3.SQLiteStmt)
	return &recStmt{SQLiteStmt: ss, c: c, query: query, write: !ss.Readonly()}, nil
}

func (c *recConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

type recStmt struct {
	*sqlite3.SQLiteStmt
	c     *recConn
	query string
	write bool
}

func (s *recStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if s.write {
		if err := s.c.note(s.query, args, false); err != nil {
			return nil, err
		}
	}
	return s.SQLiteStmt.ExecContext(ctx, args)
}

func (s *recStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if s.write {
		if err := s.c.note(s.query, args, true); err != nil {
			return nil, err
		}
	}
	return s.SQLiteStmt.QueryContext(ctx, args)
}

type recTx struct {
	inner  driver.Tx
	c      *recConn
	replay bool
}

func (t *recTx) end() []Statement {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	stmts := t.c.stmts
	t.c.tx, t.c.stmts = nil, nil
	return stmts
}

func (t *recTx) Commit() error {
	stmts := t.end()
	hp := t.c.rec.hook.Load()
	if len(stmts) == 0 || t.replay || hp == nil {
		return t.inner.Commit()
	}
	exec := func(query string, args ...any) (int64, error) {
		nv := make([]driver.NamedValue, len(args))
		for i, a := range args {
			nv[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
		}
		res, err := t.c.SQLiteConn.ExecContext(context.Background(), query, nv)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
	if err := (*hp)(stmts, exec); err != nil {
		return errors.Join(err, t.inner.Rollback())
	}
	return t.inner.Commit()
}

func (t *recTx) Rollback() error {
	t.end()
	return t.inner.Rollback()
}

// mayWrite reports whether a statement may change rows: anything but a
// read, a pragma or a transaction or maintenance verb. Statements with
// several parts are judged by the first.
func mayWrite(query string) bool {
	q := strings.TrimLeft(query, " \t\r\n(")
	for strings.HasPrefix(q, "--") {
		if i := strings.IndexByte(q, '\n'); i >= 0 {
			q = strings.TrimLeft(q[i+1:], " \t\r\n(")
		} else {
			return false
		}
	}
	end := strings.IndexFunc(q, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '(' || r == ';' })
	if end < 0 {
		end = len(q)
	}
	switch strings.ToUpper(q[:end]) {
	case "SELECT", "PRAGMA", "EXPLAIN", "VACUUM", "ANALYZE", "BEGIN", "COMMIT", "END", "ROLLBACK",
		"SAVEPOINT", "RELEASE", "ATTACH", "DETACH", "VALUES", "":
		return false
	}
	return true
}

// Replay runs recorded statements in tx, in order: the standby's side of
// the replication log.
func Replay(ctx context.Context, tx *sql.Tx, stmts []Statement) error {
	for i, s := range stmts {
		if s.Rows {
			rows, err := tx.QueryContext(ctx, s.Query, s.Args...)
			if err != nil {
				return fmt.Errorf("replay statement %d: %w", i, err)
			}
			for rows.Next() {
			}
			err = errors.Join(rows.Err(), rows.Close())
			if err != nil {
				return fmt.Errorf("replay statement %d: %w", i, err)
			}
			continue
		}
		if _, err := tx.ExecContext(ctx, s.Query, s.Args...); err != nil {
			return fmt.Errorf("replay statement %d: %w", i, err)
		}
	}
	return nil
}
