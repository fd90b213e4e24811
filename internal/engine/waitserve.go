package engine

import (
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/quota"
)

// waitServer answers the checks other servers forward to wait here, at
// their bucket's owner (cluster.ServeWaits): the same queues as this
// server's own waiting checks, so a bucket has one queue in the cluster.
// An admitted item is remembered in the applied table like any item that
// moved a bucket, so a copy of it is answered as the first was.
type waitServer struct{ e *Engine }

// serve decides it, or queues it and answers it later; it never blocks.
func (ws waitServer) serve(it cluster.Item, reply func(cluster.Result)) {
	e := ws.e
	if !e.cluster.Owns(bus.Partition([]byte(it.Key)), e.cfg.Now()) {
		reply(cluster.Result{Status: cluster.StatusNotOwner})
		return
	}
	v := e.view.Load()
	limits := v.limitsFor(it.Tenant, it.Policy, it.Tier, it.KeyID)
	if len(limits) == 0 || len(limits) > MaxLimits || it.Settle || it.Count || it.Cost <= 0 || !it.Consume {
		reply(cluster.Result{Status: cluster.StatusNoLimits})
		return
	}
	if it.ID != 0 {
		s := e.fwd.applied.lock(it.ID, time.Now())
		r, seen := s.get(it.ID)
		s.mu.Unlock()
		if seen {
			e.metrics.repeats.Inc()
			reply(r)
			return
		}
	}
	wait := min(it.Wait, MaxWait)
	d := decision{key: []byte(it.Key), tenantID: it.Tenant, tier: it.Tier, keyID: it.KeyID, limits: limits,
		cost: it.Cost, consume: true, wait: wait, lease: quota.Lease{Token: it.Lease, Expires: it.LeaseExp}}
	var outs [MaxLimits]quota.Outcome
	n := len(limits)
	_, r, queued := e.waits.enter(&d, outs[:n], wait, it.ID, func(r *waitResult) { reply(ws.result(v, &it, n, r)) })
	if !queued {
		r.outs = outs
		reply(ws.result(v, &it, n, &r))
	}
}

// result is r as the answer to it; an allowed one is counted for usage
// (Item.Units) and remembered by id.
func (ws waitServer) result(v *view, it *cluster.Item, n int, r *waitResult) cluster.Result {
	e := ws.e
	res := cluster.Result{Allowed: r.allowed, Report: r.report, Outcomes: slices.Clone(r.outs[:n]),
		Waited: int64(r.waited), Refused: r.refused}
	if !r.allowed {
		return res
	}
	if it.Units {
		if tv := v.tenant(it.Tenant); tv != nil && tv.byID[it.Policy] != nil {
			res.Counted = e.counters.addKeyUnits(it.Key, it.Tenant, tv.byID[it.Policy].name, it.Tier, e.cfg.Now().UnixNano(), it.Cost)
		}
	}
	if it.ID != 0 {
		s := e.fwd.applied.lock(it.ID, time.Now())
		s.put(it.ID, res)
		s.mu.Unlock()
	}
	return res
}

// cancel takes the waiting item id out of its queue: its sender's caller
// went away.
func (ws waitServer) cancel(id uint64) { ws.e.waits.leaveID(id) }
