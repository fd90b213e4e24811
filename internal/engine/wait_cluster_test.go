package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/bus/bustest"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/tenants"
)

// fastSnapshot adds a policy of 10 a second in bursts of 1 (/fast/*):
// one admission every 100 ms.
func fastSnapshot(t testing.TB) tenants.Snapshot {
	snap, _ := snapshot(t)
	snap.Policies = append(snap.Policies, tenants.Policy{ID: "pol_f", TenantID: "ten_a", Name: "fast", Method: "*", Path: "/fast/*",
		Consistency: "exact", CreatedAt: t0,
		Tiers: map[string]tenants.Limits{"anonymous": {{Algorithm: "token_bucket", Limit: 10, Period: "1s", Burst: 1}}}})
	return snap
}

// memberEngine is an engine on nc joined to the cluster as node: with
// owner set it takes every partition; else it takes none and forwards.
func memberEngine(t *testing.T, nc *nats.Conn, snap tenants.Snapshot, node string, owner bool) *Engine {
	t.Helper()
	e := engineOn(t, nc, snap)
	e.cfg.Node = node
	hooks := cluster.Hooks{Releasing: func(ctx context.Context, _ int) error { return e.FlushAndSync(ctx) }}
	if !owner {
		hooks.CanLoad = func() bool { return false }
	}
	c, err := cluster.New(cluster.Config{Node: node, Holder: "engine test"}, nc, hooks)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetCluster(c); err != nil {
		t.Fatal(err)
	}
	startMember(t, c)
	return e
}

// untilTrue polls cond for up to 15 s.
func untilTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// Waiters of one bucket arriving through three servers queue at its owner:
// they are admitted one per refill in the order they came, and their
// number is exact; one whose client leaves while it waits at the owner is
// out of the queue and takes nothing.
func TestWaitAcrossServersInArrivalOrder(t *testing.T) {
	snap := fastSnapshot(t)
	nc := bustest.InProcess(t, bus.EmbeddedConfig{DataDir: t.TempDir(), Name: "engine-test"})
	owner := memberEngine(t, nc, snap, "owner", true)
	untilTrue(t, "the owner holds every partition", func() bool { return owner.cluster.OwnedCount() == bus.Partitions })
	a := memberEngine(t, nc, snap, "a", false)
	b := memberEngine(t, nc, snap, "b", false)
	key := []byte(BucketKey("ten_a", "pol_f", KindIP, "192.0.2.1"))
	for _, e := range []*Engine{a, b} {
		untilTrue(t, "the senders know the owner", func() bool {
			o, ok := e.cluster.Owner(bus.Partition(key))
			return ok && o == "owner"
		})
	}
	servers := []*Engine{a, b, owner}
	req := func(wait time.Duration) *CheckRequest {
		return &CheckRequest{IP: "192.0.2.1", Path: "/fast/x", Wait: wait}
	}
	if ans, err := a.Check(t.Context(), "ten_a", req(0), time.Now()); err != nil || !ans.Allowed {
		t.Fatalf("the bucket's one token: %+v %v", ans, err)
	}

	// A waiter whose client leaves: out of the owner's queue, nothing taken.
	ctx, cancel := context.WithCancel(t.Context())
	left := make(chan error, 1)
	go func() {
		_, err := b.Check(ctx, "ten_a", req(10*time.Second), time.Now())
		left <- err
	}()
	untilTrue(t, "the leaving waiter is queued at the owner", func() bool { return owner.waits.Len() == 1 })
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the leaving waiter: %v", err)
	}
	untilTrue(t, "the owner's queue is empty", func() bool { return owner.waits.Len() == 0 })

	const n = 12
	type result struct {
		i   int
		ans Answer
		err error
	}
	out := make(chan result, n)
	var answered atomic.Int64
	start := time.Now()
	for i := range n {
		e := servers[i%len(servers)]
		go func() {
			ans, err := e.Check(t.Context(), "ten_a", req(5*time.Second), time.Now())
			answered.Add(1)
			out <- result{i, ans, err}
		}()
		// The next leaves only once this one waits at the owner (or was
		// answered): that is the order they came in.
		untilTrue(t, "the waiter is queued at the owner", func() bool { return owner.waits.Len()+int(answered.Load()) >= i+1 })
	}
	for want := range n {
		r := <-out
		if r.err != nil || !r.ans.Allowed || r.i != want || r.ans.Waited <= 0 {
			t.Fatalf("admission %d: waiter %d %+v %v", want, r.i, r.ans, r.err)
		}
	}
	took := time.Since(start)
	// The bucket gives one a 100 ms, and the cancelled waiter took none:
	// the 12 took at least 1.1 s (the first may have had the token the
	// leaving one left).
	if took < 1100*time.Millisecond || took > 4*time.Second {
		t.Fatalf("12 admissions took %s", took)
	}
	if ans, err := owner.Check(t.Context(), "ten_a", req(0), time.Now()); err != nil || ans.Allowed {
		t.Fatalf("right after the last admission the bucket is empty: %+v %v", ans, err)
	}
}

