package worker

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/logging"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/worker/analytics"
)

// Options is everything cmd/worker is told at start: its flags, each with
// a SLUICE_* environment twin (the flag wins), and the operator bootstrap
// from the environment only. README lists them.
type Options struct {
	Data        string   // --data, SLUICE_DATA
	NatsURL     string   // --nats-url, SLUICE_NATS_URL
	NatsAuth    bus.Auth // --nats-creds, --nats-nkey, --nats-ca, --nats-cert, --nats-key, SLUICE_NATS_*
	MetricsAddr string   // --metrics-addr, SLUICE_WORKER_METRICS_ADDR; empty = off
	LogLevel    string   // --log-level, SLUICE_LOG_LEVEL
	LogFormat   string   // --log-format, SLUICE_LOG_FORMAT
	// HA (--ha, SLUICE_HA) takes part in the election of the active
	// worker and keeps the replication log for standbys.
	HA bool
	// LeaseTTL (--lease-ttl, SLUICE_WORKER_LEASE_TTL) is how long the
	// active worker's lease outlives its last renewal.
	LeaseTTL    time.Duration
	Name        string // --name, SLUICE_WORKER_NAME
	Replicas    int    // --nats-replicas, SLUICE_NATS_REPLICAS
	CheckConfig bool   // --check-config
	Analytics   analytics.Retention
	Caps        tenants.Caps
	Streams     bus.StreamLimits
	Webhooks    WebhookOptions
	WriteLimits WriteLimits // --tenant-settles-per-second and the like (writelimit.go)
	// Operator is the bootstrap from SLUICE_OPERATOR_TOKEN,
	// SLUICE_OPERATOR_EMAIL and SLUICE_OPERATOR_PASSWORD (Out unset).
	Operator Operator
}

// ParseFlags reads the worker's options from args, falling back to getenv
// for each flag that is not given, and validates them. Usage goes to out
// (for -h, and with an error about a flag); -h answers flag.ErrHelp.
//
// Without NATS credentials, a worker whose --data holds the worker key a
// server made there (bus.WorkerSeedName) uses it.
func ParseFlags(args []string, getenv func(string) string, out io.Writer) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(out)
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	ha := true
	if v := getenv("SLUICE_HA"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return o, fmt.Errorf("SLUICE_HA: %q is not true or false", v)
		}
		ha = b
	}
	replicas := 0
	if v := getenv("SLUICE_NATS_REPLICAS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return o, fmt.Errorf("SLUICE_NATS_REPLICAS: %q is not a whole number", v)
		}
		replicas = n
	}
	leaseTTL := 3 * time.Second
	if v := getenv("SLUICE_WORKER_LEASE_TTL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return o, fmt.Errorf("SLUICE_WORKER_LEASE_TTL: %w", err)
		}
		leaseTTL = d
	}
	host, _ := os.Hostname()

	fs.StringVar(&o.Data, "data", env("SLUICE_DATA", "./data"), "data directory holding sluice.db (SLUICE_DATA)")
	// A URL may hold a credential: usage shows it redacted.
	o.NatsURL = env("SLUICE_NATS_URL", "nats://127.0.0.1:4222")
	fs.Var(bus.URLFlag{URL: &o.NatsURL}, "nats-url", "NATS URL (SLUICE_NATS_URL)")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", env("SLUICE_WORKER_METRICS_ADDR", ""), "serve /metrics and /healthz here; empty = off (SLUICE_WORKER_METRICS_ADDR)")
	fs.StringVar(&o.LogLevel, "log-level", env("SLUICE_LOG_LEVEL", "info"), "debug, info, warn or error (SLUICE_LOG_LEVEL)")
	fs.StringVar(&o.LogFormat, "log-format", env("SLUICE_LOG_FORMAT", logging.FormatAuto), logging.FormatUsage+" (SLUICE_LOG_FORMAT)")
	fs.BoolVar(&o.HA, "ha", ha, "take part in the election of the active worker and keep the replication log for standbys: run a second worker with its own --data as a standby (SLUICE_HA)")
	fs.DurationVar(&o.LeaseTTL, "lease-ttl", leaseTTL, "how long the active worker's lease outlives its last renewal: a standby takes over this long after the active one dies (SLUICE_WORKER_LEASE_TTL)")
	fs.StringVar(&o.Name, "name", env("SLUICE_WORKER_NAME", host+"-"+strconv.Itoa(os.Getpid())), "this worker's name in logs and in the lease (SLUICE_WORKER_NAME)")
	fs.BoolVar(&o.CheckConfig, "check-config", false, "validate flags and environment, print the result and exit")
	fs.IntVar(&o.Replicas, "nats-replicas", replicas, bus.ReplicasUsage+" (SLUICE_NATS_REPLICAS)")
	if err := o.Analytics.RegisterFlags(fs, getenv); err != nil {
		return o, err
	}
	if err := RegisterCapFlags(fs, &o.Caps, getenv); err != nil {
		return o, err
	}
	if err := RegisterWebhookFlags(fs, &o.Webhooks, getenv); err != nil {
		return o, err
	}
	if err := RegisterWriteLimitFlags(fs, &o.WriteLimits, getenv); err != nil {
		return o, err
	}
	o.NatsAuth.RegisterFlags(fs, getenv)
	streams := StreamLimitFlags(fs, getenv)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if o.Streams, err = streams(); err != nil {
		return o, err
	}
	o.Operator = Operator{
		Token:    getenv("SLUICE_OPERATOR_TOKEN"),
		Email:    getenv("SLUICE_OPERATOR_EMAIL"),
		Password: getenv("SLUICE_OPERATOR_PASSWORD"),
	}
	o.Webhooks.KeyFile = WebhookKeyFile(o.Data)
	if !o.NatsAuth.HasCredentials() {
		// Beside a server whose embedded NATS listens, with the same --data:
		// use the worker key that server made.
		if seed := filepath.Join(o.Data, bus.WorkerSeedName); fileExists(seed) {
			o.NatsAuth.NKeyFile = seed
		}
	}
	return o, o.Validate()
}

// Validate rejects bad or contradictory options.
func (o *Options) Validate() error {
	if o.LeaseTTL < 500*time.Millisecond || o.LeaseTTL > time.Minute {
		return fmt.Errorf("--lease-ttl %s: must be between 500ms and 1m", o.LeaseTTL)
	}
	if err := o.Analytics.Validate(); err != nil {
		return err
	}
	if err := o.Caps.Validate(); err != nil {
		return err
	}
	if err := o.Webhooks.Validate(); err != nil {
		return err
	}
	if err := bus.ValidateReplicas(o.Replicas); err != nil {
		return err
	}
	if _, err := logging.ParseLevel(o.LogLevel); err != nil {
		return err
	}
	if err := logging.ValidateFormat(o.LogFormat); err != nil {
		return err
	}
	if o.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(o.MetricsAddr); err != nil {
			return fmt.Errorf("--metrics-addr %q: %w", o.MetricsAddr, err)
		}
	}
	if o.NatsURL == "" {
		return fmt.Errorf("--nats-url must not be empty")
	}
	if err := o.NatsAuth.Validate(); err != nil {
		return err
	}
	if (o.Operator.Email == "") != (o.Operator.Password == "") {
		return fmt.Errorf("set both SLUICE_OPERATOR_EMAIL and SLUICE_OPERATOR_PASSWORD, or neither")
	}
	if err := o.WriteLimits.Validate(); err != nil {
		return err
	}
	return ValidateOperatorToken(o.Operator.Token)
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
