package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/tick"
)

// membership is this process's entry in the members bucket: it holds the
// node name (claim, heartbeat), counts the live members and notes their
// direct listeners, and leaves the cluster for good when another live
// process writes the name. It is safe for concurrent use.
type membership struct {
	cfg Config
	log *slog.Logger
	kv  jetstream.KeyValue // the members bucket; set once, before the loops start
	// onLeave stops the server deciding for everything it owns (leave).
	onLeave func()

	// rev is the revision of this process's member entry; a write at
	// another revision means someone else wrote our node name.
	rev atomic.Uint64
	// failed receives the error that made this member leave the cluster
	// for good (its node name taken by another live process).
	failed   chan error
	conflict atomic.Bool
	// warned is when a failed open or claim was last logged (Start only).
	warned time.Time
	// live is how many members the member loop last counted (at least 1).
	live atomic.Int64
	// self is what this server publishes about its direct listener; peers
	// is what the other members published, by node, as of the last count.
	self  atomic.Pointer[peerInfo]
	peers atomic.Pointer[map[string]peerInfo]
	// placed is whether every live member announced customer placement
	// at the last count (false before the first).
	placed atomic.Bool
}

func newMembership(cfg Config, log *slog.Logger, onLeave func()) membership {
	return membership{cfg: cfg, log: log, onLeave: onLeave, failed: make(chan error, 1)}
}

// claim makes this process the holder of its node name in the members
// bucket. An entry of another instance that is still live may be this
// server's previous life (restarted within LeaseTTL) or another process:
// only a live process renews it, so claim waits until the entry would have
// expired, plus a renew interval, and looks again. Renewed means taken.
func (m *membership) claim(ctx context.Context) error {
	for {
		now := m.cfg.Now()
		e, err := m.kv.Get(ctx, m.cfg.Node)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			rev, err := m.kv.Create(ctx, m.cfg.Node, m.memberValue(now))
			if err == nil {
				m.rev.Store(rev)
				return nil
			}
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return m.retryClaim(ctx, err)
			}
			continue // someone wrote it meanwhile: look at it
		case err != nil:
			if err := m.retryClaim(ctx, err); err != nil {
				return err
			}
			continue
		}
		var l lease
		_ = json.Unmarshal(e.Value(), &l)
		if l.Instance != m.cfg.Instance && l.Expires > now.UnixMilli() {
			wait := time.UnixMilli(l.Expires).Sub(now) + m.cfg.RenewInterval
			m.log.Info("node name held by a live entry; waiting to see whether it is renewed", "node", m.cfg.Node, "holder", l.Holder, "wait_ms", wait.Milliseconds())
			sleep(ctx, wait)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			again, err := m.kv.Get(ctx, m.cfg.Node)
			if err == nil && again.Revision() != e.Revision() {
				var l2 lease
				_ = json.Unmarshal(again.Value(), &l2)
				if l2.Instance != m.cfg.Instance && l2.Expires > m.cfg.Now().UnixMilli() {
					return &NodeTakenError{Node: m.cfg.Node, Holder: l2.Holder}
				}
			}
			if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
				if err := m.retryClaim(ctx, err); err != nil {
					return err
				}
			}
			continue
		}
		rev, err := m.kv.Update(ctx, m.cfg.Node, m.memberValue(now), e.Revision())
		if err == nil {
			if l.Instance != "" && l.Instance != m.cfg.Instance {
				m.log.Info("took over the node name from an entry nobody renewed (this server's previous run, or a stopped one)", "node", m.cfg.Node, "previous_holder", l.Holder)
			}
			m.rev.Store(rev)
			return nil
		}
		// Another write came first: look again.
	}
}

func (m *membership) retryClaim(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("cluster: claim node name %q: %w", m.cfg.Node, err)
	}
	if now := time.Now(); now.Sub(m.warned) >= 5*time.Second {
		m.warned = now
		m.log.Warn("claiming the node name in the members bucket failed; retrying", "node", m.cfg.Node, "err", err)
	}
	sleep(ctx, 250*time.Millisecond)
	return nil
}

