package repl

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/sqlitedb"
)

type txRows struct {
	stream string
	rows   int
}

// replRowsHeader carries "<stream> <rows>" on the last part of a record
// that applied stream messages: the standby counts them in its metrics.
const replRowsHeader = "Sluice-Repl-Rows"

// errNotActive refuses a write on a worker that does not hold the lease.
var errNotActive = errs.Errorf(errs.Unavailable, "This worker is not the active one; try again shortly.")

// shipTx is the Recorder's commit hook: see the top of repl.go. It runs
// under the store's one writer, so records are published in commit order.
func (r *Replicator) shipTx(stmts []sqlitedb.Statement, exec func(string, ...any) (int64, error)) error {
	rows := r.txRows
	r.txRows = txRows{}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.active {
		return errNotActive
	}
	if time.Now().After(r.leaseUntil) {
		r.stepDownLocked("the lease may have lapsed")
		return errNotActive
	}
	data, err := encodeStatements(stmts)
	if err != nil {
		return fmt.Errorf("replication: %w", err)
	}
	parts := bus.SplitReply(data, max(int(r.nc.MaxPayload())-4096, 1024))
	// The position moves in this transaction; if the previous COMMIT
	// failed after its publish, the database is behind r.pos and this
	// worker must catch up from the log before writing again.
	n, err := exec(`UPDATE repl_state SET seq = ?, epoch = ? WHERE id = 1 AND seq = ?`, int64(r.pos)+int64(len(parts)), int64(r.epoch), int64(r.pos))
	if err != nil {
		return err
	}
	if n != 1 {
		r.stepDownLocked("the database is behind the replication log (a commit failed after its publish)")
		return errNotActive
	}
	pos := r.pos
	for i, p := range parts {
		msg := &nats.Msg{Subject: bus.ReplSubject, Data: p, Header: nats.Header{}}
		msg.Header.Set(bus.ReplEpochHeader, strconv.FormatUint(r.epoch, 10))
		msg.Header.Set(bus.ReplPartHeader, strconv.Itoa(i+1)+"/"+strconv.Itoa(len(parts)))
		if i == len(parts)-1 && rows.stream != "" {
			msg.Header.Set(replRowsHeader, rows.stream+" "+strconv.Itoa(rows.rows))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ack, err := r.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequence(pos))
		cancel()
		if err != nil {
			r.unstick.FailedWith(err)
			r.stepDownLocked("publishing to the replication log failed: " + err.Error())
			return errs.Errorf(errs.Unavailable, "The worker could not replicate this write; try again shortly.")
		}
		pos = ack.Sequence
	}
	r.pos = pos
	return nil
}

// wireStmt is a statement on the wire. Arguments are typed, so that a
// replay binds exactly what the active bound.
type wireStmt struct {
	Q string    `json:"q"`
	A []wireArg `json:"a,omitempty"`
	R bool      `json:"r,omitempty"`
}

// wireArg is one argument: K is n (NULL), i (int64 in I), f (float64, its
// bits in I), t (bool, I 0 or 1), s (string in S), b (bytes in B) or d
// (time.Time, RFC 3339 with nanoseconds in S).
type wireArg struct {
	K string `json:"k"`
	I int64  `json:"i,omitempty"`
	S string `json:"s,omitempty"`
	B []byte `json:"b,omitempty"`
}

func encodeStatements(stmts []sqlitedb.Statement) ([]byte, error) {
	out := make([]wireStmt, len(stmts))
	for i, s := range stmts {
		out[i] = wireStmt{Q: s.Query, R: s.Rows, A: make([]wireArg, len(s.Args))}
		for j, a := range s.Args {
			var wa wireArg
			switch v := a.(type) {
			case nil:
				wa.K = "n"
			case int64:
				wa.K, wa.I = "i", v
			case float64:
				wa.K, wa.I = "f", int64(math.Float64bits(v))
			case bool:
				wa.K = "t"
				if v {
					wa.I = 1
				}
			case string:
				wa.K, wa.S = "s", v
			case []byte:
				wa.K, wa.B = "b", v
				if v == nil {
					wa.K = "n"
				}
			case time.Time:
				wa.K, wa.S = "d", v.Format(time.RFC3339Nano)
			default:
				return nil, fmt.Errorf("statement argument of type %T", a)
			}
			out[i].A[j] = wa
		}
	}
	return json.Marshal(out)
}

