package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestEnsureRoleKeysMakesPrivateSeedsOnce(t *testing.T) {
	dir := t.TempDir()
	first, err := EnsureRoleKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{first.WorkerSeedFile, first.ServerSeedFile} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %o, want 600", f, st.Mode().Perm())
		}
	}
	if first.workerPublic == first.serverPublic {
		t.Fatal("both roles got the same key")
	}
	again, err := EnsureRoleKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatalf("keys changed on a second start: %+v vs %+v", again, first)
	}
	if err := os.WriteFile(filepath.Join(dir, ServerSeedName), []byte("not a seed"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureRoleKeys(dir); err == nil {
		t.Fatal("a broken seed file was accepted")
	}
}

func TestStartEmbeddedOpenListenerNeedsTLS(t *testing.T) {
	dir := t.TempDir()
	keys, err := EnsureRoleKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = StartEmbedded(EmbeddedConfig{DataDir: dir, Listen: "0.0.0.0:0", Keys: &keys})
	if err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("a non-loopback listener without TLS: %v", err)
	}
}

// The embedded server with a listener takes only the role keys, and the
// server key cannot publish the worker's subjects.
func TestEmbeddedRoleKeys(t *testing.T) {
	dir := t.TempDir()
	keys, err := EnsureRoleKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := StartEmbedded(EmbeddedConfig{DataDir: dir, Listen: "127.0.0.1:0", Keys: &keys})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	if nc, err := nats.Connect(ns.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("an anonymous client got in")
	}
	opt, err := nats.NkeyOptionFromSeed(keys.ServerSeedFile)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 4)
	nc, err := nats.Connect(ns.ClientURL(), opt, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errc <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish(ChangesSubject, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !strings.Contains(err.Error(), ChangesSubject) {
		t.Fatalf("want a violation for %s, got %v", ChangesSubject, err)
	}
	// The worker key may publish it.
	wopt, _ := nats.NkeyOptionFromSeed(keys.WorkerSeedFile)
	wc, err := nats.Connect(ns.ClientURL(), wopt)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	if err := wc.Publish(ChangesSubject, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := wc.Flush(); err != nil || wc.LastError() != nil {
		t.Fatalf("worker publish: %v %v", err, wc.LastError())
	}
}

func TestAuthValidate(t *testing.T) {
	dir := t.TempDir()
	keys, err := EnsureRoleKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		auth Auth
		want string // "" = valid
	}{
		{"none", Auth{}, ""},
		{"nkey", Auth{NKeyFile: keys.WorkerSeedFile}, ""},
		{"user", Auth{User: "u", Password: "p"}, ""},
		{"user without password", Auth{User: "u"}, "both SLUICE_NATS_USER"},
		{"two credentials", Auth{User: "u", Password: "p", Token: "t"}, "only one"},
		{"missing nkey file", Auth{NKeyFile: filepath.Join(dir, "nope")}, "--nats-nkey"},
		{"missing ca", Auth{CAFile: filepath.Join(dir, "nope.pem")}, "--nats-ca"},
		{"ca that is no pem", Auth{CAFile: keys.WorkerSeedFile}, "no PEM certificate"},
		{"cert without key", Auth{CertFile: keys.WorkerSeedFile}, "--nats-key"},
	} {
		err := tc.auth.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// Connect presents each kind of credential; a wrong one is refused.
func TestConnectCredentials(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name        string
		opts        server.Options
		good, wrong Auth
	}{
		{"user", server.Options{Username: "sluice", Password: "right"}, Auth{User: "sluice", Password: "right"}, Auth{User: "sluice", Password: "wrong"}},
		{"token", server.Options{Authorization: "right-token"}, Auth{Token: "right-token"}, Auth{Token: "wrong-token"}},
	} {
		opts := tc.opts
		opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, true
		ns, err := server.NewServer(&opts)
		if err != nil {
			t.Fatal(err)
		}
		ns.Start()
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats not ready")
		}
		nc, err := Connect(ns.ClientURL(), nil, "test", tc.good, log)
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil || !nc.IsConnected() {
			t.Errorf("%s: the right credential: %v (last error %v)", tc.name, err, nc.LastError())
		}
		nc.Close()
		// Connect retries in the background; a refused credential closes
		// the connection with an authorization error.
		nc, err = Connect(ns.ClientURL(), nil, "test", tc.wrong, log)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !nc.IsClosed() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if nc.IsConnected() || !errors.Is(nc.LastError(), nats.ErrAuthorization) {
			t.Errorf("%s: a wrong credential: connected %v, last error %v", tc.name, nc.IsConnected(), nc.LastError())
		}
		nc.Close()
		ns.Shutdown()
	}
}

// A server's credential can neither append to the replication log, write
// the worker lease, ask the active worker for a snapshot of its database,
// nor make or change their streams; the worker's can do all of it.
func TestServerRoleCannotTouchReplication(t *testing.T) {
	dir := t.TempDir()
	keys, err := EnsureRoleKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := StartEmbedded(EmbeddedConfig{DataDir: dir, Listen: "127.0.0.1:0", Keys: &keys})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	wopt, _ := nats.NkeyOptionFromSeed(keys.WorkerSeedFile)
	wc, err := nats.Connect(ns.ClientURL(), wopt)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	wjs, _ := jetstream.New(wc)
	ctx := context.Background()
	if _, err := wjs.CreateOrUpdateStream(ctx, ReplStreamConfig(1<<20, time.Hour, 1)); err != nil {
		t.Fatalf("the worker cannot make the replication log: %v", err)
	}
	kv, err := OpenKeyValue(ctx, wjs, WorkerLeaseConfig(3*time.Second, 1), nil)
	if err != nil {
		t.Fatalf("the worker cannot make the lease bucket: %v", err)
	}
	if _, err := kv.Create(ctx, WorkerLeaseKey, []byte("w")); err != nil {
		t.Fatalf("the worker cannot take the lease: %v", err)
	}
	if _, err := wjs.Publish(ctx, ReplSubject, []byte("[]")); err != nil {
		t.Fatalf("the worker cannot append to the log: %v", err)
	}

	opt, _ := nats.NkeyOptionFromSeed(keys.ServerSeedFile)
	errc := make(chan error, 16)
	sc, err := nats.Connect(ns.ClientURL(), opt, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errc <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	for _, subject := range []string{
		ReplSubject,
		ReplSnapshotSubject,
		ReplChunkSubject,
		"$KV." + WorkerLeaseBucket + "." + WorkerLeaseKey,
		"$JS.API.STREAM.CREATE." + ReplStream,
		"$JS.API.STREAM.UPDATE." + ReplStream,
		"$JS.API.STREAM.CREATE.KV_" + WorkerLeaseBucket,
		"$JS.API.STREAM.PURGE." + ReplStream,
	} {
		if err := sc.Publish(subject, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if !strings.Contains(err.Error(), "Permissions Violation") || !strings.Contains(err.Error(), subject) {
				t.Fatalf("publish to %s: want a permissions violation, got %v", subject, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a server's credential published to %s", subject)
		}
	}
	// The log still holds only the worker's record.
	s, err := wjs.Stream(ctx, ReplStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("the log holds %d records, want 1", n)
	}
}

// Port 0 asks for a free port, as it does everywhere else: two embedded
// servers listening on 127.0.0.1:0 at once both start, on different ports
// (NATS itself reads port 0 as its default, 4222).
func TestEmbeddedPortZeroIsFree(t *testing.T) {
	var urls []string
	for i := range 2 {
		ns, err := StartEmbedded(EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: fmt.Sprintf("port-zero-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ns.Shutdown)
		urls = append(urls, ns.ClientURL())
	}
	if urls[0] == urls[1] || strings.HasSuffix(urls[0], ":4222") {
		t.Fatalf("client URLs %v, want two free ports", urls)
	}
}
