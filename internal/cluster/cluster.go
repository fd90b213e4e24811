// Package cluster gives every bucket key exactly one owner server at a
// time, agreed through NATS, and carries checks from the server that
// received them to the owner (forward.go).
//
// Partitions. A bucket key belongs to one of bus.Partitions partitions
// (bus.Partition, the same function on every process). Each partition has
// a lease in the JetStream KV bucket "sluice_owners": key "p.<n>", value
// {node, expires, instance, prev} (prev: see acquire). A server takes a
// free or expired lease with KV compare-and-set (Create, or Update at the
// revision it read), renews it every RenewInterval with Update at its
// revision, and treats itself as the owner only while its own clock is
// LeaseTTL-Margin inside the lease, so a server cut off from NATS stops
// deciding before anyone else may start. A server back from such an
// outage takes its own lapsed leases back unchanged when nobody wrote them
// meanwhile (acquire), and leaves the others' to them for a lease time
// (tick).
//
// Balance. Servers also heartbeat in "sluice_members". Each aims to own
// ceil(partitions / live servers): it takes free leases up to that share
// and gives back the excess. Giving back is graceful: the server stops
// deciding for the partition, flushes its state through NATS and waits for
// the worker to commit it, then deletes the lease. Taking over loads the
// partition's persisted state from the worker before deciding for it, so
// consumption survives a hand-over; a server that died loses at most its
// last flush interval, as on a single server.
//
// Node names. Leases and forwarded checks name servers by node, so two live
// processes under one name would both renew its leases and split its
// forwards. Each process holds its name through its entry in the members
// bucket, which carries a random instance id kept in memory: Start refuses
// a name whose entry another instance keeps renewing (NodeTakenError), and
// takes over one nobody renews (this server before a restart), waiting out
// the entry's TTL to tell the two apart. Renewals are compare-and-set on the
// entry's revision, so a member whose entry another instance overwrote
// notices, gives up its partitions and reports on Failed.
//
// Hand-over time is bounded by LeaseTTL + RenewInterval (+ the load): with
// the defaults, 2 s + 0.4 s. An owner stops deciding LeaseTTL - Margin
// (1.5 s) after its last renewal, so it rides out about 1.1 s of NATS
// unavailability before its partitions answer 503; a renewal that arrives
// later than that finds the lease still its own (nobody may take it before
// it expires) and it decides again.
//
// Lost buckets. The lease buckets are kept in memory, so a NATS restart
// loses them (a bucket can also be deleted by hand). A server that finds
// them gone recreates them. Every tick reads the owners bucket's creation
// time, its incarnation: when it differs from the one the owner table was
// read from, the server stops deciding for everything it owned (those
// leases went with the old bucket, and revisions of the old bucket mean
// nothing in the new one) and rereads the table before it renews or takes
// anything. Leases from the old bucket may still run on their owners'
// clocks, so nobody takes a partition whose lease is absent until the
// bucket is LeaseTTL old: the first start of a cluster waits that long too.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bus"
)

// KV buckets of the cluster (named in bus, whose roles grant them).
const (
	OwnersBucket  = bus.OwnersBucket
	MembersBucket = bus.MembersBucket
)

// Config tunes a Cluster. Zero fields take their defaults.
type Config struct {
	Node string
	// Instance tells this process from any other that uses, or used, the
	// same Node; a random one is made when empty. It lives in memory only.
	Instance string
	// Holder describes this process to another that finds its node name
	// taken (host, pid, HTTP address), for the operator to find it.
	Holder string
	// Replicas is how many NATS servers keep the lease buckets; 0 chooses
	// from the NATS the connection finds (bus.ResolveReplicas).
	Replicas      int
	LeaseTTL      time.Duration // default 2s
	RenewInterval time.Duration // default 400ms
	// Margin is how long before its lease runs out a server stops deciding
	// for the partition (clock skew allowance). Default 500ms.
	Margin time.Duration
	// PersistWindow is how long an owner decides past the start of its
	// last flush that reached the state stream (Persisted): what a cut-off
	// owner can forget. Default 1s, at most LeaseTTL - Margin.
	PersistWindow time.Duration
	Now           func() time.Time
	Log           *slog.Logger
	// Registerer receives the cluster's metrics; none when nil.
	Registerer prometheus.Registerer
	// Direct, when set, serves forwarded checks on a listener of this
	// server's own and forwards to other servers' listeners, NATS being
	// the fallback (direct.go). Nil: every forward goes over NATS.
	Direct *DirectConfig
	// CustomerPlacement announces, in this server's member entry, that it
	// places a customer's buckets in the customer's partition (bus's
	// customer placement). CustomerPlacement() reports whether every live
	// member announces it.
	CustomerPlacement bool
}

