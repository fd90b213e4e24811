package engine

// The flush protocol, server side. Allowed, consuming decisions mark their
// bucket dirty in the hot cache; denied ones and peeks do not, so abuse
// costs no writes. Every FlushInterval the dirty buckets are drained into
// a pending map (a newer state of a key replaces an older one still
// pending), published to the state stream in batches, and removed from the
// pending map only once JetStream has acked them. Publishing failures leave
// them pending for the next round, so nothing is dropped while NATS or the
// worker is away; a kill -9 loses at most what was drained in the last
// FlushInterval and not yet acked.
//
// The publisher owns all of it: the pending states, counter batches and
// quota crossings (quotaevents.go), the partition terms states carry, and
// the state formats the worker reads. Decisions only mark buckets dirty and
// add to the counters; the publisher drains both. flushMu and countersMu
// are never held together, and neither is held while a decision runs.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/tick"
)

const (
	maxBucketsPerBatch = 1000
	maxRowsPerBatch    = 2000
)

// publisher publishes what this server's decisions owe the worker: bucket
// states to the state stream, decision counters to the counter stream and
// quota crossings to the quota stream. It is safe for concurrent use.
type publisher struct {
	cfg      *Config // the engine's, read for Node, Now, Replicas and the intervals
	log      *slog.Logger
	nc       *nats.Conn
	js       jetstream.JetStream
	dirty    dirtyBuckets
	counters *counterAgg
	view     func() *view // the config view, for a state's term (termOf)
	metrics  publishMetrics
	// cluster is set in a cluster (SetCluster): a state flush's success
	// keeps this server deciding as an owner (Persisted).
	cluster persistWatcher

	flushMu sync.Mutex // one state flush at a time; guards pendingStates
	// countersMu guards pendingCounters: counters flush on their own, so
	// that a slow counter publish never delays the state flush whose
	// success keeps an owner deciding (cluster.Persisted).
	countersMu    sync.Mutex
	pendingStates map[string]bus.BucketRecord
	// pendingStatesPeak is the most entries pendingStates has held since
	// it was last made (shrinkPendingStates).
	pendingStatesPeak int
	pendingCounters   []pendingBatch
	crossings         crossingQueue
	batchSeq          atomic.Uint64
	epoch             int64
	// terms[p] is the fencing token this server was given when it last
	// loaded partition p as its owner (LoadPartition); states it decides
	// for p carry it, and the worker refuses them once another server has
	// loaded p since. 0: never owned.
	terms [bus.Partitions]atomic.Uint64

	statesPublished atomic.Uint64
	rowsPublished   atomic.Uint64
	// packedStates is set while the worker reads packed state batches
	// (its version reply says so), which cost far less to encode and
	// decode than JSON; until then, and with an older worker, JSON.
	packedStates atomic.Bool
	fencedStates atomic.Bool // the worker also reads bus.FencedStateFormat
}

// dirtyBuckets is where the states of allowed decisions wait: the hot cache.
type dirtyBuckets interface {
	DrainDirty(fn func(key string, limits []quota.Limit, states []quota.State, fullAt int64))
}

var _ dirtyBuckets = (*quota.Cache)(nil)

// persistWatcher is what the publisher tells the cluster: which decisions
// are persisted, and how long an owner may decide past its last persisted
// flush.
type persistWatcher interface {
	Persisted(t time.Time)
	LossWindow() time.Duration
}

var _ persistWatcher = (*cluster.Cluster)(nil)

// publishMetrics are the engine's metrics the publisher keeps.
type publishMetrics struct {
	flushBuckets     prometheus.Histogram
	flushCounters    prometheus.Histogram
	flushFailures    *prometheus.CounterVec
	published        prometheus.Counter
	natsLag          prometheus.Gauge
	crossingsDropped prometheus.Counter // quota crossings never reported (quotaevents.go)
}

func newPublisher(cfg *Config, log *slog.Logger, nc *nats.Conn, js jetstream.JetStream, dirty dirtyBuckets, counters *counterAgg, view func() *view, m publishMetrics) *publisher {
	p := &publisher{
		cfg: cfg, log: log, nc: nc, js: js,
		dirty: dirty, counters: counters, view: view, metrics: m,
		pendingStates: map[string]bus.BucketRecord{},
		epoch:         time.Now().UnixNano(),
	}
	p.crossings.dropped = m.crossingsDropped
	return p
}

