package engine

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// readiness is what decides whether this server may answer (Engine.Ready)
// and take partitions over (Engine.WorkerAnswers): the config and the first
// page of buckets are in, the NATS connection is up, the worker answers.
type readiness struct {
	// hydrated: the config and the first page of buckets are in.
	hydrated atomic.Bool
	// connected mirrors nc.IsConnected, kept by watch: asking the
	// connection itself takes its lock, which publishing holds, so checks
	// would queue behind every flush.
	connected atomic.Bool
	// workerSeen is when the worker last answered the version poll (unix
	// ns), kept by configSync.
	workerSeen atomic.Int64
}

// ready reports whether the server may answer requests: hydrated and
// connected to NATS.
func (r *readiness) ready() bool {
	return r.hydrated.Load() && r.connected.Load()
}

// watch keeps connected current until ctx ends: at once on a status
// change, and every 100 ms in case a change was dropped from the full
// status channel.
func (r *readiness) watch(ctx context.Context, nc *nats.Conn) {
	ch := nc.StatusChanged()
	defer nc.RemoveStatusListener(ch)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		r.connected.Store(nc.IsConnected())
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-t.C:
		}
	}
}