// Hooks are what the engine does around ownership changes.
type Hooks struct {
	// Acquired loads partition p's persisted state; it runs before the
	// server decides for p. An error gives the lease back. lease names
	// the lease write that took p, so that the worker can tell this
	// acquisition from an older one whose request arrives late.
	Acquired func(ctx context.Context, p int, lease bus.LeaseID) error
	// CanLoad reports whether Acquired can be expected to succeed (the
	// worker answers); nil means always. While it says no, the server only
	// takes back its own lapsed leases, which need no load.
	CanLoad func() bool
	// Releasing publishes p's pending state and waits until the worker has
	// committed it; it runs after the server stopped deciding for p and
	// before the lease is deleted.
	Releasing func(ctx context.Context, p int) error
}

// NodeTakenError is returned by Start when another live process holds this
// server's node name.
type NodeTakenError struct {
	Node   string
	Holder string
}

func (e *NodeTakenError) Error() string {
	return fmt.Sprintf("node name %q is held by another live server (%s): give each server its own --node, or leave --node unset for a unique default", e.Node, e.Holder)
}

// Cluster is one server's view of partition ownership. It is safe for
// concurrent use.
type Cluster struct {
	cfg   Config
	log   *slog.Logger
	nc    *nats.Conn
	js    jetstream.JetStream
	hooks Hooks

	// leases reads and writes the partition leases and keeps the owner
	// table (leases.go).
	leases leases

	// mine[p] is the unix ns until which this server decides for p; 0 when
	// it does not own p (or has not finished loading it).
	mine [bus.Partitions]atomic.Int64
	// persistedUntil is the unix ns until which this server may decide
	// without persisting: the start of its last flush that reached the
	// state stream plus LeaseTTL - Margin (Persisted). 0: no flush
	// reported yet, no limit.
	persistedUntil atomic.Int64
	// healthyUntil is the unix ns until which this server counts as able
	// to decide: the start of its last tick that reached the lease bucket
	// and renewed every lease it tried, plus LeaseTTL - Margin (Healthy).
	healthyUntil atomic.Int64
	unstick      *bus.Unstick
	// ownerOf[p] is the owner node other servers forward p's checks to.
	ownerOf [bus.Partitions]atomic.Pointer[string]

	// members holds this process's node name in the members bucket and
	// counts the live members (membership.go).
	members membership
	// reachedAt is when a tick last reached NATS; until graceUntil, other
	// servers' lapsed leases are left to them (tick; the loop's only).
	reachedAt, graceUntil time.Time
	renewWarned           time.Time // when unanswered renewals were last logged (the loop's only)
	// tableStale: lease requests got no answer since the owner table was
	// last read whole (the loop's only).
	tableStale bool
	fwd        *forwarder
	metrics    clusterMetrics
	changed    chan struct{} // closed and replaced on every ownership change
	changedMu  sync.Mutex
	stop       context.CancelFunc
	done       sync.WaitGroup
}

type clusterMetrics struct {
	owned     prometheus.GaugeFunc
	handovers *prometheus.CounterVec
	forwards  prometheus.Counter
	fwdBatch  prometheus.Histogram
	fwdTime   prometheus.Histogram
	served    prometheus.Counter
	// batches counts forward requests by transport (direct, nats).
	batches      *prometheus.CounterVec
	dialFailures prometheus.Counter
	rejected     *prometheus.CounterVec
	// renewFailures counts lease renewals that got no answer.
	renewFailures prometheus.Counter
}

