package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
)

// testPKI is a CA and the certificates signed by it, as PEM files in dir.
type testPKI struct {
	dir                   string
	ca                    string
	serverCert, serverKey string // for 127.0.0.1
	clientCert, clientKey string
}

func newTestPKI(t testing.TB) testPKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice e2e ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, name string, usage []x509.ExtKeyUsage, ips []net.IP) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+"-cert.pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	p := testPKI{dir: dir, ca: write("ca.pem", "CERTIFICATE", caDER)}
	// The NATS nodes' certificate also serves their routes, where each node
	// is a client of the others (deploy/nats-cluster.conf).
	p.serverCert, p.serverKey = leaf(2, "server", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, []net.IP{net.ParseIP("127.0.0.1")})
	p.clientCert, p.clientKey = leaf(3, "client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil)
	return p
}

// docNATSBlock is docs/NATS.md's nats-server configuration, as written.
func docNATSBlock(t testing.TB) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/NATS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- nats-conf:begin -->\n```\n")
	block, _, ok2 := strings.Cut(rest, "```\n<!-- nats-conf:end -->")
	if !ok || !ok2 {
		t.Fatal("docs/NATS.md has no nats-conf block")
	}
	return block
}

// docNATSConfig is docs/NATS.md's nats-server configuration with its file
// paths pointed at pki's certificates and a temp store directory.
func docNATSConfig(t testing.TB, pki testPKI) string {
	t.Helper()
	block := docNATSBlock(t)
	for from, to := range map[string]string{
		"/etc/nats/tls/nats-cert.pem": pki.serverCert,
		"/etc/nats/tls/nats-key.pem":  pki.serverKey,
		"/etc/nats/tls/ca.pem":        pki.ca,
		"/var/lib/nats":               filepath.Join(pki.dir, "jetstream"),
	} {
		if !strings.Contains(block, from) {
			t.Fatalf("docs/NATS.md's config does not name %s", from)
		}
		block = strings.ReplaceAll(block, from, to)
	}
	path := filepath.Join(pki.dir, "nats.conf")
	if err := os.WriteFile(path, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkDocRoles fails unless the documented users have exactly the role
// permissions the embedded NATS applies.
func checkDocRoles(t testing.TB, conf string) {
	t.Helper()
	opts, err := natsserver.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("docs/NATS.md's config: %v", err)
	}
	want := map[string]bus.Role{"sluice-worker": bus.WorkerRole(), "sluice-server": bus.ServerRole()}
	for _, u := range opts.Users {
		r, ok := want[u.Username]
		if !ok {
			t.Errorf("docs/NATS.md: unexpected user %s", u.Username)
			continue
		}
		delete(want, u.Username)
		p := u.Permissions
		if p == nil || p.Publish == nil || p.Subscribe == nil || p.Response == nil {
			t.Errorf("%s: permissions incomplete: %+v", u.Username, p)
			continue
		}
		if !slices.Equal(p.Publish.Allow, r.PublishAllow) || !slices.Equal(p.Publish.Deny, r.PublishDeny) ||
			!slices.Equal(p.Subscribe.Allow, r.SubscribeAllow) || len(p.Subscribe.Deny) != 0 {
			t.Errorf("%s: docs/NATS.md permissions differ from bus.%sRole:\ndoc:  pub %v deny %v sub %v\ncode: pub %v deny %v sub %v",
				u.Username, r.Name, p.Publish.Allow, p.Publish.Deny, p.Subscribe.Allow, r.PublishAllow, r.PublishDeny, r.SubscribeAllow)
		}
	}
	for name := range want {
		t.Errorf("docs/NATS.md: user %s missing", name)
	}
}

// violations collects the permission errors NATS reports to a client.
type violations chan error

func (v violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	select {
	case v <- err:
	default:
	}
}

// expect waits for a permission violation naming subject.
func (v violations) expect(t testing.TB, what, subject string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case err := <-v:
			if errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				if strings.Contains(err.Error(), subject) {
					return
				}
			}
		case <-timeout:
			t.Fatalf("%s: no permission violation for %s", what, subject)
		}
	}
}

