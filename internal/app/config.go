package app

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/api"
	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/httpsec"
	"github.com/sluicehq/sluice/internal/logging"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/worker"
	"github.com/sluicehq/sluice/internal/worker/analytics"
)

// Config is everything a Sluice server process is told at start. Every
// field has a flag and a SLUICE_* environment twin; the flag wins.
type Config struct {
	Addr           string   // --addr, SLUICE_ADDR
	Data           string   // --data, SLUICE_DATA
	NatsURL        string   // --nats-url, SLUICE_NATS_URL; empty = embedded server
	NatsListen     string   // --nats-listen, SLUICE_NATS_LISTEN; embedded server's client port, empty = in-process only
	NatsListenCert string   // --nats-listen-cert, SLUICE_NATS_LISTEN_CERT: PEM certificate the embedded listener presents
	NatsListenKey  string   // --nats-listen-key, SLUICE_NATS_LISTEN_KEY: its PEM private key
	NatsAuth       bus.Auth // --nats-creds, --nats-nkey, --nats-ca, --nats-cert, --nats-key, SLUICE_NATS_USER/PASSWORD/TOKEN: for --nats-url
	Worker         string   // --worker, SLUICE_WORKER: embedded | external
	Node           string   // --node, SLUICE_NODE; empty = host name plus a suffix kept in --data (node.go)
	NatsReplicas   int      // --nats-replicas, SLUICE_NATS_REPLICAS; 0 = 1 on one NATS, the cluster's size up to 3 on a cluster
	// EnvoyBytesPerSecond (--envoy-tenant-bytes-per-second,
	// SLUICE_ENVOY_TENANT_BYTES_PER_SECOND) is each tenant's share of this
	// server's Envoy door in bytes of descriptors a second; 0 =
	// engine.DefaultEnvoyBytesPerSecond, -1 = no share.
	EnvoyBytesPerSecond int
	// TenantBuckets (--tenant-buckets, SLUICE_TENANT_BUCKETS) is the live
	// buckets a tenant may hold in this server's hot cache; new callers past
	// it share the tenant's overflow bucket. 0 =
	// engine.DefaultTenantBuckets, -1 = no bound.
	TenantBuckets int
	Cluster       string // --cluster, SLUICE_CLUSTER: auto | on | off
	// ClusterListen (--cluster-listen, SLUICE_CLUSTER_LISTEN) is where other
	// servers send forwarded checks directly; "off" = over NATS only. A
	// non-loopback address needs ClusterListenCert and ClusterListenKey
	// (--cluster-listen-cert/-key, SLUICE_CLUSTER_LISTEN_CERT/_KEY).
	ClusterListen     string
	ClusterListenCert string
	ClusterListenKey  string
	// ClusterAdvertise (--cluster-advertise, SLUICE_CLUSTER_ADVERTISE) is the
	// host:port other servers dial; empty = the address listened on.
	ClusterAdvertise string
	FlushInterval    time.Duration // --flush-interval, SLUICE_FLUSH_INTERVAL
	ShutdownTimeout  time.Duration // --shutdown-timeout, SLUICE_SHUTDOWN_TIMEOUT
	LogLevel         string        // --log-level, SLUICE_LOG_LEVEL: debug | info | warn | error
	LogFormat        string        // --log-format, SLUICE_LOG_FORMAT: auto | text | json
	PprofAddr        string        // --pprof-addr, SLUICE_PPROF_ADDR: loopback host:port for /debug/pprof; empty = off
	MetricsAddr      string        // --metrics-addr, SLUICE_METRICS_ADDR: host:port serving /metrics without a token; empty = off
	PublicURL        string        // --public-url, SLUICE_PUBLIC_URL: the URL users open; https makes cookies Secure and adds HSTS
	// GRPC is Envoy's rate limit service (internal/rls): --grpc-addr
	// (SLUICE_GRPC_ADDR; empty = off), TLS with --grpc-cert/--grpc-key,
	// mutual TLS with --grpc-client-ca, and --grpc-ratelimit-headers.
	GRPCAddr     string
	GRPCCert     string
	GRPCKey      string
	GRPCClientCA string
	GRPCHeaders  bool
	CheckConfig  bool // --check-config: validate the configuration and exit
	// Demo (--demo, never on by default and with no SLUICE_* twin) makes
	// the demo tenant with generated traffic at start (internal/demo).
	Demo bool
	// TrustedProxies (--trusted-proxies, SLUICE_TRUSTED_PROXIES) are the
	// reverse proxies whose X-Forwarded-For /v1/forward-auth and the
	// dashboard's sign-in limiter believe.
	TrustedProxies []netip.Prefix
	// Analytics retention of the embedded worker: --analytics-minutes,
	// --analytics-hours, --analytics-days, --analytics-top-k (SLUICE_ANALYTICS_*).
	Analytics analytics.Retention
	// Streams bounds the state and counter streams when this process runs
	// the worker: --stream-max-bytes, --stream-max-age (streams.go).
	Streams bus.StreamLimits
	// Caps bounds what one tenant may hold, enforced by the embedded
	// worker: --tenant-max-policies, --tenant-max-limits-per-policy,
	// --tenant-max-consumer-keys, --tenant-max-service-keys,
	// --tenant-max-blocks, --tenant-max-members,
	// --tenant-max-open-reservations, --tenant-max-customers
	// (SLUICE_TENANT_MAX_*).
	Caps tenants.Caps
	// Webhooks tunes the embedded worker's webhook delivery:
	// --webhook-allow-private, --webhook-ca-file, --webhook-timeout,
	// --webhook-slots, --webhook-tenant-slots (SLUICE_WEBHOOK_*). Its KeyFile, when empty, is webhook.key in Data.
	Webhooks worker.WebhookOptions
	// JWKSAllowPrivate (--jwks-allow-private, SLUICE_JWKS_ALLOW_PRIVATE)
	// lets JWT issuers' jwks_url point at loopback, private and
	// link-local addresses on any port (development, tests). Fetches
	// trust --webhook-ca-file's authorities too, beside the system's.
	JWKSAllowPrivate bool
	// WriteLimits bounds each tenant's settles, reservations and config
	// writes across the cluster, enforced by the worker:
	// --tenant-settles-per-second, --tenant-reserves-per-second,
	// --tenant-config-writes-per-second, --tenant-write-burst-seconds
	// (SLUICE_TENANT_*).
	WriteLimits worker.WriteLimits

	// Operator bootstrap, from the environment only (secrets stay out of
	// process listings).
	OperatorToken    string // SLUICE_OPERATOR_TOKEN
	OperatorEmail    string // SLUICE_OPERATOR_EMAIL
	OperatorPassword string // SLUICE_OPERATOR_PASSWORD
	// SessionKey signs dashboard sessions (SLUICE_SESSION_KEY, 64 hex
	// characters). Servers behind one load balancer must share it; when it
	// is unset each server keeps its own in <data>/session.key.
	SessionKey []byte
}

