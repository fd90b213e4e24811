package bus

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A sign-out on one server is seen by another through the real KV bucket,
// and a revoked session stops counting once it would have expired anyway.
func TestSessionRevocationsAcrossServers(t *testing.T) {
	ctx, open := sessionServers(t)
	a, b := open(), open()
	if a.Revoked("sid-1") || b.Revoked("sid-1") {
		t.Fatal("a session is revoked before sign-out")
	}
	if err := a.Revoke(ctx, "sid-1", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !a.Revoked("sid-1") {
		t.Fatal("the signing-out server still accepts the session")
	}
	deadline := time.Now().Add(time.Second)
	for !b.Revoked("sid-1") {
		if time.Now().After(deadline) {
			t.Fatal("another server did not see the sign-out within 1 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if b.Revoked("sid-2") {
		t.Fatal("an unrelated session is revoked")
	}
	// A server started later loads what was revoked before it.
	if c := open(); !c.Revoked("sid-1") {
		t.Fatal("a new server does not know an earlier sign-out")
	}
	// Past its expiry the entry no longer matters (the session is dead).
	if err := a.Revoke(ctx, "sid-old", time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if a.Revoked("sid-old") {
		t.Fatal("an expired session's revocation still counts")
	}
}

// If NATS loses the bucket, the servers make it again and keep watching
// it: a sign-out afterwards still reaches every server.
func TestSessionRevocationsOutliveALostBucket(t *testing.T) {
	ctx, open := sessionServers(t)
	a, b := open(), open()
	if err := a.js.DeleteKeyValue(ctx, RevokedSessionsBucket); err != nil {
		t.Fatal(err)
	}
	if err := a.Revoke(ctx, "sid-1", time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("sign-out with the bucket gone: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !b.Revoked("sid-1") {
		if time.Now().After(deadline) {
			t.Fatal("another server did not see the sign-out made after the bucket was lost")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sessionServers starts a real embedded NATS server and returns a context
// for the test and a function that opens one server's revocations on its
// own connection.
func sessionServers(t *testing.T) (context.Context, func() *SessionRevocations) {
	ns, err := StartEmbedded(EmbeddedConfig{DataDir: t.TempDir(), Name: "sessions-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx, func() *SessionRevocations {
		nc, err := nats.Connect(ns.ClientURL(), nats.InProcessServer(ns))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		r, err := OpenSessionRevocations(ctx, js, time.Hour, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
}
