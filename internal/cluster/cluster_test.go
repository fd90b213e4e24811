package cluster

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
)

func member(t *testing.T, url, node string, loads *atomic.Int64) *Cluster {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := New(Config{Node: node, LeaseTTL: time.Second, RenewInterval: 200 * time.Millisecond, Margin: 200 * time.Millisecond}, nc, Hooks{
		Acquired: func(context.Context, int) error { loads.Add(1); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

func waitOwned(t *testing.T, d time.Duration, want func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !want() {
		if time.Now().After(deadline) {
			t.Fatal("ownership did not settle")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Two members split the partitions, never both owning one; when one leaves
// gracefully the other takes everything, and when one stops renewing (as a
// killed process would) its leases expire and move.
func TestOwnershipSplitsAndMoves(t *testing.T) {
	ns, err := bus.StartEmbedded(bus.EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "cluster-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	var loads atomic.Int64
	a := member(t, ns.ClientURL(), "a", &loads)
	b := member(t, ns.ClientURL(), "b", &loads)
	waitOwned(t, 10*time.Second, func() bool {
		return a.OwnedCount()+b.OwnedCount() == bus.Partitions && a.OwnedCount() == bus.Partitions/2
	})
	now := time.Now()
	for p := range bus.Partitions {
		if a.Owns(p, now) && b.Owns(p, now) {
			t.Fatalf("partition %d owned by both", p)
		}
		owner, ok := a.Owner(p)
		if !ok || (owner == "a") != a.Owns(p, now) {
			t.Fatalf("partition %d: a sees owner %q", p, owner)
		}
	}
	if loads.Load() < bus.Partitions {
		t.Fatalf("only %d partition loads for %d acquisitions", loads.Load(), bus.Partitions)
	}

	// A member that stops renewing loses its leases to the other.
	b.stop()
	b.done.Wait()
	start := time.Now()
	waitOwned(t, 5*time.Second, func() bool { return a.OwnedCount() == bus.Partitions })
	t.Logf("expired leases taken over in %s (lease TTL 1s)", time.Since(start).Round(time.Millisecond))
	if b.OwnedCount() != 0 {
		t.Fatalf("the stopped member still decides for %d partitions", b.OwnedCount())
	}
	a.Close(context.Background())
}
