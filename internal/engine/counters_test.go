package engine

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Counting and draining run concurrently (checks and the flusher); every
// decision must land in exactly one drain. Run with -race: an empty shard
// read outside its lock was once a data race here.
func TestCounterAggConcurrentDrain(t *testing.T) {
	c := newCounterAgg(0)
	const writers, perWriter = 8, 5000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var total int64
	var drained sync.WaitGroup
	drained.Go(func() {
		for {
			for _, r := range c.drain() {
				total += r.Allowed + r.Denied
			}
			select {
			case <-stop:
				for _, r := range c.drain() {
					total += r.Allowed + r.Denied
				}
				return
			default:
			}
		}
	})
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				// Few identities, so most shards stay empty between drains.
				c.add("t", "p", "anonymous", "ip", string(rune('a'+w%3)), 0, i%2 == 0, ReasonRateLimited, 0)
			}
		})
	}
	wg.Wait()
	close(stop)
	drained.Wait()
	if total != writers*perWriter {
		t.Fatalf("drained %d decisions, want %d", total, writers*perWriter)
	}
}

// Presented keys are hashed as stored, without allocating.
func TestHashKeyHex(t *testing.T) {
	for _, k := range []string{"sk_short", "sk_" + strings.Repeat("a", 200)} {
		h := hashKeyHex(k)
		if string(h[:]) != tenants.HashKey(k) {
			t.Fatalf("hashKeyHex(%q) = %s, want %s", k, h[:], tenants.HashKey(k))
		}
	}
	k := "sk_0123456789abcdefghijklmnopqrstuvwxyzABCD"
	m := map[string]string{tenants.HashKey(k): "ten_1"}
	if n := testing.AllocsPerRun(100, func() {
		h := hashKeyHex(k)
		if m[string(h[:])] != "ten_1" {
			t.Fatal("lookup failed")
		}
	}); n != 0 {
		t.Fatalf("service key lookup allocates %.0f times", n)
	}
}

// A flood of new identities in one tenant is bounded: past its share, new
// identities count in the tenant's "others" cell, totals per tenant,
// policy, tier and minute stay exact, a caller seen before the bound keeps
// its exact count, and another tenant's callers keep their own cells.
func TestCountersBoundIdentitiesPerTenant(t *testing.T) {
	c := newCounterAgg(counterShards * 4) // 4 identity cells per tenant per shard
	const minuteNS = 29000000 * 60e9
	c.add("ten_a", "p", "anonymous", "ip", "203.0.113.1", minuteNS, false, ReasonRateLimited, 0)
	for i := range 10000 {
		c.add("ten_a", "p", "anonymous", "ip", fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255), minuteNS, i%10 == 0, ReasonRateLimited, 0)
		if i%100 == 0 {
			c.add("ten_a", "p", "anonymous", "ip", "203.0.113.1", minuteNS, false, ReasonRateLimited, 0)
		}
	}
	for i := range 10 {
		c.add("ten_b", "p", "anonymous", "ip", fmt.Sprintf("192.0.2.%d", i), minuteNS, true, ReasonRateLimited, 0)
	}
	cells := map[string]int{}
	var aAllowed, aDenied, heavy int64
	others := 0
	for _, r := range c.drain() {
		cells[r.TenantID]++
		if r.IdentityKind == bus.CounterOthers {
			others++
			if r.IdentityID != "" || r.Policy != "p" || r.Tier != "anonymous" || r.Minute != 29000000 {
				t.Fatalf("others cell %+v", r)
			}
		}
		if r.TenantID == "ten_a" {
			aAllowed += r.Allowed
			aDenied += r.Denied
		}
		if r.IdentityID == "203.0.113.1" {
			heavy += r.Denied
		}
	}
	if aAllowed != 1000 || aDenied != 9000+101 {
		t.Fatalf("tenant A totals %d/%d, want 1000/9101", aAllowed, aDenied)
	}
	if n := cells["ten_a"] - others; n > counterShards*4 {
		t.Fatalf("tenant A has %d identity cells, want at most %d", n, counterShards*4)
	}
	if others == 0 || others > counterShards {
		t.Fatalf("%d others cells, want one per shard at most", others)
	}
	if heavy != 101 {
		t.Fatalf("the caller seen first counts %d, want all 101", heavy)
	}
	if cells["ten_b"] != 10 {
		t.Fatalf("tenant B has %d cells, want its 10 callers each in their own", cells["ten_b"])
	}
	// A drain starts a new interval: new identities get cells again.
	c.add("ten_a", "p", "anonymous", "ip", "198.51.100.7", minuteNS, true, ReasonRateLimited, 0)
	if rows := c.drain(); len(rows) != 1 || rows[0].IdentityID != "198.51.100.7" {
		t.Fatalf("after a drain: %+v", rows)
	}
}

// Counting allocates nothing for a known cell, nor past the bound.
func TestCountersAddAllocations(t *testing.T) {
	c := newCounterAgg(counterShards)
	c.add("ten_a", "p", "anonymous", "ip", "203.0.113.1", 0, true, ReasonRateLimited, 0)
	if n := testing.AllocsPerRun(1000, func() { c.add("ten_a", "p", "anonymous", "ip", "203.0.113.1", 0, true, ReasonRateLimited, 0) }); n != 0 {
		t.Fatalf("a known cell allocates %.0f times", n)
	}
	ids := make([]string, 5000)
	for i := range ids {
		ids[i] = fmt.Sprintf("10.0.%d.%d", i>>8, i&255)
	}
	for _, id := range ids[:2500] {
		c.add("ten_a", "p", "anonymous", "ip", id, 0, false, ReasonRateLimited, 0)
	}
	i := 2500
	if n := testing.AllocsPerRun(2000, func() {
		c.add("ten_a", "p", "anonymous", "ip", ids[i], 0, false, ReasonRateLimited, 0)
		i++
	}); n != 0 {
		t.Fatalf("a new identity past the bound allocates %.0f times", n)
	}
}

