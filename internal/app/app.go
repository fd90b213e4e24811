// Package app wires a Sluice server process together: the embedded or
// external NATS, the in-process worker (by default), the engine, and the
// HTTP API. cmd/server only parses flags and calls it, so tests boot the
// whole product on port 0 with a temp data dir exactly as users run it.
//
// Start order: NATS, worker, engine, HTTP. The HTTP listener opens at once
// (/healthz answers, /readyz says 503) while the engine hydrates. Stop order
// on SIGTERM is the reverse: HTTP drains, the engine publishes everything
// pending and waits for the worker to commit it, then the worker, SQLite and
// NATS close.
package app

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/internal/api"
	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui"
	"github.com/sluicehq/sluice/internal/worker"
)

// Main is one running server process.
type Main struct {
	Config Config
	Log    *slog.Logger
	// Out receives the one-time operator token announcement.
	Out io.Writer

	ns       *server.Server
	nc       *nats.Conn
	workerNC *nats.Conn
	worker   *worker.Worker
	stopWork context.CancelFunc
	workDone chan struct{}
	closeDB  func() error
	engine   *engine.Engine
	cluster  *cluster.Cluster
	http     *http.Server
	pprof    *http.Server
	metrics  *http.Server
	metricLn net.Listener
	revoked  *lazyRevoker // signed-out dashboard sessions
	ln       net.Listener
	bg       sync.WaitGroup
	bgCancel context.CancelFunc
	registry *prometheus.Registry
}

// NewMain returns a Main for cfg.
func NewMain(cfg Config, log *slog.Logger) *Main {
	return &Main{Config: cfg, Log: log, Out: os.Stdout}
}

