package engine

import (
	"hash/maphash"
	"maps"
)

// cowShards is how many shards a cow map has: a write copies 1/cowShards
// of the map, plus the table of shards (cowShards pointers).
const cowShards = 256

// cow is a map for the config view, copied on write in shards: set and
// without return a new map that shares every shard with the old one but
// the one they change, so a change to one entry of a million-entry map
// copies about four thousand entries, and readers of the old map are not
// disturbed. The zero value is an empty map that cannot be written; make
// one with newCow.
type cow[K comparable, V any] struct {
	s     *[cowShards]map[K]V
	shard func(K) uint8
	n     int
}

func newCow[K comparable, V any](shard func(K) uint8) cow[K, V] {
	return cow[K, V]{s: new([cowShards]map[K]V), shard: shard}
}

var shardSeed = maphash.MakeSeed()

// stringShard spreads string keys over the shards.
func stringShard(k string) uint8 { return uint8(maphash.String(shardSeed, k)) }

// bytesShard is stringShard of string(b), without making the string.
func bytesShard(b []byte) uint8 { return uint8(maphash.Bytes(shardSeed, b)) }

// sumShard spreads SHA-256 sums, already uniform, by their first byte.
func sumShard(k [32]byte) uint8 { return k[0] }

func (m cow[K, V]) get(k K) (V, bool) {
	if m.s == nil {
		var zero V
		return zero, false
	}
	v, ok := m.s[m.shard(k)][k]
	return v, ok
}

// len is the number of entries.
func (m cow[K, V]) len() int { return m.n }

// put adds or replaces an entry in place: only for a map no reader has
// seen yet (one being built).
func (m *cow[K, V]) put(k K, v V) {
	i := m.shard(k)
	sh := m.s[i]
	if sh == nil {
		sh = map[K]V{}
		m.s[i] = sh
	}
	if _, had := sh[k]; !had {
		m.n++
	}
	sh[k] = v
}

// set returns m with k set to v; m is unchanged.
func (m cow[K, V]) set(k K, v V) cow[K, V] {
	i := m.shard(k)
	n := m.copyShard(i)
	if _, had := n.s[i][k]; !had {
		n.n++
	}
	n.s[i][k] = v
	return n
}

// without returns m without k; m is unchanged.
func (m cow[K, V]) without(k K) cow[K, V] {
	i := m.shard(k)
	if _, had := m.s[i][k]; !had {
		return m
	}
	n := m.copyShard(i)
	delete(n.s[i], k)
	n.n--
	return n
}

// copyShard returns a map sharing m's shards but shard i, which is copied.
func (m cow[K, V]) copyShard(i uint8) cow[K, V] {
	s := *m.s
	if s[i] = maps.Clone(m.s[i]); s[i] == nil {
		s[i] = map[K]V{}
	}
	return cow[K, V]{s: &s, shard: m.shard, n: m.n}
}

// all calls f for every entry until it returns false.
func (m cow[K, V]) all(f func(K, V) bool) {
	if m.s == nil {
		return
	}
	for _, sh := range m.s {
		for k, v := range sh {
			if !f(k, v) {
				return
			}
		}
	}
}
