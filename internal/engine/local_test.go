package engine

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/bus/bustest"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/tenants"
)

// localEngines builds n cluster members on one real NATS, each with its
// own connection, that decide a local policy of 100 an hour (a fixed
// window) on the shared clock now. They are not started: a test shares
// their consumption with gossip.flush.
func localEngines(t *testing.T, n int, now func() time.Time) []*Engine {
	t.Helper()
	srv := bustest.StartConfig(t, bus.EmbeddedConfig{Name: "local-test", DataDir: t.TempDir()})
	snap := tenants.Snapshot{Version: 1, Tenants: []tenants.Tenant{{ID: "ten_a", Name: "a"}},
		Policies: []tenants.Policy{{ID: "pol_l", TenantID: "ten_a", Name: "hourly", Method: "*", Path: "/local/*", Consistency: "local", CreatedAt: t0,
			Tiers: map[string]tenants.Limits{"anonymous": limit("fixed_window", 100, "1h")}}}}
	var out []*Engine
	for i := range n {
		node := string(rune('a' + i))
		nc, err := nats.Connect(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		e, err := New(Config{Node: node, Now: now}, nc)
		if err != nil {
			t.Fatal(err)
		}
		v, err := viewFromSnapshot(snap)
		if err != nil {
			t.Fatal(err)
		}
		e.view.Store(v)
		e.hyd.done.Store(true)
		c, err := cluster.New(cluster.Config{Node: node, Holder: "local test", Now: now}, nc, cluster.Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.SetCluster(c); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	answerMarks(t, out[0]) // the settles' marks, for every engine on this NATS
	return out
}

// A local policy's settle after its window ended gives nothing back to
// the new window, on the server that settles and on every other: the
// shared refund carries when its reservation took the units. A refund
// from a server that does not say (an older one) is given back in the
// current window, as before.
func TestLocalSettleAfterTheWindowStaysInItsWindow(t *testing.T) {
	start := t0.Truncate(time.Hour)
	var clock atomic.Int64
	set := func(at time.Time) { clock.Store(at.UnixNano()) }
	now := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	es := localEngines(t, 3, now)
	a, b, c := es[0], es[1], es[2]
	const ip = "192.0.2.7"
	check := func(e *Engine, cost int64, hold bool) Answer {
		t.Helper()
		r := CheckRequest{IP: ip, Path: "/local/x", Cost: cost, Hold: hold}
		ans, err := e.Check(t.Context(), "ten_a", &r, now())
		if err != nil || !ans.Allowed {
			t.Fatalf("check of %d on %s: %+v, %v", cost, e.cfg.Node, ans, err)
		}
		return ans
	}
	left := func(e *Engine) int64 {
		t.Helper()
		r := CheckRequest{IP: ip, Path: "/local/x", Peek: true}
		ans, err := e.Check(t.Context(), "ten_a", &r, now())
		if err != nil {
			t.Fatal(err)
		}
		if !ans.Allowed {
			return 0
		}
		return ans.Remaining + 1
	}
	agree := func(what string, want int64) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Second)
		for _, e := range es {
			for left(e) != want && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got := left(e); got != want {
				t.Fatalf("%s: %s has %d left, want %d", what, e.cfg.Node, got, want)
			}
		}
	}

	// 50 minutes into a window, a reserves 60; every server learns it.
	reservedAt := start.Add(50 * time.Minute)
	set(reservedAt)
	hold := check(a, 60, true).Hold
	a.gossip.flush()
	agree("after a reserve of 60", 40)

	// The next window: b admits 30, then a settles the reservation at 0.
	// The 60 were the last window's: the new one keeps its 30.
	set(start.Add(65 * time.Minute))
	check(b, 30, false)
	b.gossip.flush()
	agree("the new window after b's 30", 70)
	if err := a.Settle(t.Context(), settled("ten_a", "rsv_l1", *hold, -60, reservedAt), now()); err != nil {
		t.Fatal(err)
	}
	// a's own check in the same flush: the refund and the unit travel
	// together, and the unit must not swallow the refund's since.
	check(a, 1, false)
	a.gossip.flush()
	agree("after a settled the last window's 60 at 0 and took 1", 69)

	// A refund within its window is given back everywhere.
	hold = check(c, 9, true).Hold
	c.gossip.flush()
	agree("after c reserved 9", 60)
	if err := c.Settle(t.Context(), settled("ten_a", "rsv_l2", *hold, -5, now()), now()); err != nil {
		t.Fatal(err)
	}
	c.gossip.flush()
	agree("after c settled 4 of 9", 65)

	// An older server's refund names no since: given back now, as before.
	old := []byte(`{"v":1,"node":"old","deltas":[{"k":"ten_a/pol_l/ip:` + ip + `","t":"ten_a","p":"pol_l","ti":"anonymous","c":-10}]}`)
	if bus.WireVersion != 1 {
		t.Fatalf("the old server's message is of wire version 1, this build's is %d", bus.WireVersion)
	}
	if err := a.nc.Publish(bus.LocalPrefix+"old", old); err != nil {
		t.Fatal(err)
	}
	agree("after an older server's refund of 10", 75)
}
