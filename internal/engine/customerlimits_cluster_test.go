package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/bus/bustest"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

// placingEngine is memberEngine whose cluster member announces customer
// placement when placed is set.
func placingEngine(t *testing.T, nc *nats.Conn, snap tenants.Snapshot, node string, owner, placed bool) *Engine {
	t.Helper()
	e := engineOn(t, nc, snap)
	e.cfg.Node = node
	hooks := cluster.Hooks{Releasing: func(ctx context.Context, _ int) error { return e.FlushAndSync(ctx) }}
	if !owner {
		hooks.CanLoad = func() bool { return false }
	}
	c, err := cluster.New(cluster.Config{Node: node, Holder: "engine test", CustomerPlacement: placed}, nc, hooks)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetCluster(c); err != nil {
		t.Fatal(err)
	}
	startMember(t, c)
	return e
}

// 300 concurrent checks through three servers and five keys of one
// customer whose limit is 50 admit exactly 50, decided at the customer's
// partition's owner; the keys' own buckets there took exactly 50.
func TestCustomerLimitsAcrossServers(t *testing.T) {
	snap, plain := customerSnapshot(t, 5, 1000, 50)
	nc := bustest.InProcess(t, bus.EmbeddedConfig{DataDir: t.TempDir(), Name: "engine-test"})
	owner := placingEngine(t, nc, snap, "owner", true, true)
	untilTrue(t, "the owner holds every partition", func() bool { return owner.cluster.OwnedCount() == bus.Partitions })
	a := placingEngine(t, nc, snap, "a", false, true)
	b := placingEngine(t, nc, snap, "b", false, true)
	p := bus.CustomerPartition("ten_a", "cus_1")
	servers := []*Engine{a, b, owner}
	for _, e := range servers {
		untilTrue(t, "every server places customers and knows the owner", func() bool {
			o, ok := e.cluster.Owner(p)
			return ok && o == "owner" && e.cluster.CustomerPlacement()
		})
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 300 {
		e := servers[g%3]
		wg.Go(func() {
			ans, err := e.Check(t.Context(), "ten_a", &CheckRequest{APIKey: plain["ckey_m"+itoa(g%5)], Path: "/cus/x"}, t0)
			if err != nil {
				t.Error(err)
				return
			}
			if ans.Allowed {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 50 {
		t.Fatalf("admitted %d, want 50", admitted.Load())
	}
	tl := owner.view.Load().tenant("ten_a").byID["pol_cus"].tiers["pro"]
	sum := 0.0
	for i := range 5 {
		sum += usedIn(t, owner, bus.AppendPlacedBucketKey(nil, "ten_a", "pol_cus", KindKey, "cus_1", "ckey_m"+itoa(i)), tl.limits)[0]
	}
	if sum < 49.9 || sum > 50.1 {
		t.Fatalf("the keys' buckets at the owner took %v, want 50", sum)
	}
	for _, e := range []*Engine{a, b} {
		if e.cache.Len() != 0 {
			t.Fatalf("a sender holds %d buckets: it decided something itself", e.cache.Len())
		}
	}
}

// While a live server does not announce customer placement (an older
// version), a check that needs a customer's bucket answers 503 and takes
// nothing; a caller without a customer is decided as before.
func TestCustomerLimitsNeedEveryServer(t *testing.T) {
	snap, plain := customerSnapshot(t, 1, 3, 5)
	nc := bustest.InProcess(t, bus.EmbeddedConfig{DataDir: t.TempDir(), Name: "engine-test"})
	owner := placingEngine(t, nc, snap, "owner", true, true)
	untilTrue(t, "the owner holds every partition", func() bool { return owner.cluster.OwnedCount() == bus.Partitions })
	untilTrue(t, "the owner alone places customers", func() bool { return owner.cluster.CustomerPlacement() })
	old := placingEngine(t, nc, snap, "old", false, false)
	untilTrue(t, "the owner counted the older member", func() bool { return !owner.cluster.CustomerPlacement() })
	_, err := owner.Check(t.Context(), "ten_a", &CheckRequest{APIKey: plain["ckey_m0"], Path: "/cus/x"}, t0)
	if errs.Code(err) != errs.Unavailable {
		t.Fatalf("a customer's check beside an older server: %v, want unavailable", err)
	}
	if owner.cache.Len() != 0 {
		t.Fatalf("the refused check made %d buckets", owner.cache.Len())
	}
	if ans, err := old.Check(t.Context(), "ten_a", &CheckRequest{APIKey: plain["ckey_alone"], Path: "/cus/x"}, t0); err != nil || !ans.Allowed {
		t.Fatalf("a key of no customer: %+v %v", ans, err)
	}
}

// An owner whose view puts the key with another customer than the
// sender's does not decide it: the sender asks again until its wait for
// an owner runs out, and nothing is taken at either customer.
func TestCustomerLimitsOwnerViewDiffers(t *testing.T) {
	snap, plain := customerSnapshot(t, 1, 3, 5)
	moved := snap
	moved.ConsumerKeys = append([]tenants.ConsumerKeyRecord(nil), snap.ConsumerKeys...)
	for i := range moved.ConsumerKeys {
		if moved.ConsumerKeys[i].ID == "ckey_m0" {
			moved.ConsumerKeys[i].CustomerID = "cus_2"
		}
	}
	nc := bustest.InProcess(t, bus.EmbeddedConfig{DataDir: t.TempDir(), Name: "engine-test"})
	owner := placingEngine(t, nc, moved, "owner", true, true)
	untilTrue(t, "the owner holds every partition", func() bool { return owner.cluster.OwnedCount() == bus.Partitions })
	sender := placingEngine(t, nc, snap, "sender", false, true)
	untilTrue(t, "the sender places customers and knows the owner", func() bool {
		o, ok := sender.cluster.Owner(bus.CustomerPartition("ten_a", "cus_1"))
		return ok && o == "owner" && sender.cluster.CustomerPlacement()
	})
	start := time.Now()
	_, err := sender.Check(t.Context(), "ten_a", &CheckRequest{APIKey: plain["ckey_m0"], Path: "/cus/x"}, t0)
	if errs.Code(err) != errs.Unavailable {
		t.Fatalf("a check the owner maps to another customer: %v, want unavailable", err)
	}
	if took := time.Since(start); took < HandoverWait {
		t.Fatalf("the sender gave up after %s, before its wait for an owner", took)
	}
	if owner.cache.Len() != 0 {
		t.Fatalf("the owner holds %d buckets after a check it did not decide", owner.cache.Len())
	}
}
