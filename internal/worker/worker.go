// Package worker is Sluice's only SQLite writer. It owns the worker's
// lifecycle and the application of the streams: it consumes the bucket
// state and decision counter streams (see streams.go for the flush
// protocol), fences stale states by partition term (terms.go), merges
// staged runs (runs.go), sweeps buckets that are full again, and answers
// hydration pages (bucketreads.go) and syncs (sync.go). It serves the
// operation table (bus.Op) over NATS request/reply, each operation bound
// (bus.Bind, operations.go) to configsvc (config) or analytics (queries);
// repl decides whether this worker is the active one. Each tenant's settles, reservations and config
// writes are limited here, once for the cluster (writelimit.go), and
// reservations and settles are committed in groups (groups.go).
// cmd/worker runs it as its own process; cmd/server runs the same code
// in-process by default.
//
// It must never write SQLite outside the store's one writer, act while repl
// says it is not active, or answer a request whose wire version it does
// not know; config rules belong in configsvc and tenants, not here.
package worker

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/tick"
	"github.com/sluicehq/sluice/internal/worker/analytics"
	"github.com/sluicehq/sluice/internal/worker/configsvc"
	"github.com/sluicehq/sluice/internal/worker/repl"
	"github.com/sluicehq/sluice/internal/worker/webhook"
)

// Config tunes a Worker. The zero value of each field means its default.
type Config struct {
	// FetchBatch is how many stream messages one transaction applies at
	// most. A state message holds up to 1000 bucket states, so the default
	// of 32 keeps one transaction to a fraction of a second of writing:
	// config writes queue behind it for the one writer.
	FetchBatch int
	// Streams bounds the state and counter streams (bus.StreamLimits).
	Streams bus.StreamLimits
	// LagInterval is how often the streams' backlog is read for the lag
	// metrics and the progress log. Default 2s.
	LagInterval time.Duration
	// ApplyInterval is how long fetched messages may wait to be applied, so
	// that one transaction writes a bucket or counter cell once for several
	// server flushes. They are safe in JetStream meanwhile, and a sync
	// (hydration, hand-over, shutdown) applies them at once. Default 1s.
	ApplyInterval time.Duration
	// AckWait is how long JetStream waits for an ack before redelivering a
	// message: how long a killed worker's in-flight batch waits before its
	// successor gets it. Default 10s.
	AckWait time.Duration
	// SweepInterval is how often full buckets are deleted from SQLite.
	SweepInterval time.Duration
	// Analytics bounds the analytics kept (see rollup.go).
	Analytics analytics.Retention
	// Caps bounds what one tenant may hold; zero fields take their
	// defaults (tenants.Caps).
	Caps tenants.Caps
	// Now is the clock; time.Now by default.
	Now func() time.Time
	// Log receives the worker's structured logs.
	Log *slog.Logger
	// Registerer receives the worker's metrics; none are exported when nil.
	Registerer prometheus.Registerer
	// Operator is applied to the store when Run starts, before the worker
	// answers any request, so the first snapshot a server loads has it.
	Operator Operator
	// Replicas is how many NATS servers keep the streams and KV buckets;
	// 0 chooses from the NATS the worker finds (bus.ResolveReplicas). At
	// start the worker raises any that has fewer.
	Replicas int
	// Recorder, when set, makes the worker take part in the election of
	// the active worker and keep the replication log (package repl); the
	// database must have been opened with sqlitedb.OpenRecorded over it.
	// Without it the worker is the only one and always active.
	Recorder *sqlitedb.Recorder
	// LeaseTTL is how long the active worker's lease lives after its last
	// renewal (renewed every sixth of it): how long a standby waits after
	// the active one's death. Default 3s. The first worker to make the
	// lease bucket sets it for all.
	LeaseTTL time.Duration
	// Name tells workers apart in logs and in the lease.
	Name string
	// Webhooks tunes webhook delivery.
	Webhooks WebhookOptions
	// WriteLimits bounds each tenant's settles, reservations and config
	// writes across the cluster; zero fields take their defaults.
	WriteLimits WriteLimits
}