// DefaultConfig is what `go run ./cmd/server` runs with.
func DefaultConfig() Config {
	return Config{
		Addr:            "127.0.0.1:8080",
		Data:            "./data",
		Worker:          "embedded",
		Cluster:         "auto",
		ClusterListen:   "127.0.0.1:0",
		FlushInterval:   200 * time.Millisecond,
		ShutdownTimeout: 15 * time.Second,
		LogLevel:        "info",
		LogFormat:       logging.FormatAuto,
	}
}

// ParseFlags fills c from args, falling back to getenv for each flag that
// is not given. Unknown flags and bad values are errors.
func (c *Config) ParseFlags(name string, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	envDur := func(k string, def time.Duration) (time.Duration, error) {
		v := getenv(k)
		if v == "" {
			return def, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", k, err)
		}
		return d, nil
	}
	flush, err := envDur("SLUICE_FLUSH_INTERVAL", c.FlushInterval)
	if err != nil {
		return err
	}
	shutdown, err := envDur("SLUICE_SHUTDOWN_TIMEOUT", c.ShutdownTimeout)
	if err != nil {
		return err
	}
	fs.StringVar(&c.Addr, "addr", env("SLUICE_ADDR", c.Addr), "HTTP listen address (SLUICE_ADDR)")
	fs.StringVar(&c.Data, "data", env("SLUICE_DATA", c.Data), "data directory for SQLite and embedded NATS (SLUICE_DATA)")
	// A URL may hold a credential: usage shows it redacted.
	c.NatsURL = env("SLUICE_NATS_URL", c.NatsURL)
	fs.Var(bus.URLFlag{URL: &c.NatsURL}, "nats-url", "external NATS URL; empty runs an embedded NATS server (SLUICE_NATS_URL)")
	fs.StringVar(&c.NatsListen, "nats-listen", env("SLUICE_NATS_LISTEN", c.NatsListen), "host:port where the embedded NATS server accepts other processes; empty = in-process only (SLUICE_NATS_LISTEN)")
	fs.StringVar(&c.NatsListenCert, "nats-listen-cert", env("SLUICE_NATS_LISTEN_CERT", c.NatsListenCert), "PEM certificate for the embedded NATS listener; required when --nats-listen is not loopback (SLUICE_NATS_LISTEN_CERT)")
	fs.StringVar(&c.NatsListenKey, "nats-listen-key", env("SLUICE_NATS_LISTEN_KEY", c.NatsListenKey), "PEM private key of --nats-listen-cert (SLUICE_NATS_LISTEN_KEY)")
	c.NatsAuth.RegisterFlags(fs, getenv)
	fs.StringVar(&c.Worker, "worker", env("SLUICE_WORKER", c.Worker), "embedded: run the SQLite worker in this process; external: a cmd/worker process does (SLUICE_WORKER)")
	fs.StringVar(&c.Cluster, "cluster", env("SLUICE_CLUSTER", c.Cluster), "auto: share bucket ownership with other servers when --nats-url is set; on; off (SLUICE_CLUSTER)")
	fs.StringVar(&c.ClusterListen, "cluster-listen", env("SLUICE_CLUSTER_LISTEN", c.ClusterListen), "host:port where other servers of the cluster send forwarded checks directly (authenticated; NATS is the fallback); off = forward over NATS only; not loopback needs --cluster-listen-cert (SLUICE_CLUSTER_LISTEN)")
	fs.StringVar(&c.ClusterListenCert, "cluster-listen-cert", env("SLUICE_CLUSTER_LISTEN_CERT", c.ClusterListenCert), "PEM certificate for --cluster-listen; required when it is not loopback (SLUICE_CLUSTER_LISTEN_CERT)")
	fs.StringVar(&c.ClusterListenKey, "cluster-listen-key", env("SLUICE_CLUSTER_LISTEN_KEY", c.ClusterListenKey), "PEM private key of --cluster-listen-cert (SLUICE_CLUSTER_LISTEN_KEY)")
	fs.StringVar(&c.ClusterAdvertise, "cluster-advertise", env("SLUICE_CLUSTER_ADVERTISE", c.ClusterAdvertise), "host:port other servers dial to reach --cluster-listen; empty = the address listened on (SLUICE_CLUSTER_ADVERTISE)")
	fs.StringVar(&c.Node, "node", env("SLUICE_NODE", c.Node), "this server's name in logs and NATS, unique in the cluster; empty = host name plus a suffix kept in --data (SLUICE_NODE)")
	replicas, err := envInt(getenv, "SLUICE_NATS_REPLICAS", c.NatsReplicas)
	if err != nil {
		return err
	}
	fs.IntVar(&c.NatsReplicas, "nats-replicas", replicas, bus.ReplicasUsage+" (SLUICE_NATS_REPLICAS)")
	envoyShare, err := envInt(getenv, "SLUICE_ENVOY_TENANT_BYTES_PER_SECOND", c.EnvoyBytesPerSecond)
	if err != nil {
		return err
	}
	fs.IntVar(&c.EnvoyBytesPerSecond, "envoy-tenant-bytes-per-second", envoyShare, "each tenant's share of this server's Envoy door, in bytes of descriptors a second; 0 = 8 MiB, -1 = no share (SLUICE_ENVOY_TENANT_BYTES_PER_SECOND)")
	tenantBuckets, err := envInt(getenv, "SLUICE_TENANT_BUCKETS", c.TenantBuckets)
	if err != nil {
		return err
	}
	fs.IntVar(&c.TenantBuckets, "tenant-buckets", tenantBuckets, "the live buckets a tenant may hold in this server's memory; new callers past it share one overflow bucket per policy and tier; 0 = 250000 (about 46 MiB), -1 = no bound (SLUICE_TENANT_BUCKETS)")
	fs.DurationVar(&c.FlushInterval, "flush-interval", flush, "how often allowed decisions' bucket state is published; bounds what kill -9 loses (SLUICE_FLUSH_INTERVAL)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", shutdown, "how long SIGTERM may take to drain and flush (SLUICE_SHUTDOWN_TIMEOUT)")
	fs.StringVar(&c.LogLevel, "log-level", env("SLUICE_LOG_LEVEL", c.LogLevel), "debug, info, warn or error (SLUICE_LOG_LEVEL)")
	fs.StringVar(&c.LogFormat, "log-format", env("SLUICE_LOG_FORMAT", c.LogFormat), logging.FormatUsage+" (SLUICE_LOG_FORMAT)")
	fs.StringVar(&c.PprofAddr, "pprof-addr", env("SLUICE_PPROF_ADDR", c.PprofAddr), "loopback host:port serving /debug/pprof for profiling; empty = off (SLUICE_PPROF_ADDR)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", env("SLUICE_METRICS_ADDR", c.MetricsAddr), "host:port serving /metrics (and /healthz) without the operator token, for a scraper on a private network; empty = off (SLUICE_METRICS_ADDR)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", env("SLUICE_GRPC_ADDR", c.GRPCAddr), "host:port serving Envoy's rate limit service (envoy.service.ratelimit.v3) over gRPC, e.g. 127.0.0.1:8081; empty = off (SLUICE_GRPC_ADDR)")
	fs.StringVar(&c.GRPCCert, "grpc-cert", env("SLUICE_GRPC_CERT", c.GRPCCert), "PEM certificate for TLS on --grpc-addr (SLUICE_GRPC_CERT)")
	fs.StringVar(&c.GRPCKey, "grpc-key", env("SLUICE_GRPC_KEY", c.GRPCKey), "PEM private key for TLS on --grpc-addr (SLUICE_GRPC_KEY)")
	fs.StringVar(&c.GRPCClientCA, "grpc-client-ca", env("SLUICE_GRPC_CLIENT_CA", c.GRPCClientCA), "PEM CA bundle: --grpc-addr then requires client certificates it signed (mutual TLS) (SLUICE_GRPC_CLIENT_CA)")
	fs.BoolVar(&c.JWKSAllowPrivate, "jwks-allow-private", env("SLUICE_JWKS_ALLOW_PRIVATE", "") == "true", "let JWT issuers' jwks_url point at loopback, private and link-local addresses on any port; off, they are refused when stored and when connecting (SLUICE_JWKS_ALLOW_PRIVATE=true)")
	grpcHeaders := env("SLUICE_GRPC_RATELIMIT_HEADERS", "") == "true"
	fs.BoolVar(&c.GRPCHeaders, "grpc-ratelimit-headers", grpcHeaders, "answer ShouldRateLimit with RateLimit-Policy, RateLimit and X-RateLimit-* response headers for Envoy to add (SLUICE_GRPC_RATELIMIT_HEADERS=true)")
	fs.StringVar(&c.PublicURL, "public-url", env("SLUICE_PUBLIC_URL", c.PublicURL), "the URL users open, e.g. https://sluice.example.com behind a TLS proxy: https makes dashboard cookies Secure and adds HSTS (SLUICE_PUBLIC_URL)")
	proxies := env("SLUICE_TRUSTED_PROXIES", "")
	fs.StringVar(&proxies, "trusted-proxies", proxies, "comma-separated addresses or CIDR prefixes of reverse proxies whose X-Forwarded-For /v1/forward-auth and the dashboard's sign-in limiter believe; empty = the peer is the client (SLUICE_TRUSTED_PROXIES)")
	fs.BoolVar(&c.CheckConfig, "check-config", false, "validate flags and environment, print the result and exit")
	fs.BoolVar(&c.Demo, "demo", false, "make a demo tenant with policies, keys and fifteen minutes of generated traffic, replacing an earlier one, and print its sign-in")
	if err := c.Analytics.RegisterFlags(fs, getenv); err != nil {
		return err
	}
	if err := worker.RegisterCapFlags(fs, &c.Caps, getenv); err != nil {
		return err
	}
	if err := worker.RegisterWebhookFlags(fs, &c.Webhooks, getenv); err != nil {
		return err
	}
	if err := worker.RegisterWriteLimitFlags(fs, &c.WriteLimits, getenv); err != nil {
		return err
	}
	streams := worker.StreamLimitFlags(fs, getenv)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.Streams, err = streams(); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	tp, err := api.ParseTrustedProxies(proxies)
	if err != nil {
		return fmt.Errorf("--trusted-proxies: %w", err)
	}
	c.TrustedProxies = tp
	c.OperatorToken = getenv("SLUICE_OPERATOR_TOKEN")
	c.OperatorEmail = getenv("SLUICE_OPERATOR_EMAIL")
	c.OperatorPassword = getenv("SLUICE_OPERATOR_PASSWORD")
	if v := getenv("SLUICE_SESSION_KEY"); v != "" {
		k, err := hex.DecodeString(v)
		if err != nil || len(k) != 32 {
			return fmt.Errorf("SLUICE_SESSION_KEY must be 64 hex characters (32 random bytes), e.g. from: openssl rand -hex 32")
		}
		c.SessionKey = k
	}
	return c.Validate()
}

