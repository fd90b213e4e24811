// Package repl is the worker's standby replication and the election of the
// active worker. It owns the worker lease (bus.WorkerLeaseBucket), the
// replication log (bus.ReplStream) and the repl_state row: it ships each
// write transaction of the active worker to the log from the database's
// commit hook, applies the log on a standby, copies a snapshot to a
// standby whose database does not belong to the log, and decides from the
// lease when this worker runs its active role, which the worker hands to
// Run.
//
// It never chooses what is written: it ships the statements the worker's
// transactions ran and replays them as recorded. It must never write to
// the database but through the worker's one writer (Config.Writer), never
// let a transaction commit that the log lacks, never run the active role
// without holding the lease, and never import package worker: the worker
// hands it what it needs in Config.
package repl

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
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/sqlitedb"
)

// Writer is the worker's one writer: its transactions queue in Go, one at
// a time. *tenants.Store is one.
type Writer interface {
	// WriteTx runs fn in one write transaction.
	WriteTx(ctx context.Context, fn func(tx *sql.Tx) error) error
	// Exclusive runs fn while no write transaction runs.
	Exclusive(ctx context.Context, fn func() error) error
}

// Config is what a Replicator takes from the worker that runs it.
type Config struct {
	// DB is the worker's database, opened with sqlitedb.OpenRecorded over
	// Recorder.
	DB *sql.DB
	// Writer orders every write to DB, the worker's and this package's.
	Writer Writer
	// Recorder is DB's: Run sets its commit hook, and clears it on return.
	Recorder *sqlitedb.Recorder
	NC       *nats.Conn
	JS       jetstream.JetStream
	// LeaseTTL is how long the active worker's lease lives after its last
	// renewal (renewed every sixth of it). It must be positive.
	LeaseTTL time.Duration
	// Name tells workers apart in logs and in the lease.
	Name string
	// Replicas is how many NATS servers keep the log and the lease bucket;
	// 0 chooses from the NATS found (bus.ResolveReplicas).
	Replicas int
	// Streams bounds the log as it bounds the worker's streams.
	Streams bus.StreamLimits
	// Log receives the logs; none are written when nil.
	Log *slog.Logger
	// Unstick is told of NATS requests that failed or succeeded, to move
	// off a NATS node that lost its cluster; none when nil.
	Unstick *bus.Unstick
	// Replayed is told of the stream rows a record applied on a standby
	// wrote (NoteRows on the active), so that a standby counts them as the
	// active does. It may be nil.
	Replayed func(stream string, rows int)
	// StreamFailed is told of each failed attempt to set up the log and
	// the lease bucket (bus.WaitStreams); Unstick.FailedWith when nil.
	StreamFailed func(error)
}

// Replicator runs the election and the log for one worker. Create it with
// New, run it with Run. Active and Collectors are safe for concurrent use;
// NoteRows is called under the worker's one writer.
type Replicator struct {
	cfg     Config
	db      *sql.DB
	store   Writer
	nc      *nats.Conn
	js      jetstream.JetStream
	log     *slog.Logger
	unstick *bus.Unstick

	kv     jetstream.KeyValue
	stream jetstream.Stream // the log

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
	// set by NoteRows and taken by shipTx; both run under the one writer.
	txRows txRows

	snaps snapshots // copies kept for standbys

	role       prometheus.Gauge
	lagRecords prometheus.Gauge
	lagSeconds prometheus.Gauge
	takeovers  prometheus.Counter
}

// New prepares a Replicator; it does nothing until Run.
func New(cfg Config) *Replicator {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Unstick == nil {
		cfg.Unstick = bus.NewUnstick(cfg.NC, cfg.LeaseTTL/2, cfg.Log)
	}
	if cfg.StreamFailed == nil {
		cfg.StreamFailed = cfg.Unstick.FailedWith
	}
	if cfg.Replayed == nil {
		cfg.Replayed = func(string, int) {}
	}
	return &Replicator{
		cfg: cfg, db: cfg.DB, store: cfg.Writer, nc: cfg.NC, js: cfg.JS, log: cfg.Log, unstick: cfg.Unstick,
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

// Collectors are the Replicator's metrics, for the worker to register.
func (r *Replicator) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.role, r.lagRecords, r.lagSeconds, r.takeovers}
}