// Worker is the SQLite writer. Create it with New, start it with Run.
type Worker struct {
	cfg     Config
	db      *sql.DB
	store   *tenants.Store
	nc      *nats.Conn
	js      jetstream.JetStream
	log     *slog.Logger
	metrics workerMetrics
	// config serves the config operations and orders every config write.
	config *configsvc.Service

	// Every SQLite write of the worker (stream batches, config writes, the
	// sweep, pruning) is one transaction through store.WriteTx or the
	// store's own writes, which share one semaphore: they queue in Go, one
	// at a time, and never meet in SQLite's busy handler.

	stateRows   atomic.Uint64
	counterRows atomic.Uint64
	quotaRows   atomic.Uint64 // webhook deliveries written from the quota stream
	large       largeReplies  // replies too big for one NATS message, served in parts

	// syncs answers sync requests; while any waits, fetched messages are
	// applied without waiting for ApplyInterval.
	syncs backlogSync

	// writes limits tenants' writes and groups their reservations and
	// settles (reservations.go).
	writes tenantWrites
	// reservations records, settles and sweeps reservations.
	reservations *reservationLedger

	sweeper *bucketSweeper // deletes buckets full again (sweep.go)

	usage *dailyUsage // usage_daily (usage.go)

	runs    *stagedRuns     // staged bucket states (runs.go)
	staging *runWriter      // stages and merges them
	terms   *partitionTerms // partition fencing tokens (terms.go)
	// unstick moves the connection off a NATS node whose JetStream stops
	// answering while the connection stays up (its node lost its cluster).
	unstick *bus.Unstick

	// buckets answers servers' reads of the persisted buckets
	// (bucketreads.go).
	buckets *bucketReader

	// repl runs the election and the replication log; nil without a
	// Recorder.
	repl *repl.Replicator

	purges *dataPurger // what committed changes leave behind (changehooks.go)

	webhooks *webhook.Deliverer // sends the webhook outbox (webhooks.go)

	// servers tells which live servers cannot compile a concurrency
	// limit, for the config writes that hold one (members.go).
	servers *serverSupport
}

// Stats are the worker's running totals of SQLite rows written.
type Stats struct {
	StateRows   uint64 // bucket rows upserted or deleted
	CounterRows uint64 // counter rows upserted
}

// Stats returns the running totals.
func (w *Worker) Stats() Stats {
	return Stats{StateRows: w.stateRows.Load(), CounterRows: w.counterRows.Load()}
}

type workerMetrics struct {
	rowsWritten   *prometheus.CounterVec
	batches       *prometheus.CounterVec
	configOps     *prometheus.CounterVec
	applyFailures *prometheus.CounterVec
	// streamWaits counts failed attempts to set up the NATS streams and
	// the replication log (bus.WaitStreams) at start and at each takeover.
	streamWaits prometheus.Counter
	lag         lagMetrics
}