func (m *membership) memberValue(now time.Time) []byte {
	l := lease{Node: m.cfg.Node, Expires: now.Add(m.cfg.LeaseTTL).UnixMilli(), Instance: m.cfg.Instance, Holder: m.cfg.Holder,
		Concurrency: true, Customers: m.cfg.CustomerPlacement}
	if self := m.self.Load(); self != nil {
		l.Fwd, l.FwdKey, l.FwdHost, l.FwdCert, l.FwdIDs, l.FwdLeases = self.Addr, self.Key, self.Host, self.Cert, self.IDs, self.Leases
	}
	b, _ := json.Marshal(l)
	return b
}

// heartbeat renews this process's member entry at the revision it wrote
// last. When that fails because another live instance wrote the entry, two
// processes share the node name: this one gives up every partition, stops
// taking any and reports on Failed, so the cluster never runs with two
// servers under one name.
func (m *membership) heartbeat(ctx context.Context, now time.Time) {
	val := m.memberValue(now)
	rev, err := m.kv.Update(ctx, m.cfg.Node, val, m.rev.Load())
	if err == nil {
		m.rev.Store(rev)
		return
	}
	e, gerr := m.kv.Get(ctx, m.cfg.Node)
	if gerr == nil {
		var l lease
		_ = json.Unmarshal(e.Value(), &l)
		if l.Instance != m.cfg.Instance && l.Expires > now.UnixMilli() {
			m.leave(&NodeTakenError{Node: m.cfg.Node, Holder: l.Holder})
			return
		}
	} else if !errors.Is(gerr, jetstream.ErrKeyNotFound) {
		return // NATS does not answer; the next tick tries again
	}
	// Gone (a lost bucket) or expired: write it again.
	if rev, err := m.kv.Put(ctx, m.cfg.Node, val); err == nil {
		m.rev.Store(rev)
	}
}

// leave stops deciding for everything (onLeave) and reports err once.
func (m *membership) leave(err error) {
	if m.conflict.Swap(true) {
		return
	}
	m.log.Error("leaving the cluster", "node", m.cfg.Node, "err", err)
	m.onLeave()
	select {
	case m.failed <- err:
	default:
	}
}

// loop renews this server's member entry and counts the live members
// every RenewInterval, once synced reports the owner table read. It runs
// beside the lease loop, so that on a slow link the member reads (a
// listing is several round trips) never delay a lease renewal.
func (m *membership) loop(ctx context.Context, synced func() bool) {
	tick.Every(ctx, m.cfg.RenewInterval, func() {
		if m.conflict.Load() || !synced() {
			return
		}
		now := m.cfg.Now()
		mctx, cancel := context.WithTimeout(ctx, m.cfg.renewTimeout())
		m.heartbeat(mctx, now)
		if !m.conflict.Load() {
			m.live.Store(int64(m.liveMembers(mctx, now)))
		}
		cancel()
	})
}

// liveMembers counts the members whose entries have not run out (at least
// this server), reading them at once, and notes their direct listeners.
func (m *membership) liveMembers(ctx context.Context, now time.Time) int {
	keys, err := m.kv.ListKeys(ctx)
	if err != nil {
		return 1
	}
	var names []string
	for k := range keys.Keys() {
		names = append(names, k)
	}
	entries := make([]*lease, len(names))
	var wg sync.WaitGroup
	for i, k := range names {
		wg.Go(func() {
			if e, err := m.kv.Get(ctx, k); err == nil {
				var l lease
				if json.Unmarshal(e.Value(), &l) == nil {
					entries[i] = &l
				}
			}
		})
	}
	wg.Wait()
	live, placed, unread := 0, 0, false
	peers := map[string]peerInfo{}
	for _, l := range entries {
		unread = unread || l == nil
		if l != nil && l.Expires > now.UnixMilli() {
			live++
			if l.Customers {
				placed++
			}
			if l.Fwd != "" {
				peers[l.Node] = peerInfo{Addr: l.Fwd, Key: l.FwdKey, Host: l.FwdHost, Cert: l.FwdCert, IDs: l.FwdIDs, Leases: l.FwdLeases}
			}
		}
	}
	m.peers.Store(&peers)
	m.placed.Store(m.cfg.CustomerPlacement && !unread && live > 0 && placed == live)
	return max(live, 1)
}

// remove deletes this process's member entry when it is still our own:
// never one another process wrote since.
func (m *membership) remove(ctx context.Context) {
	if m.kv != nil && !m.conflict.Load() && m.rev.Load() != 0 {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = m.kv.Delete(dctx, m.cfg.Node, jetstream.LastRevision(m.rev.Load()))
		cancel()
	}
}