// serverRoleMayNot checks, over nc (a server-role connection), that it
// cannot do what only the worker may, and that the streams survive.
func serverRoleMayNot(t testing.TB, nc *nats.Conn, v violations) {
	t.Helper()
	if err := nc.Publish("sluice.config.operator.bootstrap", []byte(`{"token_hash":"x"}`)); err != nil {
		t.Fatal(err)
	}
	v.expect(t, "operator bootstrap", "sluice.config.operator.bootstrap")
	if err := nc.Publish(bus.ChangesSubject, []byte(`{"v":1,"changes":[]}`)); err != nil {
		t.Fatal(err)
	}
	v.expect(t, "config announcement", bus.ChangesSubject)
	// Sign-in requests carry passwords: only the worker may receive them.
	if _, err := nc.QueueSubscribe(bus.OpUserSignIn.Subject(), bus.ServiceName, func(*nats.Msg) {
		t.Error("a server-role client received a request meant for the worker")
	}); err != nil {
		t.Fatal(err)
	}
	v.expect(t, "impersonate the worker", bus.OpUserSignIn.Subject())
	// No config operation outside bus.ServerConfigOps, such as the lookup
	// that once answered password hashes.
	if err := nc.Publish(bus.ConfigPrefix+".user.by_email", []byte(`{"email":"x@example.com"}`)); err != nil {
		t.Fatal(err)
	}
	v.expect(t, "password hash lookup", bus.ConfigPrefix+".user.by_email")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, bus.StateStream); err == nil {
		t.Error("a server-role client deleted the state stream")
	}
	v.expect(t, "delete the state stream", "$JS.API.STREAM.DELETE."+bus.StateStream)
	// A stream of its own could republish onto the worker's subjects.
	cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer ccancel()
	if _, err := js.CreateStream(cctx, jetstream.StreamConfig{Name: "INTRUDER", Subjects: []string{"sluice.cluster.intruder"},
		RePublish: &jetstream.RePublish{Source: ">", Destination: bus.ChangesSubject}}); err == nil {
		t.Error("a server-role client made a stream that republishes onto the config announcements")
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Stream(ctx, bus.StateStream); err != nil {
		t.Errorf("the state stream is gone: %v", err)
	}
	if _, err := js.Stream(ctx, "INTRUDER"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("the intruder's stream: want not found, got %v", err)
	}
}

