// Package engine is a Sluice server's data plane: it holds the config
// cache (configview.go) and the hot cache of buckets, decides checks in memory
// (check.go), and keeps both in step with the worker over NATS: it hydrates
// at start, applies announced config changes, and flushes the state of
// allowed decisions and the decision counters in batches (publish.go).
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/tick"
)

// Config tunes an Engine. Zero fields take their defaults.
type Config struct {
	// Node names this server in published batches and logs.
	Node string
	// FlushInterval is how often allowed decisions' bucket states are
	// published; it bounds what a kill -9 can lose. Default 200ms.
	FlushInterval time.Duration
	// CounterInterval is how often decision counters are published. Default 1s.
	CounterInterval time.Duration
	// CounterIdentities bounds the identity cells of decision counters a
	// tenant holds between two counter flushes; decisions of identities
	// beyond it count as "others" (see counters.go). Default
	// DefaultCounterIdentities.
	CounterIdentities int
	// SweepInterval is how often buckets that are full again leave memory. Default 10s.
	SweepInterval time.Duration
	// ResyncInterval is how often the server checks it has not missed a
	// config change. Default 2s.
	ResyncInterval time.Duration
	// KeyUseInterval is how often the server reports which service keys it
	// saw in use (keyuse.go). Default 30s.
	KeyUseInterval time.Duration
	// Replicas is how many NATS servers keep a stream this server makes
	// again; 0 chooses from the NATS it finds (bus.ResolveReplicas).
	Replicas int
	// Now is the clock; time.Now by default. The decision path reads
	// it: ownership of a partition (the cluster's leases, given with
	// SetCluster, must be written on the same clock) and what a flush
	// persisted. Waits on the network are bounded on the wall clock
	// instead, so that a stopped test clock cannot make them endless;
	// durations measured for metrics and logs are wall time too.
	Now func() time.Time
	Log *slog.Logger
	// Registerer receives the engine's metrics; none when nil.
	Registerer prometheus.Registerer
	// EnvoyBytesPerSecond is each tenant's share of this server's Envoy
	// door in bytes of descriptors a second (doorshare.go); 0 is
	// DefaultEnvoyBytesPerSecond, negative no share.
	EnvoyBytesPerSecond int64
	// JWKS tunes the fetching of JWT issuers' key sets (jwks.go).
	JWKS JWKSOptions
	// TenantBuckets bounds the live buckets a tenant holds in this
	// server's hot cache; new callers past it share the tenant's overflow
	// bucket (overflow.go). 0 is DefaultTenantBuckets, negative no bound.
	TenantBuckets int
	// Waits holds the checks waiting for their buckets (wait.go); nil
	// makes one with the default bounds.
	Waits *Waits
}

// Engine is the data plane of one server. It is safe for concurrent use.
type Engine struct {
	cfg      Config
	log      *slog.Logger
	nc       *nats.Conn
	cache    *quota.Cache
	view     atomic.Pointer[view]
	counters *counterAgg
	metrics  engineMetrics
	keyBuf   sync.Pool

	// readiness says whether the server may answer (readiness.go); hyd
	// tracks the load of the buckets after the first page (hydrate.go).
	readiness readiness
	hyd       hydration
	// sync keeps view current: announced changes, resyncs.
	sync configSync

	// pub publishes the states, counters and quota crossings of decisions
	// (publish.go).
	pub *publisher

	cluster *cluster.Cluster
	// gossip shares local policies' consumption with the other servers
	// (gossip.go).
	gossip *localGossip
	// fwd names this server's moving decisions and remembers what it
	// answered others' (applied.go).
	fwd *forwardMemory

	// keyUse notes and reports the service keys' use (keyuse.go).
	keyUse keyUse
	// door is each tenant's share of the Envoy door (doorshare.go).
	door *doorShare
	// jwt verifies checks' tokens; its fetcher keeps issuers' key sets
	// (jwt.go, jwks.go).
	jwt jwtVerifier
	// bound bounds each tenant's buckets in cache (overflow.go).
	bound *tenantBound
	// leases takes and gives back concurrency limits' slots (lease.go).
	leases *leaseBook
	// waits queues the checks that wait for their buckets (wait.go).
	waits *Waits

	stop   context.CancelFunc
	done   sync.WaitGroup
	closed atomic.Bool
}

