package repl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/sqlitedb"
)

// Snapshots.

type snapshotReply struct {
	ID   string `json:"id"`
	Size int64  `json:"size"`
	Err  string `json:"err,omitempty"`
}

type chunkRequest struct {
	ID     string `json:"id"`
	Offset int64  `json:"offset"`
}

// snapshots are the copies the active keeps for standbys, two minutes each.
type snapshots struct {
	mu    sync.Mutex
	seq   int
	files map[string]string
}

func (r *Replicator) dbPath(ctx context.Context) (string, error) {
	var seq int
	var name, file string
	err := r.db.QueryRowContext(ctx, `SELECT seq, name, file FROM pragma_database_list WHERE name = 'main'`).Scan(&seq, &name, &file)
	if err == nil && file == "" {
		err = errors.New("the database has no file")
	}
	return file, err
}

// serveSnapshots answers standbys' snapshot and chunk requests.
func (r *Replicator) serveSnapshots() (*nats.Subscription, error) {
	sub, err := r.nc.Subscribe(bus.ReplSnapshotSubject, func(m *nats.Msg) {
		go r.answerSnapshot(m)
	})
	if err != nil {
		return nil, err
	}
	csub, err := r.nc.Subscribe(bus.ReplChunkSubject, r.answerChunk)
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	go func() {
		// The chunk subscription ends with the snapshot one.
		for sub.IsValid() {
			time.Sleep(250 * time.Millisecond)
		}
		_ = csub.Unsubscribe()
	}()
	return sub, nil
}