// Validate rejects contradictory settings.
func (c *Config) Validate() error {
	if c.Worker != "embedded" && c.Worker != "external" {
		return fmt.Errorf("--worker must be embedded or external, not %q", c.Worker)
	}
	if c.Cluster != "auto" && c.Cluster != "on" && c.Cluster != "off" {
		return fmt.Errorf("--cluster must be auto, on or off, not %q", c.Cluster)
	}
	if c.Worker == "external" && c.NatsURL == "" && c.NatsListen == "" {
		return fmt.Errorf("--worker=external needs a NATS the worker can reach: set --nats-url, or --nats-listen for the embedded server")
	}
	if err := c.validateNATS(); err != nil {
		return err
	}
	if err := c.validateClusterListen(); err != nil {
		return err
	}
	if err := logging.ValidateFormat(c.LogFormat); err != nil {
		return err
	}
	if c.FlushInterval < 10*time.Millisecond || c.FlushInterval > time.Minute {
		return fmt.Errorf("--flush-interval must be between 10ms and 1m, not %s", c.FlushInterval)
	}
	if c.PprofAddr != "" {
		host, _, err := net.SplitHostPort(c.PprofAddr)
		if ip := net.ParseIP(host); err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
			return fmt.Errorf("--pprof-addr %q: must be a loopback host:port such as 127.0.0.1:6060 (profiles reveal internals)", c.PprofAddr)
		}
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return fmt.Errorf("--metrics-addr %q: must be host:port such as 127.0.0.1:9090", c.MetricsAddr)
		}
	}
	if err := c.validateGRPC(); err != nil {
		return err
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--public-url %q: must be an absolute http or https URL such as https://sluice.example.com", c.PublicURL)
		}
	}
	if c.Data == "" {
		return fmt.Errorf("--data must not be empty")
	}
	if err := c.Analytics.Validate(); err != nil {
		return err
	}
	if err := c.Caps.Validate(); err != nil {
		return err
	}
	if err := c.Webhooks.Validate(); err != nil {
		return err
	}
	if err := c.WriteLimits.Validate(); err != nil {
		return err
	}
	if err := bus.ValidateReplicas(c.NatsReplicas); err != nil {
		return err
	}
	for _, r := range c.Node {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("--node %q: use letters, digits, - and _ only", c.Node)
		}
	}
	if (c.OperatorEmail == "") != (c.OperatorPassword == "") {
		return fmt.Errorf("set both SLUICE_OPERATOR_EMAIL and SLUICE_OPERATOR_PASSWORD, or neither")
	}
	if c.Worker == "embedded" {
		if err := worker.ValidateOperatorToken(c.OperatorToken); err != nil {
			return err
		}
	}
	return nil
}

