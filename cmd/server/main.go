// Command server runs Sluice: the check API, the dashboard, an embedded
// NATS server and the SQLite worker in one process by default. See the
// README's configuration table for flags and their SLUICE_* twins.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // calendar quotas need the zone database wherever Sluice runs

	"github.com/sluicehq/sluice/internal/app"
	"github.com/sluicehq/sluice/internal/logging"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := app.DefaultConfig()
	if err := cfg.ParseFlags("server", os.Args[1:], os.Getenv, os.Stderr); err != nil {
		return err
	}
	log, err := logging.New(os.Stderr, cfg.LogLevel, cfg.LogFormat, os.Getenv)
	if err != nil {
		return err
	}
	if cfg.CheckConfig {
		fmt.Println("configuration ok")
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	m := app.NewMain(cfg, log)
	if err := m.Run(ctx); err != nil {
		closeCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		_ = m.Close(closeCtx)
		return err
	}
	var failed error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())
	case failed = <-m.Failed():
		log.Error("stopping: this server cannot run", "err", failed)
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := m.Close(closeCtx); err != nil {
		log.Error("shutdown incomplete", "err", err)
		return errors.Join(failed, err)
	}
	if failed != nil {
		return failed
	}
	log.Info("stopped cleanly")
	return nil
}
