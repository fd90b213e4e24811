package worker

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/sluicehq/sluice/internal/bus"
)

// cmd/worker's flags, their SLUICE_* twins and their defaults, which
// README lists: the flag wins over the environment, bad values are
// refused naming the flag or variable, and -h lists every flag.
func TestParseFlags(t *testing.T) {
	dir := t.TempDir()
	token := "op_" + strings.Repeat("x", 40)
	for _, tc := range []struct {
		name  string
		args  []string
		env   map[string]string
		check func(o Options) bool
		err   string // "" = valid
	}{
		{"defaults", nil, nil, func(o Options) bool {
			mb, age := o.Streams.Resolved()
			return o.Data == "./data" && o.NatsURL == "nats://127.0.0.1:4222" && o.MetricsAddr == "" &&
				o.LogLevel == "info" && o.LogFormat == "auto" && o.HA && o.LeaseTTL == 3*time.Second &&
				strings.HasSuffix(o.Name, "-"+strconv.Itoa(os.Getpid())) && o.Replicas == 0 && !o.CheckConfig &&
				mb == bus.DefaultStreamMaxBytes && age == bus.DefaultStreamMaxAge &&
				o.Analytics.MinuteRows == 72*time.Hour && o.Caps.Policies == 1000 &&
				o.NatsAuth.Identity() == "none" && o.Operator == (Operator{})
		}, ""},
		{"from the environment", nil, map[string]string{
			"SLUICE_DATA": dir, "SLUICE_NATS_URL": "nats://nats:4222", "SLUICE_WORKER_METRICS_ADDR": "127.0.0.1:9091",
			"SLUICE_LOG_LEVEL": "debug", "SLUICE_LOG_FORMAT": "json", "SLUICE_HA": "false", "SLUICE_WORKER_LEASE_TTL": "10s",
			"SLUICE_WORKER_NAME": "w1", "SLUICE_NATS_REPLICAS": "3", "SLUICE_STREAM_MAX_BYTES": "2GiB", "SLUICE_STREAM_MAX_AGE": "-1",
			"SLUICE_ANALYTICS_MINUTES": "4d", "SLUICE_TENANT_MAX_POLICIES": "5", "SLUICE_NATS_TOKEN": "t",
			"SLUICE_OPERATOR_TOKEN": token, "SLUICE_OPERATOR_EMAIL": "op@example.com", "SLUICE_OPERATOR_PASSWORD": "a long enough password",
		}, func(o Options) bool {
			return o.Data == dir && o.NatsURL == "nats://nats:4222" && o.MetricsAddr == "127.0.0.1:9091" &&
				o.LogLevel == "debug" && o.LogFormat == "json" && !o.HA && o.LeaseTTL == 10*time.Second && o.Name == "w1" &&
				o.Replicas == 3 && o.Streams.MaxBytes == 2<<30 && o.Streams.MaxAge == -1 &&
				o.Analytics.MinuteRows == 96*time.Hour && o.Caps.Policies == 5 && o.NatsAuth.Token == "t" &&
				o.Operator == Operator{Token: token, Email: "op@example.com", Password: "a long enough password"}
		}, ""},
		{"flags win", []string{"--data", dir, "--nats-url", "nats://other:4222", "--metrics-addr", "127.0.0.1:9092",
			"--log-level", "warn", "--log-format", "text", "--ha=true", "--lease-ttl", "1s", "--name", "w2", "--nats-replicas", "1",
			"--stream-max-bytes", "1MiB", "--analytics-minutes", "2h", "--tenant-max-policies", "7", "--check-config"},
			map[string]string{"SLUICE_DATA": "/elsewhere", "SLUICE_NATS_URL": "nats://nats:4222", "SLUICE_WORKER_METRICS_ADDR": "127.0.0.1:9091",
				"SLUICE_LOG_LEVEL": "debug", "SLUICE_LOG_FORMAT": "json", "SLUICE_HA": "false", "SLUICE_WORKER_LEASE_TTL": "10s",
				"SLUICE_WORKER_NAME": "w1", "SLUICE_NATS_REPLICAS": "3", "SLUICE_STREAM_MAX_BYTES": "2GiB",
				"SLUICE_ANALYTICS_MINUTES": "4d", "SLUICE_TENANT_MAX_POLICIES": "5"},
			func(o Options) bool {
				return o.Data == dir && o.NatsURL == "nats://other:4222" && o.MetricsAddr == "127.0.0.1:9092" &&
					o.LogLevel == "warn" && o.LogFormat == "text" && o.HA && o.LeaseTTL == time.Second && o.Name == "w2" &&
					o.Replicas == 1 && o.Streams.MaxBytes == 1<<20 && o.Analytics.MinuteRows == 2*time.Hour &&
					o.Caps.Policies == 7 && o.CheckConfig
			}, ""},

		{"webhooks from the environment", nil, map[string]string{"SLUICE_DATA": dir, "SLUICE_WEBHOOK_ALLOW_PRIVATE": "true", "SLUICE_WEBHOOK_TIMEOUT": "3s",
			"SLUICE_WEBHOOK_KEY": strings.Repeat("ab", 32)}, func(o Options) bool {
			return o.Webhooks.AllowPrivate && o.Webhooks.Timeout == 3*time.Second && len(o.Webhooks.Key) == 32 &&
				o.Webhooks.KeyFile == filepath.Join(dir, "webhook.key")
		}, ""},
		{"webhook flags win", []string{"--webhook-allow-private=false", "--webhook-timeout", "20s"},
			map[string]string{"SLUICE_WEBHOOK_ALLOW_PRIVATE": "true", "SLUICE_WEBHOOK_TIMEOUT": "3s"}, func(o Options) bool {
				return !o.Webhooks.AllowPrivate && o.Webhooks.Timeout == 20*time.Second && o.Webhooks.Key == nil
			}, ""},
		{"webhook slots", []string{"--webhook-slots", "64"}, map[string]string{"SLUICE_WEBHOOK_SLOTS": "16", "SLUICE_WEBHOOK_TENANT_SLOTS": "4"}, func(o Options) bool {
			return o.Webhooks.Slots == 64 && o.Webhooks.TenantSlots == 4
		}, ""},
		{"webhook slots by default", nil, nil, func(o Options) bool { return o.Webhooks.Slots == 32 && o.Webhooks.TenantSlots == 8 }, ""},
		{"webhook tenant slots above the pool", []string{"--webhook-slots", "8", "--webhook-tenant-slots", "9"}, nil, nil, "--webhook-tenant-slots 9: must be between 1 and --webhook-slots (8)"},
		{"webhook slots not a number", nil, map[string]string{"SLUICE_WEBHOOK_TENANT_SLOTS": "many"}, nil, `SLUICE_WEBHOOK_TENANT_SLOTS: "many" is not a whole number`},
		{"webhook key not hex", nil, map[string]string{"SLUICE_WEBHOOK_KEY": "short"}, nil, "SLUICE_WEBHOOK_KEY must be 64 hex characters"},
		{"webhook timeout", []string{"--webhook-timeout", "1ms"}, nil, nil, "--webhook-timeout 1ms: must be between 100ms and 5m"},
		{"webhook CA file missing", []string{"--webhook-ca-file", filepath.Join(dir, "none.pem")}, nil, nil, "--webhook-ca-file"},
		{"SLUICE_WEBHOOK_ALLOW_PRIVATE not a boolean", nil, map[string]string{"SLUICE_WEBHOOK_ALLOW_PRIVATE": "sometimes"}, nil, "SLUICE_WEBHOOK_ALLOW_PRIVATE"},
		{"SLUICE_HA not a boolean", nil, map[string]string{"SLUICE_HA": "maybe"}, nil, `SLUICE_HA: "maybe" is not true or false`},
		{"SLUICE_NATS_REPLICAS not a number", nil, map[string]string{"SLUICE_NATS_REPLICAS": "x"}, nil, "SLUICE_NATS_REPLICAS"},
		{"SLUICE_WORKER_LEASE_TTL not a duration", nil, map[string]string{"SLUICE_WORKER_LEASE_TTL": "soon"}, nil, "SLUICE_WORKER_LEASE_TTL"},
		{"lease too short", []string{"--lease-ttl", "100ms"}, nil, nil, "--lease-ttl 100ms: must be between 500ms and 1m"},
		{"lease too long from the environment", nil, map[string]string{"SLUICE_WORKER_LEASE_TTL": "2m"}, nil, "--lease-ttl 2m0s"},
		{"replicas", []string{"--nats-replicas", "6"}, nil, nil, "--nats-replicas must be between 0"},
		{"log level", []string{"--log-level", "loud"}, nil, nil, `--log-level "loud"`},
		{"log format", nil, map[string]string{"SLUICE_LOG_FORMAT": "pretty"}, nil, `--log-format "pretty"`},
		{"metrics address", []string{"--metrics-addr", "9090"}, nil, nil, `--metrics-addr "9090"`},
		{"empty NATS URL", []string{"--nats-url="}, nil, nil, "--nats-url must not be empty"},
		{"stream bound", []string{"--stream-max-bytes", "10"}, nil, nil, "--stream-max-bytes"},
		{"analytics retention", []string{"--analytics-minutes", "1m"}, nil, nil, "--analytics-minutes"},
		{"tenant cap", nil, map[string]string{"SLUICE_TENANT_MAX_POLICIES": "0"}, nil, "SLUICE_TENANT_MAX_POLICIES"},
		{"write limits by default", nil, nil, func(o Options) bool {
			return o.WriteLimits == WriteLimits{Settles: 5000, Reserves: 5000, ConfigWrites: 20, BurstSeconds: 5}
		}, ""},
		{"write limits from the environment, the flag winning", []string{"--tenant-settles-per-second", "9"},
			map[string]string{"SLUICE_TENANT_SETTLES_PER_SECOND": "7", "SLUICE_TENANT_RESERVES_PER_SECOND": "8",
				"SLUICE_TENANT_CONFIG_WRITES_PER_SECOND": "3", "SLUICE_TENANT_WRITE_BURST_SECONDS": "2"}, func(o Options) bool {
				return o.WriteLimits == WriteLimits{Settles: 9, Reserves: 8, ConfigWrites: 3, BurstSeconds: 2}
			}, ""},
		{"write limit not a number", nil, map[string]string{"SLUICE_TENANT_SETTLES_PER_SECOND": "many"}, nil, "SLUICE_TENANT_SETTLES_PER_SECOND"},
		{"write burst too long", []string{"--tenant-write-burst-seconds", "7200"}, nil, nil, "--tenant-write-burst-seconds 7200"},
		{"two kinds of NATS credentials", nil, map[string]string{"SLUICE_NATS_TOKEN": "t", "SLUICE_NATS_USER": "u", "SLUICE_NATS_PASSWORD": "p"}, nil, "NATS"},
		{"operator email alone", nil, map[string]string{"SLUICE_OPERATOR_EMAIL": "op@example.com"}, nil, "set both SLUICE_OPERATOR_EMAIL"},
		{"short operator token", nil, map[string]string{"SLUICE_OPERATOR_TOKEN": "op_short"}, nil, "SLUICE_OPERATOR_TOKEN"},
		{"unknown flag", []string{"--bogus"}, nil, nil, "flag provided but not defined: -bogus"},
		{"argument", []string{"extra"}, nil, nil, `unexpected argument "extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var usage strings.Builder
			o, err := ParseFlags(tc.args, func(k string) string { return tc.env[k] }, &usage)
			if tc.err == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				if !tc.check(o) {
					t.Fatalf("options: %+v", o)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want one containing %q", err, tc.err)
			}
		})
	}
}

// -h answers flag.ErrHelp and lists every flag README names, with its
// environment twin.
func TestParseFlagsHelp(t *testing.T) {
	var usage strings.Builder
	_, err := ParseFlags([]string{"-h"}, func(string) string { return "" }, &usage)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{
		"-data", "SLUICE_DATA", "-nats-url", "SLUICE_NATS_URL", "-metrics-addr", "SLUICE_WORKER_METRICS_ADDR",
		"-log-level", "SLUICE_LOG_LEVEL", "-log-format", "SLUICE_LOG_FORMAT", "-ha", "SLUICE_HA",
		"-lease-ttl", "SLUICE_WORKER_LEASE_TTL", "-name", "SLUICE_WORKER_NAME", "-check-config",
		"-nats-replicas", "SLUICE_NATS_REPLICAS", "-nats-creds", "-nats-nkey", "-nats-ca", "-nats-cert", "-nats-key",
		"-stream-max-bytes", "SLUICE_STREAM_MAX_BYTES", "-stream-max-age", "SLUICE_STREAM_MAX_AGE",
		"-analytics-minutes", "-analytics-hours", "-analytics-days", "-analytics-top-k", "-audit-retention",
		"-tenant-max-policies", "-tenant-max-limits-per-policy", "-tenant-max-consumer-keys",
		"-tenant-max-service-keys", "-tenant-max-blocks", "-tenant-max-members", "-tenant-max-open-reservations",
		"-tenant-settles-per-second", "SLUICE_TENANT_SETTLES_PER_SECOND", "-tenant-reserves-per-second",
		"SLUICE_TENANT_RESERVES_PER_SECOND", "-tenant-config-writes-per-second", "SLUICE_TENANT_CONFIG_WRITES_PER_SECOND",
		"-tenant-write-burst-seconds", "SLUICE_TENANT_WRITE_BURST_SECONDS",
	} {
		if !strings.Contains(usage.String(), want) {
			t.Errorf("usage does not name %s:\n%s", want, usage.String())
		}
	}
}

// Without credentials, a worker whose --data holds the worker key a
// server made there uses it; given credentials, it does not.
func TestParseFlagsFindsTheWorkerKey(t *testing.T) {
	dir := t.TempDir()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, bus.WorkerSeedName)
	if err := os.WriteFile(path, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := ParseFlags([]string{"--data", dir}, func(string) string { return "" }, &strings.Builder{})
	if err != nil || o.NatsAuth.NKeyFile != path {
		t.Fatalf("nkey file %q, err %v; want %q", o.NatsAuth.NKeyFile, err, path)
	}
	o, err = ParseFlags([]string{"--data", dir}, func(k string) string { return map[string]string{"SLUICE_NATS_TOKEN": "t"}[k] }, &strings.Builder{})
	if err != nil || o.NatsAuth.NKeyFile != "" || o.NatsAuth.Token != "t" {
		t.Fatalf("with a token: %+v, %v", o.NatsAuth, err)
	}
}
