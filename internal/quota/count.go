package quota

import (
	"hash/maphash"
	"time"
)

// Count decides a request of cost units the way Envoy's reference rate
// limit server does: the cost is counted whether or not the request is
// allowed, and the request is allowed when, counted, the usage is at most
// the limit. A cost of 0 counts nothing and answers the bucket as it is: at
// its limit is allowed (nothing left), past it is not.
//
// For a fixed window this is the reference's INCRBY and compare exactly:
// Remaining is the limit less the count (0 past it), Reset the time to the
// window's end, also when the count is 0. A denial's Remaining is what was
// left before its cost counted, as a denied Check describes the bucket it
// did not change (the reference's statistics split such a cost between
// near and over the limit by it). The other algorithms take the cost when
// it fits and force it (Force) when it does not; for them a cost of 0 is
// allowed when at least one unit is left.
func (l *Limit) Count(s *State, now int64, cost int64) Outcome {
	var o Outcome
	l.count(s, now, max(cost, 0), &o)
	return o
}

func (l *Limit) count(s *State, now, cost int64, o *Outcome) {
	if !l.usable() {
		*o = Outcome{Limit: l.Limit, RetryAfter: Never}
		return
	}
	if l.Algorithm == FixedWindow {
		start, end, count := l.fwCount(s, now)
		after := count + float64(cost)
		lim := float64(l.Limit)
		*o = Outcome{Limit: l.Limit, Allowed: after <= lim, Remaining: floorUnits(lim - after), Reset: time.Duration(end - now)}
		switch {
		case o.Allowed:
		case cost > l.Limit:
			o.RetryAfter = Never
		default:
			o.RetryAfter = time.Duration(end - now)
		}
		if !o.Allowed && cost > 0 {
			o.Remaining = floorUnits(lim - count)
		}
		if cost > 0 {
			s.Tokens, s.At = after, start
		}
		return
	}
	if cost == 0 {
		l.decide(s, now, 1, false, o)
		if o.Allowed {
			o.Remaining++ // the look took one unit
		}
		return
	}
	l.decide(s, now, cost, true, o)
	if !o.Allowed {
		l.Force(s, now, cost)
		_, o.Reset = l.status(s, now)
	}
}

// CountBytes applies Limit.Count to every limit of key's bucket (creating
// it if absent): the request is allowed when every limit allows it, and
// its cost is counted on every limit either way. It returns the allowed
// answer and the index of the limit to report (the first that denied, else
// the one with the least Remaining), and fills out. A positive cost marks
// the bucket dirty.
func (c *Cache) CountBytes(key []byte, limits []Limit, now int64, cost int64, out []Outcome) (allowed bool, report int) {
	if len(limits) == 0 {
		return true, -1
	}
	h1, h2 := maphash.Bytes(c.seed1, key), maphash.Bytes(c.seed2, key)
	sh := &c.shards[h1&shardMask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.find(h1, h2)
	if i < 0 {
		i = c.create(sh, h1, h2, string(key), limits)
	} else if cost > 0 && sh.allow(i, limits, now, cost, &out[0]) {
		return true, 0 // it fits: counted as Check counts it
	}
	return sh.count(i, limits, now, cost, out)
}

// CountBytesBound is CountBytes that creates a bucket for an absent key
// only while the key's tenant has fewer than bound live buckets (a negative
// bound: always), as CheckBytesBound: past the bound it decides nothing and
// reports ok false. A cost of 0 on an absent key creates nothing: it
// answers a full bucket.
func (c *Cache) CountBytesBound(key []byte, bound int, limits []Limit, now int64, cost int64, out []Outcome) (allowed bool, report int, ok bool) {
	if len(limits) == 0 {
		return true, -1, true
	}
	h1, h2 := maphash.Bytes(c.seed1, key), maphash.Bytes(c.seed2, key)
	sh := &c.shards[h1&shardMask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.find(h1, h2)
	switch {
	case i >= 0:
		if cost > 0 && sh.allow(i, limits, now, cost, &out[0]) {
			return true, 0, true
		}
	case cost <= 0:
		if c.AtBound(key, bound) {
			return false, 0, false
		}
		var buf [4]State
		allowed, report = countStates(limits, stateBuf(&buf, len(limits)), now, 0, out)
		return allowed, report, true
	case !c.counts.tryAdd(key, bound):
		return false, 0, false
	default:
		i = sh.newBucket(h1, h2, string(key), limits)
	}
	allowed, report = sh.count(i, limits, now, cost, out)
	return allowed, report, true
}

// count counts cost on the bucket at i (CountBytes); sh.mu must be held.
func (sh *shard) count(i int, limits []Limit, now, cost int64, out []Outcome) (allowed bool, report int) {
	if !sameSlice(sh.limitsOf(i), limits) {
		i = sh.adopt(i, limits, now)
	}
	var buf [4]State
	states := stateBuf(&buf, len(limits))
	sh.getStates(i, states)
	allowed, report = countStates(limits, states, now, cost, out)
	if cost > 0 {
		sh.putStates(i, states)
		if sh.ents[i].tag&fDirty == 0 {
			sh.markDirty(i)
		}
	}
	return allowed, report
}

// countStates applies Limit.Count to every limit's state.
func countStates(limits []Limit, states []State, now, cost int64, out []Outcome) (bool, int) {
	allowed := true
	for k := range limits {
		limits[k].count(&states[k], now, max(cost, 0), &out[k])
		allowed = allowed && out[k].Allowed
	}
	return allowed, reportIndex(out[:len(limits)], allowed)
}
