package worker

// The standby worker. Workers started with a Recorder take part in an
// election: the one holding the lease (bus.WorkerLeaseKey, a KV entry that
// lives LeaseTTL after its last renewal) is active and does everything a
// worker does; the others are standbys that serve nothing and keep their
// own SQLite file current from the replication log.
//
// The log. Every write transaction of the active goes through the
// Recorder's commit hook (shipTx), which, before COMMIT, publishes the
// transaction's statements to bus.ReplStream with the expected last
// sequence set to the one it published before, and records the new
// sequence in repl_state within the same transaction. So:
//   - anything acknowledged (a stream batch acked, a config write answered)
//     is in the log: acks and replies come after COMMIT, COMMIT after the
//     publish;
//   - a database never holds a transaction the log lacks. A worker killed
//     between publish and COMMIT finds the record in the log and applies
//     it when it comes back, as a standby;
//   - two workers cannot both append: the expected sequence fails for one.
//     A publish that fails for any reason rolls the transaction back and
//     the worker steps down; it then catches up from the log like any
//     standby, and may be elected again.
//
// Terms. Each active's term (epoch) is one more than the newest epoch in
// the log, and opens with a marker record. Records carry their epoch; a
// reader skips a record older than an epoch it has already seen, so a
// deposed active that still managed to append after the new term began
// changes no database, and every reader decides the same from the log
// alone. An active also refuses to write once its lease may have lapsed
// (LeaseTTL since its last renewal was sent, less a margin).
//
// Standby. It applies records in order, each in one transaction that also
// records the record's sequence and epoch in repl_state. A database that
// does not belong to the log (another log's creation time, a fresh file,
// or a position the log no longer holds) copies a snapshot from the
// active first: VACUUM INTO a file, fetched in parts, loaded table by
// table in one transaction. When the lease is free, the standby applies
// the rest of the log, takes the lease, appends its marker and starts the
// active role: it makes the stream consumers anew (so the dead active's
// unacked messages come at once; stream_applied, which is replicated too,
// makes every redelivery a no-op) and serves the request subjects.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/sqlitedb"
)

// replState is what runs the election and the log for one worker.
type replState struct {
	kv  jetstream.KeyValue
	log jetstream.Stream

	// instance is this process's random id, written in its lease.
	instance string
	// claimWarned is when taking a free lease last failed with a warning.
	claimWarned time.Time

	mu         sync.Mutex
	active     bool
	epoch      uint64
	pos        uint64    // the last log sequence this database includes
	leaseUntil time.Time // the active's own bound on its lease
	stop       context.CancelFunc

	// txRows is the stream rows the transaction being committed wrote,
	// set by applyBatch and taken by shipTx; both run under the one writer.
	txRows txRows

	role       prometheus.Gauge
	lagRecords prometheus.Gauge
	lagSeconds prometheus.Gauge
	takeovers  prometheus.Counter
}

func (r *replState) collectors() []prometheus.Collector {
	return []prometheus.Collector{r.role, r.lagRecords, r.lagSeconds, r.takeovers}
}

func newReplState() replState {
	return replState{
		instance: rand.Text(),
		role: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_worker_active",
			Help: "1 while this worker holds the lease and serves, 0 while it is a standby."}),
		lagRecords: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_worker_replication_lag_records",
			Help: "Replication log records this standby has not applied yet."}),
		lagSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_worker_replication_lag_seconds",
			Help: "How old the newest record this standby applied was when it was behind; 0 when caught up."}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_worker_takeovers_total",
			Help: "Times this worker became active."}),
	}
}

type txRows struct {
	stream string
	rows   int
}

// replRowsHeader carries "<stream> <rows>" on the last part of a record
// that applied stream messages: the standby counts them in its metrics.
const replRowsHeader = "Sluice-Repl-Rows"

// errNotActive refuses a write on a worker that does not hold the lease.
var errNotActive = errs.Errorf(errs.Unavailable, "This worker is not the active one; try again shortly.")