// answerSnapshot makes a snapshot for a standby, keeps it for two minutes
// and replies with its id and size.
func (r *Replicator) answerSnapshot(m *nats.Msg) {
	reply := func(rep snapshotReply) {
		data, _ := json.Marshal(rep)
		_ = m.Respond(data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dbFile, err := r.dbPath(ctx)
	if err != nil {
		reply(snapshotReply{Err: err.Error()})
		return
	}
	id := r.snaps.newID()
	path := dbFile + ".snapshot-" + id
	if err := r.writeSnapshot(ctx, path); err != nil {
		_ = os.Remove(path)
		r.log.Error("snapshot for a standby failed", "err", err)
		reply(snapshotReply{Err: "the snapshot failed"})
		return
	}
	st, _ := os.Stat(path)
	r.snaps.keep(id, path)
	r.log.Info("snapshot made for a standby", "bytes", st.Size())
	reply(snapshotReply{ID: id, Size: st.Size()})
}

// writeSnapshot copies the database into a new file at path.
func (r *Replicator) writeSnapshot(ctx context.Context, path string) error {
	// Made empty and owner-only first: VACUUM INTO fills an empty
	// file and keeps its mode, so the copy is never readable by
	// others, whatever the umask.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		err = errors.Join(os.Chmod(path, 0o600), f.Close())
	}
	if err == nil {
		// Under the one writer, so that no transaction commits
		// between the copy and the position it records.
		err = r.store.Exclusive(ctx, func() error {
			_, err := r.db.ExecContext(ctx, `VACUUM INTO ?`, path)
			return err
		})
	}
	return err
}

// answerChunk replies with the part of a kept snapshot that starts at the
// offset asked for, as much as one message holds.
func (r *Replicator) answerChunk(m *nats.Msg) {
	var req chunkRequest
	fail := func(msg string) {
		_ = m.RespondMsg(&nats.Msg{Header: nats.Header{bus.PartErrorHeader: []string{msg}}})
	}
	if err := json.Unmarshal(m.Data, &req); err != nil {
		fail("malformed chunk request")
		return
	}
	path, ok := r.snaps.path(req.ID)
	if !ok {
		fail("the snapshot expired; ask again")
		return
	}
	f, err := os.Open(path)
	if err != nil {
		fail("the snapshot expired; ask again")
		return
	}
	defer f.Close()
	buf := make([]byte, max(int(r.nc.MaxPayload())-4096, 1024))
	n, err := f.ReadAt(buf, req.Offset)
	if n == 0 && err != nil {
		fail("no such chunk")
		return
	}
	_ = m.Respond(buf[:n])
}

// newID names a new snapshot.
func (s *snapshots) newID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	if s.files == nil {
		s.files = map[string]string{}
	}
	return strconv.Itoa(s.seq) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// keep serves the snapshot at path as id for two minutes, then deletes it.
func (s *snapshots) keep(id, path string) {
	s.mu.Lock()
	s.files[id] = path
	s.mu.Unlock()
	time.AfterFunc(2*time.Minute, func() {
		s.mu.Lock()
		delete(s.files, id)
		s.mu.Unlock()
		_ = os.Remove(path)
	})
}

// path is the file of the kept snapshot id.
func (s *snapshots) path(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	path, ok := s.files[id]
	return path, ok
}

// removeStaleSnapshots deletes snapshot files a previous run of this
// worker left beside its database (it stopped before their two minutes).
func (r *Replicator) removeStaleSnapshots(ctx context.Context) {
	dbFile, err := r.dbPath(ctx)
	if err != nil {
		return
	}
	stale, _ := filepath.Glob(dbFile + ".snapshot-*")
	stale = append(stale, dbFile+".incoming")
	for _, f := range stale {
		if err := os.Remove(f); err == nil {
			r.log.Info("removed a snapshot file left by a previous run", "file", f)
		}
	}
}

// loadSnapshot copies the active's database into this one.
func (r *Replicator) loadSnapshot(ctx context.Context) error {
	dbFile, err := r.dbPath(ctx)
	if err != nil {
		return err
	}
	msg, err := r.nc.RequestWithContext(ctx, bus.ReplSnapshotSubject, nil)
	if err != nil {
		return fmt.Errorf("ask for a snapshot: %w", err)
	}
	var rep snapshotReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return err
	}
	if rep.Err != "" {
		return errors.New(rep.Err)
	}
	path := filepath.Join(filepath.Dir(dbFile), filepath.Base(dbFile)+".incoming")
	defer os.Remove(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	for off := int64(0); off < rep.Size; {
		req, _ := json.Marshal(chunkRequest{ID: rep.ID, Offset: off})
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := r.nc.RequestWithContext(cctx, bus.ReplChunkSubject, req)
		cancel()
		if err == nil && m.Header.Get(bus.PartErrorHeader) != "" {
			err = errors.New(m.Header.Get(bus.PartErrorHeader))
		}
		if err == nil && len(m.Data) == 0 {
			err = errors.New("an empty chunk")
		}
		if err != nil {
			f.Close()
			return fmt.Errorf("snapshot chunk at %d: %w", off, err)
		}
		if _, err := f.Write(m.Data); err != nil {
			f.Close()
			return err
		}
		off += int64(len(m.Data))
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return err
	}
	n, err := r.copyFrom(ctx, path)
	if err != nil {
		return err
	}
	pos, _ := r.readPosition(ctx)
	r.log.Info("standby: snapshot loaded", "bytes", rep.Size, "rows", n, "log_seq", pos.seq, "epoch", pos.epoch)
	return nil
}

// copyFrom replaces every table's rows with those of the SQLite file at
// path, in one transaction. Both must have the same schema version.
func (r *Replicator) copyFrom(ctx context.Context, path string) (int64, error) {
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `ATTACH DATABASE ? AS snap`, path); err != nil {
		return 0, err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `DETACH DATABASE snap`)
	var mine, theirs int64
	if err := conn.QueryRowContext(ctx, `SELECT MAX(version_id) FROM main.goose_db_version`).Scan(&mine); err != nil {
		return 0, err
	}
	if err := conn.QueryRowContext(ctx, `SELECT MAX(version_id) FROM snap.goose_db_version`).Scan(&theirs); err != nil {
		return 0, err
	}
	if mine != theirs {
		return 0, fmt.Errorf("the active worker's schema is at version %d and this one's at %d: run the same Sluice version on both", theirs, mine)
	}
	rows, err := conn.QueryContext(ctx, `SELECT name FROM main.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name != 'goose_db_version' ORDER BY name`)
	if err != nil {
		return 0, err
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return 0, err
		}
		tables = append(tables, t)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, err
	}
	// Triggers keep tenant_usage (migration 0015) as the other tables'
	// rows come and go, copied ones included: it is copied last, over
	// whatever they wrote.
	for i, t := range tables {
		if t == "tenant_usage" {
			tables = append(append(tables[:i:i], tables[i+1:]...), t)
			break
		}
	}
	// The copy is consistent as a whole, but a table copied before its
	// parent would lose rows to the parent's ON DELETE CASCADE: foreign
	// keys are off on this connection while it copies.
	if _, err := conn.ExecContext(ctx, `PRAGMA foreign_keys = OFF`); err != nil {
		return 0, err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA foreign_keys = ON`)
	var copied int64
	err = r.store.Exclusive(ctx, func() error {
		rctx := sqlitedb.Replaying(ctx)
		tx, err := conn.BeginTx(rctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		for _, t := range tables {
			q := `"` + strings.ReplaceAll(t, `"`, `""`) + `"`
			if _, err := tx.ExecContext(rctx, `DELETE FROM main.`+q); err != nil {
				return fmt.Errorf("clear %s: %w", t, err)
			}
			res, err := tx.ExecContext(rctx, `INSERT INTO main.`+q+` SELECT * FROM snap.`+q)
			if err != nil {
				return fmt.Errorf("copy %s: %w", t, err)
			}
			n, _ := res.RowsAffected()
			copied += n
		}
		return tx.Commit()
	})
	return copied, err
}
