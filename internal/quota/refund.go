package quota

import "hash/maphash"

// Refund gives back n units consumed earlier (Envoy's is_negative_hits):
// a token bucket gains n tokens up to its capacity, a window's count drops
// by n but not below 0, and a sliding log forgets its newest n entries. A
// refund never raises a bucket above what it holds when full.
func (l *Limit) Refund(s *State, now int64, n int64) {
	if !l.usable() || n <= 0 {
		return
	}
	c := float64(n)
	switch l.Algorithm {
	case TokenBucket:
		tokens, base := l.tbLevel(s, now)
		s.Tokens, s.At = min(tokens+c, float64(l.Capacity())), base
	case FixedWindow:
		start, _, count := l.fwCount(s, now)
		s.Tokens, s.At = max(count-c, 0), start
	case SlidingWindow:
		w := l.swinOf(s, now)
		// The current window's count is what can be given back; an older
		// consumption is already fading out.
		s.Tokens, s.Prev, s.At = max(w.curr-c, 0), w.prev, w.start
	default:
		cut := now - int64(l.Period)
		log := s.Log[:0:0]
		for _, t := range s.Log {
			if t > cut {
				log = append(log, t)
			}
		}
		if k := len(log) - int(min(n, int64(len(log)))); k >= 0 {
			log = log[:k]
		}
		s.Log = log
	}
}

// Refund gives n units back to every limit of key's bucket (Limit.Refund)
// and marks it dirty; an absent bucket is full already and is left alone.
// It reports whether the bucket exists.
func (c *Cache) Refund(key []byte, limits []Limit, now int64, n int64) bool {
	if len(limits) == 0 || n <= 0 {
		return false
	}
	sh, i := c.lockedFind(key)
	defer sh.mu.Unlock()
	if i < 0 {
		return false
	}
	sh.adjust(i, limits, now, n, true)
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
