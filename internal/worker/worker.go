// Package worker is Sluice's only SQLite writer. It owns the worker's
// lifecycle and the application of the streams: it consumes the bucket
// state and decision counter streams (see streams.go for the flush
// protocol), fences stale states by partition term (terms.go), merges
// staged runs (runs.go), sweeps buckets that are full again, and answers
// hydration pages and syncs. It serves the operation table (bus.Op) over
// NATS request/reply by decoding each request's wire form and calling
// configsvc (config) or analytics (queries); repl decides whether this
// worker is the active one. Each tenant's settles, reservations and config
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
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
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

	// syncing counts sync requests waiting: while any is, fetched messages
	// are applied without waiting for ApplyInterval.
	syncing atomic.Int32

	keyOrderWarned atomic.Int64 // unix ns of the last warnKeyOrder

	// writes limits tenants' writes and groups their reservations and
	// settles (reservations.go).
	writes tenantWrites

	// rowsAtSweep and releasedAt are releaseIfIdle's, under releaseMu.
	releaseMu   sync.Mutex
	rowsAtSweep uint64
	releasedAt  time.Time

	zones zoneCache // tenants' time zones, for daily usage (usage.go)

	runs  *stagedRuns     // staged bucket states (runs.go)
	terms *partitionTerms // partition fencing tokens (terms.go)
	// unstick moves the connection off a NATS node whose JetStream stops
	// answering while the connection stays up (its node lost its cluster).
	unstick *bus.Unstick

	// pageRowBytes is what a live bucket took in the last hydration page,
	// to size the next page's reads (readMerged).
	pageRowBytes atomic.Int64
	// pagePacked is the length of the last full packed hydration page, to
	// size the next one's buffer (pageBuilder.add).
	pagePacked atomic.Int64

	// repl runs the election and the replication log; nil without a
	// Recorder.
	repl *repl.Replicator

	purges chan string // deleted tenants whose late data to purge (purgeDeleted)

	webhooks *webhook.Deliverer // sends the webhook outbox (webhooks.go)
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
	lag           lagMetrics
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
	w := &Worker{cfg: cfg, db: db, store: tenants.NewStore(db), nc: nc, js: js, log: cfg.Log.With("component", "worker"), purges: make(chan string, 64)}
	w.writes = newTenantWrites(cfg.WriteLimits, func() int { return w.store.Caps().OpenReservations })
	if err := w.setUpWebhooks(); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w.config = configsvc.New(w.store, func() time.Time { return w.cfg.Now() }, configsvc.Hooks{
		Announce: w.announce, TenantDeleted: w.purgeLater, BucketsReset: w.deleteResetBuckets,
		CheckWebhookURL: w.checkWebhookURL, WebhookQueued: w.webhooks.Kick,
	}, w.log)
	w.store.SetCaps(cfg.Caps)
	w.metrics = workerMetrics{
		rowsWritten: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_rows_written_total", Help: "SQLite rows written from each stream."}, []string{"stream"}),
		batches:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_batches_committed_total", Help: "Stream batches committed to SQLite."}, []string{"stream"}),
		configOps:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_config_requests_total", Help: "Config and query requests served, by operation and outcome."}, []string{"op", "code"}),
		applyFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_apply_failures_total",
			Help: "Stream batches whose transaction failed and that stay in the stream, by reason (disk_full, error)."}, []string{"stream", "reason"}),
	}
	w.metrics.lag = newLagMetrics()
	w.runs = newStagedRuns()
	w.terms = newPartitionTerms()
	w.unstick = bus.NewUnstick(nc, cfg.LeaseTTL/2, w.log)
	if cfg.Recorder != nil {
		w.repl = repl.New(repl.Config{DB: db, Writer: w.store, Recorder: cfg.Recorder, NC: nc, JS: js,
			LeaseTTL: cfg.LeaseTTL, Name: cfg.Name, Replicas: cfg.Replicas, Streams: cfg.Streams,
			Log: w.log, Unstick: w.unstick, Replayed: w.countReplayedRows})
	}
	if cfg.Registerer != nil {
		if err := w.unstick.Register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("worker: register metrics: %w", err)
		}
		cs := append([]prometheus.Collector{w.metrics.rowsWritten, w.metrics.batches, w.metrics.configOps, w.metrics.applyFailures, w.terms.fenced}, w.metrics.lag.collectors()...)
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
	// idle release (releaseIfIdle) never closes the last one: closing the
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
func (w *Worker) runActive(ctx context.Context, serving func()) error {
	if err := bus.WaitStreams(ctx, w.js, w.ensureStreams); err != nil {
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
	wg.Go(func() { w.mergeLoop(ctx) })
	wg.Go(func() { _ = w.consume(ctx, bus.StateStream, w.applyState) })
	wg.Go(func() { _ = w.consume(ctx, bus.CounterStream, w.applyCounters) })
	wg.Go(func() { _ = w.consume(ctx, bus.QuotaStream, w.applyQuota) })
	wg.Go(func() { w.webhooks.Run(ctx) })
	wg.Go(func() { w.watchTopOffenders(ctx) })
	wg.Go(func() { w.watchLag(ctx) })
	wg.Go(func() { w.purgeDeleted(ctx) })
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
	wg.Go(func() { tick.Every(ctx, w.cfg.SweepInterval, func() { w.sweep(ctx) }) })
	wg.Go(func() { tick.Every(ctx, w.cfg.SweepInterval, func() { w.sweepReservations(ctx) }) })
	wg.Go(func() { w.groupLoops(ctx) })
	m := analytics.NewMaintainer(w.db, w.store, w.cfg.Analytics, w.cfg.Now(), w.log)
	wg.Go(func() {
		tick.Every(ctx, w.cfg.Analytics.Interval, func() {
			if _, err := m.Run(ctx, w.cfg.Now()); err != nil && ctx.Err() == nil {
				w.log.Error("analytics maintenance failed; will retry", "err", err)
			}
			if n, err := w.pruneUsage(ctx, w.cfg.Now()); err != nil && ctx.Err() == nil {
				w.log.Error("daily usage retention failed; will retry", "err", err)
			} else if n > 0 {
				w.log.Info("daily usage retention", "rows_deleted", n)
			}
		})
	})
	wg.Wait()
	return nil
}

const (
	// maxPage is the most buckets one page holds; a page also ends at half
	// of NATS's max_payload.
	maxPage = 20000
	// maxPageKeys is the most buckets one request may name.
	maxPageKeys = 1000
)

// bucketsPage answers hydration. The first page waits until every state
// batch already in the stream is committed, so a restarted server never
// hydrates from state older than what it published before it died.
//
// Each page reads buckets and the staged runs together (readMerged). A
// page in (partition, key) order reads one partition at a time, going on
// to the next while the page has room.
func (w *Worker) bucketsPage(ctx context.Context, req bus.BucketsRequest) (bus.BucketsPage, error) {
	if len(req.Keys) > 0 {
		return w.bucketsByKey(ctx, req.Keys, req.Packed)
	}
	var term uint64
	if req.After == "" {
		if _, err := w.syncRequest(ctx, struct{}{}); err != nil {
			return bus.BucketsPage{}, err
		}
		if req.Acquire && req.Partition != nil {
			var err error
			if term, err = w.raiseTerm(ctx, *req.Partition, req.Lease); err != nil {
				return bus.BucketsPage{}, err
			}
		}
	}
	if req.Limit <= 0 || req.Limit > maxPage {
		req.Limit = maxPage
	}
	// A packed page's buffer is sized as the last full page, with room to
	// spare: one buffer, not a doubling.
	pb := w.newPageBuilder(req.Packed, w.cfg.Now().UnixNano(), max(int(w.pagePacked.Load())*9/8, 64<<10))
	defer func() {
		if pb.live > 0 {
			w.pageRowBytes.Store(int64(pb.size / pb.live))
		}
		if pb.page.Next != "" && len(pb.page.Packed) > 0 {
			w.pagePacked.Store(int64(len(pb.page.Packed)))
		}
	}()
	switch {
	case req.Partition != nil:
		// One partition: a range of the table, in key order (the same
		// order as bus.CompareBucketKeys within a partition).
		more, err := w.readMerged(ctx, pb, req.Limit, `part = ? AND key > ?`, *req.Partition, req.After)
		if err != nil {
			return bus.BucketsPage{}, err
		}
		if more {
			pb.page.Next = pb.last
		}
		pb.page.Term = term
		return pb.page, nil
	case req.Order == bus.OrderPartitionKey:
		part, after := 0, req.After
		if after != "" {
			part = bus.Partition([]byte(after))
		}
		for ; part < bus.Partitions; part, after = part+1, "" {
			more, err := w.readMerged(ctx, pb, req.Limit-pb.read, `part = ? AND key > ?`, part, after)
			if err != nil {
				return bus.BucketsPage{}, err
			}
			if more || pb.read >= req.Limit {
				pb.page.Next = pb.last
				break
			}
		}
		pb.page.Order = req.Order
		return pb.page, nil
	default:
		w.warnKeyOrder()
		more, err := w.readMerged(ctx, pb, req.Limit, `key > ?`, req.After)
		if err != nil {
			return bus.BucketsPage{}, err
		}
		if more {
			pb.page.Next = pb.last
		}
		return pb.page, nil
	}
}

// warnKeyOrder logs, at most once a minute, that a server asked for
// hydration pages in plain key order: a server older than the worker. Such
// pages are correct but cost the worker a sort of the whole table each.
func (w *Worker) warnKeyOrder() {
	now := time.Now().UnixNano()
	last := w.keyOrderWarned.Load()
	if now-last < int64(time.Minute) || !w.keyOrderWarned.CompareAndSwap(last, now) {
		return
	}
	w.log.Warn("a server asked for hydration pages in key order; it is older than this worker and its pages cost a sort of the bucket table each: upgrade it")
}

// bucketsByKey answers the live persisted buckets among keys: each key's
// newest state in buckets or in a staged run.
func (w *Worker) bucketsByKey(ctx context.Context, keys []string, packed bool) (bus.BucketsPage, error) {
	if len(keys) > maxPageKeys {
		return bus.BucketsPage{}, errs.Errorf(errs.Invalid, "keys: at most %d in one request", maxPageKeys)
	}
	args := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		args = append(args, bus.Partition([]byte(k)), k)
	}
	q := `WITH k(part, key) AS (VALUES (?, ?)` + strings.Repeat(", (?, ?)", len(keys)-1) + `)
	SELECT b.key, b.tenant_id, b.state, b.full_at, b.seq FROM k JOIN buckets b ON b.part = k.part AND b.key = k.key
	UNION ALL
	SELECT r.key, r.tenant_id, r.state, r.full_at, r.seq FROM k JOIN bucket_runs r ON r.run IN (SELECT run FROM bucket_run_ids) AND r.part = k.part AND r.key = k.key`
	found, err := queryStored(ctx, w.db, q, args...)
	if err != nil {
		return bus.BucketsPage{}, err
	}
	slices.SortFunc(found, func(a, b storedBucket) int { return strings.Compare(a.key, b.key) })
	// The buffer fits what was found: these are the first touches of a
	// hydrating server, often one key each.
	size := 0
	for _, b := range found {
		size += len(b.key) + len(b.tenant) + len(b.state) + 2*binary.MaxVarintLen64
	}
	pb := w.newPageBuilder(packed, w.cfg.Now().UnixNano(), size)
	for i := 0; i < len(found); {
		j, newest := i+1, i
		for ; j < len(found) && found[j].key == found[i].key; j++ {
			if found[j].seq > found[newest].seq {
				newest = j
			}
		}
		pb.add(&found[newest])
		i = j
	}
	return pb.page, nil
}

