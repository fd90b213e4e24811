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
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
	_ "time/tzdata" // calendar quotas need the zone database wherever Sluice runs

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/logging"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/worker"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-worker:", err)
		os.Exit(1)
	}
}

func run() error {
	o, err := worker.ParseFlags(os.Args[1:], os.Getenv, os.Stderr)
	if err != nil {
		return err
	}
	log, err := logging.New(os.Stderr, o.LogLevel, o.LogFormat, os.Getenv)
	if err != nil {
		return err
	}
	if o.CheckConfig {
		fmt.Println("configuration ok")
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if err := os.MkdirAll(o.Data, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	var rec *sqlitedb.Recorder
	var db *sql.DB
	if o.HA {
		rec = &sqlitedb.Recorder{}
		db, err = sqlitedb.OpenRecorded(ctx, filepath.Join(o.Data, "sluice.db"), rec)
	} else {
		db, err = sqlitedb.Open(ctx, filepath.Join(o.Data, "sluice.db"))
	}
	if err != nil {
		return err
	}
	defer db.Close()
	nc, err := bus.Connect(o.NatsURL, nil, "sluice-worker", o.NatsAuth, log)
	if err != nil {
		return err
	}
	defer nc.Drain()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	op := o.Operator
	op.Out = os.Stdout
	w, err := worker.New(worker.Config{Log: log, Registerer: reg, Analytics: o.Analytics, Caps: o.Caps, Operator: op, Streams: o.Streams, Replicas: o.Replicas,
		Recorder: rec, LeaseTTL: o.LeaseTTL, Name: o.Name, Webhooks: o.Webhooks, WriteLimits: o.WriteLimits}, db, nc)
	if err != nil {
		return err
	}
	if o.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"status":"ok"}`)) })
		srv := &http.Server{Addr: o.MetricsAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server stopped", "err", err)
			}
		}()
		defer srv.Close()
	}
	log.Info("sluice worker starting", "data", o.Data, "nats", bus.RedactURL(o.NatsURL), "nats_auth", o.NatsAuth.Identity(), "nats_tls", o.NatsAuth.TLS(), "ha", o.HA, "name", o.Name)
	return w.Run(ctx)
}
