package app

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
		{"short operator token", nil, map[string]string{"SLUICE_OPERATOR_TOKEN": "op_short"}, "SLUICE_OPERATOR_TOKEN: "},
		{"operator token long enough", nil, map[string]string{"SLUICE_OPERATOR_TOKEN": "op_" + strings.Repeat("x", 40)}, ""},
		{"short operator token the external worker applies", []string{"--worker=external", "--nats-url", "nats://nats:4222"}, map[string]string{"SLUICE_OPERATOR_TOKEN": "op_short"}, ""},
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

func TestTenantBucketsFlag(t *testing.T) {
	parse := func(args []string, env map[string]string) (Config, error) {
		c := DefaultConfig()
		err := c.ParseFlags("server", append([]string{"--data", t.TempDir()}, args...), func(k string) string { return env[k] }, io.Discard)
		return c, err
	}
	if c, err := parse(nil, nil); err != nil || c.TenantBuckets != 0 {
		t.Fatalf("default: %d, %v", c.TenantBuckets, err)
	}
	if c, err := parse(nil, map[string]string{"SLUICE_TENANT_BUCKETS": "-1"}); err != nil || c.TenantBuckets != -1 {
		t.Fatalf("from the environment: %d, %v", c.TenantBuckets, err)
	}
	if c, err := parse([]string{"--tenant-buckets", "1000"}, map[string]string{"SLUICE_TENANT_BUCKETS": "-1"}); err != nil || c.TenantBuckets != 1000 {
		t.Fatalf("the flag wins: %d, %v", c.TenantBuckets, err)
	}
	if _, err := parse(nil, map[string]string{"SLUICE_TENANT_BUCKETS": "many"}); err == nil || !strings.Contains(err.Error(), "SLUICE_TENANT_BUCKETS") {
		t.Fatalf("a bad value: %v", err)
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

// The direct forwarding listener follows the NATS listener's rule: loopback,
// or TLS; and an address that listens everywhere needs the one peers dial.
func TestClusterListenFlags(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeSelfSigned(t, dir)
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
		{"default loopback", nil, nil, ""},
		{"off", []string{"--cluster-listen", "off"}, nil, ""},
		{"loopback port from the environment", nil, map[string]string{"SLUICE_CLUSTER_LISTEN": "127.0.0.1:7422"}, ""},
		{"open without TLS", []string{"--cluster-listen", "10.0.0.5:7422"}, nil, "not a loopback address"},
		{"open without TLS, from the environment", nil, map[string]string{"SLUICE_CLUSTER_LISTEN": "0.0.0.0:7422"}, "not a loopback address"},
		{"open with TLS", []string{"--cluster-listen", "10.0.0.5:7422", "--cluster-listen-cert", cert, "--cluster-listen-key", key}, nil, ""},
		{"everywhere with TLS but no advertise", []string{"--cluster-listen", ":7422", "--cluster-listen-cert", cert, "--cluster-listen-key", key}, nil, "--cluster-advertise"},
		{"everywhere with TLS and advertise", []string{"--cluster-listen", "0.0.0.0:7422", "--cluster-advertise", "10.0.0.5:7422"},
			map[string]string{"SLUICE_CLUSTER_LISTEN_CERT": cert, "SLUICE_CLUSTER_LISTEN_KEY": key}, ""},
		{"advertise unspecified", []string{"--cluster-listen", "127.0.0.1:7422", "--cluster-advertise", "0.0.0.0:7422"}, nil, "--cluster-advertise"},
		{"cert that does not load", []string{"--cluster-listen", "10.0.0.5:7422", "--cluster-listen-cert", notPEM, "--cluster-listen-key", notPEM}, nil, "--cluster-listen-cert"},
		{"cert without key", []string{"--cluster-listen-cert", cert}, nil, "both --cluster-listen-cert"},
		{"cert with off", []string{"--cluster-listen", "off", "--cluster-listen-cert", cert, "--cluster-listen-key", key}, nil, "which is off"},
		{"not host:port", []string{"--cluster-listen", "7422"}, nil, "host:port"},
	} {
		cfg := DefaultConfig()
		err := cfg.ParseFlags("server", append([]string{"--data", dir}, tc.args...), func(k string) string { return tc.env[k] }, io.Discard)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	cfg := DefaultConfig()
	if err := cfg.ParseFlags("server", []string{"--data", dir, "--cluster-listen", "10.0.0.5:7422", "--cluster-listen-cert", cert, "--cluster-listen-key", key}, func(string) string { return "" }, io.Discard); err != nil {
		t.Fatal(err)
	}
	d, err := cfg.clusterDirect()
	if err != nil || d == nil || d.TLS == nil || d.Listen != "10.0.0.5:7422" || d.Host == "" {
		t.Fatalf("direct config: %+v, %v", d, err)
	}
}

func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// A NATS URL's credential shows neither in the usage (whose defaults come
// from the environment) nor in the description the start log gives.
func TestNATSURLCredentialRedacted(t *testing.T) {
	const password = "hunter2-password"
	env := map[string]string{"SLUICE_NATS_URL": "nats://sluice:" + password + "@nats.internal:4222"}
	cfg := DefaultConfig()
	var out strings.Builder
	err := cfg.ParseFlags("server", []string{"--no-such-flag"}, func(k string) string { return env[k] }, &out)
	if err == nil {
		t.Fatal("an unknown flag was accepted")
	}
	if strings.Contains(out.String(), password) || !strings.Contains(out.String(), "redacted@nats.internal") {
		t.Errorf("usage shows the password, or not the redacted URL:\n%s", out.String())
	}
	cfg = DefaultConfig()
	if err := cfg.ParseFlags("server", []string{"--data", t.TempDir()}, func(k string) string { return env[k] }, io.Discard); err != nil {
		t.Fatal(err)
	}
	if cfg.NatsURL != env["SLUICE_NATS_URL"] {
		t.Fatalf("NatsURL = %q", cfg.NatsURL)
	}
	if d := natsDesc(cfg); strings.Contains(d, password) {
		t.Errorf("start log's NATS: %q", d)
	}
}

// --demo is off unless given, and has no SLUICE_* twin that could leave it
// on by accident.
func TestDemoFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want bool
	}{
		{nil, nil, false},
		{nil, map[string]string{"SLUICE_DEMO": "true"}, false},
		{[]string{"--demo"}, nil, true},
		{[]string{"--demo=false"}, nil, false},
	} {
		c := DefaultConfig()
		if err := c.ParseFlags("server", append([]string{"--data", t.TempDir()}, tc.args...), func(k string) string { return tc.env[k] }, io.Discard); err != nil {
			t.Fatal(err)
		}
		if c.Demo != tc.want {
			t.Errorf("%v %v: Demo %v, want %v", tc.args, tc.env, c.Demo, tc.want)
		}
	}
}

