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
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/tick"
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

type lease struct {
	Node    string `json:"node"`
	Expires int64  `json:"expires"` // unix ms
	// Instance and Holder are set on member entries: which process holds
	// the node name, and where it runs.
	Instance string `json:"instance,omitempty"`
	Holder   string `json:"holder,omitempty"`
	// Prev is the revision a partition lease replaced, when its writer
	// held the partition's state (see writtenLease.resumes).
	Prev uint64 `json:"prev,omitempty"`
	// The direct listener's address, key, host and certificate
	// fingerprint (member entries of servers that have one).
	Fwd     string `json:"fwd,omitempty"`
	FwdKey  string `json:"fwd_key,omitempty"`
	FwdHost string `json:"fwd_host,omitempty"`
	FwdCert string `json:"fwd_cert,omitempty"`
	// FwdIDs says the listener reads forwarded items' ids (wire.go), so
	// an owner remembers a repeated item; peers that do not say so get
	// frames without them, which their decoders read.
	FwdIDs bool `json:"fwd_ids,omitempty"`
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

// writtenLease is a lease write of this process: the owners bucket's
// incarnation and the revision the write got.
type writtenLease struct {
	inc int64
	rev uint64
}

type ownerEntry struct {
	node     string
	expires  int64 // unix ms
	revision uint64
	// instance wrote the entry; prev is the revision it replaced (lease).
	instance string
	prev     uint64
	// gen is the watch generation that last confirmed the entry: an entry
	// older than the current watch's initial values is gone from the bucket.
	gen uint64
}

// Cluster is one server's view of partition ownership. It is safe for
// concurrent use.
type Cluster struct {
	cfg   Config
	log   *slog.Logger
	nc    *nats.Conn
	js    jetstream.JetStream
	hooks Hooks

	mu     sync.Mutex
	owners [bus.Partitions]ownerEntry // from the KV watch and our own writes
	// written[p] is the lease revision this process last wrote for p, and
	// the incarnation of the bucket it wrote it in (see acquire).
	written [bus.Partitions]writtenLease
	gen     uint64           // watch generation, one per (re)open
	members map[string]int64 // node -> expires (unix ms)

	// synced is the incarnation (creation time, unix ns) of the owners
	// bucket the owner table was read from; watching is the one the watch
	// is reading now. Absent leases are not taken until the bucket is
	// LeaseTTL old.
	synced, watching atomic.Int64
	// rewatch asks the watch to reopen on a new incarnation.
	rewatch chan struct{}
	// freed is signalled when the watch sees a lease deleted (a server
	// giving partitions back): the loop ticks at once instead of at its
	// next RenewInterval, so a clean hand-over takes no extra interval.
	freed chan struct{}

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
	// live is how many members the member loop last counted (at least 1).
	live atomic.Int64
	// ownerOf[p] is the owner node other servers forward p's checks to.
	ownerOf [bus.Partitions]atomic.Pointer[string]

	owners_, members_ jetstream.KeyValue
	// memberRev is the revision of this process's member entry; a write
	// at another revision means someone else wrote our node name.
	memberRev atomic.Uint64
	// failed receives the error that made this member leave the cluster
	// for good (its node name taken by another live process).
	failed   chan error
	conflict atomic.Bool
	// claimWarned is when a failed open or claim was last logged (Start
	// only).
	claimWarned time.Time
	// reachedAt is when a tick last reached NATS; until graceUntil, other
	// servers' lapsed leases are left to them (tick; the loop's only).
	reachedAt, graceUntil time.Time
	renewWarned           time.Time // when unanswered renewals were last logged (the loop's only)
	// tableStale: lease requests got no answer since the owner table was
	// last read whole (the loop's only).
	tableStale bool
	fwd        *forwarder
	// self is what this server publishes about its direct listener; peers
	// is what the other members published, by node, as of the last tick.
	self      atomic.Pointer[peerInfo]
	peers     atomic.Pointer[map[string]peerInfo]
	metrics   clusterMetrics
	changed   chan struct{} // closed and replaced on every ownership change
	changedMu sync.Mutex
	stop      context.CancelFunc
	done      sync.WaitGroup
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
		members: map[string]int64{}, changed: make(chan struct{}), rewatch: make(chan struct{}, 1), freed: make(chan struct{}, 1), failed: make(chan error, 1)}
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

// Failed receives an error when this member had to leave the cluster for
// good: another live process wrote its node name. The process should stop.
func (c *Cluster) Failed() <-chan error { return c.failed }

// Start joins the cluster: it opens the KV buckets, claims the node name
// (a *NodeTakenError when another live process holds it), starts watching
// leases and runs the lease loop in the background until Close.
func (c *Cluster) Start(ctx context.Context) error {
	if err := c.openBuckets(ctx); err != nil {
		return err
	}
	if err := c.claim(ctx); err != nil {
		return err
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	c.done.Go(func() { c.watch(loopCtx) })
	c.live.Store(int64(c.liveMembers(ctx, c.cfg.Now())))
	c.done.Go(func() { c.loop(loopCtx) })
	c.done.Go(func() { c.memberLoop(loopCtx) })
	return nil
}

// openBuckets creates the buckets, or binds to them, retrying until ctx
// ends. It runs once, before the loops start.
func (c *Cluster) openBuckets(ctx context.Context) error {
	for {
		o, m, err := c.createBuckets(ctx)
		if err == nil {
			c.owners_, c.members_ = o, m
			return nil
		} else if ctx.Err() != nil {
			return fmt.Errorf("cluster: open kv: %w", err)
		} else if now := time.Now(); now.Sub(c.claimWarned) >= 5*time.Second {
			c.claimWarned = now
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

// claim makes this process the holder of its node name in the members
// bucket. An entry of another instance that is still live may be this
// server's previous life (restarted within LeaseTTL) or another process:
// only a live process renews it, so claim waits until the entry would have
// expired, plus a renew interval, and looks again. Renewed means taken.
func (c *Cluster) claim(ctx context.Context) error {
	for {
		now := c.cfg.Now()
		e, err := c.members_.Get(ctx, c.cfg.Node)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			rev, err := c.members_.Create(ctx, c.cfg.Node, c.memberValue(now))
			if err == nil {
				c.memberRev.Store(rev)
				return nil
			}
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return c.retryClaim(ctx, err)
			}
			continue // someone wrote it meanwhile: look at it
		case err != nil:
			if err := c.retryClaim(ctx, err); err != nil {
				return err
			}
			continue
		}
		var l lease
		_ = json.Unmarshal(e.Value(), &l)
		if l.Instance != c.cfg.Instance && l.Expires > now.UnixMilli() {
			wait := time.UnixMilli(l.Expires).Sub(now) + c.cfg.RenewInterval
			c.log.Info("node name held by a live entry; waiting to see whether it is renewed", "node", c.cfg.Node, "holder", l.Holder, "wait_ms", wait.Milliseconds())
			sleep(ctx, wait)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			again, err := c.members_.Get(ctx, c.cfg.Node)
			if err == nil && again.Revision() != e.Revision() {
				var l2 lease
				_ = json.Unmarshal(again.Value(), &l2)
				if l2.Instance != c.cfg.Instance && l2.Expires > c.cfg.Now().UnixMilli() {
					return &NodeTakenError{Node: c.cfg.Node, Holder: l2.Holder}
				}
			}
			if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
				if err := c.retryClaim(ctx, err); err != nil {
					return err
				}
			}
			continue
		}
		rev, err := c.members_.Update(ctx, c.cfg.Node, c.memberValue(now), e.Revision())
		if err == nil {
			if l.Instance != "" && l.Instance != c.cfg.Instance {
				c.log.Info("took over the node name from an entry nobody renewed (this server's previous run, or a stopped one)", "node", c.cfg.Node, "previous_holder", l.Holder)
			}
			c.memberRev.Store(rev)
			return nil
		}
		// Another write came first: look again.
	}
}

func (c *Cluster) retryClaim(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("cluster: claim node name %q: %w", c.cfg.Node, err)
	}
	if now := time.Now(); now.Sub(c.claimWarned) >= 5*time.Second {
		c.claimWarned = now
		c.log.Warn("claiming the node name in the members bucket failed; retrying", "node", c.cfg.Node, "err", err)
	}
	sleep(ctx, 250*time.Millisecond)
	return nil
}

func (c *Cluster) memberValue(now time.Time) []byte {
	l := lease{Node: c.cfg.Node, Expires: now.Add(c.cfg.LeaseTTL).UnixMilli(), Instance: c.cfg.Instance, Holder: c.cfg.Holder}
	if self := c.self.Load(); self != nil {
		l.Fwd, l.FwdKey, l.FwdHost, l.FwdCert, l.FwdIDs = self.Addr, self.Key, self.Host, self.Cert, self.IDs
	}
	b, _ := json.Marshal(l)
	return b
}

// heartbeat renews this process's member entry at the revision it wrote
// last. When that fails because another live instance wrote the entry, two
// processes share the node name: this one gives up every partition, stops
// taking any and reports on Failed, so the cluster never runs with two
// servers under one name.
func (c *Cluster) heartbeat(ctx context.Context, now time.Time) {
	val := c.memberValue(now)
	rev, err := c.members_.Update(ctx, c.cfg.Node, val, c.memberRev.Load())
	if err == nil {
		c.memberRev.Store(rev)
		return
	}
	e, gerr := c.members_.Get(ctx, c.cfg.Node)
	if gerr == nil {
		var l lease
		_ = json.Unmarshal(e.Value(), &l)
		if l.Instance != c.cfg.Instance && l.Expires > now.UnixMilli() {
			c.leave(&NodeTakenError{Node: c.cfg.Node, Holder: l.Holder})
			return
		}
	} else if !errors.Is(gerr, jetstream.ErrKeyNotFound) {
		return // NATS does not answer; the next tick tries again
	}
	// Gone (a lost bucket) or expired: write it again.
	if rev, err := c.members_.Put(ctx, c.cfg.Node, val); err == nil {
		c.memberRev.Store(rev)
	}
}

// leave stops deciding for everything and reports err once.
func (c *Cluster) leave(err error) {
	if c.conflict.Swap(true) {
		return
	}
	c.log.Error("leaving the cluster", "node", c.cfg.Node, "err", err)
	for p := range bus.Partitions {
		if c.mine[p].Load() != 0 {
			c.lose(p, "node name taken by another server")
		}
	}
	select {
	case c.failed <- err:
	default:
	}
}

// incarnation reads the owners bucket's creation time (unix ns). When the
// buckets are gone (a NATS restart loses in-memory buckets) it makes them
// again and reports false, as it does while JetStream does not answer.
func (c *Cluster) incarnation(ctx context.Context) (int64, bool) {
	inc, err := bus.Incarnation(ctx, c.owners_)
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

func partKey(p int) string { return "p." + strconv.Itoa(p) }

func partOf(key string) (int, bool) {
	if len(key) < 3 || key[:2] != "p." {
		return 0, false
	}
	n, err := strconv.Atoi(key[2:])
	return n, err == nil && n >= 0 && n < bus.Partitions
}

// watch keeps the owner table current from the KV bucket, reopening the
// watch when NATS comes back after an outage or the buckets were recreated.
func (c *Cluster) watch(ctx context.Context) {
	for ctx.Err() == nil {
		select {
		case <-c.rewatch: // this open reads the new bucket anyway
		default:
		}
		c.mu.Lock()
		c.gen++
		gen := c.gen
		c.mu.Unlock()
		// The incarnation is read before the watch opens: if the bucket
		// is replaced in between, the next tick sees a newer one and asks
		// for another reopen.
		ictx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL)
		inc, ok := c.incarnation(ictx)
		cancel()
		if !ok {
			sleep(ctx, 250*time.Millisecond)
			continue
		}
		c.watching.Store(inc)
		w, err := c.owners_.WatchAll(ctx)
		if err != nil {
			sleep(ctx, 250*time.Millisecond)
			continue
		}
		for ctx.Err() == nil {
			var e jetstream.KeyValueEntry
			var ok bool
			select {
			case <-ctx.Done():
			case <-c.rewatch:
				goto reopen
			case e, ok = <-w.Updates():
				if !ok {
					goto reopen
				}
			case <-time.After(5 * time.Second):
				if !c.nc.IsConnected() {
					goto reopen
				}
				continue
			}
			if e == nil { // end of the initial values
				c.forgetStale(gen)
				c.synced.Store(inc)
				continue
			}
			p, ok := partOf(e.Key())
			if !ok {
				continue
			}
			c.mu.Lock()
			if e.Operation() == jetstream.KeyValuePut {
				var l lease
				if json.Unmarshal(e.Value(), &l) == nil {
					c.owners[p] = ownerEntry{node: l.Node, expires: l.Expires, revision: e.Revision(), instance: l.Instance, prev: l.Prev, gen: gen}
				}
			} else {
				c.owners[p] = ownerEntry{revision: e.Revision(), gen: gen}
			}
			c.mu.Unlock()
			c.publishOwner(p)
			if e.Operation() != jetstream.KeyValuePut {
				select {
				case c.freed <- struct{}{}:
				default:
				}
			}
		}
	reopen:
		_ = w.Stop()
	}
}

// forgetStale drops the entries the watch of generation gen did not find
// in the bucket's initial values: those leases are gone. An owner whose
// lease is gone stops deciding for the partition.
func (c *Cluster) forgetStale(gen uint64) {
	for p := range bus.Partitions {
		c.mu.Lock()
		stale := c.owners[p].gen < gen
		if stale {
			c.owners[p] = ownerEntry{gen: gen}
		}
		c.mu.Unlock()
		if !stale {
			continue
		}
		if c.mine[p].Load() != 0 {
			c.lose(p, "lease gone from the bucket")
		} else {
			c.publishOwner(p)
		}
	}
}

// publishOwner refreshes the forward target of p from the table.
func (c *Cluster) publishOwner(p int) {
	now := c.cfg.Now().UnixMilli()
	c.mu.Lock()
	e := c.owners[p]
	c.mu.Unlock()
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
		case <-c.freed:
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
	if inc != c.synced.Load() {
		c.bucketReplaced(inc)
		return
	}
	if c.conflict.Load() {
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
		c.refreshOwners(ctx)
	}
	pl := planTick(c.view(now, slow, owned, unanswered))
	if pl.reached {
		c.reachedAt = now
	}
	if pl.healthy {
		c.healthyUntil.Store(sent.Add(c.cfg.LeaseTTL - c.cfg.Margin).UnixNano())
	}
	if pl.nodeOK {
		c.unstick.OK()
	} else {
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
	slow = !ok && ictx.Err() != nil && ctx.Err() == nil && c.synced.Load() != 0 && c.nc.IsConnected()
	if slow {
		return c.synced.Load(), true, true
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
	if inc != c.watching.Load() {
		select {
		case c.rewatch <- struct{}{}:
		default:
		}
	}
}

// view gathers what planTick decides from, as this tick sees it.
func (c *Cluster) view(now time.Time, slow bool, owned, unanswered int) view {
	v := view{now: now, node: c.cfg.Node, instance: c.cfg.Instance, leaseTTL: c.cfg.LeaseTTL,
		owned: owned, unanswered: unanswered, live: int(c.live.Load()), graceUntil: c.graceUntil,
		slow: slow, conflict: c.conflict.Load(), canLoad: c.hooks.CanLoad == nil || c.hooks.CanLoad()}
	c.mu.Lock()
	v.table, v.written = c.owners, c.written
	v.inc = c.synced.Load()
	c.mu.Unlock()
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

// memberLoop renews this server's member entry and counts the live
// members every RenewInterval. It runs beside the lease loop, so that on a
// slow link the member reads (a listing is several round trips) never
// delay a lease renewal.
func (c *Cluster) memberLoop(ctx context.Context) {
	tick.Every(ctx, c.cfg.RenewInterval, func() {
		if c.conflict.Load() || c.synced.Load() == 0 {
			return
		}
		now := c.cfg.Now()
		mctx, cancel := context.WithTimeout(ctx, c.renewTimeout())
		c.heartbeat(mctx, now)
		if !c.conflict.Load() {
			c.live.Store(int64(c.liveMembers(mctx, now)))
		}
		cancel()
	})
}

// renewTimeout is how long one round of lease requests may wait for NATS:
// half a lease, so that a slow link's answers still count, while a renewal
// answered that late still leaves the owner most of its lease.
func (c *Cluster) renewTimeout() time.Duration {
	return max(c.cfg.RenewInterval, c.cfg.LeaseTTL/2)
}

// renew renews every lease this server holds at once, and returns how many
// it holds afterwards and how many renewals got no answer.
func (c *Cluster) renew(ctx context.Context, exp int64) (owned, unanswered int) {
	rctx, cancel := context.WithTimeout(ctx, c.renewTimeout())
	defer cancel()
	var held, failed atomic.Int64
	var wg sync.WaitGroup
	for p := range bus.Partitions {
		c.mu.Lock()
		e := c.owners[p]
		c.mu.Unlock()
		if e.node != c.cfg.Node || c.mine[p].Load() == 0 {
			if c.mine[p].Load() != 0 {
				c.lose(p, "lease taken by another server")
			}
			continue
		}
		wg.Go(func() {
			err := c.setLease(rctx, p, e.revision, exp)
			if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
				// Our own earlier renewal may have landed with its answer
				// lost, and the watch not have shown it yet: renew again at
				// the revision it got.
				err = c.renewOwnLanded(rctx, p, e.revision, exp, err)
			}
			switch {
			case err == nil:
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

// refreshOwners reads every partition's lease and takes into the owner
// table those newer than what it holds. Deletions are left to the watch.
func (c *Cluster) refreshOwners(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, c.renewTimeout())
	defer cancel()
	var wg sync.WaitGroup
	for p := range bus.Partitions {
		wg.Go(func() {
			cur, err := c.owners_.Get(rctx, partKey(p))
			if err != nil {
				return
			}
			var l lease
			if json.Unmarshal(cur.Value(), &l) == nil && c.learn(p, l, cur.Revision()) {
				c.publishOwner(p)
			}
		})
	}
	wg.Wait()
}

// renewOwnLanded renews p at the bucket's current revision when the entry
// there is this process's renewal of rev (one whose answer never came);
// otherwise it returns refused, the error of the renewal at rev.
func (c *Cluster) renewOwnLanded(ctx context.Context, p int, rev uint64, exp int64, refused error) error {
	cur, err := c.owners_.Get(ctx, partKey(p))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return refused
		}
		return err // no answer: the lease runs out on its own
	}
	var l lease
	if json.Unmarshal(cur.Value(), &l) != nil {
		return refused
	}
	if l.Node != c.cfg.Node || l.Instance != c.cfg.Instance || l.Prev != rev {
		// Another server's lease: the table learns it now, not when the
		// watch delivers it, so that checks forward to the new owner.
		c.learn(p, l, cur.Revision())
		return refused
	}
	return c.setLease(ctx, p, cur.Revision(), exp)
}

// learn takes lease l, read at revision rev, into the owner table when it
// is newer than the entry there, and reports whether it was; the caller
// publishes the change.
func (c *Cluster) learn(p int, l lease, rev uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev <= c.owners[p].revision {
		return false
	}
	c.owners[p] = ownerEntry{node: l.Node, expires: l.Expires, revision: rev, instance: l.Instance, prev: l.Prev, gen: c.owners[p].gen}
	return true
}

// liveMembers counts the members whose entries have not run out (at least
// this server), reading them at once, and notes their direct listeners.
func (c *Cluster) liveMembers(ctx context.Context, now time.Time) int {
	keys, err := c.members_.ListKeys(ctx)
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
			if e, err := c.members_.Get(ctx, k); err == nil {
				var l lease
				if json.Unmarshal(e.Value(), &l) == nil {
					entries[i] = &l
				}
			}
		})
	}
	wg.Wait()
	live := 0
	peers := map[string]peerInfo{}
	for _, l := range entries {
		if l != nil && l.Expires > now.UnixMilli() {
			live++
			if l.Fwd != "" {
				peers[l.Node] = peerInfo{Addr: l.Fwd, Key: l.FwdKey, Host: l.FwdHost, Cert: l.FwdCert, IDs: l.FwdIDs}
			}
		}
	}
	c.peers.Store(&peers)
	return max(live, 1)
}

// setLease writes our lease for p at the revision we hold.
func (c *Cluster) setLease(ctx context.Context, p int, rev uint64, exp int64) error {
	b, _ := json.Marshal(lease{Node: c.cfg.Node, Expires: exp, Instance: c.cfg.Instance, Prev: rev})
	nrev, err := c.owners_.Update(ctx, partKey(p), b, rev)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.owners[p] = ownerEntry{node: c.cfg.Node, expires: exp, revision: nrev, instance: c.cfg.Instance, prev: rev, gen: c.gen}
	c.written[p] = writtenLease{inc: c.synced.Load(), rev: nrev}
	c.mu.Unlock()
	c.own(p, exp)
	return nil
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
	c.mu.Lock()
	resume := c.written[p].resumes(seen, c.synced.Load(), c.cfg.Node, c.cfg.Instance)
	c.mu.Unlock()
	// Only a resumed lease names the revision it replaced: a takeover that
	// is written but not answered must not look like a renewal of state
	// this server holds.
	l := lease{Node: c.cfg.Node, Expires: exp, Instance: c.cfg.Instance}
	if resume {
		l.Prev = seen.revision
	}
	b, _ := json.Marshal(l)
	actx, cancel := context.WithTimeout(ctx, c.cfg.RenewInterval)
	var rev uint64
	var err error
	if seen.revision != 0 {
		rev, err = c.owners_.Update(actx, partKey(p), b, seen.revision)
	}
	if err != nil && resume {
		resume = false
		l.Prev = 0
		b, _ = json.Marshal(l)
	}
	if seen.revision == 0 || err != nil {
		// Never written, deleted (a delete marker's revision is not always
		// accepted by Update), or gone with a lost bucket: Create succeeds
		// only where no lease is, so it never takes a live one.
		rev, err = c.owners_.Create(actx, partKey(p), b)
	}
	cancel()
	if err != nil {
		return false // someone else was faster: their write reaches us by the watch
	}
	c.mu.Lock()
	c.owners[p] = ownerEntry{node: c.cfg.Node, expires: exp, revision: rev, instance: c.cfg.Instance, prev: l.Prev, gen: c.gen}
	c.written[p] = writtenLease{} // until the state is loaded
	c.mu.Unlock()
	held := func() {
		c.mu.Lock()
		c.written[p] = writtenLease{inc: c.synced.Load(), rev: rev}
		c.mu.Unlock()
	}
	if resume {
		held()
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
		err := c.hooks.Acquired(lctx, p, bus.LeaseID{Incarnation: c.synced.Load(), Revision: rev})
		cancel()
		if err != nil {
			c.log.Warn("loading a taken-over partition failed; giving it back", "partition", p, "err", err)
			// Also when ctx ended (a shutdown): the lease would hold p
			// for a lease time otherwise.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = c.owners_.Delete(dctx, partKey(p), jetstream.LastRevision(rev))
			cancel()
			return false
		}
	}
	held()
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
	if c.conflict.Load() {
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
	c.mu.Lock()
	e := c.owners[p]
	c.mu.Unlock()
	if e.node == c.cfg.Node {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = c.owners_.Delete(dctx, partKey(p), jetstream.LastRevision(e.revision))
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
	if until == 0 || now.UnixNano() >= until || c.conflict.Load() {
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
	if c.members_ != nil && !c.conflict.Load() && c.memberRev.Load() != 0 {
		// Only our own entry: never one another process wrote since.
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = c.members_.Delete(dctx, c.cfg.Node, jetstream.LastRevision(c.memberRev.Load()))
		cancel()
	}
	c.fwd.close()
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