// storedBucket is one persisted row of a bucket, from buckets or a run.
type storedBucket struct {
	key, tenant string
	state       []byte
	fullAt, seq int64
	src         int // which table: 0 buckets, 1 a run (readMerged)
}

// storedScanner reads storedBucket rows with few allocations: states go
// into one buffer, and a tenant id like the row before's is shared.
type storedScanner struct {
	tenant, state sql.RawBytes
	lastTenant    string
	buf           []byte
	ends          []int // where each row's state ends in buf
	dest          []any
}

// scan reads the current row (key, tenant_id, state, full_at, seq, and src
// when withSrc) into b; b.state is set by finish.
func (s *storedScanner) scan(rows *sql.Rows, b *storedBucket, withSrc bool) error {
	s.dest = append(s.dest[:0], &b.key, &s.tenant, &s.state, &b.fullAt, &b.seq)
	if withSrc {
		s.dest = append(s.dest, &b.src)
	}
	if err := rows.Scan(s.dest...); err != nil {
		return err
	}
	if string(s.tenant) != s.lastTenant {
		s.lastTenant = string(s.tenant)
	}
	b.tenant = s.lastTenant
	s.buf = append(s.buf, s.state...)
	s.ends = append(s.ends, len(s.buf))
	return nil
}

// finish points the scanned rows' states into the buffer, in scan order.
func (s *storedScanner) finish(bs ...[]storedBucket) {
	i, start := 0, 0
	for _, list := range bs {
		for j := range list {
			list[j].state = s.buf[start:s.ends[i]:s.ends[i]]
			start = s.ends[i]
			i++
		}
	}
}