// Active reports whether this worker holds the lease and may write.
func (r *Replicator) Active() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active
}

// NoteRows records that the transaction being committed wrote rows rows
// from stream's messages: its record carries the count, so that a standby
// counts these rows when it writes them. Call it inside the transaction;
// the commit hook takes the count.
func (r *Replicator) NoteRows(stream string, rows int) {
	r.txRows = txRows{stream: stream, rows: rows}
}

func (r *Replicator) replicas() int { return bus.ResolveReplicas(r.nc, r.cfg.Replicas) }

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Run takes part in the election until ctx ends. While this worker holds
// the lease it runs active, which must return soon after its ctx ends and
// call serving once its request subjects are subscribed (from then on a
// request reaches this worker).
func (r *Replicator) Run(ctx context.Context, active func(ctx context.Context, serving func()) error) error {
	if err := bus.WaitStreams(ctx, r.js, r.ensureRepl, r.log, r.cfg.StreamFailed); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	r.removeStaleSnapshots(ctx)
	r.cfg.Recorder.SetHook(r.shipTx)
	defer r.cfg.Recorder.SetHook(nil)
	for ctx.Err() == nil {
		epoch, rev, ok := r.standby(ctx)
		if !ok {
			break
		}
		r.activeTerm(ctx, epoch, rev, active)
	}
	return nil
}

// ensureRepl makes or opens the replication log and the lease bucket, also
// when NATS lost them (its data directory wiped): a new log then starts
// from whichever worker takes the lease first, and the other copies it.
func (r *Replicator) ensureRepl(ctx context.Context, js jetstream.JetStream) error {
	maxBytes, maxAge := r.cfg.Streams.Resolved()
	s, err := js.CreateOrUpdateStream(ctx, bus.ReplStreamConfig(maxBytes, maxAge, r.replicas()))
	if err != nil {
		return fmt.Errorf("replication log: %w", err)
	}
	kv, err := bus.OpenKeyValue(ctx, js, bus.WorkerLeaseConfig(r.cfg.LeaseTTL, r.replicas()), r.log)
	if err != nil {
		return fmt.Errorf("worker lease bucket: %w", err)
	}
	r.mu.Lock()
	r.stream, r.kv = s, kv
	r.mu.Unlock()
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

func (r *Replicator) readPosition(ctx context.Context) (position, error) {
	var p position
	err := r.db.QueryRowContext(ctx, `SELECT seq, epoch, log_created FROM repl_state WHERE id = 1`).Scan(&p.seq, &p.epoch, &p.logCreated)
	return p, err
}

// activeTerm runs the active role until ctx ends or the lease is lost.
func (r *Replicator) activeTerm(ctx context.Context, epoch, rev uint64, active func(context.Context, func()) error) {
	roleCtx, cancel := context.WithCancel(ctx)
	r.mu.Lock()
	r.stop = cancel
	pos := r.pos
	r.mu.Unlock()
	r.lagRecords.Set(0)
	r.lagSeconds.Set(0)
	r.takeovers.Inc()
	serving := func() {
		// Once NATS has the service's subscriptions: from here a request
		// reaches this worker.
		_ = r.nc.Flush()
		r.role.Set(1)
		r.log.Info("worker is active", "log_seq", pos, "epoch", epoch, "worker", r.cfg.Name)
	}

	renewCtx, stopRenew := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { r.renewLease(renewCtx, rev, epoch) })
	sub, err := r.serveSnapshots()
	if err != nil {
		r.log.Error("serving snapshots to standbys failed", "err", err)
	}
	if err := active(roleCtx, serving); err != nil {
		r.log.Error("active role ended", "err", err)
	}
	if sub != nil {
		_ = sub.Unsubscribe()
	}
	r.stepDown("")
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
	r.log.Info("worker left the active role", "log_seq", r.pos, "epoch", epoch)
	r.mu.Unlock()
}

// stepDown ends the active role: writes are refused from now on and the
// role's loops stop. reason is logged when not empty.
func (r *Replicator) stepDown(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stepDownLocked(reason)
}

func (r *Replicator) stepDownLocked(reason string) {
	if r.active && reason != "" {
		r.log.Warn("worker stops being active", "reason", reason, "log_seq", r.pos, "epoch", r.epoch)
	}
	r.active = false
	if r.stop != nil {
		r.stop() // only cancels a context: never waits
	}
}