// The documented nats-server configuration (user/password, mutual TLS, role
// permissions) runs Sluice: a worker and two clustered servers with the right
// credentials work; no credential, or no client certificate, is refused; and
// the server role cannot do the worker's part.
func TestNATSAuthExternal(t *testing.T) {
	pki := newTestPKI(t)
	conf := docNATSConfig(t, pki)
	const workerPass, serverPass = "worker-secret-e2e", "server-secret-e2e"
	t.Setenv("SLUICE_WORKER_NATS_PASSWORD", workerPass)
	t.Setenv("SLUICE_SERVER_NATS_PASSWORD", serverPass)
	checkDocRoles(t, conf)
	began := time.Now()
	step := func(what string) { t.Logf("%5.1fs %s", time.Since(began).Seconds(), what) }

	addr := freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	natsProc := start(t, "nats", buildNATS(t), []string{"-c", conf, "-a", host, "-p", port})
	waitFor(t, 20*time.Second, "nats listening", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	url := "tls://" + addr
	tlsArgs := []string{"--nats-ca", pki.ca, "--nats-cert", pki.clientCert, "--nats-key", pki.clientKey}

	step("nats up")
	// Refused: no credential; the right password without a client certificate.
	if nc, err := nats.Connect(url, nats.RootCAs(pki.ca), nats.ClientCert(pki.clientCert, pki.clientKey), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("nats accepted a client without credentials")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("no credentials: want an authorization error, got %v", err)
	}
	if nc, err := nats.Connect(url, nats.RootCAs(pki.ca), nats.UserInfo("sluice-server", serverPass), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("nats accepted a client without a certificate")
	}

	// A server without credentials does not get in, and says why.
	bin, wbin := build(t)
	bare := start(t, "server-no-creds", bin, append([]string{"--addr", freeAddr(t), "--data", t.TempDir(), "--node", "bare",
		"--nats-url", url, "--worker=external"}, tlsArgs...))
	waitFor(t, 30*time.Second, "the credential-less server logs its refusal", func() bool {
		return strings.Contains(strings.ToLower(bare.logs.String()), "authorization violation")
	})
	bare.kill()

	step("credential-less server refused")
	// The worker also checks its configuration: a missing CA file is named.
	out, err := exec.Command(wbin, "--nats-url", url, "--nats-ca", filepath.Join(pki.dir, "missing.pem"), "--check-config").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--nats-ca") {
		t.Fatalf("worker --check-config with a missing CA: %v %s", err, out)
	}

	data := t.TempDir()
	start(t, "worker", wbin, append([]string{"--nats-url", url, "--data", data}, tlsArgs...),
		"SLUICE_OPERATOR_TOKEN="+operatorToken, "SLUICE_NATS_USER=sluice-worker", "SLUICE_NATS_PASSWORD="+workerPass)
	tp := &topology{t: t}
	for i := range 2 {
		tp.servers = append(tp.servers, startServer(t, serverOpts{noWait: true,
			extra: append([]string{"--nats-url", url, "--worker=external", "--cluster", "on", "--node", fmt.Sprintf("s%d", i+1)}, tlsArgs...),
			env:   []string{"SLUICE_NATS_USER=sluice-server", "SLUICE_NATS_PASSWORD=" + serverPass},
		}))
	}
	for _, s := range tp.servers {
		s.waitReady(t, 60*time.Second)
	}
	tp.waitBalanced(45 * time.Second)
	step("cluster balanced")
	tn := createTenant(t, tp.servers[0], "natsauth")
	createPolicy(t, tp.servers[0], tn, limitPolicy("p", "exact", 5))
	waitFor(t, 10*time.Second, "s2 knows the new policy", func() bool {
		c, _ := check(t, tp.servers[1], tn, ipCheck("203.0.113.9", "/p"))
		return c.Policy == "p"
	})
	allowed := 0
	for i := range 8 {
		if c, _ := check(t, tp.servers[i%2], tn, ipCheck("203.0.113.7", "/p")); c.Allowed {
			allowed++
		}
	}
	if allowed != 5 {
		t.Errorf("%d of 8 checks allowed across the two servers, want 5", allowed)
	}

	step("checks counted")
	// A client with the server's credentials cannot do the worker's part.
	v := make(violations, 16)
	nc, err := nats.Connect(url, nats.RootCAs(pki.ca), nats.ClientCert(pki.clientCert, pki.clientKey),
		nats.UserInfo("sluice-server", serverPass), nats.ErrorHandler(v.handler), nats.Timeout(5*time.Second), nats.Name("e2e-intruder"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	serverRoleMayNot(t, nc, v)

	step("server role refused")
	// Everything still works, and no Sluice process broke a permission:
	// nats-server logs every violation with the client's name.
	mustStatus(t, call(t, "GET", tp.servers[1].base+"/v1/admin/tenants", operatorToken, nil), 200)
	seen := 0
	for _, line := range strings.Split(natsProc.logs.String(), "\n") {
		if !strings.Contains(line, "Violation") {
			continue
		}
		seen++
		if strings.Contains(line, ":go:sluice-") { // Sluice names its connections

			t.Errorf("a Sluice process broke its permissions: %s", line)
		}
	}
	if seen == 0 {
		t.Error("nats-server logged none of the test client's violations")
	}
}

// The embedded NATS with a listener requires the role keys it makes under
// --data (0600): an anonymous client is refused, an external worker given the
// worker key over TLS serves, the server key cannot do the worker's part, and
// a non-loopback listener without TLS is refused before start.
func TestNATSAuthEmbedded(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	bin, _ := build(t)
	out, err := exec.Command(bin, "--nats-listen", "0.0.0.0:4222", "--check-config").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not a loopback address") {
		t.Fatalf("--check-config --nats-listen 0.0.0.0:4222 without TLS: %v %s", err, out)
	}

	natsAddr := freeAddr(t)
	s := startServer(t, serverOpts{noWait: true, extra: []string{"--worker=external", "--nats-listen", natsAddr,
		"--nats-listen-cert", pki.serverCert, "--nats-listen-key", pki.serverKey}})
	workerKey := waitWorkerKey(t, s)
	serverKey := filepath.Join(s.data, bus.ServerSeedName)
	waitFor(t, 10*time.Second, "the server makes its own key", func() bool {
		_, err := os.Stat(serverKey)
		return err == nil
	})
	for _, f := range []string{workerKey, serverKey} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %o, want 600", f, st.Mode().Perm())
		}
	}
	url := "tls://" + natsAddr
	workerData := t.TempDir() // not the server's: the worker finds no key by itself
	startWorker(t, url, workerData, "--nats-nkey", workerKey, "--nats-ca", pki.ca)
	s.waitReady(t, 60*time.Second)
	tn := createTenant(t, s, "embedded-auth")
	createPolicy(t, s, tn, limitPolicy("p", "exact", 2))
	if c, _ := check(t, s, tn, ipCheck("203.0.113.1", "/p")); !c.Allowed {
		t.Fatalf("first check denied: %+v", c)
	}

	if nc, err := nats.Connect(url, nats.RootCAs(pki.ca), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("the embedded nats accepted an anonymous client")
	}
	if nc, err := nats.Connect("nats://"+natsAddr, nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("the embedded nats accepted a client without TLS")
	}
	opt, err := nats.NkeyOptionFromSeed(serverKey)
	if err != nil {
		t.Fatal(err)
	}
	v := make(violations, 16)
	nc, err := nats.Connect(url, opt, nats.RootCAs(pki.ca), nats.ErrorHandler(v.handler), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	serverRoleMayNot(t, nc, v)
	mustStatus(t, call(t, "GET", s.base+"/v1/admin/tenants", operatorToken, nil), 200)
}
