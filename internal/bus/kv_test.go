package bus

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// LeaderEntry reads a key's latest value and revision, and tells a key
// with no value (never written, deleted) and a bucket that does not exist.
func TestLeaderEntry(t *testing.T) {
	nc := inProcessNATS(t, "leader-entry")
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := LeaderEntry(ctx, nc, "b", "k"); !errors.Is(err, ErrNoEntry) {
		t.Fatalf("never written: %v", err)
	}
	if _, err := kv.Put(ctx, "k", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "other", []byte("x")); err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(ctx, "k", []byte("two"))
	if err != nil {
		t.Fatal(err)
	}
	val, got, err := LeaderEntry(ctx, nc, "b", "k")
	if err != nil || string(val) != "two" || got != rev {
		t.Fatalf("got %q at %d, %v; want two at %d", val, got, err, rev)
	}
	if err := kv.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LeaderEntry(ctx, nc, "b", "k"); !errors.Is(err, ErrNoEntry) {
		t.Fatalf("deleted: %v", err)
	}
	if _, _, err := LeaderEntry(ctx, nc, "missing", "k"); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("no bucket: %v", err)
	}
}

// RestoreStreamsMade names the streams it had to make, and none when they
// were all there (NATS slow, not lost), so a warning says what happened.
func TestRestoreStreamsMade(t *testing.T) {
	nc := inProcessNATS(t, "restore-made")
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	for _, tc := range []struct {
		before func()
		want   string
	}{
		{func() {}, StateStream + " " + CounterStream + " " + QuotaStream},
		{func() {}, ""},
		{func() {
			if err := js.DeleteStream(ctx, CounterStream); err != nil {
				t.Fatal(err)
			}
		}, CounterStream},
	} {
		tc.before()
		made, err := RestoreStreamsMade(ctx, js, StreamLimits{Replicas: 1})
		if err != nil || strings.Join(made, " ") != tc.want {
			t.Fatalf("made %v, %v; want %q", made, err, tc.want)
		}
	}
}

// inProcessNATS starts an embedded NATS with JetStream for one test and
// connects to it in process.
func inProcessNATS(t *testing.T, name string) *nats.Conn {
	t.Helper()
	ns, err := StartEmbedded(EmbeddedConfig{DataDir: t.TempDir(), Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL(), nats.InProcessServer(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