// New prepares a cluster member; Start joins.
func New(cfg Config, nc *nats.Conn, hooks Hooks) (*Cluster, error) {
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	if cfg.RenewInterval <= 0 {
		cfg.RenewInterval = 400 * time.Millisecond
	}
	if cfg.Margin <= 0 {
		cfg.Margin = 500 * time.Millisecond
	}
	if cfg.PersistWindow <= 0 {
		cfg.PersistWindow = time.Second
	}
	cfg.PersistWindow = min(cfg.PersistWindow, cfg.LeaseTTL-cfg.Margin)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Instance == "" {
		cfg.Instance = nats.NewInbox()[len(nats.InboxPrefix):]
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, log: cfg.Log.With("component", "cluster"), nc: nc, js: js, hooks: hooks,
		changed: make(chan struct{})}
	// A member whose node name another process took stops deciding for
	// everything.
	c.members = newMembership(cfg, c.log, func() {
		for p := range bus.Partitions {
			if c.mine[p].Load() != 0 {
				c.lose(p, "node name taken by another server")
			}
		}
	})
	// An owner whose lease is gone stops deciding for the partition.
	c.leases = newLeases(cfg.Node, cfg.Instance, c.publishOwner, func(p int) {
		if c.mine[p].Load() != 0 {
			c.lose(p, "lease gone from the bucket")
		} else {
			c.publishOwner(p)
		}
	})
	c.unstick = bus.NewUnstick(nc, cfg.LeaseTTL+cfg.Margin, c.log)
	if err := c.initMetrics(); err != nil {
		return nil, err
	}
	c.fwd = newForwarder(c)
	return c, nil
}

