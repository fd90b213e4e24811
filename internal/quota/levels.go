package quota

import "hash/maphash"

// Checks over several buckets at once. A check whose limits are counted at
// several levels (a caller's own bucket and its customer's, shared by all
// the customer's callers) is admitted only if every level admits it, and
// then every level is debited: all or nothing. CheckLevelsBound holds the
// shard locks of every level's bucket at once, taken in ascending shard
// order (so two such checks never wait on each other in a cycle, and a
// single-bucket check, which takes one lock, never waits on one holding
// its lock while it waits), decides every level, and writes either every
// level's consumption or none.

// MaxLevels is the most buckets one CheckLevelsBound decides together.
const MaxLevels = 4

// Level is one bucket of a check decided with others: its key, its limits
// (a slice shared and never mutated, as Check's) and where its outcomes go
// (len(Out) >= len(Limits)). CheckLevelsBound sets Report to DecideAll's
// report for the level.
type Level struct {
	Key    []byte
	Limits []Limit
	Out    []Outcome
	Report int
}

// CheckLevelsBound decides a request of cost units at instant now on every
// level's bucket together, as CheckBytesBound decides one: it reports
// allowed when every level allows, and then, for a consuming check,
// consumes from every level and records lease (when its Token is not 0) in
// each concurrency limit of every level; when one level denies, nothing is
// consumed anywhere, denied is the first denying level, and the other
// levels' outcomes describe their buckets as they are (as DecideAll's do).
// denied is -1 when every level allows.
//
// An absent bucket is created, for a consuming check, only while its
// tenant has fewer than bound live buckets (a negative bound: always); when
// one cannot be, nothing is decided and ok is false. A peek creates no
// bucket and sees an absent one as full (ok false when its tenant is at the
// bound). Level keys must differ, and there are at most MaxLevels levels;
// more panic. A level with no limits allows and reports -1.
func (c *Cache) CheckLevelsBound(levels []Level, bound int, now, cost int64, consume bool, lease Lease) (allowed bool, denied int, ok bool) {
	if len(levels) > MaxLevels {
		panic("quota: CheckLevelsBound over more than MaxLevels levels")
	}
	var ls levelLocks
	ls.hash(c, levels)
	ls.lock(c)
	defer ls.unlock(c)
	if !ls.place(c, levels, bound, now, consume) {
		return false, 0, false
	}
	var bufs [MaxLevels][4]State
	var states [MaxLevels][]State
	allowed, denied = true, -1
	for k := range levels {
		lv := &levels[k]
		lv.Report = -1
		if len(lv.Limits) == 0 {
			continue
		}
		states[k] = stateBuf(&bufs[k], len(lv.Limits))
		if sh, i := ls.at(c, k); i >= 0 {
			sh.getStates(i, states[k])
		}
		var ok bool
		ok, lv.Report = DecideAll(lv.Limits, states[k], now, cost, false, lv.Out)
		if !ok && denied < 0 {
			allowed, denied = false, k
		}
	}
	if !allowed {
		describeUnconsumed(levels, states[:len(levels)], now)
		return false, denied, true
	}
	if consume {
		for k := range levels {
			ls.commit(c, k, &levels[k], states[k], now, cost, lease)
		}
	}
	return true, -1, true
}

// describeUnconsumed rewrites the outcomes of the limits that allowed in a
// check some level denied: nothing was consumed, so they describe their
// buckets as they are.
func describeUnconsumed(levels []Level, states [][]State, now int64) {
	for k := range levels {
		lv := &levels[k]
		for j := range lv.Limits {
			if lv.Out[j].Allowed {
				lv.Out[j].Remaining, lv.Out[j].Reset = lv.Limits[j].status(&states[k][j], now)
			}
		}
	}
}

// levelLocks is the shards and bucket indexes of one CheckLevelsBound.
type levelLocks struct {
	n      int
	h1, h2 [MaxLevels]uint64
	idx    [MaxLevels]int // bucket index in its shard, -1 when absent
	order  [MaxLevels]int // distinct shard numbers, ascending
	shards int
}

func (ls *levelLocks) hash(c *Cache, levels []Level) {
	ls.n = len(levels)
	for k := range levels {
		ls.h1[k], ls.h2[k] = maphash.Bytes(c.seed1, levels[k].Key), maphash.Bytes(c.seed2, levels[k].Key)
		s := int(ls.h1[k] & shardMask)
		j := ls.shards
		for j > 0 && ls.order[j-1] > s {
			j--
		}
		if j > 0 && ls.order[j-1] == s {
			continue
		}
		copy(ls.order[j+1:ls.shards+1], ls.order[j:ls.shards])
		ls.order[j] = s
		ls.shards++
	}
}

func (ls *levelLocks) lock(c *Cache) {
	for _, s := range ls.order[:ls.shards] {
		c.shards[s].mu.Lock()
	}
}

func (ls *levelLocks) unlock(c *Cache) {
	for j := ls.shards - 1; j >= 0; j-- {
		c.shards[ls.order[j]].mu.Unlock()
	}
}

// place finds every level's bucket, creating the absent ones of a
// consuming check and switching each to its level's limits, and reports
// false when a bucket could not be made (or a peek's tenant is at bound).
// Making or switching one bucket may move another of the same shard, so
// every index is found again after any change.
func (ls *levelLocks) place(c *Cache, levels []Level, bound int, now int64, consume bool) bool {
	changed := false
	for k := range levels {
		ls.idx[k] = -1
		if len(levels[k].Limits) == 0 {
			continue
		}
		sh := &c.shards[ls.h1[k]&shardMask]
		i := sh.find(ls.h1[k], ls.h2[k])
		if i < 0 {
			if !consume {
				if c.AtBound(levels[k].Key, bound) {
					return false
				}
				continue
			}
			if !c.counts.tryAdd(levels[k].Key, bound) {
				return false
			}
			i, changed = sh.newBucket(ls.h1[k], ls.h2[k], string(levels[k].Key), levels[k].Limits), true
		}
		if !sameSlice(sh.limitsOf(i), levels[k].Limits) {
			i, changed = sh.adopt(i, levels[k].Limits, now), true
		}
		ls.idx[k] = i
	}
	if changed {
		for k := range levels {
			if ls.idx[k] >= 0 {
				ls.idx[k] = c.shards[ls.h1[k]&shardMask].find(ls.h1[k], ls.h2[k])
			}
		}
	}
	return true
}

// at returns level k's shard and bucket index (-1: absent, seen as full).
func (ls *levelLocks) at(c *Cache, k int) (*shard, int) {
	return &c.shards[ls.h1[k]&shardMask], ls.idx[k]
}

// commit consumes cost from level lv's states, allowed at now, takes
// lease in its concurrency limits, and stores them as its bucket's.
func (ls *levelLocks) commit(c *Cache, k int, lv *Level, states []State, now, cost int64, lease Lease) {
	sh, i := ls.at(c, k)
	if i < 0 || len(lv.Limits) == 0 {
		return
	}
	for j := range lv.Limits {
		lv.Limits[j].Decide(&states[j], now, cost, true)
		if lease.Token != 0 && lv.Limits[j].Algorithm == Concurrency {
			lv.Limits[j].take(&states[j], now, lease)
		}
	}
	sh.putStates(i, states)
	if sh.ents[i].tag&fDirty == 0 {
		sh.markDirty(i)
	}
}