// New creates an engine over a NATS connection. Call Start before serving.
func New(cfg Config, nc *nats.Conn) (*Engine, error) {
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = 200 * time.Millisecond
	}
	if cfg.CounterInterval <= 0 {
		cfg.CounterInterval = time.Second
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 10 * time.Second
	}
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = 2 * time.Second
	}
	if cfg.KeyUseInterval <= 0 {
		cfg.KeyUseInterval = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Node == "" {
		cfg.Node = "server"
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("engine: jetstream: %w", err)
	}
	e := &Engine{
		cfg:      cfg,
		log:      cfg.Log.With("component", "engine"),
		nc:       nc,
		cache:    quota.NewCache(),
		counters: newCounterAgg(cfg.CounterIdentities),
		fwd:      newForwardMemory(),
		door:     newDoorShare(cfg.EnvoyBytesPerSecond),
	}
	e.bound = newTenantBound(cfg.TenantBuckets, e.cache, e.log)
	e.leases = newLeaseBook(e.cache, e.bound)
	e.waits = cfg.Waits
	if e.waits == nil {
		e.waits = NewWaits(WaitConfig{})
	}
	e.waits.clock, e.waits.eng, e.waits.log = wallClock{now: cfg.Now}, e, e.log
	e.keyBuf.New = func() any { b := make([]byte, 0, 128); return &b }
	e.view.Store(emptyView())
	e.keyUse = keyUse{nc: nc, node: cfg.Node, log: e.log, now: cfg.Now, view: &e.view}
	e.keyUse.tick()
	e.metrics = newEngineMetrics(e)
	e.jwt = jwtVerifier{cache: newTokenCache(jwtCachePerShard), jwks: newJWKSFetcher(cfg.JWKS, e.log.With("part", "jwks"), e.metrics.jwksFailures)}
	e.hyd.nc, e.hyd.cache, e.hyd.log, e.hyd.leases = nc, e.cache, e.log, &e.leases.keys
	e.hyd.retries, e.hyd.firstTouch = e.metrics.hydrateRetries, e.metrics.firstTouch
	e.hyd.version = func() int64 { return e.view.Load().version }
	e.pub = newPublisher(&e.cfg, e.log, nc, js, e.cache, e.counters, e.view.Load, e.metrics.publishMetrics)
	e.gossip = newLocalGossip(&e.cfg, e.log, nc, e.cache, e.view.Load, e.bound)
	e.sync = configSync{nc: nc, log: e.log, view: &e.view, interval: e.cfg.ResyncInterval, resyncs: e.metrics.resyncs,
		workerSeen: &e.readiness.workerSeen, formats: e.pub.workerReads, requests: make(chan struct{}, 1),
		reset: func(key string) {
			e.hyd.noteReset(key)
			e.cache.Reset(key)
		},
		issuersLoaded: e.jwt.jwks.load, issuersChanged: e.jwt.jwks.changed}
	if cfg.Registerer != nil {
		for _, c := range append(e.metrics.collectors(), e.waits.m.collectors()...) {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("engine: register metrics: %w", err)
			}
		}
	}
	return e, nil
}

// Ready reports whether the engine may answer requests: hydrated and
// connected to NATS.
func (e *Engine) Ready() bool {
	return e.readiness.ready()
}

// WorkerAnswers reports whether the worker answered the version poll
// (every ResyncInterval, 2 s by default) within the last 5 s (or two and
// a half intervals). The cluster
// takes partitions over, which needs the worker to load them, only then:
// a takeover that cannot load gives its lease back, and the partition's
// owner, back from the same outage, could then no longer resume it from
// memory.
func (e *Engine) WorkerAnswers() bool {
	window := max(5*time.Second, e.cfg.ResyncInterval*5/2)
	return time.Since(time.Unix(0, e.readiness.workerSeen.Load())) < window
}

// Healthy reports what /readyz answers: Ready, and in a cluster able to
// decide (cluster.Healthy: its leases renewed and its decisions persisted
// within a lease time). A silent partition leaves the TCP connection up
// for minutes; the lease renewals tell the truth within a lease.
func (e *Engine) Healthy() bool {
	return e.Ready() && (e.cluster == nil || e.cluster.Healthy(e.cfg.Now()))
}

