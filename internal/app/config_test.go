package app

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigNATSOptions(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string // "" = valid
	}{
		{"in-process only", nil, nil, ""},
		{"loopback listener", []string{"--nats-listen", "127.0.0.1:4222"}, nil, ""},
		{"open listener without TLS", []string{"--nats-listen", "0.0.0.0:4222"}, nil, "not a loopback address"},
		{"listener cert that does not load", []string{"--nats-listen", "0.0.0.0:4222", "--nats-listen-cert", notPEM, "--nats-listen-key", notPEM}, nil, "--nats-listen-cert"},
		{"listener cert without key", []string{"--nats-listen", "0.0.0.0:4222", "--nats-listen-cert", notPEM}, nil, "both --nats-listen-cert"},
		{"external with user", []string{"--nats-url", "tls://nats:4222"}, map[string]string{"SLUICE_NATS_USER": "s", "SLUICE_NATS_PASSWORD": "p"}, ""},
		{"external with a missing creds file", []string{"--nats-url", "nats://nats:4222", "--nats-creds", filepath.Join(dir, "missing.creds")}, nil, "--nats-creds"},
		{"missing ca from the environment", []string{"--nats-url", "nats://nats:4222"}, map[string]string{"SLUICE_NATS_CA": filepath.Join(dir, "ca.pem")}, "--nats-ca"},
		{"credentials for the embedded nats", nil, map[string]string{"SLUICE_NATS_TOKEN": "t"}, "are for --nats-url"},
		{"listener with an external nats", []string{"--nats-url", "nats://nats:4222", "--nats-listen", "127.0.0.1:4222"}, nil, "for the embedded NATS"},
	} {
		cfg := DefaultConfig()
		err := cfg.ParseFlags("server", append([]string{"--data", dir}, tc.args...), func(k string) string { return tc.env[k] }, io.Discard)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestPublicURLAndMetricsAddr(t *testing.T) {
	parse := func(args []string, env map[string]string) (Config, error) {
		c := DefaultConfig()
		err := c.ParseFlags("server", args, func(k string) string { return env[k] }, io.Discard)
		return c, err
	}
	c, err := parse(nil, map[string]string{"SLUICE_PUBLIC_URL": "https://sluice.example.com", "SLUICE_METRICS_ADDR": "0.0.0.0:9090"})
	if err != nil || c.PublicURL != "https://sluice.example.com" || c.MetricsAddr != "0.0.0.0:9090" || !c.transport().PublicHTTPS {
		t.Fatalf("from the environment: %+v, %v", c, err)
	}
	c, err = parse([]string{"--public-url", "http://127.0.0.1:8080"}, map[string]string{"SLUICE_PUBLIC_URL": "https://ignored.example.com"})
	if err != nil || c.transport().PublicHTTPS {
		t.Fatalf("the flag wins, and http is not https: %+v, %v", c, err)
	}
	if c, err := parse(nil, nil); err != nil || c.transport().PublicHTTPS || c.MetricsAddr != "" {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	for _, args := range [][]string{
		{"--public-url", "sluice.example.com"},
		{"--public-url", "ftp://sluice.example.com"},
		{"--public-url", "https://"},
		{"--metrics-addr", "9090"},
	} {
		if _, err := parse(args, nil); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

func TestNATSReplicasFlag(t *testing.T) {
	parse := func(args []string, env map[string]string) (Config, error) {
		c := DefaultConfig()
		err := c.ParseFlags("server", args, func(k string) string { return env[k] }, io.Discard)
		return c, err
	}
	if c, err := parse(nil, nil); err != nil || c.NatsReplicas != 0 {
		t.Fatalf("default: %d, %v", c.NatsReplicas, err)
	}
	if c, err := parse(nil, map[string]string{"SLUICE_NATS_REPLICAS": "3"}); err != nil || c.NatsReplicas != 3 {
		t.Fatalf("from the environment: %d, %v", c.NatsReplicas, err)
	}
	if c, err := parse([]string{"--nats-replicas", "1"}, map[string]string{"SLUICE_NATS_REPLICAS": "3"}); err != nil || c.NatsReplicas != 1 {
		t.Fatalf("the flag wins: %d, %v", c.NatsReplicas, err)
	}
	for _, bad := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"--nats-replicas", "6"}, nil},
		{[]string{"--nats-replicas", "-1"}, nil},
		{nil, map[string]string{"SLUICE_NATS_REPLICAS": "three"}},
	} {
		if _, err := parse(bad.args, bad.env); err == nil || !strings.Contains(err.Error(), "REPLICAS") && !strings.Contains(err.Error(), "replicas") {
			t.Errorf("%v %v: got %v", bad.args, bad.env, err)
		}
	}
}

// Without --node a server is named after its host plus a suffix kept in its
// data directory: the same after a restart, different for another data
// directory on the same host.
func TestDefaultNodeName(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	n1, err := defaultNode(a)
	if err != nil {
		t.Fatal(err)
	}
	n2, _ := defaultNode(a)
	n3, _ := defaultNode(b)
	if n1 != n2 {
		t.Fatalf("the name changed across restarts: %q then %q", n1, n2)
	}
	if n1 == n3 {
		t.Fatalf("two data directories on one host share the name %q", n1)
	}
	host, _ := os.Hostname()
	if !strings.HasPrefix(n1, sanitizeNode(host)+"-") {
		t.Fatalf("%q does not start with the host name %q", n1, host)
	}
	st, err := os.Stat(filepath.Join(a, nodeIDFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("node id file: %v, %v", st, err)
	}
	c := DefaultConfig()
	if err := c.ParseFlags("server", []string{"--data", a}, func(string) string { return "" }, io.Discard); err != nil || c.Node != "" {
		t.Fatalf("without --node the name is chosen at start: %q, %v", c.Node, err)
	}
	if err := c.ParseFlags("server", []string{"--node", "bad name"}, func(string) string { return "" }, io.Discard); err == nil {
		t.Fatal("a node name with a space was accepted")
	}
}
