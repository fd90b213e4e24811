package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/tenants"
)

// configSync keeps the engine's config view current: it applies the
// changes the worker announces, in version order, and loads a whole
// snapshot when one was missed (a gap, an unreadable change) or when the
// worker's version, asked every interval, is ahead.
type configSync struct {
	nc         *nats.Conn
	log        *slog.Logger
	view       *atomic.Pointer[view] // the engine's
	interval   time.Duration         // how often the worker's version is asked
	resyncs    prometheus.Counter
	workerSeen *atomic.Int64          // when the worker last answered (unix ns)
	formats    func(formats []string) // told the state forms the worker reads
	reset      func(key string)       // a bucket reset by a change
	// issuersLoaded and issuersChanged tell the key set fetcher (jwks.go)
	// the JWT issuers of a new snapshot, or a write's changes; either may
	// be nil.
	issuersLoaded  func([]tenants.JWTIssuer)
	issuersChanged func([]tenants.Change)

	mu       sync.Mutex // serialises view swaps
	requests chan struct{}
}

// resync replaces the view with a fresh snapshot.
func (cs *configSync) resync(ctx context.Context) error {
	snap, err := bus.LoadSnapshot(ctx, cs.nc)
	if err != nil {
		return fmt.Errorf("load config snapshot: %w", err)
	}
	v, err := viewFromSnapshot(snap)
	if err != nil {
		return fmt.Errorf("build config view: %w", err)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cur := cs.view.Load()
	if cur.version > v.version {
		return nil // changes applied meanwhile are newer than this snapshot
	}
	v.carryKeyUse(cur)
	cs.view.Store(v)
	if cs.issuersLoaded != nil {
		cs.issuersLoaded(snap.JWTIssuers)
	}
	return nil
}

// onChange applies an announced config change (all the changes of one
// committed write, one version) in version order; a gap (a message missed
// during a disconnect) triggers a resync.
func (cs *configSync) onChange(m *nats.Msg) {
	var msg bus.ChangeMsg
	if err := json.Unmarshal(m.Data, &msg); err != nil || msg.V != bus.WireVersion || len(msg.Changes) == 0 {
		cs.log.Error("unreadable config change", "err", err)
		cs.request()
		return
	}
	version := msg.Changes[0].Version
	cs.mu.Lock()
	cur := cs.view.Load()
	switch {
	case version <= cur.version:
		cs.mu.Unlock()
		return
	case version > cur.version+1:
		cs.mu.Unlock()
		cs.log.Info("config change gap; resynchronising", "have", cur.version, "got", version)
		cs.request()
		return
	}
	nv := cur
	for _, c := range msg.Changes {
		var err error
		if nv, err = nv.apply(c); err != nil {
			cs.mu.Unlock()
			cs.log.Error("apply config change failed; resynchronising", "version", version, "err", err)
			cs.request()
			return
		}
	}
	cs.view.Store(nv)
	if cs.issuersChanged != nil {
		cs.issuersChanged(msg.Changes)
	}
	cs.mu.Unlock()
	for _, c := range msg.Changes {
		if c.Kind == tenants.ChangeBucketReset && c.BucketReset != nil {
			key := BucketKey(c.TenantID, c.BucketReset.PolicyID, c.BucketReset.Identity.Kind, c.BucketReset.Identity.ID)
			cs.reset(key)
		}
		cs.log.Info("config change applied", "version", version, "kind", c.Kind, "tenant", c.TenantID)
	}
}

// request asks the loop for a resync, unless one is asked already.
func (cs *configSync) request() {
	select {
	case cs.requests <- struct{}{}:
	default:
	}
}

// resyncLoop resynchronises on request and, every ResyncInterval, asks the
// worker for its config version so a server that missed the last change
// (and so saw no gap) still catches up.
func (cs *configSync) loop(ctx context.Context) {
	t := time.NewTicker(cs.interval)
	defer t.Stop()
	// behind asks the worker for its config version, and notes the state
	// batch forms it reads.
	behind := func() bool {
		var ver bus.Version
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := bus.Request(rctx, cs.nc, bus.OpVersion.Subject(), bus.None{}, &ver)
		cancel()
		if err != nil {
			return false
		}
		cs.workerSeen.Store(time.Now().UnixNano())
		cs.formats(ver.StateFormats)
		return ver.Version > cs.view.Load().version
	}
	for need := behind(); ; need = false {
		if !need {
			select {
			case <-ctx.Done():
				return
			case <-cs.requests:
			case <-t.C:
				if !behind() {
					continue
				}
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := cs.resync(rctx); err != nil {
			cs.log.Warn("config resync failed", "err", err)
		} else {
			cs.resyncs.Inc()
			cs.log.Info("config resynchronised", "version", cs.view.Load().version)
		}
		cancel()
	}
}