// New prepares a worker over an open, migrated database and a NATS
// connection.
func New(cfg Config, db *sql.DB, nc *nats.Conn) (*Worker, error) {
	if cfg.FetchBatch <= 0 {
		cfg.FetchBatch = 32
	}
	if cfg.LagInterval <= 0 {
		cfg.LagInterval = 2 * time.Second
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 10 * time.Second
	}
	if cfg.ApplyInterval <= 0 {
		cfg.ApplyInterval = time.Second
	}
	cfg.ApplyInterval = min(cfg.ApplyInterval, cfg.AckWait/4)
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 3 * time.Second
	}
	cfg.Analytics.Defaults()
	if err := cfg.Analytics.Validate(); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if err := cfg.Caps.Validate(); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if err := cfg.Webhooks.Validate(); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if err := cfg.WriteLimits.Validate(); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("worker: jetstream: %w", err)
	}
	w := &Worker{cfg: cfg, db: db, store: tenants.NewStore(db), nc: nc, js: js, log: cfg.Log.With("component", "worker")}
	w.purges = newDataPurger(w.store, w.log)
	w.writes = newTenantWrites(cfg.WriteLimits, func() int { return w.store.Caps().OpenReservations })
	if err := w.setUpWebhooks(); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w.servers = newServerSupport(js, func() time.Time { return w.cfg.Now() })
	w.config = configsvc.New(w.store, func() time.Time { return w.cfg.Now() }, configsvc.Hooks{
		Announce: w.announce, TenantDeleted: w.purges.later, BucketsReset: w.purges.resetBuckets,
		CheckWebhookURL: w.checkWebhookURL, WebhookQueued: w.webhooks.Kick,
		ServersWithoutConcurrency: w.servers.withoutConcurrency,
	}, w.log)
	w.store.SetCaps(cfg.Caps)
	w.metrics = workerMetrics{
		rowsWritten: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_rows_written_total", Help: "SQLite rows written from each stream."}, []string{"stream"}),
		batches:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_batches_committed_total", Help: "Stream batches committed to SQLite."}, []string{"stream"}),
		configOps:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_config_requests_total", Help: "Config and query requests served, by operation and outcome."}, []string{"op", "code"}),
		applyFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_apply_failures_total",
			Help: "Stream batches whose transaction failed and that stay in the stream, by reason (disk_full, error)."}, []string{"stream", "reason"}),
		streamWaits: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_worker_stream_setup_failures_total",
			Help: "Failed attempts to set up the NATS streams, the replication log and the lease bucket, at start and at each takeover; the worker retries every 250 ms and serves nothing meanwhile."}),
	}
	w.metrics.lag = newLagMetrics()
	w.runs = newStagedRuns()
	w.staging = &runWriter{runs: w.runs, db: db, writeTx: w.store.WriteTx, now: cfg.Now, log: w.log}
	w.terms = newPartitionTerms()
	w.sweeper = &bucketSweeper{db: db, store: w.store, runs: w.runs, staging: w.staging, now: cfg.Now, ackWait: cfg.AckWait, log: w.log,
		pruneApplied: w.pruneApplied, written: func() uint64 { return w.stateRows.Load() + w.counterRows.Load() }}
	w.syncs.js = js
	// The reservations' stale and the buckets' acquire read w.terms when
	// called rather than holding it, so that replacing it reaches them.
	w.reservations = &reservationLedger{db: db, writeTx: w.store.WriteTx, writes: &w.writes, now: cfg.Now, log: w.log,
		stale: func(p int, term uint64) bool { return w.terms.stale(p, term) }}
	w.usage = &dailyUsage{db: db, writeTx: w.store.WriteTx, now: cfg.Now}
	w.buckets = &bucketReader{db: db, runs: w.runs, now: cfg.Now, log: w.log, maxPayload: nc.MaxPayload,
		sync: func(ctx context.Context) error { _, err := w.syncs.wait(ctx, struct{}{}); return err },
		acquire: func(ctx context.Context, p int, lease bus.LeaseID) (uint64, error) {
			return w.terms.raise(ctx, w.store.WriteTx, p, lease)
		}}
	w.unstick = bus.NewUnstick(nc, cfg.LeaseTTL/2, w.log)
	if cfg.Recorder != nil {
		w.repl = repl.New(repl.Config{DB: db, Writer: w.store, Recorder: cfg.Recorder, NC: nc, JS: js,
			LeaseTTL: cfg.LeaseTTL, Name: cfg.Name, Replicas: cfg.Replicas, Streams: cfg.Streams,
			Log: w.log, Unstick: w.unstick, Replayed: w.countReplayedRows, StreamFailed: w.streamFailed})
	}
	if cfg.Registerer != nil {
		if err := w.unstick.Register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("worker: register metrics: %w", err)
		}
		cs := append([]prometheus.Collector{w.metrics.rowsWritten, w.metrics.batches, w.metrics.configOps, w.metrics.applyFailures, w.metrics.streamWaits, w.terms.fenced, w.servers.failures}, w.metrics.lag.collectors()...)
		cs = append(cs, w.runs.collectors()...)
		cs = append(cs, newCHeapCollector())
		cs = append(cs, w.webhooks.Collectors()...)
		if w.repl != nil {
			cs = append(cs, w.repl.Collectors()...)
		}
		for _, c := range cs {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("worker: register metrics: %w", err)
			}
		}
	}
	return w, nil
}

// Store gives the worker's config store, for bootstrap steps a process
// takes before serving.
func (w *Worker) Store() *tenants.Store { return w.store }

