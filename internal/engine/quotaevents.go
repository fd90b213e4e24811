package engine

// Quota crossings. When an allowed check (or a settle's charge) moves a
// consumer key's use of a calendar limit past a whole percent of the
// limit, the server tells the worker (bus.QuotaCrossing), which turns the
// crossings into webhook events. A key crosses at most 100 percents of a
// limit per period, so the reports are bounded by keys × limits × 100 per
// period however hard a key calls, and a check that crosses nothing costs
// two divisions per calendar limit.
//
// The reports are batched like the decision counters: published on the
// counter interval with a message id kept across retries (JetStream drops
// a retry of a batch that arrived), held while NATS is away, and bounded:
// past maxPendingCrossings the oldest are dropped, logged and counted,
// since a crossing is a notification, not a decision.

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/quota"
)

const (
	maxCrossingsPerBatch = 1000
	maxPendingCrossings  = 100_000
)

type crossingQueue struct {
	mu      sync.Mutex
	pending []bus.QuotaCrossing // not yet in a batch
	batches []pendingBatch      // made, not yet acked (in order)
	dropped prometheus.Counter
}

// note queues the calendar limits of tl that a key's consumption of cost
// units (ending at outs) moved past a whole percent.
func (qe *crossingQueue) note(tenantID, keyID, policy string, tl *tierLimits, outs []quota.Outcome, cost, nowNS int64) {
	if cost <= 0 {
		return
	}
	for i := range outs {
		l := &tl.limits[i]
		q := outs[i].Limit
		if l.Calendar == nil || q <= 0 {
			continue
		}
		// A settle's charge past the quota answers how far past as a
		// negative remaining (settleCache), so after and before are the
		// real use, and a charge that starts past the quota crosses
		// nothing again. An older owner's answer reads 0 there: before
		// may then be understated and a report repeat a percent (the
		// worker drops it), never miss one.
		after := q - outs[i].Remaining
		before := after - cost
		if percentOf(after, q) <= percentOf(before, q) {
			continue
		}
		start, end := l.Calendar.Window(nowNS)
		name := ""
		if len(tl.limits) > 1 {
			name = tl.names[i][len(policy)+1:]
		}
		qe.add(bus.QuotaCrossing{TenantID: tenantID, KeyID: keyID, Policy: policy, Limit: name,
			Calendar: l.Calendar.Unit().String(), Quota: q, Before: max(before, 0), After: after,
			PeriodStart: time.Unix(0, start).Unix(), PeriodEnd: time.Unix(0, end).Unix(), At: nowNS})
	}
}

// percentOf is how many whole percents of q used reaches, 0 to 100.
func percentOf(used, q int64) int64 {
	if used <= 0 {
		return 0
	}
	if used >= q {
		return 100
	}
	return used * 100 / q
}

func (qe *crossingQueue) add(c bus.QuotaCrossing) {
	qe.mu.Lock()
	defer qe.mu.Unlock()
	if len(qe.pending) >= maxPendingCrossings {
		qe.pending = qe.pending[1:]
		qe.dropped.Inc()
	}
	qe.pending = append(qe.pending, c)
}

// flushCrossings publishes the crossings noted since the last flush, after
// any batch still waiting from an earlier one.
func (p *publisher) flushCrossings(ctx context.Context) {
	qe := &p.crossings
	qe.mu.Lock()
	defer qe.mu.Unlock()
	now := time.Now()
	for len(qe.pending) > 0 {
		n := min(len(qe.pending), maxCrossingsPerBatch)
		data, err := json.Marshal(bus.QuotaBatch{V: bus.WireVersion, Node: p.cfg.Node, Crossings: qe.pending[:n]})
		if err != nil {
			p.log.Error("encode quota crossings", "err", err)
			break
		}
		qe.batches = append(qe.batches, pendingBatch{id: p.nextMsgID("q"), data: data, rows: n, at: now})
		qe.pending = qe.pending[n:]
	}
	if len(qe.pending) == 0 {
		qe.pending = nil
	}
	// A backlog of batches is bounded too: drop the oldest.
	for len(qe.batches)*maxCrossingsPerBatch > maxPendingCrossings {
		qe.dropped.Add(float64(qe.batches[0].rows))
		p.log.Warn("quota crossings dropped: NATS was away too long", "crossings", qe.batches[0].rows)
		qe.batches = qe.batches[1:]
	}
	p.publishBatches(ctx, &qe.batches, bus.QuotaSubjectPrefix, bus.QuotaStream, "quota crossings not published; will retry", nil)
}

// pendingCrossings counts crossings not yet acked by JetStream.
func (p *publisher) pendingCrossings() int {
	qe := &p.crossings
	qe.mu.Lock()
	defer qe.mu.Unlock()
	n := len(qe.pending)
	for _, b := range qe.batches {
		n += b.rows
	}
	return n
}
