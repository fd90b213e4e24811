// Package app wires a Sluice server process together: the embedded or
// external NATS, the in-process worker (by default), the engine, and the
// HTTP API. cmd/server only parses flags and calls it, so tests boot the
// whole product on port 0 with a temp data dir exactly as users run it.
//
// Start order: NATS, worker, engine, HTTP. The HTTP listener opens at once
// (/healthz answers, /readyz says 503) while the engine hydrates. Stop order
// on SIGTERM is the reverse: the checks waiting for their buckets are
// answered, HTTP drains, the engine publishes everything
// pending and waits for the worker to commit it, then the worker, SQLite and
// NATS close.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/internal/api"
	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/httpsec"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/ui"
	"github.com/sluicehq/sluice/internal/worker"
	"github.com/sluicehq/sluice/internal/worker/webhook"
)

// Main is one running server process.
type Main struct {
	Config Config
	Log    *slog.Logger
	// Out receives the one-time operator token announcement.
	Out io.Writer

	ns         *server.Server
	nc         *nats.Conn
	workerNC   *nats.Conn
	worker     *worker.Worker
	stopWork   context.CancelFunc
	workDone   chan struct{}
	closeDB    func() error
	engine     *engine.Engine
	waits      *engine.Waits // checks waiting for their buckets, answered first at shutdown
	cluster    *cluster.Cluster
	http       *http.Server
	pprof      *http.Server
	metrics    *http.Server
	metricLn   net.Listener
	grpc       *grpc.Server
	grpcLn     net.Listener
	grpcCancel context.CancelFunc
	revoked    *lazyRevoker // signed-out dashboard sessions
	// Test settings: revocationWait overrides revocationsUnavailableAfter,
	// revocationHold (when not nil) keeps the sign-outs from loading until
	// it is closed, and keyUseInterval overrides the engine's default.
	revocationWait time.Duration
	revocationHold chan struct{}
	keyUseInterval time.Duration
	ln             net.Listener
	bg             sync.WaitGroup
	bgCancel       context.CancelFunc
	registry       *prometheus.Registry
	// failed receives the error that ends this server after Run returned
	// (its node name held by another live server).
	failed chan error
	// clock, a test setting, when not nil is the time the engine, the API
	// and the worker decide and count by (a test's month boundary); the
	// dashboard, NATS and the sessions keep the real time.
	clock func() time.Time
	// setupClosed is set when this server's setup offer found an operator
	// login: the setup link is dead on every server for good, and the
	// setup page says so without asking the worker (firstrun.go).
	setupClosed atomic.Bool
}

// NewMain returns a Main for cfg.
func NewMain(cfg Config, log *slog.Logger) *Main {
	return &Main{Config: cfg, Log: log, Out: os.Stdout, failed: make(chan error, 1)}
}

// Failed receives an error when the server cannot go on after Run returned:
// another live server holds its node name. The process should then stop.
func (m *Main) Failed() <-chan error { return m.failed }

func (m *Main) fail(err error) {
	select {
	case m.failed <- err:
	default:
	}
}