// validateNATS checks the NATS options: an embedded listener other
// machines can reach must use TLS, and every file named must be readable.
func (c *Config) validateNATS() error {
	if c.NatsURL == "" && (c.NatsAuth.HasCredentials() || c.NatsAuth.TLS()) {
		return fmt.Errorf("NATS credentials and TLS options are for --nats-url; the embedded NATS makes its own credentials under --data")
	}
	if c.NatsURL != "" && (c.NatsListen != "" || c.NatsListenCert != "") {
		return fmt.Errorf("--nats-listen and --nats-listen-cert are for the embedded NATS; with --nats-url configure that NATS instead")
	}
	if (c.NatsListenCert == "") != (c.NatsListenKey == "") {
		return fmt.Errorf("set both --nats-listen-cert and --nats-listen-key, or neither")
	}
	if c.NatsListenCert != "" {
		if c.NatsListen == "" {
			return fmt.Errorf("--nats-listen-cert needs --nats-listen")
		}
		if _, err := tls.LoadX509KeyPair(c.NatsListenCert, c.NatsListenKey); err != nil {
			return fmt.Errorf("--nats-listen-cert/--nats-listen-key: %w", err)
		}
	}
	if c.NatsListen != "" {
		if _, _, err := net.SplitHostPort(c.NatsListen); err != nil {
			return fmt.Errorf("--nats-listen %q: %w", c.NatsListen, err)
		}
		if !bus.LoopbackListen(c.NatsListen) && c.NatsListenCert == "" {
			return fmt.Errorf("--nats-listen %s is not a loopback address: other machines would reach NATS without TLS; set --nats-listen-cert and --nats-listen-key, or listen on 127.0.0.1", c.NatsListen)
		}
	}
	return c.NatsAuth.Validate()
}