// Start subscribes to config changes, hydrates the config and the hot cache
// from the worker (retrying until it answers or ctx ends), and starts the
// background loops. Checks may be served once Ready reports true.
func (e *Engine) Start(ctx context.Context) error {
	loopCtx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	e.readiness.connected.Store(e.nc.IsConnected())
	e.done.Go(func() { e.readiness.watch(loopCtx, e.nc) })
	e.jwt.jwks.start(loopCtx)
	if _, err := e.nc.Subscribe(bus.ChangesSubject, e.sync.onChange); err != nil {
		return fmt.Errorf("engine: subscribe to config changes: %w", err)
	}
	if err := e.pub.waitStreams(ctx); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	started := time.Now()
	var after string
	for attempt := 1; ; attempt++ {
		a, err := e.hydrate(ctx)
		if err == nil {
			after = a
			break
		}
		// At a normal start the in-process worker registers a moment after
		// the engine asks; only a lasting failure deserves a warning.
		lvl := slog.LevelDebug
		if attempt%4 == 0 {
			lvl = slog.LevelWarn
		}
		e.log.Log(ctx, lvl, "hydration waiting for the worker", "attempt", attempt, "waited_s", time.Since(started).Seconds(), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	e.readiness.hydrated.Store(true)
	e.log.Info("hot cache serving; loading the rest of the persisted buckets", "loaded", e.hyd.loaded.Load(), "seconds", time.Since(started).Seconds())
	e.done.Go(func() { e.hyd.loadRest(loopCtx, after, started) })
	e.pub.run(loopCtx, &e.done)
	e.done.Go(func() {
		tick.Every(loopCtx, e.cfg.SweepInterval, func() { e.cache.Sweep(e.cfg.Now().UnixNano()) })
	})
	e.done.Go(func() { e.sync.loop(loopCtx) })
	e.done.Go(func() { tick.Every(loopCtx, time.Second, e.keyUse.tick) })
	e.done.Go(func() { tick.Every(loopCtx, e.cfg.KeyUseInterval, func() { e.keyUse.report(loopCtx) }) })
	if e.cluster != nil {
		e.done.Go(func() { tick.Every(loopCtx, LocalFlushInterval, e.gossip.flush) })
	}
	return nil
}

// BucketKey is the key of one identity's bucket for one policy
// (bus.BucketKey), with an IP address in its normal form.
func BucketKey(tenantID, policyID, kind, id string) string {
	if kind == KindIP {
		if n, ok := NormalizeIP(id); ok {
			id = n
		}
	}
	return bus.BucketKey(tenantID, policyID, kind, id)
}

// Close stops the loops, publishes everything pending, and waits until the
// worker has committed it (bounded by ctx). It is the SIGTERM path. It
// fails only when something could not be published: a worker that does not
// answer is logged, as what it has not committed waits for it in the
// streams.
func (e *Engine) Close(ctx context.Context) error {
	if !e.closed.CompareAndSwap(false, true) {
		return nil
	}
	e.waits.Close()
	if e.stop != nil {
		e.stop()
	}
	e.jwt.jwks.close()
	e.done.Wait()
	if !e.readiness.hydrated.Load() {
		return nil
	}
	var errsOut []error
	if e.cluster != nil {
		e.gossip.flush()
	}
	if err := e.pub.flushAll(ctx); err != nil {
		errsOut = append(errsOut, err)
	}
	e.keyUse.report(ctx)
	var synced struct {
		State uint64 `json:"state"`
	}
	if err := bus.Request(ctx, e.nc, bus.SyncSubject, struct{}{}, &synced); err != nil {
		if len(errsOut) > 0 {
			errsOut = append(errsOut, fmt.Errorf("engine: wait for the worker to commit: %w", err))
		} else {
			// Every batch is in the streams, which keep it until the
			// worker has committed it: nothing is lost, the worker
			// commits it when it answers again.
			e.log.Warn("the worker did not confirm it committed this server's last decisions; they wait for it in the streams", "err", err)
		}
	}
	return errors.Join(errsOut...)
}

// TenantForServiceKey returns the tenant an active service key belongs to,
// and notes the key's use (keyuse.go).
func (e *Engine) TenantForServiceKey(key string) (string, bool) {
	h := hashKeyHex(key)
	ent, ok := e.view.Load().serviceKey(&h)
	if !ok {
		return "", false
	}
	e.keyUse.note(ent)
	return ent.tenantID, true
}

// TenantSuspended reports whether the operator suspended the tenant: its
// service keys are then refused (403) although they are valid.
func (e *Engine) TenantSuspended(tenantID string) bool {
	tv := e.view.Load().tenant(tenantID)
	return tv != nil && tv.tenant.SuspendedAt != nil
}

// SessionVersion returns the session version a dashboard user's sessions
// must carry; false for a user this server does not know (deleted, or not
// yet announced) and before the config is hydrated.
func (e *Engine) SessionVersion(userID string) (int64, bool) {
	if !e.readiness.hydrated.Load() {
		return 0, false
	}
	v, ok := e.view.Load().users.get(userID)
	return v, ok
}

// OperatorTokenHash returns the stored hash of the operator token.
func (e *Engine) OperatorTokenHash() string { return e.view.Load().operatorHash }

// ConfigVersion is the config version this server has applied.
func (e *Engine) ConfigVersion() int64 { return e.view.Load().version }

// WaitVersion blocks until the server has applied config version v or ctx
// ends, so an API write can answer only once its own server enforces it.
func (e *Engine) WaitVersion(ctx context.Context, v int64) {
	for e.view.Load().version < v {
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// Cache exposes the hot cache to tests and benchmarks.
func (e *Engine) Cache() *quota.Cache { return e.cache }

// Stats are the engine's running totals, for tests and load reports.
type Stats struct {
	// StatesPublished counts bucket states acked by JetStream: the state
	// writes this server caused. Only allowed checks cause them.
	StatesPublished uint64
	// CounterRowsPublished counts analytics counter rows acked by JetStream.
	CounterRowsPublished uint64
}

// Stats returns the running totals.
func (e *Engine) Stats() Stats {
	return e.pub.stats()
}
