// Command worker runs Sluice's SQLite writer as its own process, for
// servers started with --worker=external. It connects to the same NATS
// (--nats-url, with the credentials and TLS options of docs/NATS.md), owns
// the SQLite file under --data, and applies the operator bootstrap
// (SLUICE_OPERATOR_TOKEN, SLUICE_OPERATOR_EMAIL, SLUICE_OPERATOR_PASSWORD).
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/internal/app"
	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/worker"
	"github.com/sluicehq/sluice/internal/worker/analytics"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-worker:", err)
		os.Exit(1)
	}
}

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run() error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	data := fs.String("data", env("SLUICE_DATA", "./data"), "data directory holding sluice.db (SLUICE_DATA)")
	natsURL := new(string)
	*natsURL = env("SLUICE_NATS_URL", "nats://127.0.0.1:4222")
	// A URL may hold a credential: usage shows it redacted.
	fs.Var(bus.URLFlag{URL: natsURL}, "nats-url", "NATS URL (SLUICE_NATS_URL)")
	metricsAddr := fs.String("metrics-addr", env("SLUICE_WORKER_METRICS_ADDR", ""), "serve /metrics and /healthz here; empty = off (SLUICE_WORKER_METRICS_ADDR)")
	logLevel := fs.String("log-level", env("SLUICE_LOG_LEVEL", "info"), "debug, info, warn or error (SLUICE_LOG_LEVEL)")
	logFormat := fs.String("log-format", env("SLUICE_LOG_FORMAT", app.LogFormatAuto), app.LogFormatUsage+" (SLUICE_LOG_FORMAT)")
	haDef := true
	if v := os.Getenv("SLUICE_HA"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("SLUICE_HA: %q is not true or false", v)
		}
		haDef = b
	}
	ha := fs.Bool("ha", haDef, "take part in the election of the active worker and keep the replication log for standbys: run a second worker with its own --data as a standby (SLUICE_HA)")
	leaseTTL := fs.Duration("lease-ttl", 3*time.Second, "how long the active worker's lease outlives its last renewal: a standby takes over this long after the active one dies (SLUICE_WORKER_LEASE_TTL)")
	host, _ := os.Hostname()
	name := fs.String("name", env("SLUICE_WORKER_NAME", host+"-"+strconv.Itoa(os.Getpid())), "this worker's name in logs and in the lease (SLUICE_WORKER_NAME)")
	checkConfig := fs.Bool("check-config", false, "validate flags and environment, print the result and exit")
	replicasDef := 0
	if v := os.Getenv("SLUICE_NATS_REPLICAS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("SLUICE_NATS_REPLICAS: %q is not a whole number", v)
		}
		replicasDef = n
	}
	replicas := fs.Int("nats-replicas", replicasDef, app.ReplicasUsage+" (SLUICE_NATS_REPLICAS)")
	var analytics analytics.Retention
	if err := analytics.RegisterFlags(fs, os.Getenv); err != nil {
		return err
	}
	var caps tenants.Caps
	if err := worker.RegisterCapFlags(fs, &caps, os.Getenv); err != nil {
		return err
	}
	var auth bus.Auth
	auth.RegisterFlags(fs, os.Getenv)
	streams := app.StreamLimitFlags(fs, os.Getenv)
	if v := os.Getenv("SLUICE_WORKER_LEASE_TTL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("SLUICE_WORKER_LEASE_TTL: %w", err)
		}
		*leaseTTL = d
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *leaseTTL < 500*time.Millisecond || *leaseTTL > time.Minute {
		return fmt.Errorf("--lease-ttl %s: must be between 500ms and 1m", *leaseTTL)
	}
	limits, err := streams()
	if err != nil {
		return err
	}
	if err := analytics.Validate(); err != nil {
		return err
	}
	if err := caps.Validate(); err != nil {
		return err
	}
	if err := app.ValidateReplicas(*replicas); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	log, err := app.NewLogger(os.Stderr, *logLevel, *logFormat, os.Getenv)
	if err != nil {
		return err
	}
	if *metricsAddr != "" {
		if _, _, err := net.SplitHostPort(*metricsAddr); err != nil {
			return fmt.Errorf("--metrics-addr %q: %w", *metricsAddr, err)
		}
	}
	if *natsURL == "" {
		return fmt.Errorf("--nats-url must not be empty")
	}
	if !auth.HasCredentials() {
		// Beside a server whose embedded NATS listens, with the same --data:
		// use the worker key that server made.
		if seed := filepath.Join(*data, bus.WorkerSeedName); fileExists(seed) {
			auth.NKeyFile = seed
		}
	}
	if err := auth.Validate(); err != nil {
		return err
	}
	op := worker.Operator{
		Token:    os.Getenv("SLUICE_OPERATOR_TOKEN"),
		Email:    os.Getenv("SLUICE_OPERATOR_EMAIL"),
		Password: os.Getenv("SLUICE_OPERATOR_PASSWORD"),
		Out:      os.Stdout,
	}
	if (op.Email == "") != (op.Password == "") {
		return fmt.Errorf("set both SLUICE_OPERATOR_EMAIL and SLUICE_OPERATOR_PASSWORD, or neither")
	}
	if err := worker.ValidateOperatorToken(op.Token); err != nil {
		return err
	}
	if *checkConfig {
		fmt.Println("configuration ok")
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if err := os.MkdirAll(*data, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	var rec *sqlitedb.Recorder
	var db *sql.DB
	if *ha {
		rec = &sqlitedb.Recorder{}
		db, err = sqlitedb.OpenRecorded(ctx, filepath.Join(*data, "sluice.db"), rec)
	} else {
		db, err = sqlitedb.Open(ctx, filepath.Join(*data, "sluice.db"))
	}
	if err != nil {
		return err
	}
	defer db.Close()
	nc, err := bus.Connect(*natsURL, nil, "sluice-worker", auth, log)
	if err != nil {
		return err
	}
	defer nc.Drain()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	w, err := worker.New(worker.Config{Log: log, Registerer: reg, Analytics: analytics, Caps: caps, Operator: op, Streams: limits, Replicas: *replicas,
		Recorder: rec, LeaseTTL: *leaseTTL, Name: *name}, db, nc)
	if err != nil {
		return err
	}
	if *metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"status":"ok"}`)) })
		srv := &http.Server{Addr: *metricsAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server stopped", "err", err)
			}
		}()
		defer srv.Close()
	}
	log.Info("sluice worker starting", "data", *data, "nats", bus.RedactURL(*natsURL), "nats_auth", auth.Identity(), "nats_tls", auth.TLS(), "ha", *ha, "name", *name)
	return w.Run(ctx)
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
