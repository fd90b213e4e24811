package quota

import (
	"hash/maphash"
	"strings"
)

// Force records cost units consumed elsewhere — by another server deciding
// a "local" consistency policy from its own cache — even past the limit, so
// that every server's bucket reflects the whole cluster's consumption.
//
// A token bucket may go into debt (negative tokens) down to -capacity: the
// debt is repaid by refill before this server admits again, which keeps the
// cluster's sustained rate at the limit's rate instead of one rate per
// server. Window counts may exceed the limit; a sliding log keeps its newest
// Limit entries.
func (l *Limit) Force(s *State, now int64, cost int64) {
	if !l.usable() || cost <= 0 {
		return
	}
	c := float64(cost)
	switch l.Algorithm {
	case TokenBucket:
		tokens, base := l.tbLevel(s, now)
		s.Tokens, s.At = max(tokens-c, -float64(l.Capacity())), base
	case FixedWindow:
		start, _, count := l.fwCount(s, now)
		s.Tokens, s.At = count+c, start
	case SlidingWindow:
		w := l.swinOf(s, now)
		s.Tokens, s.Prev, s.At = w.curr+c, w.prev, w.start
	case Concurrency:
		// Slots are held only at a bucket's owner, by their leases.
	default:
		cut := now - int64(l.Period)
		log := s.Log[:0:0]
		for _, t := range s.Log {
			if t > cut {
				log = append(log, t)
			}
		}
		stamp := now
		if len(log) > 0 && log[len(log)-1] > stamp {
			stamp = log[len(log)-1] // keep the log sorted
		}
		for range min(cost, l.Limit) {
			log = append(log, stamp)
		}
		if over := int64(len(log)) - l.Limit; over > 0 {
			log = log[over:]
		}
		s.Log = log
	}
}

// Force applies Limit.Force to every limit of key's bucket (creating it if
// absent) and marks it dirty, so the combined consumption is persisted.
func (c *Cache) Force(key string, limits []Limit, now int64, cost int64) {
	if len(limits) == 0 || cost <= 0 {
		return
	}
	h1, h2 := maphash.String(c.seed1, key), maphash.String(c.seed2, key)
	sh := &c.shards[h1&shardMask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.find(h1, h2)
	if i < 0 {
		i = c.create(sh, h1, h2, strings.Clone(key), limits)
	}
	sh.adjust(i, limits, now, cost, false)
}

// adjust forces cost onto every limit of the bucket at i (Limit.Force), or
// with refund gives it back (Limit.Refund), and marks the bucket dirty;
// sh.mu must be held.
func (sh *shard) adjust(i int, limits []Limit, now, cost int64, refund bool) {
	sh.adjustSince(i, limits, now, cost, refund, 0, nil)
}

// adjustSince is adjust with a refund's since (Limit.RefundSince) and, when
// given is not nil, what each limit gave back.
func (sh *shard) adjustSince(i int, limits []Limit, now, cost int64, refund bool, since int64, given []float64) {
	if !sameSlice(sh.limitsOf(i), limits) {
		i = sh.adopt(i, limits, now)
	}
	var buf [4]State
	states := stateBuf(&buf, len(limits))
	sh.getStates(i, states)
	for k := range limits {
		if refund {
			g := limits[k].RefundSince(&states[k], now, cost, since)
			if k < len(given) {
				given[k] = g
			}
		} else {
			limits[k].Force(&states[k], now, cost)
		}
	}
	sh.putStates(i, states)
	if sh.ents[i].tag&fDirty == 0 {
		sh.markDirty(i)
	}
}