func decodeStatements(data []byte) ([]sqlitedb.Statement, error) {
	if len(data) == 0 {
		return nil, nil
	}
	var in []wireStmt
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, err
	}
	out := make([]sqlitedb.Statement, len(in))
	for i, s := range in {
		out[i] = sqlitedb.Statement{Query: s.Q, Rows: s.R, Args: make([]any, len(s.A))}
		for j, a := range s.A {
			var v any
			switch a.K {
			case "n":
			case "i":
				v = a.I
			case "f":
				v = math.Float64frombits(uint64(a.I))
			case "t":
				v = a.I != 0
			case "s":
				v = a.S
			case "b":
				v = a.B
				if a.B == nil {
					v = []byte{}
				}
			case "d":
				t, err := time.Parse(time.RFC3339Nano, a.S)
				if err != nil {
					return nil, err
				}
				v = t
			default:
				return nil, fmt.Errorf("argument kind %q", a.K)
			}
			out[i].Args[j] = v
		}
	}
	return out, nil
}

// applier reads the log from a position and applies its records.
type applier struct {
	r        *Replicator
	cons     jetstream.Consumer
	from     uint64 // the consumer's start sequence
	consumed uint64 // the last sequence read

	partial      []byte
	partialEpoch uint64
	partialNext  int
}

func (a *applier) reset() {
	a.cons, a.partial = nil, nil
}

// catchUp reads what the log holds after pos and applies it, returning
// once nothing more came within a short wait or once it passed last.
func (a *applier) catchUp(ctx context.Context, pos position, last uint64) error {
	r := a.r
	if a.cons == nil || a.consumed < pos.seq {
		cons, err := r.js.OrderedConsumer(ctx, bus.ReplStream, jetstream.OrderedConsumerConfig{
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:   pos.seq + 1,
		})
		if err != nil {
			return err
		}
		a.cons, a.from, a.consumed, a.partial = cons, pos.seq+1, pos.seq, nil
	}
	epoch := pos.epoch
	for ctx.Err() == nil {
		batch, err := a.cons.Fetch(256, jetstream.FetchMaxWait(100*time.Millisecond))
		if err != nil {
			return err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			seq := md.Sequence.Stream
			if seq <= a.consumed {
				continue
			}
			a.consumed = seq
			e, perr := strconv.ParseUint(m.Headers().Get(bus.ReplEpochHeader), 10, 64)
			i, n, ok := parsePart(m.Headers().Get(bus.ReplPartHeader))
			if perr != nil || !ok {
				r.log.Error("standby: skipping an unreadable replication record", "log_seq", seq)
				a.partial = nil
				continue
			}
			if i == 1 {
				a.partial, a.partialEpoch, a.partialNext = append([]byte(nil), m.Data()...), e, 2
			} else if a.partial != nil && e == a.partialEpoch && i == a.partialNext {
				a.partial = append(a.partial, m.Data()...)
				a.partialNext++
			} else {
				a.partial = nil // a record its writer never finished
				continue
			}
			if i < n {
				continue
			}
			data := a.partial
			a.partial = nil
			if e < epoch {
				// A deposed active's append after the next term began.
				r.log.Warn("standby: skipping a record of an ended term", "log_seq", seq, "epoch", e, "current_epoch", epoch)
				if err := a.record(ctx, seq, epoch, nil); err != nil {
					return err
				}
				continue
			}
			stmts, err := decodeStatements(data)
			if err != nil {
				return fmt.Errorf("replication record %d: %w", seq, err)
			}
			if err := a.record(ctx, seq, e, stmts); err != nil {
				return fmt.Errorf("replication record %d: %w", seq, err)
			}
			r.countReplayedRows(m.Headers().Get(replRowsHeader))
			epoch = e
			if behind := last > seq; behind {
				r.lagSeconds.Set(time.Since(md.Timestamp).Seconds())
			} else {
				r.lagSeconds.Set(0)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout) {
			return err
		}
		if got == 0 {
			return nil
		}
	}
	return ctx.Err()
}

// record applies one record's statements and its position in one
// transaction.
func (a *applier) record(ctx context.Context, seq, epoch uint64, stmts []sqlitedb.Statement) error {
	rctx := sqlitedb.Replaying(ctx)
	return a.r.store.WriteTx(rctx, func(tx *sql.Tx) error {
		if err := sqlitedb.Replay(rctx, tx, stmts); err != nil {
			return err
		}
		_, err := tx.ExecContext(rctx, `UPDATE repl_state SET seq = ?, epoch = ? WHERE id = 1`, seq, epoch)
		return err
	})
}

// countReplayedRows passes the stream rows a replayed record wrote, from
// its replRowsHeader, to Config.Replayed.
func (r *Replicator) countReplayedRows(h string) {
	stream, n, ok := strings.Cut(h, " ")
	rows, err := strconv.Atoi(n)
	if !ok || err != nil || rows < 0 {
		return
	}
	r.cfg.Replayed(stream, rows)
}

func parsePart(h string) (int, int, bool) {
	a, b, ok := strings.Cut(h, "/")
	if !ok {
		return 0, 0, false
	}
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	return i, n, err1 == nil && err2 == nil && i >= 1 && i <= n
}
