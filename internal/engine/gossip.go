package engine

// Local consistency. A local policy's checks are decided by every server
// from its own cache (decide.go); each server sums what it admitted per
// bucket and, every LocalFlushInterval, tells the others in one message on
// bus.LocalPrefix + its node. They force that consumption into their own
// buckets (and give refunds back), so overshoot is bounded by what the
// servers admit before they hear of each other. A lost message is not sent
// again: local policies trade that for latency.

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/quota"
)

// LocalFlushInterval is how often local-mode consumption is shared.
const LocalFlushInterval = 50 * time.Millisecond

type delta struct {
	Key    string `json:"k"`
	Tenant string `json:"t"`
	Policy string `json:"p"`
	Tier   string `json:"ti,omitempty"`
	KeyID  string `json:"ki,omitempty"`
	Cost   int64  `json:"c"`
	// Since is, for a settle's refund, when its reservation took the
	// units (unix ns): the receiver gives nothing back to a window that
	// began after it, as the sender did (quota.Limit.RefundSince). Absent
	// (0) for consumption and other refunds, and from older servers,
	// whose refunds are given back in the current window as before.
	Since int64 `json:"s,omitempty"`
}

type deltaMsg struct {
	V      int     `json:"v"`
	Node   string  `json:"node"`
	Deltas []delta `json:"deltas"`
}

// localGossip shares local-mode consumption between the servers of a
// cluster: what this server admitted goes out, what the others admitted
// comes into the hot cache. It is safe for concurrent use.
type localGossip struct {
	cfg     *Config // the engine's, read for Node and Now
	log     *slog.Logger
	nc      *nats.Conn
	buckets forcedBuckets
	view    func() *view // the config view, for a delta's limits
	// bound sends a delta of a caller with no bucket here, whose tenant
	// holds its bound of buckets, to its overflow bucket (overflow.go).
	bound *tenantBound

	mu sync.Mutex
	m  map[string]*delta // what this server admitted since the last flush
}

// forcedBuckets is where other servers' consumption goes: the hot cache.
type forcedBuckets interface {
	Force(key string, limits []quota.Limit, now, cost int64)
	RefundSince(key []byte, limits []quota.Limit, now, n, since int64, given []float64) bool
}

var _ forcedBuckets = (*quota.Cache)(nil)

func newLocalGossip(cfg *Config, log *slog.Logger, nc *nats.Conn, buckets forcedBuckets, view func() *view, bound *tenantBound) *localGossip {
	return &localGossip{cfg: cfg, log: log, nc: nc, buckets: buckets, view: view, bound: bound, m: map[string]*delta{}}
}

// subscribe starts applying the other servers' consumption.
func (g *localGossip) subscribe() error {
	_, err := g.nc.Subscribe(bus.LocalPrefix+"*", g.apply)
	return err
}

// add adds cost to what this server shares for key. A refund with a
// since (a settle's) is summed apart, per since: adding it to the key's
// consumption would give it back in whatever window the receiver is in.
func (g *localGossip) add(key, tenant, policy, tier, keyID string, cost, since int64) {
	mk := key
	if since != 0 {
		mk = key + "\x00" + strconv.FormatInt(since, 10)
	}
	g.mu.Lock()
	d := g.m[mk]
	if d == nil {
		d = &delta{Key: key, Tenant: tenant, Policy: policy, Tier: tier, KeyID: keyID, Since: since}
		g.m[mk] = d
	}
	d.Cost += cost
	g.mu.Unlock()
}

// flush tells the other servers what local-mode policies admitted here.
func (g *localGossip) flush() {
	g.mu.Lock()
	m := g.m
	if len(m) == 0 {
		g.mu.Unlock()
		return
	}
	g.m = make(map[string]*delta, len(m))
	g.mu.Unlock()
	msg := deltaMsg{V: bus.WireVersion, Node: g.cfg.Node, Deltas: make([]delta, 0, len(m))}
	// Consumption first, then the settles' refunds, as they happened here
	// for a refund of units consumed within the same flush.
	for _, d := range m {
		if d.Since == 0 {
			msg.Deltas = append(msg.Deltas, *d)
		}
	}
	for _, d := range m {
		if d.Since != 0 {
			msg.Deltas = append(msg.Deltas, *d)
		}
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return
	}
	if err := g.nc.Publish(bus.LocalPrefix+g.cfg.Node, data); err != nil {
		g.log.Warn("local-mode deltas not shared", "err", err)
	}
}

// apply forces other servers' local-mode consumption into this cache.
func (g *localGossip) apply(m *nats.Msg) {
	var msg deltaMsg
	if err := json.Unmarshal(m.Data, &msg); err != nil || msg.V != bus.WireVersion || msg.Node == g.cfg.Node {
		return
	}
	v := g.view()
	now := g.cfg.Now().UnixNano()
	for _, d := range msg.Deltas {
		limits := v.limitsFor(d.Tenant, d.Policy, d.Tier, d.KeyID)
		if len(limits) == 0 || d.Cost == 0 {
			continue
		}
		key := g.bound.route([]byte(d.Key), d.Tier, d.KeyID)
		if d.Cost > 0 {
			g.buckets.Force(string(key), limits, now, d.Cost)
		} else {
			// Refunds (settles below their estimate, negative hits)
			// outweighed consumption at the sender; a settle's refund
			// carries when its units were taken.
			g.buckets.RefundSince(key, limits, now, -d.Cost, d.Since, nil)
		}
	}
}