func queryStored(ctx context.Context, db *sql.DB, query string, args ...any) ([]storedBucket, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []storedBucket
	var sc storedScanner
	for rows.Next() {
		var b storedBucket
		if err := sc.scan(rows, &b, false); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	sc.finish(out)
	return out, rows.Err()
}

// readMerged adds to pb, in key order, the newest state of each key that
// matches cond (a condition on part and key) in buckets or a staged run,
// reading at most limit keys, and reports whether more may follow. Both
// tables are read in one statement, so in one snapshot.
//
// Each table is read up to its limit; keys beyond the first table's last
// row, or up to the runs' last key (whose other versions may be cut off),
// are left for the next page. A key is in a run at most once, so the runs
// are read up to limit plus the number of runs: the page always advances.
func (w *Worker) readMerged(ctx context.Context, pb *pageBuilder, limit int, cond string, args ...any) (more bool, err error) {
	if limit <= 0 {
		return true, nil
	}
	// Read about as many rows as the page has room for: a page ends at
	// half of max_payload, often long before limit, and rows read past it
	// would be read again for the next page.
	if per := w.pageRowBytes.Load(); per > 0 {
		limit = min(limit, max(pb.budget-pb.size, 0)/int(per)+64)
	}
	runLimit := limit + max(w.runs.count(), maxRuns) + 1
	q := `SELECT key, tenant_id, state, full_at, seq, 0 FROM (SELECT key, tenant_id, state, full_at, seq FROM buckets WHERE ` + cond + ` ORDER BY key LIMIT ?)
	UNION ALL
	SELECT key, tenant_id, state, full_at, seq, 1 FROM (SELECT key, tenant_id, state, full_at, seq FROM bucket_runs WHERE run IN (SELECT run FROM bucket_run_ids) AND ` + cond + ` ORDER BY key LIMIT ?)`
	qargs := append(append(append(append([]any{}, args...), limit), args...), runLimit)
	rows, err := w.db.QueryContext(ctx, q, qargs...)
	if err != nil {
		return false, err
	}
	// The rows go into buffers kept from earlier reads: a page takes
	// several reads, and hydration hundreds of pages. Nothing read here
	// outlives the call but keys (strings) and what pb copied.
	rs := readScratchPool.Get().(*readScratch)
	defer rs.put()
	all, sc := rs.all[:0], &rs.sc
	var scanErr error
	for rows.Next() {
		all = append(all, storedBucket{})
		if scanErr = sc.scan(rows, &all[len(all)-1], true); scanErr != nil {
			break
		}
	}
	rs.all = all
	rows.Close()
	if scanErr != nil {
		return false, scanErr
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	sc.finish(all)
	// The UNION ALL gives the buckets rows, then the runs' rows; a stable
	// sort by table keeps that (and each part's key order) either way.
	bySrc := func(a, b storedBucket) int { return a.src - b.src }
	if !slices.IsSortedFunc(all, bySrc) {
		slices.SortStableFunc(all, bySrc)
	}
	split, _ := slices.BinarySearchFunc(all, 1, func(b storedBucket, src int) int { return b.src - src })
	table, staged := all[:split], all[split:]
	// Each part comes in key order from its own ORDER BY; sorted again only
	// if SQLite did not keep that order through the UNION ALL.
	byKey := func(a, b storedBucket) int { return strings.Compare(a.key, b.key) }
	for _, part := range [][]storedBucket{table, staged} {
		if !slices.IsSortedFunc(part, byKey) {
			slices.SortStableFunc(part, byKey)
		}
	}
	// The keys this read is complete for: up to the table's last row if it
	// was cut off, and below the runs' last key if they were.
	tableCut, stagedCut := len(table) == limit, len(staged) == runLimit
	within := func(key string) bool {
		return (!tableCut || key <= table[len(table)-1].key) && (!stagedCut || key < staged[len(staged)-1].key)
	}
	i, j := 0, 0
	for i < len(table) || j < len(staged) {
		var key string
		switch {
		case j == len(staged) || (i < len(table) && table[i].key <= staged[j].key):
			key = table[i].key
		default:
			key = staged[j].key
		}
		if !within(key) {
			return true, nil
		}
		var newest *storedBucket
		if i < len(table) && table[i].key == key {
			newest = &table[i]
			i++
		}
		for ; j < len(staged) && staged[j].key == key; j++ {
			if newest == nil || staged[j].seq > newest.seq {
				newest = &staged[j]
			}
		}
		if !pb.add(newest) {
			return true, nil
		}
	}
	return tableCut || stagedCut, nil
}

// readScratch holds what readMerged reads rows into, pooled across reads.
type readScratch struct {
	all []storedBucket
	sc  storedScanner
}

var readScratchPool = sync.Pool{New: func() any { return new(readScratch) }}

// put empties rs, letting go of the keys it pointed to, and pools it.
func (rs *readScratch) put() {
	clear(rs.all)
	rs.all = rs.all[:0]
	rs.sc.buf, rs.sc.ends = rs.sc.buf[:0], rs.sc.ends[:0]
	readScratchPool.Put(rs)
}

// pageBuilder fills a hydration page, packed or not, with the live buckets
// it is given, up to half of NATS's max_payload: any reply may travel in
// parts, but a page that fits one message keeps hydration to one round
// trip per page and the worker from holding large replies for it.
type pageBuilder struct {
	w      *Worker
	page   bus.BucketsPage
	packed bool
	now    int64
	budget int
	size   int
	read   int    // keys taken, live or not
	live   int    // keys added to the page
	last   string // the last key taken
	bin    []byte
	// sizeHint is the packed buffer's first capacity.
	sizeHint int
}

// newPageBuilder starts a page; a packed one's buffer is made for
// sizeHint bytes (it grows if it must).
func (w *Worker) newPageBuilder(packed bool, now int64, sizeHint int) *pageBuilder {
	budget := max(int(w.nc.MaxPayload())/2, 4096)
	return &pageBuilder{w: w, packed: packed, now: now, budget: budget, sizeHint: min(budget, sizeHint)}
}

// add takes b's key, adding b to the page unless it is full again (no
// longer live); it reports false, taking nothing, when the page has no
// room left.
func (pb *pageBuilder) add(b *storedBucket) bool {
	if b.fullAt <= pb.now {
		pb.read++
		pb.last = b.key
		return true
	}
	if pb.size+len(b.key)+len(b.tenant)+len(b.state)+64 > pb.budget && pb.size > 0 {
		return false
	}
	pb.size += len(b.key) + len(b.tenant) + len(b.state) + 64
	pb.live++
	pb.read++
	pb.last = b.key
	var err error
	if pb.packed {
		if pb.page.Packed == nil {
			// Not the budget's size: the budget counts more than a
			// packed record takes, and a first touch asks for one key.
			// A buffer of the budget's size (4 MiB) was cleared for
			// each.
			pb.page.Packed = make([]byte, 0, pb.sizeHint)
		}
		pb.bin, err = bus.BinaryState(pb.bin[:0], b.state)
		if err == nil {
			pb.page.Packed = bus.AppendPacked(pb.page.Packed, b.key, b.tenant, b.fullAt, pb.bin)
		}
	} else {
		rec := bus.BucketRecord{Key: b.key, TenantID: b.tenant, FullAt: b.fullAt}
		rec.Limits, rec.States, err = bus.DecodeState(b.state)
		if err == nil {
			pb.page.Buckets = append(pb.page.Buckets, rec)
		}
	}
	if err != nil {
		pb.w.log.Error("skipping unreadable bucket", "key", b.key, "err", err)
	}
	return true
}

// SyncReply reports the stream sequences the worker has committed.
type SyncReply struct {
	State    uint64 `json:"state"`
	Counters uint64 `json:"counters"`
}

// syncRequest waits until every message that was in the two streams when
// it arrived has been committed and acked.
func (w *Worker) syncRequest(ctx context.Context, _ struct{}) (SyncReply, error) {
	w.syncing.Add(1)
	defer w.syncing.Add(-1)
	var out SyncReply
	for i, stream := range []string{bus.StateStream, bus.CounterStream} {
		s, err := w.js.Stream(ctx, stream)
		if err != nil {
			return out, fmt.Errorf("sync: %w", err)
		}
		target := s.CachedInfo().State.LastSeq
		for {
			if w.committedThrough(ctx, s, stream, target) {
				break
			}
			select {
			case <-ctx.Done():
				return out, errs.Errorf(errs.Unavailable, "The worker is still catching up with its backlog; try again shortly.")
			case <-time.After(20 * time.Millisecond):
			}
		}
		if i == 0 {
			out.State = target
		} else {
			out.Counters = target
		}
	}
	return out, nil
}

// committedThrough reports whether every message of stream up to target
// has been committed. Either the worker's consumer acknowledged through
// it, or none of those messages is left in the stream: both streams are
// work queues, which drop a message once it is acknowledged, and the
// worker acknowledges only after COMMIT. The second test holds when the
// first does not: after a NATS node holding the consumer dies, or the
// worker makes its consumer anew, the consumer's ack floor can stay behind
// messages that are long gone.
func (w *Worker) committedThrough(ctx context.Context, s jetstream.Stream, stream string, target uint64) bool {
	if c, err := w.js.Consumer(ctx, stream, bus.WorkerDurable); err == nil {
		if info, err := c.Info(ctx); err == nil && info.AckFloor.Stream >= target {
			return true
		}
	}
	info, err := s.Info(ctx)
	return err == nil && (info.State.Msgs == 0 || info.State.FirstSeq > target)
}
