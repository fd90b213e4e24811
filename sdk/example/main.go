// Command example is a tiny API protected by Sluice.
//
//	SLUICE_URL=http://127.0.0.1:8080 SLUICE_SERVICE_KEY=sk_… go run ./example
//	curl -i localhost:8081/api/example?mode=heavy
//
// ADDR sets the listen address (default 127.0.0.1:8081).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/sdk"
)

func main() {
	if err := run(); err != nil {
		slog.Error("example stopped", "error", err)
		os.Exit(1)
	}
}

func run() error {
	base, key := os.Getenv("SLUICE_URL"), os.Getenv("SLUICE_SERVICE_KEY")
	if base == "" || key == "" {
		return errors.New("set SLUICE_URL and SLUICE_SERVICE_KEY")
	}
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = "127.0.0.1:8081"
	}

	client := sdk.New(base, key) // fail-open, 100 ms timeout

	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/example", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"mode\":%q}\n", r.URL.Query().Get("mode"))
	})
	srv := &http.Server{Addr: addr, Handler: client.Middleware(mux), ReadHeaderTimeout: 5 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	slog.Info("listening", "addr", addr, "sluice", base)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}