// leaseValue is the lease entry's content, for operators reading it.
// Instance tells this process from another under the same name (or this
// one before a restart).
//
// Expires (unix ms) is when the lease ends unless renewed, by its writer's
// clock. A standby takes a lease whose Expires has passed (by more than
// leaseSkew) with compare-and-set at its revision: it does not wait for
// NATS to expire the entry, which each replica of a replicated bucket does
// on its own timer, so that after a leader change a replica may keep an
// entry the others dropped (or the other way round). The bucket's TTL
// only cleans up; an entry without Expires (an older worker's) counts as
// held until NATS removes it.
type leaseValue struct {
	Worker   string `json:"worker"`
	Epoch    uint64 `json:"epoch"`
	Since    string `json:"since"`
	Instance string `json:"instance,omitempty"`
	Expires  int64  `json:"expires,omitempty"`
}

// leaseSkew is how long past a lease's Expires a standby still counts it as
// held: room for the clocks of two workers to differ.
func (w *Worker) leaseSkew() time.Duration { return w.cfg.LeaseTTL / 6 }

// leaseExpired reports whether a lease entry's content says it has ended.
func (w *Worker) leaseExpired(data []byte) bool {
	var v leaseValue
	if json.Unmarshal(data, &v) != nil || v.Expires == 0 {
		return false
	}
	return time.Now().After(time.UnixMilli(v.Expires).Add(w.leaseSkew()))
}

// leaseBytes is the lease entry for a term, renewed (or taken) at sent.
func (w *Worker) leaseBytes(epoch uint64, since, sent time.Time) []byte {
	b, _ := json.Marshal(leaseValue{Worker: w.cfg.Name, Epoch: epoch, Since: since.UTC().Format(time.RFC3339Nano),
		Instance: w.repl.instance, Expires: sent.Add(w.cfg.LeaseTTL).UnixMilli()})
	return b
}

// runElected takes part in the election until ctx ends.
func (w *Worker) runElected(ctx context.Context) error {
	if err := bus.WaitStreams(ctx, w.js, w.ensureRepl); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	w.removeStaleSnapshots(ctx)
	w.cfg.Recorder.SetHook(w.shipTx)
	defer w.cfg.Recorder.SetHook(nil)
	for ctx.Err() == nil {
		epoch, rev, ok := w.standby(ctx)
		if !ok {
			break
		}
		w.activeTerm(ctx, epoch, rev)
	}
	return nil
}

// ensureRepl makes or opens the replication log and the lease bucket, also
// when NATS lost them (its data directory wiped): a new log then starts
// from whichever worker takes the lease first, and the other copies it.
func (w *Worker) ensureRepl(ctx context.Context, js jetstream.JetStream) error {
	maxBytes, maxAge := w.cfg.Streams.Resolved()
	s, err := js.CreateOrUpdateStream(ctx, bus.ReplStreamConfig(maxBytes, maxAge, w.replicas()))
	if err != nil {
		return fmt.Errorf("replication log: %w", err)
	}
	kv, err := bus.OpenKeyValue(ctx, js, bus.WorkerLeaseConfig(w.cfg.LeaseTTL, w.replicas()), w.log)
	if err != nil {
		return fmt.Errorf("worker lease bucket: %w", err)
	}
	w.repl.mu.Lock()
	w.repl.log, w.repl.kv = s, kv
	w.repl.mu.Unlock()
	return nil
}

// gone reports whether err says a stream or bucket no longer exists.
func gone(err error) bool {
	return errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound)
}

// position is a database's place in the log.
type position struct {
	seq, epoch uint64
	logCreated int64
}

func (w *Worker) readPosition(ctx context.Context) (position, error) {
	var p position
	err := w.db.QueryRowContext(ctx, `SELECT seq, epoch, log_created FROM repl_state WHERE id = 1`).Scan(&p.seq, &p.epoch, &p.logCreated)
	return p, err
}