// An owner of a version without waiting (it serves forwards but not
// waiting ones): a sender's waiting check is decided at once there, and
// the answer says the owner could not wait.
func TestWaitOwnerWithoutWaiting(t *testing.T) {
	owner, _ := ownerEngine(t, func(e *Engine) func([]cluster.Item, []cluster.Result) { return e.serveForward })
	snap, _ := snapshot(t)
	sender := memberEngine(t, owner.nc, snap, "sender", false)
	key := []byte(BucketKey("ten_a", "pol_1", KindIP, "192.0.2.7"))
	untilTrue(t, "the sender knows the owner", func() bool {
		o, ok := sender.cluster.Owner(bus.Partition(key))
		return ok && o == "owner"
	})
	for range 10 {
		if ans, err := sender.Check(t.Context(), "ten_a", &CheckRequest{IP: "192.0.2.7", Path: "/api/example?mode=heavy"}, time.Now()); err != nil || !ans.Allowed {
			t.Fatal(ans, err)
		}
	}
	start := time.Now()
	ans, err := sender.Check(t.Context(), "ten_a", &CheckRequest{IP: "192.0.2.7", Path: "/api/example?mode=heavy", Wait: 10 * time.Second}, time.Now())
	if err != nil || ans.Allowed || ans.WaitRefused != WaitRefusedOwner || time.Since(start) > time.Second || ans.RetryAfter <= 0 {
		t.Fatalf("at an owner without waiting: %+v %v after %s", ans, err, time.Since(start))
	}
}

// A forwarded waiter does not hold the sender's other forwards to its
// owner; a hand-over answers the waiters of the partitions given back,
// denied: none is lost, none is decided by two owners.
func TestWaitHandoverDeniesWaiters(t *testing.T) {
	snap := fastSnapshot(t)
	nc := bustest.InProcess(t, bus.EmbeddedConfig{DataDir: t.TempDir(), Name: "engine-test"})
	owner := memberEngine(t, nc, snap, "owner", true)
	untilTrue(t, "the owner holds every partition", func() bool { return owner.cluster.OwnedCount() == bus.Partitions })
	a := memberEngine(t, nc, snap, "a", false)
	key := []byte(BucketKey("ten_a", "pol_f", KindIP, "192.0.2.1"))
	untilTrue(t, "the sender knows the owner", func() bool {
		o, ok := a.cluster.Owner(bus.Partition(key))
		return ok && o == "owner"
	})
	// A long wait on a slow bucket: 1 a minute.
	req := func(wait time.Duration) *CheckRequest {
		return &CheckRequest{IP: "192.0.2.1", Path: "/api/example?mode=heavy", Wait: wait}
	}
	for range 10 {
		if ans, err := owner.Check(t.Context(), "ten_a", req(0), time.Now()); err != nil || !ans.Allowed {
			t.Fatal(ans, err)
		}
	}
	type result struct {
		ans Answer
		err error
	}
	out := make(chan result, 2)
	for i, e := range []*Engine{owner, a} {
		go func() {
			ans, err := e.Check(t.Context(), "ten_a", req(8*time.Second), time.Now())
			out <- result{ans, err}
		}()
		untilTrue(t, "the waiter is queued at the owner", func() bool { return owner.waits.Len() == i+1 })
	}
	// A forwarded waiter holds no other forward: another caller's check
	// through the same sender is answered at once.
	began := time.Now()
	if ans, err := a.Check(t.Context(), "ten_a", &CheckRequest{IP: "192.0.2.2", Path: "/api/example?mode=heavy"}, time.Now()); err != nil || !ans.Allowed || time.Since(began) > time.Second {
		t.Fatalf("a forward beside a waiting one: %+v %v after %s", ans, err, time.Since(began))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	go owner.cluster.Close(ctx)
	for range 2 {
		r := <-out
		if r.err != nil || r.ans.Allowed || r.ans.WaitRefused != WaitRefusedHandover {
			t.Fatalf("at the hand-over: %+v %v", r.ans, r.err)
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("answered %s after the hand-over began", took)
	}
}
