package worker

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
)

// backlogSync answers servers' syncs (bus.SyncSubject) and the first page
// of a hydration: it waits until what the state and counter streams held
// when asked is committed. While a sync waits, the worker applies what it
// fetched without waiting for ApplyInterval (applyDue reads waiting).
type backlogSync struct {
	js      jetstream.JetStream
	waiting atomic.Int32 // syncs waiting
}

// SyncReply reports the stream sequences the worker has committed.
type SyncReply struct {
	State    uint64 `json:"state"`
	Counters uint64 `json:"counters"`
}

// wait answers a sync request once every message that was in the two
// streams when it arrived has been committed and acked.
func (b *backlogSync) wait(ctx context.Context, _ struct{}) (SyncReply, error) {
	b.waiting.Add(1)
	defer b.waiting.Add(-1)
	var out SyncReply
	for i, stream := range []string{bus.StateStream, bus.CounterStream} {
		s, err := b.js.Stream(ctx, stream)
		if err != nil {
			return out, fmt.Errorf("sync: %w", err)
		}
		target := s.CachedInfo().State.LastSeq
		for {
			if b.committedThrough(ctx, s, stream, target) {
				break
			}
			select {
			case <-ctx.Done():
				return out, errs.Errorf(errs.Unavailable, "The worker is still catching up with its backlog; try again shortly.")
			case <-time.After(20 * time.Millisecond):
			}
		}
		if i == 0 {
			out.State = target
		} else {
			out.Counters = target
		}
	}
	return out, nil
}

// committedThrough reports whether every message of stream up to target
// has been committed. Either the worker's consumer acknowledged through
// it, or none of those messages is left in the stream: both streams are
// work queues, which drop a message once it is acknowledged, and the
// worker acknowledges only after COMMIT. The second test holds when the
// first does not: after a NATS node holding the consumer dies, or the
// worker makes its consumer anew, the consumer's ack floor can stay behind
// messages that are long gone.
func (b *backlogSync) committedThrough(ctx context.Context, s jetstream.Stream, stream string, target uint64) bool {
	if c, err := b.js.Consumer(ctx, stream, bus.WorkerDurable); err == nil {
		if info, err := c.Info(ctx); err == nil && info.AckFloor.Stream >= target {
			return true
		}
	}
	info, err := s.Info(ctx)
	return err == nil && (info.State.Msgs == 0 || info.State.FirstSeq > target)
}