// validateClusterListen applies the NATS listener's rule to the direct
// forwarding listener: loopback, or TLS.
func (c *Config) validateClusterListen() error {
	if (c.ClusterListenCert == "") != (c.ClusterListenKey == "") {
		return fmt.Errorf("set both --cluster-listen-cert and --cluster-listen-key, or neither")
	}
	if c.ClusterListen == "off" {
		if c.ClusterListenCert != "" || c.ClusterAdvertise != "" {
			return fmt.Errorf("--cluster-listen-cert and --cluster-advertise need --cluster-listen, which is off")
		}
		return nil
	}
	host, _, err := net.SplitHostPort(c.ClusterListen)
	if err != nil {
		return fmt.Errorf("--cluster-listen %q: must be host:port such as 127.0.0.1:7422, or off", c.ClusterListen)
	}
	if c.ClusterListenCert != "" {
		if _, err := tls.LoadX509KeyPair(c.ClusterListenCert, c.ClusterListenKey); err != nil {
			return fmt.Errorf("--cluster-listen-cert/--cluster-listen-key: %w", err)
		}
	} else if !bus.LoopbackListen(c.ClusterListen) {
		return fmt.Errorf("--cluster-listen %s is not a loopback address: other machines would reach it without TLS; set --cluster-listen-cert and --cluster-listen-key, or listen on 127.0.0.1", c.ClusterListen)
	}
	if c.ClusterAdvertise != "" {
		ah, _, err := net.SplitHostPort(c.ClusterAdvertise)
		if err != nil || ah == "" || net.ParseIP(ah).IsUnspecified() {
			return fmt.Errorf("--cluster-advertise %q: must be the host:port other servers dial, such as 10.0.0.5:7422", c.ClusterAdvertise)
		}
	} else if ip := net.ParseIP(host); host == "" || ip.IsUnspecified() {
		return fmt.Errorf("--cluster-listen %s listens on every address: set --cluster-advertise to the host:port other servers dial", c.ClusterListen)
	}
	return nil
}

