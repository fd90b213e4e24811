// Package keyed holds Sluice's small in-process tables keyed by a caller,
// a tenant or a hash: a Table bounded in entries, the least recently
// touched evicted first, and Buckets, a Table of token buckets decided by
// quota's engine. The dashboard's sign-in and per-user limits, the API's
// per-tenant reservations and the worker's per-tenant write limits use
// them; the check path's buckets live in quota.Cache instead.
//
// Like quota it never reads a clock: every call takes its instant. Its
// types are not safe for concurrent use: the caller's mutex guards them.
package keyed

import "github.com/sluicehq/sluice/internal/quota"

// Table is a map of at most max entries, kept in the order they were last
// touched. Inserting past max evicts the least recently touched entry.
type Table[K comparable, V any] struct {
	max  int
	m    map[K]*entry[K, V]
	root entry[K, V] // root.next: most recently touched; root.prev: least
}

type entry[K comparable, V any] struct {
	key        K
	v          V
	prev, next *entry[K, V]
}

// NewTable returns an empty table of at most size entries (at least one).
func NewTable[K comparable, V any](size int) *Table[K, V] {
	t := &Table[K, V]{max: max(size, 1), m: make(map[K]*entry[K, V])}
	t.root.prev, t.root.next = &t.root, &t.root
	return t
}

// Get returns key's value, marked touched. An absent key is inserted with
// value zero, the least recently touched entry evicted first when the
// table is full; fresh says it was.
func (t *Table[K, V]) Get(key K, zero V) (v *V, fresh bool) {
	if e, ok := t.m[key]; ok {
		t.touch(e)
		return &e.v, false
	}
	return &t.insert(key, zero).v, true
}

// touch moves e to the most recently touched end.
func (t *Table[K, V]) touch(e *entry[K, V]) {
	if t.root.next != e {
		t.unlink(e)
		t.pushFront(e)
	}
}

// insert adds an absent key with value v, evicting the least recently
// touched entry first when the table is full.
func (t *Table[K, V]) insert(key K, v V) *entry[K, V] {
	if len(t.m) >= t.max {
		t.remove(t.root.prev)
	}
	e := &entry[K, V]{key: key, v: v}
	t.m[key] = e
	t.pushFront(e)
	return e
}

// Peek returns key's value without touching it.
func (t *Table[K, V]) Peek(key K) (*V, bool) {
	if e, ok := t.m[key]; ok {
		return &e.v, true
	}
	return nil, false
}

// DropWhile removes entries from the least recently touched end while
// stale says so, and stops at the first it does not.
func (t *Table[K, V]) DropWhile(stale func(*V) bool) {
	for e := t.root.prev; e != &t.root && stale(&e.v); e = t.root.prev {
		t.remove(e)
	}
}

// Len is the number of entries.
func (t *Table[K, V]) Len() int { return len(t.m) }

func (t *Table[K, V]) pushFront(e *entry[K, V]) {
	e.prev, e.next = &t.root, t.root.next
	t.root.next.prev = e
	t.root.next = e
}

func (t *Table[K, V]) unlink(e *entry[K, V]) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (t *Table[K, V]) remove(e *entry[K, V]) {
	t.unlink(e)
	delete(t.m, e.key)
}

// Buckets is a bucket of one limit per key, in a Table of at most size
// keys: quota.Limit.Decide on a quota.State per key. A key's first
// bucket is full. Before a new key is inserted into a table of trimFrom
// keys or more, the buckets full again at the least recently touched end
// are dropped: a dropped bucket is the full one a later call creates, so
// the table holds the keys active lately (within the time a bucket takes
// to refill), or fewer than trimFrom, and never more than its size; past
// it the least recently touched is evicted, full or not.
type Buckets[K comparable] struct {
	limit quota.Limit
	t     *Table[K, quota.State]
}

// trimFrom is the fewest keys a Buckets trims before inserting one: below
// it, keeping a few full buckets costs less than making them again.
const trimFrom = 64

// NewBuckets returns an empty table of buckets of limit l, for at most
// size keys.
func NewBuckets[K comparable](l quota.Limit, size int) *Buckets[K] {
	return &Buckets[K]{limit: l, t: NewTable[K, quota.State](size)}
}

// Take decides a request of cost units for key at now (unix ns) and, if
// it is allowed, takes them; a refusal takes nothing.
func (b *Buckets[K]) Take(key K, now, cost int64) quota.Outcome {
	return b.decide(key, now, cost, true)
}

// Check is Take without taking: the outcome Take would have at now. The
// key is touched all the same.
func (b *Buckets[K]) Check(key K, now, cost int64) quota.Outcome {
	return b.decide(key, now, cost, false)
}

func (b *Buckets[K]) decide(key K, now, cost int64, consume bool) quota.Outcome {
	e, ok := b.t.m[key]
	if ok {
		b.t.touch(e)
	} else {
		if b.t.Len() >= trimFrom {
			b.Trim(now)
		}
		e = b.t.insert(key, quota.State{})
	}
	return b.limit.Decide(&e.v, now, cost, consume)
}

// Trim drops, from the least recently touched end, the buckets that are
// full at now.
func (b *Buckets[K]) Trim(now int64) {
	b.t.DropWhile(func(s *quota.State) bool { return b.limit.FullAt(s) <= now })
}

// Limit is the buckets' limit.
func (b *Buckets[K]) Limit() quota.Limit { return b.limit }

// Len is the number of buckets held.
func (b *Buckets[K]) Len() int { return b.t.Len() }
