package engine

// Decision counters for analytics. Every decision adds one to its cell
// (tenant, policy, tier, identity, minute) in a sharded in-memory map; the
// flusher swaps the maps out every interval and publishes the deltas. A
// batch that fails to publish is kept, with its message id, and retried
// until JetStream acks it; the id makes a retry of a batch that did arrive
// a duplicate JetStream drops, so every decision is counted exactly once.
// Until it is acked the maps are not swapped out: decisions made while NATS
// is away merge into their cells rather than into a batch per interval.
//
// Bounded. A flood of new callers would otherwise grow the maps (and the
// counter stream) by one cell per caller. Each shard keeps at most
// perShard cells per tenant between two drains (CounterIdentities spread
// over the shards); a decision whose cell is new once its tenant's share is
// full is added to the "others" cell of its tenant, policy, tier and minute
// (bus.CounterOthers) instead. Totals stay exact; the identities seen first
// in each interval keep their own cells, and a caller that keeps calling is
// among them, since its cell lives until the drain. A decision whose cell
// exists costs what it did (one map lookup), and one beyond the bound
// allocates nothing. The worker bounds the cells it stores the same way
// (internal/worker/rollup.go).
//
// Units. A cell also sums the units its decisions consumed (the cost of
// each allowed decision; a settle's charge or refund through addUnits),
// which the worker keeps per day, key and policy for billing. Usage per key
// must be exact, so a consumer key's cell that carries units is never
// folded into "others": it gets a cell of its own even past the bound.
// That is still bounded, by the tenant's consumer key cap (tenants.Caps)
// rather than by the callers an outsider can invent: a key cell carries
// units only when the key is the tenant's own and a decision under it was
// allowed. Denied decisions and IP callers keep the bound as before (an
// IP caller's units are exact in the "others" cell's totals per policy,
// which is all usage per policy needs).

import (
	"hash/maphash"
	"sync"

	"github.com/sluicehq/sluice/internal/bus"
)

const counterShards = 64

// counterCell counts one cell's decisions: allowed, and denied split by
// reason (denied is their sum), and the units they consumed.
type counterCell struct{ allowed, denied, rateLimited, invalidKey, blocked, concurrencyLimited, units int64 }

type counterShard struct {
	mu    sync.Mutex
	cells map[bus.CounterKey]*counterCell
	// perTenant counts each tenant's identity cells (not its others cells).
	perTenant map[string]int
	_         [32]byte // keep shards on separate cache lines
}

type counterAgg struct {
	seed     maphash.Seed
	perShard int
	shards   [counterShards]counterShard
}

// DefaultCounterIdentities is how many identity cells a tenant may hold
// between two counter flushes before new ones count as "others".
const DefaultCounterIdentities = 16384

func newCounterAgg(identities int) *counterAgg {
	if identities <= 0 {
		identities = DefaultCounterIdentities
	}
	c := &counterAgg{seed: maphash.MakeSeed(), perShard: max(1, (identities+counterShards-1)/counterShards)}
	for i := range c.shards {
		c.shards[i].cells = map[bus.CounterKey]*counterCell{}
		c.shards[i].perTenant = map[string]int{}
	}
	return c
}

// add counts one decision in its cell; units is what it consumed (0 for a
// denial). The lookup is written out here, not shared with addUnits: this
// is every check's path, and a helper that returns a locked shard is not
// inlined. Only a new cell costs the call to newCell.
func (c *counterAgg) add(tenantID, policy, tier, kind, id string, nowNS int64, allowed bool, reason string, units int64) {
	k := bus.CounterKey{TenantID: tenantID, Policy: policy, Tier: tier, IdentityKind: kind, IdentityID: id, Minute: nowNS / 60e9}
	s := &c.shards[maphash.String(c.seed, id)%counterShards]
	s.mu.Lock()
	cell := s.cells[k]
	if cell == nil {
		cell = s.newCell(k, c.perShard, units != 0)
	}
	if allowed {
		cell.allowed++
	} else {
		cell.denied++
		switch reason {
		case ReasonRateLimited:
			cell.rateLimited++
		case ReasonInvalidKey, ReasonInvalidToken:
			// Analytics count both credentials' refusals as invalid.
			cell.invalidKey++
		case ReasonBlocked:
			cell.blocked++
		case ReasonConcurrencyLimited:
			cell.concurrencyLimited++
		}
	}
	cell.units += units
	s.mu.Unlock()
}

// addKeyUnits is addUnits for the caller a bucket key names (a bucket
// took the units, or gave them back); it reports whether the key names one.
func (c *counterAgg) addKeyUnits(key, tenantID, policy, tier string, nowNS, units int64) bool {
	_, _, caller, ok := bus.SplitBucketKey(key)
	kind, id, ok2 := bus.SplitCaller(caller)
	if !ok || !ok2 {
		return false
	}
	c.addUnits(tenantID, policy, tier, kind, id, nowNS, units)
	return true
}

// addUnits counts units consumed (positive) or given back (negative)
// outside a decision, such as a settle's charge or refund: the cell's
// decisions stay as they are.
func (c *counterAgg) addUnits(tenantID, policy, tier, kind, id string, nowNS, units int64) {
	if units == 0 {
		return
	}
	k := bus.CounterKey{TenantID: tenantID, Policy: policy, Tier: tier, IdentityKind: kind, IdentityID: id, Minute: nowNS / 60e9}
	s := &c.shards[maphash.String(c.seed, id)%counterShards]
	s.mu.Lock()
	cell := s.cells[k]
	if cell == nil {
		cell = s.newCell(k, c.perShard, true)
	}
	cell.units += units
	s.mu.Unlock()
}

// newCell makes the cell of k, which has none yet; s.mu must be held. A
// new cell past the tenant's share of perShard is its "others" cell,
// except for a consumer key's cell that carries units (see the top of the
// file).
func (s *counterShard) newCell(k bus.CounterKey, perShard int, units bool) *counterCell {
	if n := s.perTenant[k.TenantID]; n < perShard {
		s.perTenant[k.TenantID] = n + 1
	} else if !units || k.IdentityKind != KindKey || k.IdentityID == InvalidKeyIdentity {
		k.IdentityKind, k.IdentityID = bus.CounterOthers, ""
		if cell := s.cells[k]; cell != nil {
			return cell
		}
	}
	cell := &counterCell{}
	s.cells[k] = cell
	return cell
}

// drain removes and returns every cell counted since the last drain.
func (c *counterAgg) drain() []bus.CounterRow {
	var rows []bus.CounterRow
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		cells := s.cells
		if len(cells) == 0 {
			// Nothing to take; the map stays, and is not read unlocked.
			s.mu.Unlock()
			continue
		}
		s.cells = make(map[bus.CounterKey]*counterCell, len(cells))
		clear(s.perTenant)
		s.mu.Unlock()
		for k, v := range cells {
			rows = append(rows, bus.CounterRow{CounterKey: k, Allowed: v.allowed, Denied: v.denied,
				RateLimited: v.rateLimited, InvalidKey: v.invalidKey, Blocked: v.blocked, ConcurrencyLimited: v.concurrencyLimited, Units: v.units})
		}
	}
	return rows
}