// Denials are counted by reason as well as in total, so the dashboard can
// show rate limits, invalid keys and blocks as separate series.
func TestCountersSplitDenialsByReason(t *testing.T) {
	c := newCounterAgg(0)
	add := func(n int, allowed bool, reason string) {
		for range n {
			c.add("ten_a", "p", "anonymous", "ip", "203.0.113.1", 0, allowed, reason, 0)
		}
	}
	add(4, true, ReasonOK)
	add(3, false, ReasonRateLimited)
	add(2, false, ReasonInvalidKey)
	add(1, false, ReasonBlocked)
	rows := c.drain()
	if len(rows) != 1 {
		t.Fatalf("drained %d rows, want 1: %+v", len(rows), rows)
	}
	r := rows[0]
	if r.Allowed != 4 || r.Denied != 6 || r.RateLimited != 3 || r.InvalidKey != 2 || r.Blocked != 1 {
		t.Fatalf("row %+v, want allowed 4, denied 6 = 3 rate_limited + 2 invalid_key + 1 blocked", r)
	}
}

// Usage units: a consumer key's cell that carries units is its own even
// past the bound, so usage per key is exact; a denial under a key past the
// bound, an unknown key and IP callers still fold into "others", whose
// units keep the totals per policy exact. addUnits moves units alone.
func TestCountersUnitsPerKeyPastTheBound(t *testing.T) {
	c := newCounterAgg(counterShards) // 1 identity cell per tenant per shard
	const minuteNS = 29000000 * 60e9
	const keys = 500
	for i := range keys {
		id := fmt.Sprintf("key_%d", i)
		c.add("ten_a", "p", "pro", KindKey, id, minuteNS, true, ReasonOK, int64(i+1))
		c.add("ten_a", "p", "pro", KindKey, id, minuteNS, false, ReasonRateLimited, 0)
		c.add("ten_a", "p", "pro", KindIP, fmt.Sprintf("10.0.%d.%d", i>>8, i&255), minuteNS, true, ReasonOK, 2)
		c.add("ten_a", "p", "pro", KindKey, InvalidKeyIdentity, minuteNS, false, ReasonInvalidKey, 0)
	}
	c.addUnits("ten_a", "p", "pro", KindKey, "key_7", minuteNS, -3) // a refund
	c.addUnits("ten_a", "p", "pro", KindKey, "key_8", minuteNS, 0)  // nothing
	perKey := map[string]int64{}
	var units, allowed, denied int64
	ownCells := 0
	for _, r := range c.drain() {
		units += r.Units
		allowed += r.Allowed
		denied += r.Denied
		switch r.IdentityKind {
		case KindKey:
			perKey[r.IdentityID] += r.Units
			ownCells++
		case bus.CounterOthers:
		default:
			ownCells++
		}
	}
	for i := range keys {
		want := int64(i + 1)
		if i == 7 {
			want -= 3
		}
		if got := perKey[fmt.Sprintf("key_%d", i)]; got != want {
			t.Fatalf("key_%d: %d units, want %d", i, got, want)
		}
	}
	if want := int64(keys*(keys+1)/2 - 3 + 2*keys); units != want {
		t.Fatalf("%d units in all, want %d", units, want)
	}
	if allowed != 2*keys || denied != 2*keys {
		t.Fatalf("decisions %d allowed, %d denied, want %d and %d", allowed, denied, 2*keys, 2*keys)
	}
	if ownCells > keys+counterShards {
		t.Fatalf("%d cells of their own: IP callers past the bound got cells", ownCells)
	}
}

// What a decision consumed is its usage: the cost of an allowed check
// under a policy, nothing for a denial (a shadow denial included, whose
// answer allows), a peek or a check no policy matches.
func TestCheckUnits(t *testing.T) {
	snap, _ := snapshot(t)
	e := newTestEngine(t, snap)
	check := func(path string, cost int64, peek bool) Answer {
		t.Helper()
		a, err := e.Check(t.Context(), "ten_a", &CheckRequest{IP: "192.0.2.10", Path: path, Cost: cost, Peek: peek}, t0)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	heavy := "/api/example?mode=heavy"
	for i, s := range []struct {
		path    string
		cost    int64
		peek    bool
		allowed bool
	}{
		{heavy, 4, false, true},
		{heavy, 4, false, true},
		{heavy, 4, false, false}, // 2 left of 10
		{heavy, 1, true, true},   // a peek
		{heavy, 2, false, true},
		{"/shadow/x", 1, false, true},
		{"/shadow/x", 5, false, true}, // shadow-denied
		{"/nowhere", 7, false, true},
	} {
		if a := check(s.path, s.cost, s.peek); a.Allowed != s.allowed {
			t.Fatalf("check %d: %+v", i, a)
		}
	}
	units := map[string]int64{}
	for _, r := range e.counters.drain() {
		units[r.Policy] += r.Units
	}
	if units["heavy"] != 10 || units["shadowed"] != 1 || units[""] != 0 {
		t.Fatalf("units per policy %v, want heavy 10, shadowed 1, none without a policy", units)
	}
}

// BenchmarkCountersAdd is one decision counted in a cell that exists, the
// counters' share of every check.
func BenchmarkCountersAdd(b *testing.B) {
	c := newCounterAgg(0)
	b.ReportAllocs()
	for b.Loop() {
		c.add("ten_a", "p", "pro", KindKey, "key_1", 0, true, ReasonOK, 3)
	}
}