// standby keeps the database current from the log until this worker takes
// the lease; it returns the new term's epoch and the lease revision.
func (w *Worker) standby(ctx context.Context) (uint64, uint64, bool) {
	r := &w.repl
	r.role.Set(0)
	a := &applier{w: w}
	var lastWarn time.Time
	warn := func(msg string, args ...any) {
		if time.Since(lastWarn) >= 5*time.Second {
			lastWarn = time.Now()
			w.log.Warn(msg, args...)
		}
	}
	announced := false
	for ctx.Err() == nil {
		pos, err := w.readPosition(ctx)
		if err != nil {
			warn("standby: reading the replication position failed; retrying", "err", err)
			sleepCtx(ctx, time.Second)
			continue
		}
		// A short timeout: a request sent while the log had no leader
		// (a NATS node died) gets no answer at all, and the next one
		// should go soon after a leader is elected.
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		info, err := r.log.Info(ictx)
		cancel()
		if gone(err) {
			w.log.Warn("the replication log was gone (NATS lost it); making it again")
			a.reset()
			if err = w.ensureRepl(ctx, w.js); err == nil {
				continue
			}
		}
		if err != nil {
			w.unstick.Failed()
			warn("standby: the replication log does not answer; retrying", "err", err)
			sleepCtx(ctx, 250*time.Millisecond)
			continue
		}
		created, first, last := info.Created.UnixNano(), info.State.FirstSeq, info.State.LastSeq
		lease := w.readLease(ctx)
		held, expiredRev := lease.held, lease.expiredRev
		belongs := pos.logCreated == created && pos.seq <= last && (pos.seq+1 >= first || last == 0 || pos.seq == last)
		if pos.logCreated == created && pos.seq > last {
			// This database holds records the log does not: the NATS node
			// that answered has an old view of the log (it lost its
			// cluster). Another node has the rest; a snapshot is not the
			// way to it.
			w.unstick.Failed()
			warn("standby: the replication log as this NATS node has it ends before this database does; waiting for a node with the whole log",
				"log_seq", pos.seq, "log_last", last)
			sleepCtx(ctx, 250*time.Millisecond)
			continue
		}
		if !belongs {
			a.reset()
			if held {
				w.log.Info("standby: this database is not a copy of the active one's log; copying a snapshot",
					"log_seq", pos.seq, "log_first", first, "log_last", last)
				if err := w.loadSnapshot(ctx); err != nil {
					warn("standby: copying the active worker's snapshot failed; retrying", "err", err)
					sleepCtx(ctx, time.Second)
				}
				continue
			}
			if last > 0 {
				warn("standby: this database is not a copy of the replication log and no active worker can send a snapshot; waiting for one (or delete the stream "+bus.ReplStream+" to start a new log from this database)",
					"log_seq", pos.seq, "log_first", first, "log_last", last)
				sleepCtx(ctx, time.Second)
				continue
			}
			// An empty log: this database may start it.
			if epoch, rev, ok := w.takeLease(ctx, a, position{seq: 0, epoch: pos.epoch, logCreated: created}, expiredRev); ok {
				return epoch, rev, true
			}
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		if !announced {
			announced = true
			w.log.Info("worker is standby", "log_seq", pos.seq, "epoch", pos.epoch, "log_last", last)
		}
		r.lagRecords.Set(float64(last - min(pos.seq, last)))
		if err := a.catchUp(ctx, pos, last); err != nil {
			if ctx.Err() == nil {
				w.unstick.Failed()
				warn("standby: applying the replication log failed; retrying", "err", err)
				a.reset()
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		r.lagRecords.Set(float64(last - min(a.consumed, last)))
		if lease.err == nil && lease.held && (lease.entry == nil || !w.ownEndedLease(lease.entry)) {
			// Another worker is active and this one keeps up with it: its
			// NATS node answers. (A node cut off from its cluster may still
			// answer reads from its own old view, so a read alone is not a
			// success; a lease this worker cannot take or give back counts
			// as a failure below.)
			w.unstick.OK()
		}
		switch {
		case lease.err != nil:
			w.unstick.Failed()
			warn("standby: the worker lease cannot be read, so it counts as held; retrying", "err", lease.err)
		case held && lease.entry != nil && w.ownEndedLease(lease.entry):
			// This process's own lease from a term that ended while NATS
			// did not answer (it could not give it back then): no need to
			// wait for it to expire.
			if err := r.kv.Delete(ctx, bus.WorkerLeaseKey, jetstream.LastRevision(lease.entry.Revision())); err != nil {
				w.unstick.Failed()
				warn("standby: giving back the lease of this worker's ended term failed; retrying", "err", err)
			} else {
				w.log.Info("standby: gave back the lease of this worker's ended term")
				held = false
			}
		}
		if !held {
			cur, err := w.readPosition(ctx)
			if err == nil {
				// Parts of a record its writer never finished (it died
				// between them) move no position; the new term's marker
				// goes after them, and every reader drops them.
				if a.cons != nil && a.consumed > cur.seq {
					cur.seq = a.consumed
				}
				if epoch, rev, ok := w.takeLease(ctx, a, cur, expiredRev); ok {
					return epoch, rev, true
				}
			}
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return 0, 0, false
}

// ownEndedLease reports whether lease entry e is this process's own while
// it is not active: a term that ended without giving the lease back.
func (w *Worker) ownEndedLease(e jetstream.KeyValueEntry) bool {
	var v leaseValue
	if json.Unmarshal(e.Value(), &v) != nil || v.Instance == "" || v.Instance != w.repl.instance {
		return false
	}
	w.repl.mu.Lock()
	defer w.repl.mu.Unlock()
	return !w.repl.active
}

// leaseRead is what a standby read of the lease found.
type leaseRead struct {
	held       bool                    // some worker holds the lease now
	expiredRev uint64                  // the revision of an entry whose term has ended, to take it at
	entry      jetstream.KeyValueEntry // the entry read, when there is one
	err        error                   // the lease could not be read (it counts as held)
}

// readLease reads the lease once. A lease that has expired is not held;
// one that cannot be read is; a bucket NATS lost is made again.
func (w *Worker) readLease(ctx context.Context) leaseRead {
	e, err := w.repl.kv.Get(ctx, bus.WorkerLeaseKey)
	switch {
	case gone(err):
		w.log.Warn("the worker lease bucket was gone (NATS lost it); making it again")
		_ = w.ensureRepl(ctx, w.js)
		return leaseRead{held: true}
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return leaseRead{}
	case err != nil:
		return leaseRead{held: true, err: err}
	case w.leaseExpired(e.Value()):
		return leaseRead{expiredRev: e.Revision(), entry: e}
	}
	return leaseRead{held: true, entry: e}
}

// takeLease takes the free lease and opens a term with a marker record
// after everything the database has applied (pos). It gives the lease back
// if the log moved on meanwhile (a deposed active's last append): the
// caller applies it and tries again.
func (w *Worker) takeLease(ctx context.Context, a *applier, pos position, expiredRev uint64) (uint64, uint64, bool) {
	r := &w.repl
	epoch := pos.epoch + 1
	sent := time.Now()
	val := w.leaseBytes(epoch, sent, sent)
	rev, err := w.claimLease(ctx, val, expiredRev)
	if err != nil {
		if _, kerr := w.js.KeyValue(ctx, bus.WorkerLeaseBucket); gone(kerr) {
			w.log.Warn("the worker lease bucket was gone (NATS lost it); making it again")
			_ = w.ensureRepl(ctx, w.js)
		} else if !errors.Is(err, errLeaseHeld) {
			w.unstick.Failed()
			if time.Since(r.claimWarned) >= 5*time.Second {
				r.claimWarned = time.Now()
				w.log.Warn("standby: the lease looks free but taking it failed; retrying", "err", err)
			}
		}
		return 0, 0, false
	}
	msg := &nats.Msg{Subject: bus.ReplSubject, Header: nats.Header{}}
	msg.Header.Set(bus.ReplEpochHeader, strconv.FormatUint(epoch, 10))
	msg.Header.Set(bus.ReplPartHeader, "1/1")
	msg.Header.Set(bus.ReplMarkerHeader, "1")
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	ack, err := w.js.PublishMsg(pctx, msg, jetstream.WithExpectLastSequence(pos.seq))
	cancel()
	if err != nil {
		w.log.Info("standby: took the lease but the log moved on; applying it first", "log_seq", pos.seq, "err", err)
		_ = r.kv.Delete(context.WithoutCancel(ctx), bus.WorkerLeaseKey, jetstream.LastRevision(rev))
		a.reset()
		return 0, 0, false
	}
	err = w.store.WriteTx(sqlitedb.Replaying(ctx), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE repl_state SET seq = ?, epoch = ?, log_created = ? WHERE id = 1`, ack.Sequence, epoch, pos.logCreated)
		return err
	})
	if err != nil {
		w.log.Error("standby: recording the new term failed; giving the lease back", "err", err)
		_ = r.kv.Delete(context.WithoutCancel(ctx), bus.WorkerLeaseKey, jetstream.LastRevision(rev))
		a.reset()
		return 0, 0, false
	}
	r.mu.Lock()
	r.active, r.epoch, r.pos = true, epoch, ack.Sequence
	r.leaseUntil = sent.Add(w.leaseMargin())
	r.mu.Unlock()
	a.reset()
	return epoch, rev, true
}

// errLeaseHeld: the lease's leader holds a live lease.
var errLeaseHeld = errors.New("the lease is held")

// claimLease writes val as the lease where it is free: at expiredRev, the
// revision of an expired entry, or where there is none. When that fails
// the replica that answered the read may not agree with the bucket's
// leader, which checks the write: the leader's own entry decides.
func (w *Worker) claimLease(ctx context.Context, val []byte, expiredRev uint64) (uint64, error) {
	kv := w.repl.kv
	if expiredRev != 0 {
		if rev, err := kv.Update(ctx, bus.WorkerLeaseKey, val, expiredRev); err == nil {
			return rev, nil
		}
	}
	rev, err := kv.Create(ctx, bus.WorkerLeaseKey, val)
	if err == nil {
		return rev, nil
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	data, lrev, lerr := bus.LeaderEntry(lctx, w.nc, bus.WorkerLeaseBucket, bus.WorkerLeaseKey)
	switch {
	case errors.Is(lerr, bus.ErrNoEntry):
		return kv.Create(ctx, bus.WorkerLeaseKey, val)
	case lerr != nil:
		return 0, fmt.Errorf("%w (and reading it from the bucket's leader: %v)", err, lerr)
	case w.leaseExpired(data):
		return kv.Update(ctx, bus.WorkerLeaseKey, val, lrev)
	}
	return 0, errLeaseHeld
}

// leaseMargin is how long after sending a renewal the active still trusts
// its lease: the TTL less a margin for the renewal's own trip.
func (w *Worker) leaseMargin() time.Duration { return w.cfg.LeaseTTL - w.cfg.LeaseTTL/6 }

// activeTerm runs the active role until ctx ends or the lease is lost.
func (w *Worker) activeTerm(ctx context.Context, epoch, rev uint64) {
	r := &w.repl
	roleCtx, cancel := context.WithCancel(ctx)
	r.mu.Lock()
	r.stop = cancel
	pos := r.pos
	r.mu.Unlock()
	r.lagRecords.Set(0)
	r.lagSeconds.Set(0)
	r.takeovers.Inc()
	w.serving = func() {
		// Once NATS has the service's subscriptions: from here a request
		// reaches this worker.
		_ = w.nc.Flush()
		r.role.Set(1)
		w.log.Info("worker is active", "log_seq", pos, "epoch", epoch, "worker", w.cfg.Name)
	}

	renewCtx, stopRenew := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { w.renewLease(renewCtx, rev, epoch) })
	sub, err := w.serveSnapshots()
	if err != nil {
		w.log.Error("serving snapshots to standbys failed", "err", err)
	}
	if err := w.runActive(roleCtx); err != nil {
		w.log.Error("active role ended", "err", err)
	}
	if sub != nil {
		_ = sub.Unsubscribe()
	}
	w.stepDown("")
	r.role.Set(0)
	stopRenew()
	wg.Wait()
	cancel()
	// Give the lease back at once, so that a standby takes over without
	// waiting for it to expire (SIGTERM, or a step-down).
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer dcancel()
	if e, err := r.kv.Get(dctx, bus.WorkerLeaseKey); err == nil {
		var v leaseValue
		if json.Unmarshal(e.Value(), &v) == nil && v.Epoch == epoch && v.Instance == r.instance {
			_ = r.kv.Delete(dctx, bus.WorkerLeaseKey, jetstream.LastRevision(e.Revision()))
		}
	}
	r.mu.Lock()
	w.log.Info("worker left the active role", "log_seq", r.pos, "epoch", epoch)
	r.mu.Unlock()
}

// renewLease renews the lease every LeaseTTL/6 until ctx ends; a renewal
// refused (another worker has the lease) or none accepted for the lease's
// time ends the term.
func (w *Worker) renewLease(ctx context.Context, rev, epoch uint64) {
	r := &w.repl
	since := time.Now()
	t := time.NewTicker(w.cfg.LeaseTTL / 6)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, w.cfg.LeaseTTL/2)
		next, err := r.kv.Update(rctx, bus.WorkerLeaseKey, w.leaseBytes(epoch, since, sent), rev)
		cancel()
		if err == nil {
			w.unstick.OK()
			rev = next
			r.mu.Lock()
			r.leaseUntil = sent.Add(w.leaseMargin())
			r.mu.Unlock()
			continue
		}
		if ctx.Err() != nil {
			return
		}
		// On a NATS node that lost its cluster the renewals only time
		// out: move to another node before the lease is gone.
		w.unstick.Failed()
		if errors.Is(err, jetstream.ErrKeyExists) {
			w.stepDown("another worker holds the lease")
			return
		}
		r.mu.Lock()
		lapsed := time.Now().After(r.leaseUntil)
		r.mu.Unlock()
		if lapsed {
			w.stepDown("the lease could not be renewed in time: " + err.Error())
			return
		}
		w.log.Warn("renewing the worker lease failed; retrying", "err", err)
	}
}

// stepDown ends the active role: writes are refused from now on and the
// role's loops stop. reason is logged when not empty.
func (w *Worker) stepDown(reason string) {
	w.repl.mu.Lock()
	defer w.repl.mu.Unlock()
	w.stepDownLocked(reason)
}

func (w *Worker) stepDownLocked(reason string) {
	r := &w.repl
	if r.active && reason != "" {
		w.log.Warn("worker stops being active", "reason", reason, "log_seq", r.pos, "epoch", r.epoch)
	}
	r.active = false
	if r.stop != nil {
		r.stop() // only cancels a context: never waits
	}
}

// shipTx is the Recorder's commit hook: see the top of this file. It runs
// under the store's one writer, so records are published in commit order.
func (w *Worker) shipTx(stmts []sqlitedb.Statement, exec func(string, ...any) (int64, error)) error {
	r := &w.repl
	rows := r.txRows
	r.txRows = txRows{}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.active {
		return errNotActive
	}
	if time.Now().After(r.leaseUntil) {
		w.stepDownLocked("the lease may have lapsed")
		return errNotActive
	}
	data, err := encodeStatements(stmts)
	if err != nil {
		return fmt.Errorf("replication: %w", err)
	}
	parts := bus.SplitReply(data, max(int(w.nc.MaxPayload())-4096, 1024))
	// The position moves in this transaction; if the previous COMMIT
	// failed after its publish, the database is behind r.pos and this
	// worker must catch up from the log before writing again.
	n, err := exec(`UPDATE repl_state SET seq = ?, epoch = ? WHERE id = 1 AND seq = ?`, int64(r.pos)+int64(len(parts)), int64(r.epoch), int64(r.pos))
	if err != nil {
		return err
	}
	if n != 1 {
		w.stepDownLocked("the database is behind the replication log (a commit failed after its publish)")
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
		ack, err := w.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequence(pos))
		cancel()
		if err != nil {
			w.unstick.Failed()
			w.stepDownLocked("publishing to the replication log failed: " + err.Error())
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
	w        *Worker
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
	w := a.w
	if a.cons == nil || a.consumed < pos.seq {
		cons, err := w.js.OrderedConsumer(ctx, bus.ReplStream, jetstream.OrderedConsumerConfig{
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
				w.log.Error("standby: skipping an unreadable replication record", "log_seq", seq)
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
				w.log.Warn("standby: skipping a record of an ended term", "log_seq", seq, "epoch", e, "current_epoch", epoch)
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
			w.countReplayedRows(m.Headers().Get(replRowsHeader))
			epoch = e
			if behind := last > seq; behind {
				w.repl.lagSeconds.Set(time.Since(md.Timestamp).Seconds())
			} else {
				w.repl.lagSeconds.Set(0)
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
	return a.w.store.WriteTx(rctx, func(tx *sql.Tx) error {
		if err := sqlitedb.Replay(rctx, tx, stmts); err != nil {
			return err
		}
		_, err := tx.ExecContext(rctx, `UPDATE repl_state SET seq = ?, epoch = ? WHERE id = 1`, seq, epoch)
		return err
	})
}

// countReplayedRows adds the stream rows a replayed record wrote to the
// same totals the active keeps.
func (w *Worker) countReplayedRows(h string) {
	stream, n, ok := strings.Cut(h, " ")
	rows, err := strconv.Atoi(n)
	if !ok || err != nil || rows < 0 {
		return
	}
	switch stream {
	case bus.StateStream:
		w.stateRows.Add(uint64(rows))
	case bus.CounterStream:
		w.counterRows.Add(uint64(rows))
	default:
		return
	}
	w.metrics.rowsWritten.WithLabelValues(stream).Add(float64(rows))
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

func (w *Worker) dbPath(ctx context.Context) (string, error) {
	var seq int
	var name, file string
	err := w.db.QueryRowContext(ctx, `SELECT seq, name, file FROM pragma_database_list WHERE name = 'main'`).Scan(&seq, &name, &file)
	if err == nil && file == "" {
		err = errors.New("the database has no file")
	}
	return file, err
}

// serveSnapshots answers standbys' snapshot and chunk requests.
func (w *Worker) serveSnapshots() (*nats.Subscription, error) {
	s := &w.snaps
	sub, err := w.nc.Subscribe(bus.ReplSnapshotSubject, func(m *nats.Msg) {
		go func() {
			reply := func(r snapshotReply) {
				data, _ := json.Marshal(r)
				_ = m.Respond(data)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			dbFile, err := w.dbPath(ctx)
			if err != nil {
				reply(snapshotReply{Err: err.Error()})
				return
			}
			s.mu.Lock()
			s.seq++
			id := strconv.Itoa(s.seq) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			if s.files == nil {
				s.files = map[string]string{}
			}
			s.mu.Unlock()
			path := dbFile + ".snapshot-" + id
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
				err = w.store.Exclusive(ctx, func() error {
					_, err := w.db.ExecContext(ctx, `VACUUM INTO ?`, path)
					return err
				})
			}
			if err != nil {
				_ = os.Remove(path)
				w.log.Error("snapshot for a standby failed", "err", err)
				reply(snapshotReply{Err: "the snapshot failed"})
				return
			}
			st, _ := os.Stat(path)
			s.mu.Lock()
			s.files[id] = path
			s.mu.Unlock()
			time.AfterFunc(2*time.Minute, func() {
				s.mu.Lock()
				delete(s.files, id)
				s.mu.Unlock()
				_ = os.Remove(path)
			})
			w.log.Info("snapshot made for a standby", "bytes", st.Size())
			reply(snapshotReply{ID: id, Size: st.Size()})
		}()
	})
	if err != nil {
		return nil, err
	}
	csub, err := w.nc.Subscribe(bus.ReplChunkSubject, func(m *nats.Msg) {
		var req chunkRequest
		fail := func(msg string) {
			_ = m.RespondMsg(&nats.Msg{Header: nats.Header{bus.PartErrorHeader: []string{msg}}})
		}
		if err := json.Unmarshal(m.Data, &req); err != nil {
			fail("malformed chunk request")
			return
		}
		s.mu.Lock()
		path, ok := s.files[req.ID]
		s.mu.Unlock()
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
		buf := make([]byte, max(int(w.nc.MaxPayload())-4096, 1024))
		n, err := f.ReadAt(buf, req.Offset)
		if n == 0 && err != nil {
			fail("no such chunk")
			return
		}
		_ = m.Respond(buf[:n])
	})
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

// removeStaleSnapshots deletes snapshot files a previous run of this
// worker left beside its database (it stopped before their two minutes).
func (w *Worker) removeStaleSnapshots(ctx context.Context) {
	dbFile, err := w.dbPath(ctx)
	if err != nil {
		return
	}
	stale, _ := filepath.Glob(dbFile + ".snapshot-*")
	stale = append(stale, dbFile+".incoming")
	for _, f := range stale {
		if err := os.Remove(f); err == nil {
			w.log.Info("removed a snapshot file left by a previous run", "file", f)
		}
	}
}

// loadSnapshot copies the active's database into this one.
func (w *Worker) loadSnapshot(ctx context.Context) error {
	dbFile, err := w.dbPath(ctx)
	if err != nil {
		return err
	}
	msg, err := w.nc.RequestWithContext(ctx, bus.ReplSnapshotSubject, nil)
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
		m, err := w.nc.RequestWithContext(cctx, bus.ReplChunkSubject, req)
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
	n, err := w.copyFrom(ctx, path)
	if err != nil {
		return err
	}
	pos, _ := w.readPosition(ctx)
	w.log.Info("standby: snapshot loaded", "bytes", rep.Size, "rows", n, "log_seq", pos.seq, "epoch", pos.epoch)
	return nil
}

// copyFrom replaces every table's rows with those of the SQLite file at
// path, in one transaction. Both must have the same schema version.
func (w *Worker) copyFrom(ctx context.Context, path string) (int64, error) {
	conn, err := w.db.Conn(ctx)
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
	err = w.store.Exclusive(ctx, func() error {
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