func TestGRPCFlags(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeSelfSigned(t, dir)
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
		{"off by default", nil, nil, ""},
		{"plaintext", []string{"--grpc-addr", "0.0.0.0:8081"}, nil, ""},
		{"from the environment", nil, map[string]string{"SLUICE_GRPC_ADDR": "127.0.0.1:8081", "SLUICE_GRPC_RATELIMIT_HEADERS": "true"}, ""},
		{"TLS", []string{"--grpc-addr", ":8081", "--grpc-cert", cert, "--grpc-key", key}, nil, ""},
		{"mutual TLS", []string{"--grpc-addr", ":8081", "--grpc-cert", cert, "--grpc-key", key, "--grpc-client-ca", cert}, nil, ""},
		{"not host:port", []string{"--grpc-addr", "8081"}, nil, "--grpc-addr"},
		{"cert without key", []string{"--grpc-addr", ":8081", "--grpc-cert", cert}, nil, "both --grpc-cert"},
		{"cert without an address", []string{"--grpc-cert", cert, "--grpc-key", key}, nil, "need --grpc-addr"},
		{"client CA without TLS", []string{"--grpc-addr", ":8081", "--grpc-client-ca", cert}, nil, "mutual TLS is TLS"},
		{"cert that does not load", []string{"--grpc-addr", ":8081", "--grpc-cert", notPEM, "--grpc-key", notPEM}, nil, "--grpc-cert"},
		{"client CA that is not PEM", []string{"--grpc-addr", ":8081", "--grpc-cert", cert, "--grpc-key", key, "--grpc-client-ca", notPEM}, nil, "no PEM certificate"},
	} {
		cfg := DefaultConfig()
		err := cfg.ParseFlags("server", append([]string{"--data", dir}, tc.args...), func(k string) string { return tc.env[k] }, io.Discard)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
		if tc.name == "from the environment" && (cfg.GRPCAddr != "127.0.0.1:8081" || !cfg.GRPCHeaders) {
			t.Errorf("environment not read: %+v", cfg)
		}
	}
}
