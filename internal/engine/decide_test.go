package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/bus/bustest"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

// clusterEngine builds an engine with a cluster member on a real embedded
// NATS. The member is not started: it owns no partition and knows no
// owner, so an exact policy's check waits for a hand-over.
func clusterEngine(t *testing.T, snap tenants.Snapshot, now func() time.Time) (*Engine, *cluster.Cluster) {
	t.Helper()
	nc := bustest.InProcess(t, bus.EmbeddedConfig{DataDir: t.TempDir(), Name: "engine-test"})
	e := engineOn(t, nc, snap)
	e.cfg.Now = now
	c, err := cluster.New(cluster.Config{Node: "test", Holder: "engine test", Now: now}, nc, cluster.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetCluster(c); err != nil {
		t.Fatal(err)
	}
	return e, c
}

// A check waiting for its partition's owner stops waiting when its context
// ends: it answers unavailable, wrapping the context's error, well before
// HandoverWait.
func TestCheckWaitingForOwnerEndsWithContext(t *testing.T) {
	snap, _ := snapshot(t)
	e, _ := clusterEngine(t, snap, time.Now)
	exact := CheckRequest{IP: "192.0.2.1", Path: "/api/example?mode=heavy"}

	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancelled while waiting", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(t.Context())
			return ctx, cancel
		}, context.Canceled},
		{"deadline before the hand-over wait", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(t.Context(), HandoverWait/20)
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			res := make(chan error, 1)
			go func() {
				r := exact
				_, err := e.Check(ctx, "ten_a", &r, t0)
				res <- err
			}()
			if tc.want == context.Canceled {
				cancel()
			}
			// Returning at once is the point: the hand-over wait would end
			// it after HandoverWait anyway, half of which is the margin.
			var err error
			select {
			case err = <-res:
			case <-time.After(HandoverWait / 2):
				t.Fatal("the check still waits for an owner after its context ended")
			}
			if !errs.Is(err, errs.Unavailable) || !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want unavailable wrapping %v", err, tc.want)
			}
		})
	}

	// A batch stops at the same point, with the same error.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := e.CheckBatch(ctx, "ten_a", []CheckRequest{exact}, t0); !errs.Is(err, errs.Unavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("batch: err = %v, want unavailable wrapping context.Canceled", err)
	}
}

// The wait for an owner is bounded on the wall clock: with the engine's
// clock stopped, a check nobody can decide still answers unavailable.
func TestHandoverWaitEndsWithStoppedClock(t *testing.T) {
	snap, _ := snapshot(t)
	e, _ := clusterEngine(t, snap, func() time.Time { return t0 })
	r := CheckRequest{IP: "192.0.2.1", Path: "/api/example?mode=heavy"}
	res := make(chan error, 1)
	go func() {
		_, err := e.Check(t.Context(), "ten_a", &r, t0)
		res <- err
	}()
	select {
	case err := <-res:
		if !errs.Is(err, errs.Unavailable) || errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want unavailable", err)
		}
	case <-time.After(10 * HandoverWait):
		t.Fatal("the check still waits for an owner with the clock stopped")
	}
}

// Ownership is judged on the engine's clock, the clock the cluster's
// leases are written in, not on the wall clock: a member whose clock runs
// an hour behind decides the partitions it holds.
func TestOwnershipOnEngineClock(t *testing.T) {
	snap, _ := snapshot(t)
	behind := func() time.Time { return time.Now().Add(-5 * time.Second) }
	ns, err := bus.StartEmbedded(bus.EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "engine-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	e := engineOn(t, nc, snap)
	e.cfg.Now = behind
	c, err := cluster.New(cluster.Config{Node: "test", Holder: "engine test", Now: behind}, nc, cluster.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetCluster(c); err != nil {
		t.Fatal(err)
	}
	startMember(t, c)
	for deadline := time.Now().Add(15 * time.Second); c.OwnedCount() < bus.Partitions; {
		if time.Now().After(deadline) {
			t.Fatalf("the member owns %d partitions, want %d", c.OwnedCount(), bus.Partitions)
		}
		select {
		case <-c.Changed():
		case <-time.After(50 * time.Millisecond):
		}
	}
	r := CheckRequest{IP: "192.0.2.1", Path: "/api/example?mode=heavy"}
	if a, err := e.Check(t.Context(), "ten_a", &r, behind()); err != nil || !a.Allowed {
		t.Fatalf("check on an owned partition: %+v, %v", a, err)
	}
}

// In a cluster, an exact policy's state is published only with the term of
// the owner that decided it: a server that never owned the partition (it
// decided the bucket while the policy was local, say) publishes nothing,
// since a state of term 0 is fenced by nothing and would overwrite the
// owner's. Local policies publish with term 0, and so does everything
// while the worker predates terms.
func TestExactStatesPublishOnlyWithATerm(t *testing.T) {
	snap, _ := snapshot(t)
	snap.Policies[2].Consistency = "local" // pol_3
	e, _ := clusterEngine(t, snap, time.Now)
	v := e.view.Load()
	exact := BucketKey("ten_a", "pol_1", KindIP, "192.0.2.1")
	local := BucketKey("ten_a", "pol_3", KindIP, "192.0.2.1")
	steps := []struct {
		name     string
		fenced   bool
		term     uint64
		key, pol string
		want     uint64
		publish  bool
	}{
		{"exact, never owned, fencing worker", true, 0, exact, "pol_1", 0, false},
		{"exact, owned under term 3", true, 3, exact, "pol_1", 3, true},
		{"local", true, 0, local, "pol_3", 0, true},
		{"exact, worker without terms", false, 0, exact, "pol_1", 0, true},
	}
	for _, s := range steps {
		e.pub.fencedStates.Store(s.fenced)
		e.pub.terms[bus.Partition([]byte(s.key))].Store(s.term)
		term, ok := e.pub.termOf(v, s.key, "ten_a", s.pol)
		if term != s.want || ok != s.publish {
			t.Errorf("%s: termOf = %d, %v; want %d, %v", s.name, term, ok, s.want, s.publish)
		}
	}
}