// run starts the publishing loops on wg until ctx ends.
func (p *publisher) run(ctx context.Context, wg *sync.WaitGroup) {
	wg.Go(func() { tick.Every(ctx, p.cfg.FlushInterval, func() { p.flushStates(ctx) }) })
	wg.Go(func() { tick.Every(ctx, p.cfg.CounterInterval, func() { p.flushCounters(ctx) }) })
	wg.Go(func() { tick.Every(ctx, p.cfg.CounterInterval, func() { p.flushCrossings(ctx) }) })
}

// flushAll publishes everything pending, again every 100 ms until it is
// all out or ctx ends (the shutdown path); it fails when something is left.
func (p *publisher) flushAll(ctx context.Context) error {
	for {
		p.flushStates(ctx)
		p.flushCounters(ctx)
		p.flushCrossings(ctx)
		if p.pendingCount()+p.pendingCrossings() == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("engine: %d batches still unpublished at shutdown", p.pendingCount())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// workerReads notes the state batch forms the worker's version reply lists.
func (p *publisher) workerReads(formats []string) {
	p.packedStates.Store(slices.Contains(formats, bus.PackedStateFormat))
	p.fencedStates.Store(slices.Contains(formats, bus.FencedStateFormat))
}

// stats returns the running totals.
func (p *publisher) stats() Stats {
	return Stats{StatesPublished: p.statesPublished.Load(), CounterRowsPublished: p.rowsPublished.Load()}
}

// adoptTerm makes term the one states of partition part carry from now
// on, and drops the pending states of part with an older term, which the
// worker would refuse.
func (p *publisher) adoptTerm(part int, term uint64) {
	p.flushMu.Lock()
	defer p.flushMu.Unlock()
	p.terms[part].Store(term)
	for k, rec := range p.pendingStates {
		if rec.Term != 0 && rec.Term < term && bus.Partition([]byte(k)) == part {
			delete(p.pendingStates, k)
		}
	}
}

type pendingBatch struct {
	id   string
	data []byte
	rows int
	at   time.Time
}

func (p *publisher) pendingCount() int {
	p.flushMu.Lock()
	n := len(p.pendingStates)
	p.flushMu.Unlock()
	p.countersMu.Lock()
	defer p.countersMu.Unlock()
	return n + len(p.pendingCounters)
}

func (p *publisher) nextMsgID(kind string) string {
	return p.cfg.Node + "-" + strconv.FormatInt(p.epoch, 36) + "-" + kind + "-" + strconv.FormatUint(p.batchSeq.Add(1), 10)
}

// flushStates publishes the dirty buckets' states and reports whether
// every state pending when it began is now in the stream. In a cluster,
// each success tells the cluster that this server's decisions up to the
// flush's start are persisted (Cluster.Persisted): an owner whose flushes
// keep failing stops deciding before it has more to lose than the bound.
func (p *publisher) flushStates(ctx context.Context) bool {
	p.flushMu.Lock()
	defer p.flushMu.Unlock()
	began := p.cfg.Now()
	v := p.view()
	p.dirty.DrainDirty(func(key string, limits []quota.Limit, states []quota.State, fullAt int64) {
		tenant, policy, _, _ := bus.SplitBucketKey(key)
		term, ok := p.termOf(v, key, tenant, policy)
		if !ok {
			return
		}
		p.pendingStates[key] = bus.BucketRecord{
			Key: key, TenantID: tenant,
			Limits: bus.EncodeLimits(limits), States: bus.EncodeStates(states), FullAt: fullAt,
			Term: term,
		}
	})
	p.pendingStatesPeak = max(p.pendingStatesPeak, len(p.pendingStates))
	defer p.shrinkPendingStates()
	if len(p.pendingStates) == 0 {
		p.persisted(began)
		return true
	}
	batch := make([]bus.BucketRecord, 0, min(len(p.pendingStates), maxBucketsPerBatch))
	publish := func() bool {
		var data []byte
		if fenced := p.fencedStates.Load(); fenced || p.packedStates.Load() {
			data = bus.AppendPackedStateBatch(nil, p.cfg.Node, batch, fenced)
		} else {
			var err error
			if data, err = json.Marshal(bus.StateBatch{V: bus.WireVersion, Node: p.cfg.Node, Buckets: batch}); err != nil {
				p.log.Error("encode state batch", "err", err)
				return false
			}
		}
		pctx, cancel := context.WithTimeout(ctx, p.statePublishTimeout())
		_, err := p.js.Publish(pctx, bus.StateSubjectPrefix+p.cfg.Node, data, jetstream.WithMsgID(p.nextMsgID("s")))
		cancel()
		if err != nil {
			p.metrics.flushFailures.WithLabelValues(bus.StateStream).Inc()
			p.log.Warn("state flush failed; will retry", "buckets", len(batch), "pending", len(p.pendingStates), "err", err)
			p.restoreStreams(ctx, err)
			return false
		}
		for _, r := range batch {
			// Only drop what was sent: a newer state drained meanwhile
			// cannot be here, as draining holds flushMu too.
			delete(p.pendingStates, r.Key)
		}
		p.metrics.published.Add(float64(len(batch)))
		p.statesPublished.Add(uint64(len(batch)))
		p.metrics.flushBuckets.Observe(float64(len(batch)))
		batch = batch[:0]
		return true
	}
	for _, rec := range p.pendingStates {
		batch = append(batch, rec)
		if len(batch) == maxBucketsPerBatch && !publish() {
			return false
		}
	}
	if len(batch) > 0 && !publish() {
		return false
	}
	p.persisted(began)
	return true
}

// termOf is the partition term a drained state of key is published with:
// this server's term for the key's partition when the key's policy is
// decided by a partition owner (exact, in a cluster), else 0, which the
// worker never fences (a single server, a local-mode policy, whose every
// server publishes its own view). A state drained after this server lost
// the partition keeps the term it decided under, so the worker refuses it
// once another owner has loaded the partition. An exact policy's state on
// a server that never owned its partition (decided while the policy was
// local, say) is not published at all (ok false): unfenced, it would
// overwrite what the owner persisted. The owner's state is the one that
// counts.
func (p *publisher) termOf(v *view, key, tenant, policy string) (term uint64, ok bool) {
	if p.cluster == nil {
		return 0, true
	}
	if tv, ok := v.tenants.get(tenant); ok && tv != nil {
		if pv := tv.byID[policy]; pv != nil && pv.consistency == "local" {
			return 0, true
		}
	}
	term = p.terms[bus.Partition([]byte(key))].Load()
	// A worker that predates terms gives none (and fences nothing).
	return term, term != 0 || !p.fencedStates.Load()
}

// statePublishTimeout is how long a state batch may wait for JetStream's
// ack. In a cluster, an owner stops deciding LossWindow after its last
// persisted flush began, so a publish that waits much longer only delays
// the retry that would let it decide again.
func (p *publisher) statePublishTimeout() time.Duration {
	if p.cluster != nil {
		return 2 * p.cluster.LossWindow()
	}
	return 5 * time.Second
}

// persisted tells the cluster that every decision made before t is in the
// state stream.
func (p *publisher) persisted(t time.Time) {
	if p.cluster != nil {
		p.cluster.Persisted(t)
	}
}

// shrinkPendingStates gives back the memory of a pending-states map that a
// burst grew, once it is empty again: a Go map keeps its largest size, and
// after a million new callers that is tens of MiB held for nothing.
// flushMu must be held.
func (p *publisher) shrinkPendingStates() {
	if len(p.pendingStates) == 0 && p.pendingStatesPeak > shrinkPendingAbove {
		p.pendingStates = map[string]bus.BucketRecord{}
		p.pendingStatesPeak = 0
	}
}

// shrinkPendingAbove is the size past which an emptied pending-states map is
// replaced by a new one.
const shrinkPendingAbove = 4096

// flushCounters publishes decision counters. Batches keep their message id
// from their first attempt (a retry of a batch that did arrive is dropped by
// JetStream), so a batch is never rebuilt; and new batches are made only once
// the older ones are out. While NATS is away, new decisions therefore merge
// in the aggregate, one row per identity and minute, instead of piling up a
// batch per interval.
func (p *publisher) flushCounters(ctx context.Context) {
	p.countersMu.Lock()
	defer p.countersMu.Unlock()
	defer func() {
		if len(p.pendingCounters) > 0 {
			p.metrics.natsLag.Set(time.Since(p.pendingCounters[0].at).Seconds())
		} else {
			p.metrics.natsLag.Set(0)
		}
	}()
	if !p.publishCounters(ctx) {
		return
	}
	rows := p.counters.drain()
	now := time.Now()
	for len(rows) > 0 {
		n := min(len(rows), maxRowsPerBatch)
		data, err := json.Marshal(bus.CounterBatch{V: bus.WireVersion, Node: p.cfg.Node, Rows: rows[:n]})
		if err != nil {
			p.log.Error("encode counter batch", "err", err)
			break
		}
		p.pendingCounters = append(p.pendingCounters, pendingBatch{id: p.nextMsgID("c"), data: data, rows: n, at: now})
		rows = rows[n:]
	}
	p.publishCounters(ctx)
}

// publishCounters publishes the pending counter batches in order and
// reports whether all went out; countersMu must be held.
func (p *publisher) publishCounters(ctx context.Context) bool {
	return p.publishBatches(ctx, &p.pendingCounters, bus.CounterSubjectPrefix, bus.CounterStream, "counter flush failed; will retry", func(b pendingBatch) {
		p.metrics.flushCounters.Observe(float64(b.rows))
		p.rowsPublished.Add(uint64(b.rows))
	})
}

// publishBatches publishes *batches in order to prefix + this node, each
// with the message id it was made with (JetStream drops a retry of one that
// arrived), removing each once acked and passing it to sent (when not nil);
// at the first failure it counts and logs it, makes the streams again if
// they are gone, and reports false, keeping the rest for the next flush.
func (p *publisher) publishBatches(ctx context.Context, batches *[]pendingBatch, prefix, stream, failed string, sent func(pendingBatch)) bool {
	for len(*batches) > 0 {
		b := (*batches)[0]
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := p.js.Publish(pctx, prefix+p.cfg.Node, b.data, jetstream.WithMsgID(b.id))
		cancel()
		if err != nil {
			p.metrics.flushFailures.WithLabelValues(stream).Inc()
			p.log.Warn(failed, "batches", len(*batches), "err", err)
			p.restoreStreams(ctx, err)
			return false
		}
		if sent != nil {
			sent(b)
		}
		*batches = (*batches)[1:]
	}
	return true
}

// restoreStreams makes the state and counter streams again when a publish
// failed because no stream took it: NATS lost them (its data directory
// wiped, a stream deleted). The pending batches then go out at the next
// flush and wait in the stream, durably, for the worker, which adopts the
// new streams by itself.
func (p *publisher) restoreStreams(ctx context.Context, err error) {
	if !errors.Is(err, jetstream.ErrNoStreamResponse) {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	made, err := bus.RestoreStreamsMade(sctx, p.js, bus.StreamLimits{Replicas: bus.ResolveReplicas(p.nc, p.cfg.Replicas)})
	if len(made) > 0 {
		p.log.Warn("streams were gone (NATS lost them); made them again", "streams", made)
	}
	if err != nil {
		p.log.Warn("making the state and counter streams again failed; will retry", "err", err)
	}
}

// waitStreams polls until JetStream answers and has the streams, making
// those that are missing (restoreStreamsOnce), or ctx ends.
func (p *publisher) waitStreams(ctx context.Context) error {
	return bus.WaitStreams(ctx, p.js, p.restoreStreamsOnce, p.log, nil)
}

// restoreStreamsOnce makes the streams that are missing, at start, and
// reports streams that have fewer replicas than this server asks for.
func (p *publisher) restoreStreamsOnce(ctx context.Context, js jetstream.JetStream) error {
	replicas := bus.ResolveReplicas(p.nc, p.cfg.Replicas)
	if err := bus.RestoreStreams(ctx, js, replicas); err != nil {
		return err
	}
	bus.CheckReplicas(ctx, js, replicas, p.log, bus.StateStream, bus.CounterStream, bus.QuotaStream)
	return nil
}
