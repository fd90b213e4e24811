package quota

// A concurrency limit's State keeps its leases in Log as pairs
// (expires, token): the lease's expiry (unix ns) and the random token that
// names it in its bucket. A lease whose expiry is at or before now holds no
// slot and is dropped by the next acquire or release. Tokens and At are
// unused. The pairs are in no particular order; a Log of odd length
// (corrupt) ignores its last number.
//
// Decide on a concurrency limit counts the live leases and never takes a
// slot, whatever consume says: only Cache.AcquireBytesBound, which has a
// lease to record, takes one, after every limit of the bucket allowed.

import (
	"hash/maphash"
	"strconv"
	"time"
)

// Lease is one slot of a concurrency limit: Token names it in its bucket
// (non-zero; the caller draws it at random), Expires is the instant (unix
// ns) it frees itself if nobody releases it.
type Lease struct {
	Token   int64
	Expires int64
}

// validateConcurrency is Validate for a concurrency limit.
func (l Limit) validateConcurrency() error {
	fe := func(field, msg string) error { return &FieldError{Field: field, Message: msg} }
	switch {
	case l.Calendar != nil:
		return fe("calendar", "is not allowed with algorithm concurrency")
	case l.Period != 0:
		return fe("period", "is not allowed with algorithm concurrency (a slot is held until it is released or its lease expires)")
	case l.Burst != 0:
		return fe("burst", "is not allowed with algorithm concurrency")
	case l.Limit < 1:
		return fe("limit", "must be at least 1")
	case l.Limit > MaxConcurrency:
		return fe("limit", "must be at most "+strconv.Itoa(MaxConcurrency)+" for concurrency")
	}
	return nil
}

// concurrency decides one request on a concurrency limit: allowed while a
// slot is free. Reset counts to the last live lease's expiry, RetryAfter
// (when denied) to the first's.
func (l *Limit) concurrency(s *State, now int64, o *Outcome) {
	live, first, last := leaseSpan(s.Log, now)
	*o = Outcome{Limit: l.Limit}
	if live > 0 {
		o.Reset = time.Duration(last - now)
	}
	if live < l.Limit {
		o.Allowed = true
		o.Remaining = l.Limit - live - 1
		return
	}
	o.RetryAfter = time.Duration(first - now)
}

// leaseSpan counts the leases in log live at now and returns the earliest
// and the latest expiry among them.
func leaseSpan(log []int64, now int64) (live int64, first, last int64) {
	for k := 0; k+1 < len(log); k += 2 {
		if t := log[k]; t > now {
			if live == 0 || t < first {
				first = t
			}
			last = max(last, t)
			live++
		}
	}
	return live, first, last
}

// leasesEnd is the instant the last lease of log expires, 0 if it holds none.
func leasesEnd(log []int64) int64 {
	var end int64
	for k := 0; k+1 < len(log); k += 2 {
		end = max(end, log[k])
	}
	return end
}

// liveLeases returns a new log of the leases of log live at now, with room
// for one more.
func liveLeases(log []int64, now int64) []int64 {
	n := 0
	for k := 0; k+1 < len(log); k += 2 {
		if log[k] > now {
			n++
		}
	}
	out := make([]int64, 0, 2*n+2)
	for k := 0; k+1 < len(log); k += 2 {
		if log[k] > now {
			out = append(out, log[k], log[k+1])
		}
	}
	return out
}

// take records lease in s, a concurrency limit's state that Decide allowed
// at now, dropping the expired leases.
func (l *Limit) take(s *State, now int64, lease Lease) {
	s.Log = append(liveLeases(s.Log, now), lease.Expires, lease.Token)
}

// release drops the lease named token from s if it is live at now, and
// reports whether it did; expired leases are dropped too.
func (l *Limit) release(s *State, now int64, token int64) bool {
	log := liveLeases(s.Log, now)
	for k := 0; k+1 < len(log); k += 2 {
		if log[k+1] == token {
			s.Log = append(log[:k], log[k+2:]...)
			return true
		}
	}
	return false
}

// InFlight is the number of leases of a concurrency limit's state live at now.
func (l *Limit) InFlight(s *State, now int64) int64 {
	live, _, _ := leaseSpan(s.Log, now)
	return live
}

// hasConcurrency reports whether limits hold a concurrency limit.
func hasConcurrency(limits []Limit) bool {
	for k := range limits {
		if limits[k].Algorithm == Concurrency {
			return true
		}
	}
	return false
}

// AcquireBytesBound is CheckBytesBound for a consuming check whose limits
// hold a concurrency limit: when every limit allows, it consumes from each
// and records lease in each concurrency limit's state, all under the
// bucket's lock; when one denies, nothing is taken. A check whose limits
// hold no concurrency limit is an ordinary consuming check.
func (c *Cache) AcquireBytesBound(key []byte, bound int, limits []Limit, now, cost int64, lease Lease, out []Outcome) (allowed bool, report int, ok bool) {
	if !hasConcurrency(limits) {
		return c.CheckBytesBound(key, bound, limits, now, cost, true, out)
	}
	h1, h2 := maphash.Bytes(c.seed1, key), maphash.Bytes(c.seed2, key)
	sh := &c.shards[h1&shardMask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.find(h1, h2)
	if i < 0 {
		if i = c.createBound(sh, h1, h2, key, bound, limits, true); i < 0 {
			return false, 0, false
		}
	}
	if !sameSlice(sh.limitsOf(i), limits) {
		i = sh.adopt(i, limits, now)
	}
	states := make([]State, len(limits))
	sh.getStates(i, states)
	allowed, report = DecideAll(limits, states, now, cost, true, out)
	if !allowed {
		return false, report, true
	}
	for k := range limits {
		if limits[k].Algorithm == Concurrency {
			limits[k].take(&states[k], now, lease)
		}
	}
	sh.putStates(i, states)
	if sh.ents[i].tag&fDirty == 0 {
		sh.markDirty(i)
	}
	return true, report, true
}

// Release gives back the slot of the lease named token in key's bucket, in
// every concurrency limit that holds it, and reports whether one held it
// live at now. An absent bucket holds none.
func (c *Cache) Release(key []byte, token int64, now int64) bool {
	sh, i := c.lockedFind(key)
	defer sh.mu.Unlock()
	if i < 0 {
		return false
	}
	limits := sh.limitsOf(i)
	if !hasConcurrency(limits) {
		return false
	}
	states := make([]State, len(limits))
	sh.getStates(i, states)
	held := false
	for k := range limits {
		if limits[k].Algorithm == Concurrency && limits[k].release(&states[k], now, token) {
			held = true
		}
	}
	if held {
		sh.putStates(i, states)
		if sh.ents[i].tag&fDirty == 0 {
			sh.markDirty(i)
		}
	}
	return held
}

// InFlight writes to n, per limit of key's bucket, the leases live at now
// (0 for a limit that is not a concurrency limit) and reports whether the
// bucket exists.
func (c *Cache) InFlight(key []byte, now int64, n []int64) bool {
	clear(n)
	sh, i := c.lockedFind(key)
	defer sh.mu.Unlock()
	if i < 0 {
		return false
	}
	limits := sh.limitsOf(i)
	states := make([]State, len(limits))
	sh.getStates(i, states)
	for k := range limits {
		if k < len(n) && limits[k].Algorithm == Concurrency {
			n[k] = limits[k].InFlight(&states[k], now)
		}
	}
	return true
}
