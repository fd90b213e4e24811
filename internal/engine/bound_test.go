package engine

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
)

// A state stream at its max bytes bound refuses a flush: the server keeps
// the bucket state pending (nothing is dropped) and publishes it at the
// first flush after the worker has drained the stream.
func TestFlushRefusedByAFullStreamKeepsState(t *testing.T) {
	snap, _ := snapshot(t)
	e := newTestEngine(t, snap)
	ctx := context.Background()
	if err := bus.EnsureStreamsWith(bus.StreamLimits{MaxBytes: 32 << 10})(ctx, e.pub.js); err != nil {
		t.Fatal(err)
	}
	// Fill the state stream to the brim, as a backlog the worker has not
	// applied would.
	for _, size := range []int{4 << 10, 512, 64, 1} {
		for i := 0; ; i++ {
			if _, err := e.pub.js.Publish(ctx, bus.StateSubjectPrefix+"other", make([]byte, size)); err != nil {
				break
			}
			if i > 1000 {
				t.Fatal("the stream never refused a message")
			}
		}
	}
	if a, err := e.Check(t.Context(), "ten_a", &CheckRequest{IP: "192.0.2.1", Path: "/api/example?mode=heavy"}, time.Now()); err != nil || !a.Allowed {
		t.Fatalf("check: %+v %v", a, err)
	}
	e.pub.flushStates(ctx)
	if got := e.Stats().StatesPublished; got != 0 {
		t.Fatalf("%d states published into a full stream", got)
	}
	if e.pub.pendingCount() == 0 {
		t.Fatal("the refused state was dropped instead of kept pending")
	}
	// The worker drains the stream.
	s, err := e.pub.js.Stream(ctx, bus.StateStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(bus.StateSubjectPrefix+"other")); err != nil {
		t.Fatal(err)
	}
	e.pub.flushStates(ctx)
	if got := e.Stats().StatesPublished; got != 1 {
		t.Fatalf("%d states published after the drain, want 1", got)
	}
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("stream holds %+v, %v; want the one kept state", info.State, err)
	}
}
