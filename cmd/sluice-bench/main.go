// Command sluice-bench loads a Sluice server's check endpoints over
// loopback and prints a table anyone can rerun:
//
//	go run ./cmd/sluice-bench -key sk_… -workers 32 -duration 10s -floor
//
// "sluice-bench restart" measures restarts with millions of persisted
// buckets instead (restart.go); "sluice-bench worker" whether the SQLite
// worker keeps up with a flood of new callers (workerbench.go); "sluice-bench
// tenants" whether a tenant of 10 000 policies and a million keys slows
// another tenant's key revocations down (tenantsbench.go); "sluice-bench
// rls" Envoy's ShouldRateLimit on Sluice and on the reference server (rls.go);
// "sluice-bench webhooks" whether webhook delivery keeps up with 1 000
// quota threshold events/s without slowing checks (webhookbench.go).
//
// With -flood N it instead starts a server of its own and measures what N
// distinct denied callers cost on disk (see flood.go).
//
// It speaks raw HTTP (not the SDK) so that the numbers are the server's.
// With -floor it also runs the same load against a bare Echo JSON handler
// it starts in-process, which decodes a check and encodes an answer and
// does nothing else: the ratio to that floor is what Sluice's own work costs.
//
// Closed loop (-rate 0) runs each worker as fast as answers come back.
// Open loop (-rate R) sends R requests per second on schedule; latency is
// measured from when a request was due, so a server that falls behind
// shows it in the percentiles instead of hiding it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// Config is what one run does.
type Config struct {
	URL        string
	Key        string
	Workers    int
	Duration   time.Duration
	Mode       string // "check" or "batch"
	BatchSize  int
	Identities int // 0: one hot IP; K: uniformly random among K IPs
	Path       string
	Floor      bool
	Rate       float64 // requests per second; 0 = closed loop
	// Flood, when set, runs the flood scenario instead (flood.go): this
	// many distinct denied IPs against a server started in this process.
	Flood     int
	FloodTime time.Duration // bounds the flood's sending
	FloodData string        // where the flood's server keeps its data; empty = a temporary directory
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "sluice-bench:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// parseFlags fills a Config from args, with SLUICE_URL and
// SLUICE_SERVICE_KEY as fallbacks for -url and -key.
func parseFlags(args []string, stderr io.Writer) (Config, error) {
	var cfg Config
	fs := flag.NewFlagSet("sluice-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.URL, "url", envOr("SLUICE_URL", "http://127.0.0.1:8080"), "Sluice base URL (loopback only); several, comma-separated, to load a cluster round-robin [SLUICE_URL]")
	fs.StringVar(&cfg.Key, "key", os.Getenv("SLUICE_SERVICE_KEY"), "service key sk_… [SLUICE_SERVICE_KEY]")
	fs.IntVar(&cfg.Workers, "workers", 16, "concurrent keep-alive clients")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long each target is loaded")
	fs.StringVar(&cfg.Mode, "mode", "check", "check (POST /v1/check) or batch (POST /v1/check/batch)")
	fs.IntVar(&cfg.BatchSize, "batch-size", 100, "checks per batch request (1-1000)")
	fs.IntVar(&cfg.Identities, "identities", 0, "0: every check from one hot IP; K: a random IP among K")
	fs.StringVar(&cfg.Path, "path", "/api/example?mode=heavy", "request target the checks carry")
	fs.BoolVar(&cfg.Floor, "floor", false, "also load a bare in-process Echo JSON handler and compare")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open-loop target in requests/s (0: closed loop, as fast as possible)")
	fs.IntVar(&cfg.Flood, "flood", 0, "run the flood scenario instead: start a server here and send this many distinct denied IPs (at most 10000000)")
	fs.DurationVar(&cfg.FloodTime, "flood-time", time.Minute, "the flood's sending stops after this long, sent or not")
	fs.StringVar(&cfg.FloodData, "flood-data", "", "data directory of the flood's server (kept); empty = a temporary one, removed")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	switch {
	case cfg.Workers < 1:
		return cfg, errors.New("-workers must be at least 1")
	case cfg.Duration <= 0 || cfg.Duration > time.Hour:
		return cfg, errors.New("-duration must be between 0 and 1h")
	case cfg.Mode != "check" && cfg.Mode != "batch":
		return cfg, fmt.Errorf("-mode %q: want check or batch", cfg.Mode)
	case cfg.BatchSize < 1 || cfg.BatchSize > 1000:
		return cfg, errors.New("-batch-size must be between 1 and 1000")
	case cfg.Identities < 0:
		return cfg, errors.New("-identities must not be negative")
	case cfg.Rate < 0:
		return cfg, errors.New("-rate must not be negative")
	case cfg.Flood < 0 || cfg.Flood > 10_000_000:
		return cfg, errors.New("-flood must be between 0 and 10000000")
	case cfg.FloodTime <= 0 || cfg.FloodTime > 10*time.Minute:
		return cfg, errors.New("-flood-time must be between 0 and 10m")
	}
	for _, u := range strings.Split(cfg.URL, ",") {
		if err := checkLoopback(u); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// checkLoopback refuses targets off this machine: a load test pointed at
// a shared server by mistake is an outage.
func checkLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("-url %q is not an http(s) URL", raw)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("-url %q is not a loopback address", raw)
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "restart" {
		return runRestart(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "worker" {
		return runWorkerBench(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "tenants" {
		return runTenantsBench(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "webhooks" {
		return runWebhookBench(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "rls" {
		return runRLS(ctx, args[1:], stdout)
	}
	cfg, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	if cfg.Flood > 0 {
		return runFlood(ctx, cfg, stdout)
	}
	loop := "closed loop"
	if cfg.Rate > 0 {
		loop = fmt.Sprintf("open loop at %g req/s", cfg.Rate)
	}
	batch := ""
	if cfg.Mode == "batch" {
		batch = fmt.Sprintf(" of %d", cfg.BatchSize)
	}
	ids := "one hot IP"
	if cfg.Identities > 0 {
		ids = fmt.Sprintf("%d random IPs", cfg.Identities)
	}
	fmt.Fprintf(stdout, "mode %s%s, %d workers, %s, %v per target, %s, path %s\n\n",
		cfg.Mode, batch, cfg.Workers, loop, cfg.Duration, ids, cfg.Path)

	var results []Result
	if cfg.Floor {
		floor, err := startFloor()
		if err != nil {
			return fmt.Errorf("starting the floor server: %w", err)
		}
		r := Load(ctx, cfg, "floor (echo)", floor.URL, "")
		floor.Close()
		results = append(results, r)
	}
	if ctx.Err() == nil {
		results = append(results, Load(ctx, cfg, "sluice", cfg.URL, cfg.Key))
	}
	printTable(stdout, results)
	return nil
}
