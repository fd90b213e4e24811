package worker

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Every config operation the worker serves is one a server may ask
// (bus.ServerConfigOps) or, deliberately, none: a new operation fails this
// test until someone decides which.
func TestServerConfigOpsAreTheWorkers(t *testing.T) {
	w := &Worker{}
	var served []string
	for _, b := range w.configOperations() {
		served = append(served, strings.TrimPrefix(b.Subject, bus.ConfigPrefix+"."))
	}
	slices.Sort(served)
	allowed := slices.Sorted(slices.Values(bus.ServerConfigOps))
	if !slices.Equal(served, allowed) {
		t.Fatalf("served by the worker: %v\nallowed to servers:   %v", served, allowed)
	}
}

// roleEnv is a worker on an embedded NATS that accepts only the two role
// keys, as with --nats-listen, and a connection with the server's key.
type roleEnv struct {
	worker *nats.Conn
	server *nats.Conn
	errs   chan error // what NATS reports to the server's connection
}

func newRoleEnv(t *testing.T) roleEnv { return newRoleEnvConfig(t, Config{}) }

// newRoleEnvConfig is newRoleEnv with the worker's configuration.
func newRoleEnvConfig(t *testing.T, cfg Config) roleEnv {
	t.Helper()
	dir := t.TempDir()
	keys, err := bus.EnsureRoleKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := bus.StartEmbedded(bus.EmbeddedConfig{DataDir: dir, Listen: "127.0.0.1:0", Keys: &keys, Name: "roles"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	connect := func(seed string, opts ...nats.Option) *nats.Conn {
		opt, err := nats.NkeyOptionFromSeed(seed)
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(ns.ClientURL(), append(opts, opt)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	e := roleEnv{errs: make(chan error, 16)}
	e.worker = connect(keys.WorkerSeedFile)
	e.server = connect(keys.ServerSeedFile, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case e.errs <- err:
		default:
		}
	}))
	db, err := sqlitedb.Open(context.Background(), filepath.Join(dir, "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	js, err := jetstream.New(e.worker)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureStreams(context.Background(), js, 1); err != nil {
		t.Fatal(err)
	}
	w, err := New(cfg, db, e.worker)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

// A server's NATS credential cannot obtain a password hash: no subject it
// may publish answers one (sign-in is checked on the worker), and the
// lookup servers used to make is refused by NATS itself.
func TestServerCredentialGetsNoPasswordHash(t *testing.T) {
	e := newRoleEnv(t)
	ctx := context.Background()
	cl := bus.NewClient(e.server, 10*time.Second)
	const email, password = "owner@example.com", "correct horse battery"
	var created service.Written[service.TenantCreated]
	eventuallyOK(t, "tenant created over the server's credential", func() error {
		return bus.CallInto(ctx, cl, bus.OpTenantCreate, bus.TenantCreate{Name: "acme", OwnerEmail: email, OwnerPassword: password}, &created)
	})
	tenantID := created.Result.Tenant.ID

	// Sign-in: the worker says who it is, never with a hash.
	raw := func(op string, req any) []byte {
		t.Helper()
		data, _ := json.Marshal(req)
		msg, err := e.server.Request(bus.ConfigPrefix+"."+op, data, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		return msg.Data
	}
	var rec service.UserRecord
	reply := raw(bus.OpUserSignIn.Name, bus.SignIn{Email: email, Password: password})
	if err := bus.DecodeReply(reply, &rec); err != nil || rec.User.Email != email || rec.User.TenantID != tenantID || rec.SessionVersion < 1 {
		t.Fatalf("sign-in with the right password: %+v, %v", rec, err)
	}
	for _, wrong := range []bus.SignIn{{Email: email, Password: "wrong horse battery"}, {Email: "nobody@example.com", Password: password}} {
		err := bus.DecodeReply(raw(bus.OpUserSignIn.Name, wrong), &rec)
		if !errs.Is(err, errs.Unauthenticated) {
			t.Fatalf("sign-in %+v: %v, want unauthenticated", wrong, err)
		}
	}

	// Every operation a server may ask, with the tenant and the owner's
	// email and password in the request: no answer holds a hash. (Deleting
	// and suspending the tenant are left out; they answer no user.)
	owner := rec.User.ID
	if err := bus.DecodeReply(raw(bus.OpUserSignIn.Name, bus.SignIn{Email: email, Password: password}), &rec); err != nil {
		t.Fatal(err)
	}
	req := map[string]any{"v": bus.WireVersion, "tenant_id": tenantID, "id": owner, "email": email,
		"password": password, "current": password, "new": password, "role": tenants.RoleOwner}
	for _, op := range bus.ServerConfigOps {
		if op == bus.OpTenantDelete.Name || op == bus.OpTenantSuspend.Name {
			continue
		}
		if r := string(raw(op, req)); strings.Contains(r, "$argon2") || strings.Contains(r, "password_hash") {
			t.Errorf("%s answered a password hash: %s", op, r)
		}
	}

	// The lookup by email that answered the hash: refused by NATS.
	if _, err := e.server.Request(bus.ConfigPrefix+".user.by_email", []byte(`{"email":"`+email+`"}`), time.Second); err == nil {
		t.Fatal("user.by_email answered a server")
	}
	expectViolation(t, e.errs, bus.ConfigPrefix+".user.by_email")
	// And any subject under the config prefix a server has no use for.
	if _, err := e.server.Request(bus.ConfigPrefix+".user.anything", nil, time.Second); err == nil {
		t.Fatal("an operation outside the server's list answered")
	}
	expectViolation(t, e.errs, bus.ConfigPrefix+".user.anything")
}

func eventuallyOK(t *testing.T, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// expectViolation waits for NATS to report a permission violation naming
// subject.
func expectViolation(t *testing.T, errc chan error, subject string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case err := <-errc:
			if strings.Contains(strings.ToLower(err.Error()), "permissions violation") && strings.Contains(err.Error(), subject) {
				return
			}
		case <-timeout:
			t.Fatalf("no permission violation reported for %s", subject)
		}
	}
}