// clusterDirect is the direct forwarding listener's configuration, nil
// when it is off.
func (c *Config) clusterDirect() (*cluster.DirectConfig, error) {
	if c.ClusterListen == "off" {
		return nil, nil
	}
	host, _ := os.Hostname()
	d := &cluster.DirectConfig{Listen: c.ClusterListen, Advertise: c.ClusterAdvertise, Host: host}
	if c.ClusterListenCert != "" {
		cert, err := tls.LoadX509KeyPair(c.ClusterListenCert, c.ClusterListenKey)
		if err != nil {
			return nil, fmt.Errorf("--cluster-listen-cert/--cluster-listen-key: %w", err)
		}
		d.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	}
	return d, nil
}

// envInt reads an integer environment variable, def when unset.
func envInt(getenv func(string) string, k string, def int) (int, error) {
	v := getenv(k)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a whole number", k, v)
	}
	return n, nil
}

// sanitizeNode turns a host name into a valid node name.
func sanitizeNode(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '-'
		}
	}
	if len(b) == 0 {
		return "server"
	}
	return string(b)
}

// transport is how clients reach this server, for HSTS and Secure cookies.
func (c *Config) transport() httpsec.Transport {
	u, err := url.Parse(c.PublicURL)
	return httpsec.Transport{PublicHTTPS: err == nil && u.Scheme == "https"}
}

