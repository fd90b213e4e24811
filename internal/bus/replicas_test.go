package bus

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestCountServers(t *testing.T) {
	for _, tc := range []struct {
		urls []string
		want int
	}{
		{nil, 0},
		{[]string{"nats://a:4222"}, 1},
		{[]string{"nats://a:4222", "tls://a:4222", "nats://b:4222", "nats://c:4222"}, 3},
		{[]string{"not a url", "nats://a:4222"}, 1},
	} {
		if got := countServers(tc.urls); got != tc.want {
			t.Errorf("countServers(%v) = %d, want %d", tc.urls, got, tc.want)
		}
	}
}

// On a single NATS the automatic choice is one replica, and a set value is
// taken as it is. A bucket that exists with fewer replicas than asked is
// reported as a warning naming it, and opened all the same.
func TestReplicasOnASingleNATS(t *testing.T) {
	nc := inProcessNATS(t, "replicas")
	if got := ResolveReplicas(nc, 0); got != 1 {
		t.Fatalf("automatic replicas on one NATS: %d, want 1", got)
	}
	if got := ResolveReplicas(nc, 3); got != 3 {
		t.Fatalf("asked for 3: %d", got)
	}
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := EnsureStreams(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	if n, err := StreamReplicas(ctx, js, StateStream); err != nil || n != 1 {
		t.Fatalf("state stream replicas: %d, %v", n, err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: MembersBucket, History: 1, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	CheckReplicas(ctx, js, 3, log, KVStream(MembersBucket), StateStream, "NO_SUCH_STREAM")
	for _, want := range []string{`"stream":"KV_sluice_members","replicas":1,"want":3`, `"stream":"SLUICE_STATE","replicas":1,"want":3`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no warning with %s in:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), "NO_SUCH_STREAM") {
		t.Errorf("a missing stream was reported:\n%s", logs.String())
	}
	logs.Reset()
	CheckReplicas(ctx, js, 1, log, KVStream(MembersBucket), StateStream)
	if logs.Len() != 0 {
		t.Errorf("warned although the replicas are as asked:\n%s", logs.String())
	}
	// Raising fails on a single NATS (it cannot keep three copies): the
	// stream keeps what it has, and the failure is said.
	logs.Reset()
	if err := RaiseReplicas(ctx, js, 3, log, StateStream); err == nil {
		t.Fatal("raising to 3 replicas on one NATS reported success")
	}
	if n, _ := StreamReplicas(ctx, js, StateStream); n != 1 || !strings.Contains(logs.String(), "raising a stream's replicas failed") {
		t.Fatalf("after a failed raise: %d replicas, logs:\n%s", n, logs.String())
	}
}
