package quota

import "hash/maphash"

// Refund gives back n units consumed earlier (Envoy's is_negative_hits):
// a token bucket gains n tokens up to its capacity, a window's count drops
// by n but not below 0, and a sliding log forgets its newest n entries. A
// refund never raises a bucket above what it holds when full.
func (l *Limit) Refund(s *State, now int64, n int64) {
	l.RefundSince(s, now, n, 0)
}

// RefundSince is Refund of units consumed at since (unix ns; 0 for
// unknown): a window that began after since holds none of them and gives
// nothing back, nor does a sliding log forget entries older than since.
// It answers how much it gave back.
func (l *Limit) RefundSince(s *State, now, n, since int64) float64 {
	if !l.usable() || n <= 0 {
		return 0
	}
	c := float64(n)
	switch l.Algorithm {
	case TokenBucket:
		tokens, base := l.tbLevel(s, now)
		given := max(min(c, float64(l.Capacity())-tokens), 0)
		s.Tokens, s.At = tokens+given, base
		return given
	case FixedWindow:
		start, _, count := l.fwCount(s, now)
		if since > 0 && since < start {
			return 0 // consumed in an earlier window, which has ended
		}
		given := min(c, count)
		s.Tokens, s.At = count-given, start
		return given
	case SlidingWindow:
		w := l.swinOf(s, now)
		if since > 0 && since < w.start {
			return 0
		}
		// The current window's count is what can be given back; an older
		// consumption is already fading out.
		given := min(c, w.curr)
		s.Tokens, s.Prev, s.At = w.curr-given, w.prev, w.start
		return given
	case Concurrency:
		return 0 // a slot comes back by its lease's release or expiry
	default:
		cut := now - int64(l.Period)
		log := s.Log[:0:0]
		for _, t := range s.Log {
			if t > cut {
				log = append(log, t)
			}
		}
		m := int(min(n, int64(len(log))))
		if since <= 0 {
			s.Log = log[:len(log)-m] // the newest entries
			return float64(m)
		}
		// The entries from since on, oldest first: the reservation's own
		// were stamped at since.
		j := 0
		for j < len(log) && log[j] < since {
			j++
		}
		m = min(m, len(log)-j)
		s.Log = append(log[:j], log[j+m:]...)
		return float64(m)
	}
}

// Refund gives n units back to every limit of key's bucket (Limit.Refund)
// and marks it dirty; an absent bucket is full already and is left alone.
// It reports whether the bucket exists.
func (c *Cache) Refund(key []byte, limits []Limit, now int64, n int64) bool {
	return c.RefundSince(key, limits, now, n, 0, nil)
}

// RefundSince is Refund of units consumed at since (Limit.RefundSince);
// given, when not nil, receives what each limit gave back (nothing for an
// absent bucket).
func (c *Cache) RefundSince(key []byte, limits []Limit, now, n, since int64, given []float64) bool {
	clear(given)
	if len(limits) == 0 || n <= 0 {
		return false
	}
	sh, i := c.lockedFind(key)
	defer sh.mu.Unlock()
	if i < 0 {
		return false
	}
	sh.adjustSince(i, limits, now, n, true, since, given)
	return true
}

// lockedFind locks key's shard and finds the key's bucket in it (-1 when
// absent); the caller unlocks sh.mu.
func (c *Cache) lockedFind(key []byte) (sh *shard, i int) {
	h1, h2 := maphash.Bytes(c.seed1, key), maphash.Bytes(c.seed2, key)
	sh = &c.shards[h1&shardMask]
	sh.mu.Lock()
	return sh, sh.find(h1, h2)
}