// Run serves until ctx ends, then stops fetching; a batch in flight is
// committed and acked before Run returns. With a Recorder, the worker
// serves only while it holds the lease, and is a standby otherwise.
func (w *Worker) Run(ctx context.Context) error {
	if err := sqlitedb.ConvertIncrementalVacuum(ctx, w.db, w.log); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	// One connection stays open, unused, while the worker runs, so the
	// idle release (bucketSweeper.releaseIfIdle) never closes the last one: closing the
	// last connection checkpoints the WAL and removes it under an
	// exclusive lock, and a read opening at that moment failed with
	// "database is locked". Unused, it holds no page cache.
	anchor, err := w.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer anchor.Close()
	if w.repl != nil {
		return w.repl.Run(ctx, w.runActive)
	}
	return w.runActive(ctx, nil)
}

// runActive is the active worker's work, until ctx ends. serving, when not
// nil, is called once the request subjects are served.
// streamFailed is told of each failed attempt to set up the streams: a
// NATS node whose JetStream keeps failing is left (bus.Unstick), and the
// attempt is counted.
func (w *Worker) streamFailed(err error) {
	w.metrics.streamWaits.Inc()
	w.unstick.FailedWith(err)
}

func (w *Worker) runActive(ctx context.Context, serving func()) error {
	if err := bus.WaitStreams(ctx, w.js, w.ensureStreams, w.log, w.streamFailed); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	// The account of staged runs comes first: stream batches add to it.
	// So do the partition terms: stream batches are fenced by them.
	if err := w.runs.load(ctx, w.db); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if err := w.terms.load(ctx, w.db); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	w.bootstrapOperator(ctx)
	svc, err := micro.AddService(w.nc, micro.Config{
		Name:        bus.ServiceName,
		Version:     bus.ServiceVersion,
		Description: "Sluice's SQLite writer: config, hydration and analytics.",
		QueueGroup:  bus.ServiceName,
	})
	if err != nil {
		return fmt.Errorf("worker: add service: %w", err)
	}
	defer svc.Stop()
	if err := w.registerEndpoints(svc); err != nil {
		return err
	}
	if serving != nil {
		serving()
	}
	maxBytes, maxAge := w.cfg.Streams.Resolved()
	w.log.Info("worker started", "stream_max_bytes", maxBytes, "stream_max_age", maxAge.String())
	defer w.log.Info("worker stopped")

	var wg sync.WaitGroup
	wg.Go(func() { w.staging.mergeLoop(ctx) })
	wg.Go(func() { _ = w.consume(ctx, bus.StateStream, w.applyState) })
	wg.Go(func() { _ = w.consume(ctx, bus.CounterStream, w.applyCounters) })
	wg.Go(func() { _ = w.consume(ctx, bus.QuotaStream, w.applyQuota) })
	wg.Go(func() { w.webhooks.Run(ctx) })
	wg.Go(func() { w.watchTopOffenders(ctx) })
	wg.Go(func() { w.watchLag(ctx) })
	wg.Go(func() { w.purges.run(ctx) })
	// Passive checkpoints copy committed pages from the WAL into the
	// database file every second, on a connection of their own and
	// without blocking the writer, so that the writer rarely has to do it
	// inside a commit.
	wg.Go(func() {
		tick.Every(ctx, time.Second, func() {
			if _, err := w.db.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`); err != nil && ctx.Err() == nil {
				w.log.Debug("passive checkpoint", "err", err)
			}
		})
	})
	wg.Go(func() { tick.Every(ctx, w.cfg.SweepInterval, func() { w.sweeper.sweep(ctx) }) })
	wg.Go(func() { tick.Every(ctx, w.cfg.SweepInterval, func() { w.reservations.sweep(ctx) }) })
	wg.Go(func() { w.reservations.runGroups(ctx) })
	m := analytics.NewMaintainer(w.db, w.store, w.cfg.Analytics, w.cfg.Now(), w.log)
	wg.Go(func() {
		tick.Every(ctx, w.cfg.Analytics.Interval, func() {
			if _, err := m.Run(ctx, w.cfg.Now()); err != nil && ctx.Err() == nil {
				w.log.Error("analytics maintenance failed; will retry", "err", err)
			}
			if n, err := w.usage.prune(ctx, w.cfg.Now()); err != nil && ctx.Err() == nil {
				w.log.Error("daily usage retention failed; will retry", "err", err)
			} else if n > 0 {
				w.log.Info("daily usage retention", "rows_deleted", n)
			}
		})
	})
	wg.Wait()
	return nil
}
