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

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/quota"
)

const (
	maxBucketsPerBatch = 1000
	maxRowsPerBatch    = 2000
)

type pendingBatch struct {
	id   string
	data []byte
	rows int
	at   time.Time
}

func (e *Engine) pendingCount() int {
	e.flushMu.Lock()
	n := len(e.pendingStates)
	e.flushMu.Unlock()
	e.countersMu.Lock()
	defer e.countersMu.Unlock()
	return n + len(e.pendingCounters)
}

func (e *Engine) nextMsgID(kind string) string {
	return e.cfg.Node + "-" + strconv.FormatInt(e.epoch, 36) + "-" + kind + "-" + strconv.FormatUint(e.batchSeq.Add(1), 10)
}

// flushStates publishes the dirty buckets' states and reports whether
// every state pending when it began is now in the stream. In a cluster,
// each success tells the cluster that this server's decisions up to the
// flush's start are persisted (Cluster.Persisted): an owner whose flushes
// keep failing stops deciding before it has more to lose than the bound.
func (e *Engine) flushStates(ctx context.Context) bool {
	e.flushMu.Lock()
	defer e.flushMu.Unlock()
	began := e.cfg.Now()
	v := e.view.Load()
	e.cache.DrainDirty(func(key string, limits []quota.Limit, states []quota.State, fullAt int64) {
		tenant, policy, _, _ := bus.SplitBucketKey(key)
		term, ok := e.termOf(v, key, tenant, policy)
		if !ok {
			return
		}
		e.pendingStates[key] = bus.BucketRecord{
			Key: key, TenantID: tenant,
			Limits: bus.EncodeLimits(limits), States: bus.EncodeStates(states), FullAt: fullAt,
			Term: term,
		}
	})
	e.pendingStatesPeak = max(e.pendingStatesPeak, len(e.pendingStates))
	defer e.shrinkPendingStates()
	if len(e.pendingStates) == 0 {
		e.persisted(began)
		return true
	}
	batch := make([]bus.BucketRecord, 0, min(len(e.pendingStates), maxBucketsPerBatch))
	publish := func() bool {
		var data []byte
		if fenced := e.fencedStates.Load(); fenced || e.packedStates.Load() {
			data = bus.AppendPackedStateBatch(nil, e.cfg.Node, batch, fenced)
		} else {
			var err error
			if data, err = json.Marshal(bus.StateBatch{V: bus.WireVersion, Node: e.cfg.Node, Buckets: batch}); err != nil {
				e.log.Error("encode state batch", "err", err)
				return false
			}
		}
		pctx, cancel := context.WithTimeout(ctx, e.statePublishTimeout())
		_, err := e.js.Publish(pctx, bus.StateSubjectPrefix+e.cfg.Node, data, jetstream.WithMsgID(e.nextMsgID("s")))
		cancel()
		if err != nil {
			e.metrics.flushFailures.WithLabelValues(bus.StateStream).Inc()
			e.log.Warn("state flush failed; will retry", "buckets", len(batch), "pending", len(e.pendingStates), "err", err)
			e.restoreStreams(ctx, err)
			return false
		}
		for _, r := range batch {
			// Only drop what was sent: a newer state drained meanwhile
			// cannot be here, as draining holds flushMu too.
			delete(e.pendingStates, r.Key)
		}
		e.metrics.published.Add(float64(len(batch)))
		e.statesPublished.Add(uint64(len(batch)))
		e.metrics.flushBuckets.Observe(float64(len(batch)))
		batch = batch[:0]
		return true
	}
	for _, rec := range e.pendingStates {
		batch = append(batch, rec)
		if len(batch) == maxBucketsPerBatch && !publish() {
			return false
		}
	}
	if len(batch) > 0 && !publish() {
		return false
	}
	e.persisted(began)
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
func (e *Engine) termOf(v *view, key, tenant, policy string) (term uint64, ok bool) {
	if e.cluster == nil {
		return 0, true
	}
	if tv, ok := v.tenants.get(tenant); ok && tv != nil {
		if pv := tv.byID[policy]; pv != nil && pv.consistency == "local" {
			return 0, true
		}
	}
	term = e.terms[bus.Partition([]byte(key))].Load()
	// A worker that predates terms gives none (and fences nothing).
	return term, term != 0 || !e.fencedStates.Load()
}

// statePublishTimeout is how long a state batch may wait for JetStream's
// ack. In a cluster, an owner stops deciding LossWindow after its last
// persisted flush began, so a publish that waits much longer only delays
// the retry that would let it decide again.
func (e *Engine) statePublishTimeout() time.Duration {
	if e.cluster != nil {
		return 2 * e.cluster.LossWindow()
	}
	return 5 * time.Second
}

// persisted tells the cluster that every decision made before t is in the
// state stream.
func (e *Engine) persisted(t time.Time) {
	if e.cluster != nil {
		e.cluster.Persisted(t)
	}
}

// shrinkPendingStates gives back the memory of a pending-states map that a
// burst grew, once it is empty again: a Go map keeps its largest size, and
// after a million new callers that is tens of MiB held for nothing.
// flushMu must be held.
func (e *Engine) shrinkPendingStates() {
	if len(e.pendingStates) == 0 && e.pendingStatesPeak > shrinkPendingAbove {
		e.pendingStates = map[string]bus.BucketRecord{}
		e.pendingStatesPeak = 0
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
func (e *Engine) flushCounters(ctx context.Context) {
	e.countersMu.Lock()
	defer e.countersMu.Unlock()
	defer func() {
		if len(e.pendingCounters) > 0 {
			e.metrics.natsLag.Set(time.Since(e.pendingCounters[0].at).Seconds())
		} else {
			e.metrics.natsLag.Set(0)
		}
	}()
	if !e.publishCounters(ctx) {
		return
	}
	rows := e.counters.drain()
	now := time.Now()
	for len(rows) > 0 {
		n := min(len(rows), maxRowsPerBatch)
		data, err := json.Marshal(bus.CounterBatch{V: bus.WireVersion, Node: e.cfg.Node, Rows: rows[:n]})
		if err != nil {
			e.log.Error("encode counter batch", "err", err)
			break
		}
		e.pendingCounters = append(e.pendingCounters, pendingBatch{id: e.nextMsgID("c"), data: data, rows: n, at: now})
		rows = rows[n:]
	}
	e.publishCounters(ctx)
}

// publishCounters publishes the pending counter batches in order and
// reports whether all went out; countersMu must be held.
func (e *Engine) publishCounters(ctx context.Context) bool {
	return e.publishBatches(ctx, &e.pendingCounters, bus.CounterSubjectPrefix, bus.CounterStream, "counter flush failed; will retry", func(b pendingBatch) {
		e.metrics.flushCounters.Observe(float64(b.rows))
		e.rowsPublished.Add(uint64(b.rows))
	})
}

// publishBatches publishes *batches in order to prefix + this node, each
// with the message id it was made with (JetStream drops a retry of one that
// arrived), removing each once acked and passing it to sent (when not nil);
// at the first failure it counts and logs it, makes the streams again if
// they are gone, and reports false, keeping the rest for the next flush.
func (e *Engine) publishBatches(ctx context.Context, batches *[]pendingBatch, prefix, stream, failed string, sent func(pendingBatch)) bool {
	for len(*batches) > 0 {
		b := (*batches)[0]
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := e.js.Publish(pctx, prefix+e.cfg.Node, b.data, jetstream.WithMsgID(b.id))
		cancel()
		if err != nil {
			e.metrics.flushFailures.WithLabelValues(stream).Inc()
			e.log.Warn(failed, "batches", len(*batches), "err", err)
			e.restoreStreams(ctx, err)
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
func (e *Engine) restoreStreams(ctx context.Context, err error) {
	if !errors.Is(err, jetstream.ErrNoStreamResponse) {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	made, err := bus.RestoreStreamsMade(sctx, e.js, bus.StreamLimits{Replicas: bus.ResolveReplicas(e.nc, e.cfg.Replicas)})
	if len(made) > 0 {
		e.log.Warn("streams were gone (NATS lost them); made them again", "streams", made)
	}
	if err != nil {
		e.log.Warn("making the state and counter streams again failed; will retry", "err", err)
	}
}

// restoreStreamsOnce makes the streams that are missing, at start, and
// reports streams that have fewer replicas than this server asks for.
func (e *Engine) restoreStreamsOnce(ctx context.Context, js jetstream.JetStream) error {
	replicas := bus.ResolveReplicas(e.nc, e.cfg.Replicas)
	if err := bus.RestoreStreams(ctx, js, replicas); err != nil {
		return err
	}
	bus.CheckReplicas(ctx, js, replicas, e.log, bus.StateStream, bus.CounterStream, bus.QuotaStream)
	return nil
}