// Run starts every part and returns once the HTTP listener is open; the
// engine keeps hydrating in the background until /readyz turns 200.
func (m *Main) Run(ctx context.Context) error {
	cfg := m.Config
	if err := os.MkdirAll(cfg.Data, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	m.registry = prometheus.NewRegistry()
	m.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	url := cfg.NatsURL
	if url == "" {
		ns, err := bus.StartEmbedded(bus.EmbeddedConfig{DataDir: cfg.Data, Listen: cfg.NatsListen, Name: cfg.Node})
		if err != nil {
			return err
		}
		m.ns = ns
		m.Log.Info("embedded nats started", "listen", cfg.NatsListen, "store", filepath.Join(cfg.Data, "nats"))
	}
	nc, err := bus.Connect(url, m.ns, "sluice-server-"+cfg.Node, m.Log)
	if err != nil {
		return err
	}
	m.nc = nc

	if cfg.Worker == "embedded" {
		if err := m.startWorker(ctx, url); err != nil {
			return err
		}
	}

	eng, err := engine.New(engine.Config{
		Node:          cfg.Node,
		FlushInterval: cfg.FlushInterval,
		Log:           m.Log,
		Registerer:    m.registry,
	}, nc)
	if err != nil {
		return err
	}
	m.engine = eng
	if cfg.clusterOn() {
		cl, err := cluster.New(cluster.Config{Node: cfg.Node, Log: m.Log, Registerer: m.registry}, nc, cluster.Hooks{
			Acquired:  eng.LoadPartition,
			Releasing: func(ctx context.Context, _ int) error { return eng.FlushAndSync(ctx) },
		})
		if err != nil {
			return err
		}
		if err := eng.SetCluster(cl); err != nil {
			return err
		}
		m.cluster = cl
	}
	client := bus.NewClient(nc, 5*time.Second)

	e := api.New(api.Config{Engine: eng, Worker: client, Gatherer: m.registry, Transport: cfg.transport(), Log: m.Log})
	revoked := &lazyRevoker{}
	m.revoked = revoked
	if err := ui.Register(e, ui.Deps{Engine: eng, Worker: client, DataDir: cfg.Data, SessionKey: cfg.SessionKey, Revocations: revoked, Transport: cfg.transport(), Log: m.Log}); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	m.ln = ln
	m.http = &http.Server{
		Handler:           e,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	go func() {
		if err := m.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.Log.Error("http server stopped", "err", err)
		}
	}()
	if cfg.PprofAddr != "" {
		if err := m.startPprof(cfg.PprofAddr); err != nil {
			return err
		}
	}
	if cfg.MetricsAddr != "" {
		if err := m.startMetrics(cfg.MetricsAddr); err != nil {
			return err
		}
	}
	m.Log.Info("sluice server listening", "addr", ln.Addr().String(), "node", cfg.Node, "worker", cfg.Worker, "nats", natsDesc(cfg), "cluster", cfg.clusterOn())

	bgCtx, cancel := context.WithCancel(context.Background())
	m.bgCancel = cancel
	m.bg.Go(func() {
		// The operator token is settled before the engine hydrates, so a
		// server that reports ready accepts it.
		m.bootstrap(bgCtx, client)
		m.bg.Go(func() { revoked.open(bgCtx, nc, m.Log) })
		if err := eng.Start(bgCtx); err != nil {
			if bgCtx.Err() == nil {
				m.Log.Error("engine failed to start", "err", err)
			}
			return
		}
		if m.cluster != nil {
			if err := m.cluster.Start(bgCtx); err != nil && bgCtx.Err() == nil {
				m.Log.Error("cluster failed to start", "err", err)
			}
		}
	})
	return nil
}

func natsDesc(cfg Config) string {
	if cfg.NatsURL != "" {
		return cfg.NatsURL
	}
	return "embedded"
}

func (m *Main) startWorker(ctx context.Context, url string) error {
	db, err := sqlitedb.Open(ctx, filepath.Join(m.Config.Data, "sluice.db"))
	if err != nil {
		return err
	}
	m.closeDB = db.Close
	wnc, err := bus.Connect(url, m.ns, "sluice-worker-"+m.Config.Node, m.Log)
	if err != nil {
		return err
	}
	m.workerNC = wnc
	w, err := worker.New(worker.Config{Log: m.Log, Registerer: m.registry, Streams: m.Config.Streams}, db, wnc)
	if err != nil {
		return err
	}
	m.worker = w
	wctx, cancel := context.WithCancel(context.Background())
	m.stopWork = cancel
	m.workDone = make(chan struct{})
	go func() {
		defer close(m.workDone)
		if err := w.Run(wctx); err != nil {
			m.Log.Error("worker stopped with error", "err", err)
		}
	}()
	return nil
}

// bootstrap makes sure an operator token exists: the configured one, or on
// a first start a generated one printed once (only its hash is stored).
func (m *Main) bootstrap(ctx context.Context, client *bus.Client) {
	cfg := m.Config
	token, generated := cfg.OperatorToken, false
	if token == "" {
		token, generated = "op_"+rand.Text(), true
	} else if err := tenants.ValidateOperatorToken(token); err != nil {
		m.Log.Error("SLUICE_OPERATOR_TOKEN rejected; operator API disabled until it is fixed", "err", err)
		return
	}
	retry(ctx, m.Log, "operator bootstrap", func() error {
		var w bus.Written[bool]
		err := client.Call(ctx, bus.OpBootstrap, bus.Bootstrap{TokenHash: tenants.HashToken(token), OnlyIfAbsent: generated}, &w)
		if err == nil && generated && w.Result {
			fmt.Fprintf(m.Out, "\nSluice operator token (shown once, store it now): %s\n\n", token)
		}
		return err
	})
	if cfg.OperatorEmail != "" {
		retry(ctx, m.Log, "operator login bootstrap", func() error {
			var u tenants.User
			return client.Call(ctx, bus.OpEnsureOperator, bus.EnsureOperator{Email: cfg.OperatorEmail, Password: cfg.OperatorPassword}, &u)
		})
	}
}

// lazyRevoker is the dashboard's view of signed-out sessions, usable before
// JetStream is: until the bucket is open nothing counts as revoked, and a
// sign-out only deletes the cookie (and says so in the log).
type lazyRevoker struct {
	r atomic.Pointer[bus.SessionRevocations]
}

func (l *lazyRevoker) open(ctx context.Context, nc *nats.Conn, log *slog.Logger) {
	js, err := jetstream.New(nc)
	if err != nil {
		log.Error("session revocation unavailable", "err", err)
		return
	}
	for attempt := 0; ctx.Err() == nil; attempt++ {
		r, err := bus.OpenSessionRevocations(ctx, js, ui.DefaultSessionTTL+time.Minute)
		if err == nil {
			l.r.Store(r)
			return
		}
		if attempt == 4 {
			log.Warn("session revocation waiting for JetStream", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (l *lazyRevoker) Revoke(ctx context.Context, sid string, until time.Time) error {
	r := l.r.Load()
	if r == nil {
		return errors.New("session revocations are not loaded yet")
	}
	return r.Revoke(ctx, sid, until)
}

func (l *lazyRevoker) Revoked(sid string) bool {
	r := l.r.Load()
	return r != nil && r.Revoked(sid)
}

func retry(ctx context.Context, log *slog.Logger, what string, fn func() error) {
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil {
			return
		}
		if code := errorCode(err); code != "unavailable" {
			log.Error(what+" failed", "err", err)
			return
		}
		if attempt == 4 {
			log.Warn(what+" waiting for the worker", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// startPprof serves the runtime profiles on their own loopback listener,
// never on the API's.
func (m *Main) startPprof(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("pprof listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	m.pprof = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go m.pprof.Serve(ln)
	m.Log.Info("pprof listening", "addr", ln.Addr().String())
	return nil
}

// startMetrics serves /metrics without a token on a listener of its own,
// for a scraper that reaches it over a private network (the API listener's
// /metrics asks for the operator token). /healthz answers there too, as on
// cmd/worker's metrics listener.
func (m *Main) startMetrics(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	m.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	m.metricLn = ln
	go func() {
		if err := m.metrics.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.Log.Error("metrics server stopped", "err", err)
		}
	}()
	m.Log.Info("metrics listening", "addr", ln.Addr().String())
	return nil
}

// MetricsAddr is the metrics listener's address, "" when it is off.
func (m *Main) MetricsAddr() string {
	if m.metricLn == nil {
		return ""
	}
	return m.metricLn.Addr().String()
}

// Addr is the HTTP listener's address (useful with --addr 127.0.0.1:0).
func (m *Main) Addr() string { return m.ln.Addr().String() }

// Engine gives tests access to the data plane.
func (m *Main) Engine() *engine.Engine { return m.engine }

// Close shuts down in reverse start order within ctx.
func (m *Main) Close(ctx context.Context) error {
	var errs []error
	if m.pprof != nil {
		_ = m.pprof.Close()
	}
	if m.metrics != nil {
		_ = m.metrics.Close()
	}
	if m.http != nil {
		if err := m.http.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
	}
	if m.bgCancel != nil {
		m.bgCancel()
		m.bg.Wait()
	}
	if m.cluster != nil {
		m.cluster.Close(ctx) // gives partitions back, flushing their state first
	}
	if m.engine != nil {
		if err := m.engine.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if m.stopWork != nil {
		m.stopWork()
		select {
		case <-m.workDone:
		case <-ctx.Done():
			errs = append(errs, errors.New("worker did not stop in time"))
		}
	}
	if m.workerNC != nil {
		_ = m.workerNC.Drain()
	}
	if m.closeDB != nil {
		if err := m.closeDB(); err != nil {
			errs = append(errs, err)
		}
	}
	if m.nc != nil {
		m.nc.Close()
	}
	if m.ns != nil {
		m.ns.Shutdown()
		m.ns.WaitForShutdown()
	}
	return errors.Join(errs...)
}