func (c *Cluster) initMetrics() error {
	c.metrics = clusterMetrics{
		owned: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_cluster_owned_partitions", Help: "Partitions this server owns and decides for."},
			func() float64 { return float64(c.OwnedCount()) }),
		handovers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_cluster_handovers_total", Help: "Partition leases acquired (taken over and loaded), resumed (taken back unchanged, no load), released or lost."}, []string{"direction"}),
		forwards:  prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_cluster_forwards_total", Help: "Checks forwarded to their partition's owner."}),
		fwdBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_cluster_forward_batch_size", Help: "Checks per forward request.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		fwdTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_cluster_forward_seconds", Help: "Round trip of a forward request to the owner.",
			Buckets: []float64{25e-6, 50e-6, 75e-6, 100e-6, 125e-6, 150e-6, 200e-6, 300e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 50e-3}}),
		served: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_cluster_forwarded_checks_served_total", Help: "Checks other servers forwarded to this one."}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_cluster_forward_requests_total",
			Help: "Forward requests (batches) sent to owners, by transport: direct (a connection to the owner) or nats (the fallback)."}, []string{"transport"}),
		dialFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_cluster_peer_dial_failures_total",
			Help: "Direct connections to an owner that could not be made (dial, TLS or handshake); forwards went over NATS."}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_cluster_peer_rejected_total",
			Help: "Connections to this server's cluster listener closed for failing the handshake or sending a bad frame, by reason."}, []string{"reason"}),
		renewFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_cluster_lease_renewals_unanswered_total",
			Help: "Lease renewals that got no answer from NATS in time (the lease stays until it runs out)."}),
	}
	if c.cfg.Registerer != nil {
		if err := c.unstick.Register(c.cfg.Registerer); err != nil {
			return err
		}
		for _, m := range []prometheus.Collector{c.metrics.owned, c.metrics.handovers, c.metrics.forwards, c.metrics.fwdBatch, c.metrics.fwdTime, c.metrics.served,
			c.metrics.batches, c.metrics.dialFailures, c.metrics.rejected, c.metrics.renewFailures} {
			if err := c.cfg.Registerer.Register(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// Node is this server's name.
func (c *Cluster) Node() string { return c.cfg.Node }

// CustomerPlacement reports whether this server and every live member
// announced customer placement (Config.CustomerPlacement) when the members
// were last counted: only then may a bucket be placed with its customer,
// since an older member would look for it in another partition. It is
// false before the first count, and after a count that could not read
// every entry.
func (c *Cluster) CustomerPlacement() bool { return c.members.placed.Load() }

// Failed receives an error when this member had to leave the cluster for
// good: another live process wrote its node name. The process should stop.
func (c *Cluster) Failed() <-chan error { return c.members.failed }

// Start joins the cluster: it opens the KV buckets, claims the node name
// (a *NodeTakenError when another live process holds it), starts watching
// leases and runs the lease loop in the background until Close.
func (c *Cluster) Start(ctx context.Context) error {
	if err := c.openBuckets(ctx); err != nil {
		return err
	}
	if err := c.members.claim(ctx); err != nil {
		return err
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	c.done.Go(func() { c.leases.watch(loopCtx, c.incarnation, c.nc.IsConnected, c.cfg.LeaseTTL) })
	c.members.live.Store(int64(c.members.liveMembers(ctx, c.cfg.Now())))
	c.done.Go(func() { c.loop(loopCtx) })
	c.done.Go(func() { c.members.loop(loopCtx, func() bool { return c.leases.synced.Load() != 0 }) })
	return nil
}

// openBuckets creates the buckets, or binds to them, retrying until ctx
// ends. It runs once, before the loops start.
func (c *Cluster) openBuckets(ctx context.Context) error {
	for {
		o, m, err := c.createBuckets(ctx)
		if err == nil {
			c.leases.kv, c.members.kv = o, m
			return nil
		} else if ctx.Err() != nil {
			return fmt.Errorf("cluster: open kv: %w", err)
		} else if now := time.Now(); now.Sub(c.members.warned) >= 5*time.Second {
			c.members.warned = now
			c.log.Warn("opening the lease buckets failed; retrying", "err", err)
		}
		sleep(ctx, 250*time.Millisecond)
	}
}

func (c *Cluster) bucketConfigs() [2]jetstream.KeyValueConfig {
	r := bus.ResolveReplicas(c.nc, c.cfg.Replicas)
	return [...]jetstream.KeyValueConfig{
		{Bucket: OwnersBucket, History: 1, Storage: jetstream.MemoryStorage, Replicas: r},
		{Bucket: MembersBucket, History: 1, Storage: jetstream.MemoryStorage, Replicas: r},
	}
}

func (c *Cluster) createBuckets(ctx context.Context) (owners, members jetstream.KeyValue, err error) {
	cfgs := c.bucketConfigs()
	o, err1 := bus.OpenKeyValue(ctx, c.js, cfgs[0], c.log)
	m, err2 := bus.OpenKeyValue(ctx, c.js, cfgs[1], c.log)
	return o, m, errors.Join(err1, err2)
}

// incarnation reads the owners bucket's creation time (unix ns). When the
// buckets are gone (a NATS restart loses in-memory buckets) it makes them
// again and reports false, as it does while JetStream does not answer.
func (c *Cluster) incarnation(ctx context.Context) (int64, bool) {
	inc, err := bus.Incarnation(ctx, c.leases.kv)
	if errors.Is(err, jetstream.ErrBucketNotFound) && c.nc.IsConnected() {
		bctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL)
		defer cancel()
		for _, cfg := range c.bucketConfigs() {
			if made, err := bus.RestoreKeyValue(bctx, c.js, cfg); err != nil {
				c.log.Warn("making a lease bucket again failed; retrying", "bucket", cfg.Bucket, "err", err)
			} else if made {
				c.log.Warn("the lease bucket was gone (NATS restarted without it); made it again", "bucket", cfg.Bucket)
			}
		}
	}
	return inc, err == nil
}

// publishOwner refreshes the forward target of p from the table.
func (c *Cluster) publishOwner(p int) {
	now := c.cfg.Now().UnixMilli()
	e := c.leases.entry(p)
	if e.node == "" || e.expires <= now {
		c.ownerOf[p].Store(nil)
	} else {
		n := e.node
		c.ownerOf[p].Store(&n)
	}
	c.signal()
}

func (c *Cluster) signal() {
	c.changedMu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.changedMu.Unlock()
}

// Changed returns a channel closed at the next ownership change.
func (c *Cluster) Changed() <-chan struct{} {
	c.changedMu.Lock()
	defer c.changedMu.Unlock()
	return c.changed
}

func (c *Cluster) loop(ctx context.Context) {
	t := time.NewTicker(c.cfg.RenewInterval)
	defer t.Stop()
	for {
		c.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.leases.freed:
		}
	}
}

// tick renews leases, then moves toward this server's share: it reads,
// plans (plan.go) and applies. Renewals come first, right after the one
// read that tells the bucket is still the one the owner table came from,
// so that a slow link delays them by one round trip and not by the
// membership's reads.
func (c *Cluster) tick(ctx context.Context) {
	now := c.cfg.Now()
	inc, slow, ok := c.readIncarnation(ctx)
	if !ok {
		c.unstick.Failed()
		c.tableStale = true
		return // NATS does not answer: renewals would fail too
	}
	if !slow {
		if until, back := graceAfter(now, c.reachedAt, c.cfg.LeaseTTL, c.cfg.Margin); back {
			c.graceUntil = until
			c.log.Info("NATS answers again; other servers' lapsed leases are left to them for a lease time", "unanswered_seconds", now.Sub(c.reachedAt).Round(time.Millisecond).Seconds())
		}
		c.reachedAt = now
	}
	if inc != c.leases.synced.Load() {
		c.bucketReplaced(inc)
		return
	}
	if c.members.conflict.Load() {
		return
	}

	// Renew what we hold, all at once, so that the renewals take one round
	// trip to NATS and not one each. A renewal another write refused means
	// another server has the lease: the partition is lost at once. One that
	// got no answer (NATS slow or away) leaves the partition to run out at
	// the end of the lease already held, and the next tick tries again at
	// the revision the table then shows: a renewal that did land comes
	// back by the watch.
	// The lease runs from when its renewal is sent. The member entry is
	// renewed meanwhile.
	sent := c.cfg.Now()
	exp := sent.Add(c.cfg.LeaseTTL).UnixMilli()
	owned, unanswered := c.renew(ctx, exp)
	if slow || unanswered > 0 {
		c.tableStale = true
	} else if c.tableStale {
		// Back from requests that got no answer: the watch may have
		// missed what changed meanwhile (its consumer recovers on its
		// own, but only after several heartbeats), so read the leases
		// now, and checks find their partitions' new owners at once.
		c.tableStale = false
		c.leases.refresh(ctx, c.cfg.renewTimeout())
	}
	pl := planTick(c.view(now, slow, owned, unanswered))
	if pl.reached {
		c.reachedAt = now
	}
	if pl.healthy {
		c.healthyUntil.Store(sent.Add(c.cfg.LeaseTTL - c.cfg.Margin).UnixNano())
	}
	switch {
	case pl.nodeOK:
		c.unstick.OK()
	case slow:
		// Nothing answered, not even the read: a node that lost its
		// cluster, or the majority electing (bus.Unstick.Unanswered).
		c.unstick.Unanswered()
	default:
		c.unstick.Failed()
	}
	c.balance(ctx, pl, sent, exp)
}

// readIncarnation reads the owners bucket's incarnation for a tick. The
// owner table must come from the bucket as it is now. A read that gets no
// answer within a renew interval does not hold the renewals back (a slow
// link would cost a renewal a tick): a bucket NATS made anew answers at
// once, and its revisions would have to match ours exactly for a renewal
// to land in it. Such a tick is slow, and goes on with the incarnation the
// table was read from.
func (c *Cluster) readIncarnation(ctx context.Context) (inc int64, slow, ok bool) {
	ictx, cancel := context.WithTimeout(ctx, c.cfg.RenewInterval)
	defer cancel()
	inc, ok = c.incarnation(ictx)
	slow = !ok && ictx.Err() != nil && ctx.Err() == nil && c.leases.synced.Load() != 0 && c.nc.IsConnected()
	if slow {
		return c.leases.synced.Load(), true, true
	}
	return inc, false, ok
}

// bucketReplaced stops deciding for everything this server owned when the
// owners bucket is no longer the one the table was read from, and has the
// watch reopen on the new one.
func (c *Cluster) bucketReplaced(inc int64) {
	for p := range bus.Partitions {
		if c.mine[p].Load() != 0 {
			c.lose(p, "lease bucket replaced")
		}
	}
	c.leases.reopen(inc)
}

// view gathers what planTick decides from, as this tick sees it.
func (c *Cluster) view(now time.Time, slow bool, owned, unanswered int) view {
	v := view{now: now, node: c.cfg.Node, instance: c.cfg.Instance, leaseTTL: c.cfg.LeaseTTL,
		owned: owned, unanswered: unanswered, live: int(c.members.live.Load()), graceUntil: c.graceUntil,
		slow: slow, conflict: c.members.conflict.Load(), canLoad: c.hooks.CanLoad == nil || c.hooks.CanLoad()}
	v.table, v.written, v.inc = c.leases.snapshot()
	for p := range bus.Partitions {
		v.mine[p] = c.mine[p].Load() != 0
	}
	return v
}

// balance gives back and takes what pl says, one partition after another
// and then a wave at a time, for one renew interval at most, so that the
// next renewals come on time however slow NATS or the hand-overs are. The
// interval counts from here, since on a slow link the reads before may
// take that long themselves, but ends at the latest two intervals after
// the renewals were sent. Taken leases run until exp.
func (c *Cluster) balance(ctx context.Context, pl plan, sent time.Time, exp int64) {
	from := c.cfg.Now()
	spent := func() bool {
		t := c.cfg.Now()
		return t.Sub(from) >= c.cfg.RenewInterval || t.Sub(sent) >= 2*c.cfg.RenewInterval
	}
	for _, p := range pl.release {
		if spent() {
			break
		}
		if c.mine[p].Load() != 0 {
			c.release(ctx, p)
		}
	}
	cands, took := pl.acquire, 0
	for len(cands) > 0 && took < pl.want && ctx.Err() == nil && !spent() {
		var wave []claim
		wave, cands = nextWave(cands, pl.want, took)
		var n atomic.Int64
		var wg sync.WaitGroup
		for _, cand := range wave {
			wg.Go(func() {
				if c.acquire(ctx, cand.p, cand.seen, exp) {
					n.Add(1)
				}
			})
		}
		wg.Wait()
		took += int(n.Load())
	}
}

// renewTimeout is how long one round of lease or member requests may
// wait for NATS: half a lease, so that a slow link's answers still count,
// while a renewal answered that late still leaves the owner most of its
// lease.
func (cfg *Config) renewTimeout() time.Duration {
	return max(cfg.RenewInterval, cfg.LeaseTTL/2)
}

// renew renews every lease this server holds at once, and returns how many
// it holds afterwards and how many renewals got no answer.
func (c *Cluster) renew(ctx context.Context, exp int64) (owned, unanswered int) {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.renewTimeout())
	defer cancel()
	var held, failed atomic.Int64
	var wg sync.WaitGroup
	for p := range bus.Partitions {
		e := c.leases.entry(p)
		if e.node != c.cfg.Node || c.mine[p].Load() == 0 {
			if c.mine[p].Load() != 0 {
				c.lose(p, "lease taken by another server")
			}
			continue
		}
		wg.Go(func() {
			err := c.leases.renew(rctx, p, e.revision, exp)
			if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
				// Our own earlier renewal may have landed with its answer
				// lost, and the watch not have shown it yet: renew again at
				// the revision it got.
				err = c.leases.renewOwnLanded(rctx, p, e.revision, exp, err)
			}
			switch {
			case err == nil:
				c.own(p, exp)
				held.Add(1)
			case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyExists):
				c.lose(p, "lease renewal refused: another server wrote the lease")
			default:
				// Still ours until the lease runs out (Owns); counted as
				// held so that the balance does not take a replacement.
				held.Add(1)
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		c.metrics.renewFailures.Add(float64(n))
		if now := time.Now(); now.Sub(c.renewWarned) >= 5*time.Second {
			c.renewWarned = now
			c.log.Warn("lease renewals got no answer; the partitions stay this server's until their leases run out", "unanswered", n, "held", held.Load())
		}
	}
	return int(held.Load()), int(failed.Load())
}

// acquire takes p's lease, free or expired as seen, and loads p's state.
//
// Resuming. A server whose renewals failed for longer than its lease (a
// NATS node died, NATS did not answer) stops deciding for its partitions
// but keeps their buckets in memory. When the lease it finds is still the
// last one it wrote, the Update at that revision succeeds only if no other
// server has written the lease since, and no server decides for a
// partition without writing its lease: nobody else has decided for p
// meanwhile, so the buckets in memory are the latest and p is resumed
// without loading it from the worker. Checks then come back as soon as
// the lease bucket answers, whether or not the worker does.
func (c *Cluster) acquire(ctx context.Context, p int, seen ownerEntry, exp int64) bool {
	actx, cancel := context.WithTimeout(ctx, c.cfg.RenewInterval)
	rev, resume, err := c.leases.take(actx, p, seen, exp)
	cancel()
	if err != nil {
		return false // someone else was faster: their write reaches us by the watch
	}
	if resume {
		c.leases.loaded(p, rev)
		c.own(p, exp)
		c.publishOwner(p)
		c.metrics.handovers.WithLabelValues("resumed").Inc()
		c.log.Info("partition resumed: no other server owned it since this one lost its lease", "partition", p)
		return true
	}
	// Load the partition before deciding for it. Meanwhile forwarded checks
	// for p are refused as "not ready" and retried by their senders.
	loadStart := time.Now()
	if c.hooks.Acquired != nil {
		lctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL)
		err := c.hooks.Acquired(lctx, p, bus.LeaseID{Incarnation: c.leases.synced.Load(), Revision: rev})
		cancel()
		if err != nil {
			c.log.Warn("loading a taken-over partition failed; giving it back", "partition", p, "err", err)
			// Also when ctx ended (a shutdown): the lease would hold p
			// for a lease time otherwise.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			c.leases.drop(dctx, p, rev)
			cancel()
			return false
		}
	}
	c.leases.loaded(p, rev)
	c.own(p, exp)
	c.publishOwner(p)
	c.metrics.handovers.WithLabelValues("acquired").Inc()
	prev := seen.node
	if prev == "" {
		prev = "none"
	}
	c.log.Info("partition acquired", "partition", p, "previous_owner", prev, "load_ms", time.Since(loadStart).Milliseconds())
	return true
}

// own records that this server decides for p until its lease expires at
// exp (unix ms), less the safety margin. A member that left the cluster
// meanwhile (leave, another server under its name) decides for nothing: a
// renewal or takeover that was under way when it left is undone here.
func (c *Cluster) own(p int, exp int64) {
	c.mine[p].Store(time.UnixMilli(exp).Add(-c.cfg.Margin).UnixNano())
	if c.members.conflict.Load() {
		c.mine[p].Store(0)
	}
}

func (c *Cluster) lose(p int, why string) {
	c.mine[p].Store(0)
	c.publishOwner(p)
	c.metrics.handovers.WithLabelValues("lost").Inc()
	c.log.Warn("partition lost", "partition", p, "reason", why)
}

// release gives p back: its pending state flushed and committed, then
// its lease deleted. A release runs to its end (with timeouts of its own)
// even when ctx ends: a shutdown that cancels the loop in the middle of
// one would otherwise leave the lease to expire, and p unanswered for a
// lease time, since Close releases only what this server still decides
// for.
func (c *Cluster) release(ctx context.Context, p int) {
	ctx = context.WithoutCancel(ctx)
	c.mine[p].Store(0)
	if c.hooks.Releasing != nil {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := c.hooks.Releasing(rctx, p); err != nil {
			c.log.Warn("flushing a released partition failed; its lease will expire instead", "partition", p, "err", err)
			cancel()
			return
		}
		cancel()
	}
	if e := c.leases.entry(p); e.node == c.cfg.Node {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c.leases.drop(dctx, p, e.revision)
		cancel()
	}
	c.metrics.handovers.WithLabelValues("released").Inc()
	c.log.Info("partition released", "partition", p)
}

// Owns reports whether this server decides for partition p at now: it
// holds p's lease, and has persisted its decisions recently enough
// (Persisted).
func (c *Cluster) Owns(p int, now time.Time) bool {
	until := c.mine[p].Load()
	if until == 0 || now.UnixNano() >= until || c.members.conflict.Load() {
		return false
	}
	pu := c.persistedUntil.Load()
	return pu == 0 || now.UnixNano() < pu
}

// Persisted tells the cluster that every decision this server made before
// t is in the state stream (a flush that began at t was acknowledged).
// From then on an owner decides only while its last such flush began
// within PersistWindow: one whose flushes keep failing stops deciding, as
// one whose renewals fail does, so that what a fault can make it forget is
// bounded by that time whatever the fault (LossWindow).
func (c *Cluster) Persisted(t time.Time) {
	until := t.Add(c.LossWindow()).UnixNano()
	for {
		old := c.persistedUntil.Load()
		if until <= old || c.persistedUntil.CompareAndSwap(old, until) {
			return
		}
	}
}

// LossWindow is the longest an owner decides past the start of its last
// persisted flush (PersistWindow, 1 s by default). A server cut off,
// paused or killed forgets at most the decisions it made in that long
// before it stopped; the worker fences off whatever it publishes later.
func (c *Cluster) LossWindow() time.Duration { return c.cfg.PersistWindow }

// Healthy reports whether this server can decide at now: its last tick
// reached the lease bucket and renewed every lease it tried within
// LeaseTTL - Margin, and (once its flushes are reported) its last persisted flush
// began within it. A server cut off from NATS, or on a NATS node that lost
// its cluster, turns unhealthy within a lease time whatever its TCP
// connection says.
func (c *Cluster) Healthy(now time.Time) bool {
	if now.UnixNano() >= c.healthyUntil.Load() {
		return false
	}
	pu := c.persistedUntil.Load()
	return pu == 0 || now.UnixNano() < pu
}

// Owner returns the server other servers should forward p's checks to.
func (c *Cluster) Owner(p int) (string, bool) {
	n := c.ownerOf[p].Load()
	if n == nil {
		return "", false
	}
	return *n, true
}

// OwnedCount is how many partitions this server decides for now.
func (c *Cluster) OwnedCount() int {
	now := c.cfg.Now()
	n := 0
	for p := range bus.Partitions {
		if c.Owns(p, now) {
			n++
		}
	}
	return n
}

// Close gives every partition back gracefully and leaves the cluster.
func (c *Cluster) Close(ctx context.Context) {
	if c.stop != nil {
		c.stop()
		c.done.Wait()
	}
	// Every owned partition stops deciding first, then all are released
	// at once: each release's flush and wait for the worker then covers
	// the others too, and the hand-over takes one round instead of one
	// per partition.
	var owned []int
	for p := range bus.Partitions {
		if c.mine[p].Load() != 0 {
			c.mine[p].Store(0)
			owned = append(owned, p)
		}
	}
	var wg sync.WaitGroup
	for _, p := range owned {
		wg.Go(func() { c.release(ctx, p) })
	}
	wg.Wait()
	c.members.remove(ctx)
	c.fwd.close()
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
