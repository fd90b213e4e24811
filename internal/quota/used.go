package quota

// Used is what s holds of l at now: a fixed or sliding window's count in
// its current window, a token bucket's capacity less its tokens, a
// sliding log's entries within the period. Unlike an Outcome's Remaining
// it is not bounded by the limit: units forced past it (Force) show.
func (l *Limit) Used(s *State, now int64) float64 {
	if !l.usable() {
		return 0
	}
	switch l.Algorithm {
	case TokenBucket:
		tokens, _ := l.tbLevel(s, now)
		return float64(l.Capacity()) - tokens
	case FixedWindow:
		_, _, count := l.fwCount(s, now)
		return count
	case SlidingWindow:
		return l.swinOf(s, now).curr
	case Concurrency:
		return float64(l.InFlight(s, now))
	default:
		cut, n := now-int64(l.Period), 0
		for _, t := range s.Log {
			if t > cut {
				n++
			}
		}
		return float64(n)
	}
}

// Used writes to used what each limit of key's bucket holds at now
// (Limit.Used); an absent bucket holds nothing. It reports whether the
// bucket exists.
func (c *Cache) Used(key []byte, limits []Limit, now int64, used []float64) bool {
	clear(used)
	if len(limits) == 0 {
		return false
	}
	sh, i := c.lockedFind(key)
	defer sh.mu.Unlock()
	if i < 0 {
		return false
	}
	if !sameSlice(sh.limitsOf(i), limits) {
		i = sh.adopt(i, limits, now)
	}
	var buf [4]State
	states := stateBuf(&buf, len(limits))
	sh.getStates(i, states)
	for k := range limits {
		if k < len(used) {
			used[k] = limits[k].Used(&states[k], now)
		}
	}
	return true
}