// Run starts every part and returns once the HTTP listener is open; the
// engine keeps hydrating in the background until /readyz turns 200.
func (m *Main) Run(ctx context.Context) error {
	cfg := m.Config
	if err := os.MkdirAll(cfg.Data, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if cfg.Node == "" {
		node, err := defaultNode(cfg.Data)
		if err != nil {
			return err
		}
		cfg.Node = node
		m.Config.Node = node
	}
	m.registry = prometheus.NewRegistry()
	m.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	url := cfg.NatsURL
	serverAuth, workerAuth := cfg.NatsAuth, cfg.NatsAuth
	if url == "" {
		ecfg := bus.EmbeddedConfig{DataDir: cfg.Data, Listen: cfg.NatsListen, Name: cfg.Node, TLSCert: cfg.NatsListenCert, TLSKey: cfg.NatsListenKey}
		if cfg.NatsListen != "" {
			// Other processes can reach this NATS: it accepts only the
			// role keys kept under --data, and this process uses them too.
			keys, err := bus.EnsureRoleKeys(cfg.Data)
			if err != nil {
				return fmt.Errorf("nats credentials: %w", err)
			}
			ecfg.Keys = &keys
			serverAuth, workerAuth = bus.Auth{NKeyFile: keys.ServerSeedFile}, bus.Auth{NKeyFile: keys.WorkerSeedFile}
			m.Log.Info("embedded nats requires credentials", "worker_nkey", keys.WorkerSeedFile, "server_nkey", keys.ServerSeedFile, "tls", cfg.NatsListenCert != "")
		}
		ns, err := bus.StartEmbedded(ecfg)
		if err != nil {
			return err
		}
		m.ns = ns
		m.Log.Info("embedded nats started", "listen", cfg.NatsListen, "store", filepath.Join(cfg.Data, "nats"))
	}
	nc, err := bus.Connect(url, m.ns, "sluice-server-"+cfg.Node, serverAuth, m.Log)
	if err != nil {
		return err
	}
	m.nc = nc

	if cfg.Worker == "embedded" {
		if err := m.startWorker(ctx, url, workerAuth); err != nil {
			return err
		}
	} else if cfg.OperatorToken != "" || cfg.OperatorEmail != "" {
		m.Log.Warn("SLUICE_OPERATOR_* are applied by the worker; with --worker=external give them to cmd/worker, this server ignores them")
	}

	jwksRoots, err := webhook.LoadRoots(cfg.Webhooks.CAFile)
	if err != nil {
		return err
	}
	m.waits = engine.NewWaits(engine.WaitConfig{})
	eng, err := engine.New(engine.Config{
		Waits:               m.waits,
		Node:                cfg.Node,
		Replicas:            cfg.NatsReplicas,
		EnvoyBytesPerSecond: int64(cfg.EnvoyBytesPerSecond),
		JWKS:                engine.JWKSOptions{AllowPrivate: cfg.JWKSAllowPrivate, RootCAs: jwksRoots},
		TenantBuckets:       cfg.TenantBuckets,
		FlushInterval:       cfg.FlushInterval,
		KeyUseInterval:      m.keyUseInterval,
		Now:                 m.clock,
		Log:                 m.Log,
		Registerer:          m.registry,
	}, nc)
	if err != nil {
		return err
	}
	m.engine = eng
	if cfg.clusterOn() {
		host, _ := os.Hostname()
		holder := fmt.Sprintf("host %s, pid %d, http %s", host, os.Getpid(), cfg.Addr)
		direct, err := cfg.clusterDirect()
		if err != nil {
			return err
		}
		cl, err := cluster.New(cluster.Config{Node: cfg.Node, Holder: holder, Replicas: cfg.NatsReplicas, Log: m.Log, Registerer: m.registry, Direct: direct,
			CustomerPlacement: true}, nc, cluster.Hooks{
			Acquired:  eng.LoadPartition,
			CanLoad:   eng.WorkerAnswers,
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
	svc := bus.NewServices(client)

	pit := httpsec.NewTarpit()
	m.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_http_refusals_held", Help: "429 answers held now for clients that keep asking past their limit."},
			func() float64 { n, _ := pit.Stats(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_http_refusals_held_total", Help: "429 answers held for clients that kept asking past their limit."},
			func() float64 { _, n := pit.Stats(); return float64(n) }))
	e := api.New(api.Config{Engine: eng, Services: svc, Gatherer: m.registry, Transport: cfg.transport(), TrustedProxies: cfg.TrustedProxies, Now: m.clock, Log: m.Log, Tarpit: pit,
		CheckJWKSURL: engine.JWKSURLChecker(cfg.JWKSAllowPrivate)})
	revoked := newLazyRevoker()
	m.revoked = revoked
	if err := ui.Register(e, ui.Deps{Engine: eng, Services: svc, DataDir: cfg.Data, SessionKey: cfg.SessionKey, Revocations: revoked, Transport: cfg.transport(), TrustedProxies: cfg.TrustedProxies, Log: m.Log, Tarpit: pit,
		SetupClosed: m.setupClosed.Load, CheckJWKSURL: engine.JWKSURLChecker(cfg.JWKSAllowPrivate)}); err != nil {
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
		// A check may wait up to engine.MaxWait for its bucket before
		// its answer is written.
		WriteTimeout:   engine.MaxWait + 15*time.Second,
		IdleTimeout:    120 * time.Second,
		MaxHeaderBytes: 64 << 10,
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
	if cfg.GRPCAddr != "" {
		if err := m.startGRPC(cfg, eng); err != nil {
			return err
		}
	}
	m.Log.Info("sluice server listening", "addr", ln.Addr().String(), "node", cfg.Node, "worker", cfg.Worker, "nats", natsDesc(cfg), "nats_auth", serverAuth.Identity(), "cluster", cfg.clusterOn())

	bgCtx, cancel := context.WithCancel(context.Background())
	m.bgCancel = cancel
	banner := make(chan struct{})
	m.bg.Go(func() {
		defer close(banner)
		m.announce(bgCtx, client, baseURL(cfg, ln.Addr()))
	})
	if cfg.Demo {
		m.bg.Go(func() {
			<-banner
			m.seedDemo(bgCtx, client, eng, baseURL(cfg, ln.Addr()))
		})
	}
	m.bg.Go(func() {
		m.bg.Go(func() {
			revoked.open(bgCtx, nc, m.Log, m.revocationsUnavailableAfter(), m.revocationHold, cfg.NatsReplicas)
		})
		// Sessions are refused until the sign-outs are loaded, so a server
		// normally loads them before it reports ready; a JetStream that
		// cannot serve them delays readiness by a few seconds only.
		select {
		case <-revoked.loaded:
		case <-time.After(5 * time.Second):
		case <-bgCtx.Done():
		}
		if err := eng.Start(bgCtx); err != nil {
			if bgCtx.Err() == nil {
				m.Log.Error("engine failed to start", "err", err)
			}
			return
		}
		if m.cluster != nil {
			if err := m.cluster.Start(bgCtx); err != nil && bgCtx.Err() == nil {
				m.Log.Error("cluster failed to start", "err", err)
				var taken *cluster.NodeTakenError
				if errors.As(err, &taken) {
					m.fail(err)
				}
				return
			}
			select {
			case err := <-m.cluster.Failed():
				m.fail(err)
			case <-bgCtx.Done():
			}
		}
	})
	return nil
}

// baseURL is the address people open: the public URL, or the listener's.
func baseURL(cfg Config, addr net.Addr) string {
	base := cfg.PublicURL
	if base == "" {
		host, port, _ := net.SplitHostPort(addr.String())
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			host = "localhost" // every address; this one works from here
		}
		base = "http://" + net.JoinHostPort(host, port)
	}
	return strings.TrimSuffix(base, "/")
}

// writeBanner tells a person where things are, in three lines: the API,
// the dashboard, and the data directory with what runs in this process.
func writeBanner(w io.Writer, cfg Config, base string) {
	data := cfg.Data
	if abs, err := filepath.Abs(data); err == nil {
		data = abs
	}
	listen := ""
	if cfg.NatsListen != "" {
		listen = "; NATS listens on " + cfg.NatsListen
	}
	var what string
	switch {
	case cfg.Worker == "embedded" && cfg.NatsURL == "":
		what = "SQLite and NATS, both embedded in this process" + listen
	case cfg.Worker == "embedded":
		what = "SQLite, embedded worker; NATS at " + bus.RedactURL(cfg.NatsURL)
	case cfg.NatsURL == "":
		what = "NATS, embedded" + listen + "; the SQLite file is cmd/worker's"
	default:
		what = "this server's node name and session key; the SQLite file is cmd/worker's, NATS at " + bus.RedactURL(cfg.NatsURL)
	}
	fmt.Fprintf(w, "\n  API        %s/v1\n  Dashboard  %s/ui\n  Data       %s (%s)\n\n", base, base, data, what)
}

func natsDesc(cfg Config) string {
	if cfg.NatsURL != "" {
		return bus.RedactURL(cfg.NatsURL)
	}
	return "embedded"
}

func (m *Main) startWorker(ctx context.Context, url string, auth bus.Auth) error {
	db, err := sqlitedb.Open(ctx, filepath.Join(m.Config.Data, "sluice.db"))
	if err != nil {
		return err
	}
	m.closeDB = db.Close
	wnc, err := bus.Connect(url, m.ns, "sluice-worker-"+m.Config.Node, auth, m.Log)
	if err != nil {
		return err
	}
	m.workerNC = wnc
	op := worker.Operator{Token: m.Config.OperatorToken, Email: m.Config.OperatorEmail, Password: m.Config.OperatorPassword, Out: m.Out}
	hooks := m.Config.Webhooks
	if hooks.KeyFile == "" {
		hooks.KeyFile = worker.WebhookKeyFile(m.Config.Data)
	}
	w, err := worker.New(worker.Config{Log: m.Log, Registerer: m.registry, Analytics: m.Config.Analytics, Caps: m.Config.Caps, Operator: op, Streams: m.Config.Streams, Replicas: m.Config.NatsReplicas,
		Webhooks: hooks, WriteLimits: m.Config.WriteLimits, Now: m.clock}, db, wnc)
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

// lazyRevoker is the dashboard's view of signed-out sessions, usable before
// JetStream is. Until the bucket is open the dashboard refuses every session
// (it fails closed: a restarted server must not accept a signed-out cookie
// because it has not read the sign-outs yet). After unavailableAfter of
// failed attempts it declares the list unavailable, so that people can sign
// in again (see ui's gate.valid), and keeps trying.
type lazyRevoker struct {
	r                atomic.Pointer[bus.SessionRevocations]
	unavailableSince atomic.Pointer[time.Time]
	loaded           chan struct{} // closed once r is set
}

func newLazyRevoker() *lazyRevoker { return &lazyRevoker{loaded: make(chan struct{})} }

// revocationsUnavailableAfter is how long a server tries to load the
// signed-out sessions before it lets new sign-ins through without them.
const revocationsUnavailableAfter = 15 * time.Second

func (l *lazyRevoker) open(ctx context.Context, nc *nats.Conn, log *slog.Logger, unavailableAfter time.Duration, hold <-chan struct{}, replicas int) {
	start := time.Now()
	var js jetstream.JetStream
	for attempt := 0; ctx.Err() == nil; attempt++ {
		var err error
		if js == nil {
			js, err = jetstream.New(nc)
		}
		if hold != nil {
			select {
			case <-hold:
			default:
				err = errors.New("held")
			}
		}
		if err == nil {
			var r *bus.SessionRevocations
			if r, err = bus.OpenSessionRevocations(ctx, js, ui.DefaultSessionTTL+time.Minute, bus.ResolveReplicas(nc, replicas), log); err == nil {
				l.r.Store(r)
				close(l.loaded)
				if l.unavailableSince.Load() != nil {
					log.Info("session revocations loaded; signed-out sessions are refused again")
				}
				return
			}
		}
		if attempt == 4 {
			log.Warn("session revocation waiting for JetStream; dashboard sessions are refused until it loads", "err", err)
		}
		if now := time.Now(); l.unavailableSince.Load() == nil && now.Sub(start) >= unavailableAfter {
			l.unavailableSince.Store(&now)
			log.Error("session revocations unavailable; sessions issued from now on are checked by session version only", "err", err)
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
		return errors.New("session revocations are not loaded")
	}
	return r.Revoke(ctx, sid, until)
}

func (l *lazyRevoker) Revoked(sid string) bool {
	r := l.r.Load()
	return r != nil && r.Revoked(sid)
}

func (l *lazyRevoker) State() (bool, time.Time) {
	if l.r.Load() != nil {
		return true, time.Time{}
	}
	if t := l.unavailableSince.Load(); t != nil {
		return false, *t
	}
	return false, time.Time{}
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

func (m *Main) revocationsUnavailableAfter() time.Duration {
	if m.revocationWait > 0 {
		return m.revocationWait
	}
	return revocationsUnavailableAfter
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
	if m.waits != nil {
		// Every waiting check is answered (denied) now, so that HTTP
		// drains at once rather than after the longest wait.
		m.waits.Close()
	}
	if m.grpc != nil {
		m.grpcCancel()
		stopGRPC(ctx, m.grpc)
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
