package keyed

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
)

const t0 = int64(1_800_000_000) * int64(time.Second)

func at(d time.Duration) int64 { return t0 + int64(d) }

// A table never holds more than its size: past it the least recently
// touched entry goes, and a touch (Get, not Peek) keeps an entry.
func TestTableEvictsLeastRecentlyTouched(t *testing.T) {
	tb := NewTable[string, int](3)
	for _, k := range []string{"a", "b", "c"} {
		v, fresh := tb.Get(k, 0)
		if !fresh {
			t.Fatalf("%s: not fresh", k)
		}
		*v = len(k)
	}
	if v, fresh := tb.Get("a", 0); fresh || *v != 1 {
		t.Fatalf("a again: %d fresh %v", *v, fresh)
	}
	if _, ok := tb.Peek("b"); !ok { // a peek does not touch: b stays the oldest
		t.Fatal("b missing")
	}
	tb.Get("d", 0)
	if tb.Len() != 3 {
		t.Fatalf("len %d, want 3", tb.Len())
	}
	if _, ok := tb.Peek("b"); ok {
		t.Fatal("b, the least recently touched, was not evicted")
	}
	for _, k := range []string{"a", "c", "d"} {
		if _, ok := tb.Peek(k); !ok {
			t.Fatalf("%s evicted", k)
		}
	}
	for i := range 1000 {
		tb.Get(fmt.Sprint(i), 0)
		if tb.Len() > 3 {
			t.Fatalf("len %d after %d inserts", tb.Len(), i+1)
		}
	}
	if NewTable[int, int](0).max != 1 {
		t.Fatal("a table of size 0 holds nothing")
	}
}

// DropWhile drops from the least recently touched end and stops at the
// first entry it must keep.
func TestTableDropWhile(t *testing.T) {
	tb := NewTable[int, int](10)
	for i, v := range []int{1, 1, 5, 1} { // touched in this order
		*must(tb.Get(i, 0)) = v
	}
	tb.DropWhile(func(v *int) bool { return *v == 1 })
	if tb.Len() != 2 {
		t.Fatalf("len %d, want 2 (stops at the 5)", tb.Len())
	}
	if _, ok := tb.Peek(3); !ok {
		t.Fatal("an entry in front of the kept one was dropped")
	}
	tb.DropWhile(func(*int) bool { return true })
	if tb.Len() != 0 {
		t.Fatalf("len %d, want 0", tb.Len())
	}
	tb.Get(7, 0) // still usable once empty
	if tb.Len() != 1 {
		t.Fatalf("len %d, want 1", tb.Len())
	}
}

func must[V any](v *V, _ bool) *V { return v }

// A bucket is quota's token bucket: a burst, then the rate; a refusal
// says when to retry and takes nothing; Check takes nothing either.
func TestBucketsTakeAndRefuse(t *testing.T) {
	b := NewBuckets[string](quota.Limit{Algorithm: quota.TokenBucket, Limit: 10, Period: time.Second, Burst: 20}, 100)
	if o := b.Take("a", at(0), 20); !o.Allowed || o.Remaining != 0 {
		t.Fatalf("the burst: %+v", o)
	}
	if o := b.Take("a", at(0), 1); o.Allowed || o.RetryAfter != 100*time.Millisecond {
		t.Fatalf("empty: %+v, want a refusal to retry after 100ms", o)
	}
	if o := b.Take("a", at(250*time.Millisecond), 3); o.Allowed || o.RetryAfter != 50*time.Millisecond {
		t.Fatalf("2.5 there, 3 asked: %+v, want a refusal to retry after 50ms", o)
	}
	// The refusals took nothing: 2.5 are there, 2 can be taken.
	if o := b.Check("a", at(250*time.Millisecond), 2); !o.Allowed {
		t.Fatalf("check of 2: %+v", o)
	}
	if o := b.Take("a", at(250*time.Millisecond), 2); !o.Allowed {
		t.Fatalf("take of 2 after the refusals and the check: %+v", o)
	}
	if o := b.Take("a", at(250*time.Millisecond), 1); o.Allowed {
		t.Fatalf("a third after 2 of 2.5: %+v", o)
	}
	if o := b.Take("a", at(time.Hour), 21); o.Allowed || o.RetryAfter != quota.Never {
		t.Fatalf("more than the burst: %+v, want Never", o)
	}
	if o := b.Take("b", at(0), 20); !o.Allowed {
		t.Fatalf("another key's own bucket: %+v", o)
	}
}

// Before a new key is inserted (into a table of trimFrom keys or more),
// full buckets at the least recently touched end are dropped; past the
// size the least recently touched is evicted, full or not, and comes back
// full.
func TestBucketsTrimAndBound(t *testing.T) {
	lim := quota.Limit{Algorithm: quota.TokenBucket, Limit: 10, Period: time.Second} // full 100ms after one is taken
	b := NewBuckets[int](lim, 1000)
	for i := range 5000 {
		if o := b.Take(i, at(time.Duration(i)*time.Millisecond), 1); !o.Allowed {
			t.Fatalf("key %d: %+v", i, o)
		}
		if b.Len() > 102 {
			t.Fatalf("after key %d: %d held, want those of the last 100ms", i, b.Len())
		}
	}
	b.Trim(at(time.Hour))
	if b.Len() != 0 {
		t.Fatalf("%d held an hour later, want 0", b.Len())
	}
	// A table of fewer than trimFrom keeps its full buckets.
	for i := range trimFrom - 1 {
		b.Take(i, at(time.Hour), 1)
	}
	b.Take(trimFrom-1, at(time.Hour+time.Second), 1)
	if b.Len() != trimFrom {
		t.Fatalf("%d held, want %d", b.Len(), trimFrom)
	}
	// At trimFrom, a new key drops the full ones: all but the last. A
	// refused new key is held (touched), full, and trimmed as such.
	if o := b.Take(1000, at(time.Hour+time.Second), 11); o.Allowed {
		t.Fatalf("more than the capacity: %+v", o)
	}
	if b.Len() != 2 {
		t.Fatalf("%d held, want the last two keys", b.Len())
	}
	b.Trim(at(time.Hour + 2*time.Second))
	if b.Len() != 0 {
		t.Fatalf("%d held once both are full, want 0", b.Len())
	}
	// Not full: the size bounds the table and evicts the oldest.
	s := NewBuckets[int](lim, 50)
	for i := range 500 {
		s.Take(i, at(0), 10)
		if s.Len() > 50 {
			t.Fatalf("%d held, over the size 50", s.Len())
		}
	}
	if s.Len() != 50 {
		t.Fatalf("%d held, want 50", s.Len())
	}
	if o := s.Take(0, at(0), 10); !o.Allowed {
		t.Fatalf("an evicted key starts full: %+v", o)
	}
	if o := s.Take(499, at(0), 1); o.Allowed {
		t.Fatalf("a kept key kept its state: %+v", o)
	}
}

// A take on a held key: one map lookup, a move to the front, one Decide.
func BenchmarkBucketsTake(b *testing.B) {
	bk := NewBuckets[string](quota.Limit{Algorithm: quota.TokenBucket, Limit: 5000, Period: time.Second}, 1<<16)
	keys := []string{"ten_a", "ten_b", "ten_c", "ten_d"}
	now := t0
	for i := 0; b.Loop(); i++ {
		now += int64(time.Millisecond)
		bk.Take(keys[i%len(keys)], now, 1)
	}
}