// clusterOn reports whether this server shares bucket ownership: always
// with --cluster=on, with an external NATS under auto (where other servers
// may be), never with --cluster=off.
func (c *Config) clusterOn() bool {
	return c.Cluster == "on" || (c.Cluster == "auto" && c.NatsURL != "")
}

// validateGRPC checks the gRPC listener's flags: an address, and TLS
// files that load. A listener without TLS is allowed anywhere, as the
// HTTP one is: every call must carry a tenant's service key.
func (c *Config) validateGRPC() error {
	if c.GRPCAddr == "" {
		if c.GRPCCert != "" || c.GRPCKey != "" || c.GRPCClientCA != "" {
			return fmt.Errorf("--grpc-cert, --grpc-key and --grpc-client-ca need --grpc-addr")
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
		return fmt.Errorf("--grpc-addr %q: must be host:port such as 127.0.0.1:8081", c.GRPCAddr)
	}
	if (c.GRPCCert == "") != (c.GRPCKey == "") {
		return fmt.Errorf("set both --grpc-cert and --grpc-key, or neither")
	}
	if c.GRPCClientCA != "" && c.GRPCCert == "" {
		return fmt.Errorf("--grpc-client-ca needs --grpc-cert and --grpc-key: mutual TLS is TLS")
	}
	_, err := c.grpcTLS()
	return err
}

// grpcTLS is the gRPC listener's TLS configuration, nil without TLS.
func (c *Config) grpcTLS() (*tls.Config, error) {
	if c.GRPCCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.GRPCCert, c.GRPCKey)
	if err != nil {
		return nil, fmt.Errorf("--grpc-cert/--grpc-key: %w", err)
	}
	t := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if c.GRPCClientCA != "" {
		pem, err := os.ReadFile(c.GRPCClientCA)
		if err != nil {
			return nil, fmt.Errorf("--grpc-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--grpc-client-ca %s: no PEM certificate in it", c.GRPCClientCA)
		}
		t.ClientCAs, t.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return t, nil
}
