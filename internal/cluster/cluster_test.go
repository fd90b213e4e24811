package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/bus/bustest"
)

func member(t *testing.T, url, node string, loads *atomic.Int64) *Cluster {
	t.Helper()
	return memberWith(t, url, Config{Node: node, LeaseTTL: time.Second, RenewInterval: 200 * time.Millisecond, Margin: 200 * time.Millisecond}, loads)
}

// memberWith is member with a configuration of its own.
func memberWith(t *testing.T, url string, cfg Config, loads *atomic.Int64) *Cluster {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := New(cfg, nc, Hooks{
		Acquired: func(context.Context, int, bus.LeaseID) error { loads.Add(1); return nil },
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
		return settled(a, b) && a.OwnedCount() == bus.Partitions/2
	})
	// Each learns the other's leases through its watch, a moment later.
	waitOwned(t, 5*time.Second, func() bool { return seesOwners(a, a, b) && seesOwners(b, a, b) })
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

// settled reports whether the members own every partition between them,
// each owning some and none owned twice.
func settled(ms ...*Cluster) bool {
	now := time.Now()
	total := 0
	for _, m := range ms {
		n := m.OwnedCount()
		if n == 0 {
			return false
		}
		total += n
	}
	if total != bus.Partitions {
		return false
	}
	for p := range bus.Partitions {
		owners := 0
		for _, m := range ms {
			if m.Owns(p, now) {
				owners++
			}
		}
		if owners != 1 {
			return false
		}
	}
	return true
}

// A NATS restart loses the in-memory lease buckets. The members recreate
// them and share the partitions again, whatever state the NATS client's
// own watch recovery was left in.
func TestOwnershipSurvivesNATSRestart(t *testing.T) {
	ns := bustest.Start(t, "cluster-test")
	var loads atomic.Int64
	a := member(t, ns.URL(), "a", &loads)
	b := member(t, ns.URL(), "b", &loads)
	waitOwned(t, 10*time.Second, func() bool { return settled(a, b) })

	// Throughout, no partition has two deciding owners.
	stop := make(chan struct{})
	var double atomic.Int64
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			now := time.Now()
			for p := range bus.Partitions {
				if a.Owns(p, now) && b.Owns(p, now) {
					double.Add(1)
				}
			}
		}
	}()
	defer func() {
		close(stop)
		if n := double.Load(); n > 0 {
			t.Errorf("%d samples found a partition owned by both members", n)
		}
	}()

	for round := range 3 {
		ns.Stop()
		waitOwned(t, 5*time.Second, func() bool { return a.OwnedCount()+b.OwnedCount() == 0 })
		ns.Start()
		start := time.Now()
		waitOwned(t, 15*time.Second, func() bool { return settled(a, b) && seesOwners(a, a, b) && seesOwners(b, a, b) })
		t.Logf("round %d: partitions shared again %s after the restart", round, time.Since(start).Round(time.Millisecond))
	}

	// The same when the buckets vanish while NATS stays up.
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := errors.Join(js.DeleteKeyValue(ctx, OwnersBucket), js.DeleteKeyValue(ctx, MembersBucket)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitOwned(t, 15*time.Second, func() bool {
		return settled(a, b) && leasesMatch(ctx, js, a, b) && seesOwners(a, a, b) && seesOwners(b, a, b)
	})
	t.Logf("deleted buckets: partitions shared again after %s", time.Since(start).Round(time.Millisecond))
	a.Close(ctx)
	b.Close(ctx)
}

// seesOwners reports whether viewer forwards every partition to the
// member that decides for it.
func seesOwners(viewer *Cluster, ms ...*Cluster) bool {
	now := time.Now()
	for p := range bus.Partitions {
		owner, ok := viewer.Owner(p)
		for _, m := range ms {
			if m.Owns(p, now) != (ok && owner == m.Node()) {
				return false
			}
		}
	}
	return true
}

// leasesMatch reports whether the owners bucket holds a lease for every
// partition, naming the member that decides for it.
func leasesMatch(ctx context.Context, js jetstream.JetStream, ms ...*Cluster) bool {
	kv, err := js.KeyValue(ctx, OwnersBucket)
	if err != nil {
		return false
	}
	now := time.Now()
	for p := range bus.Partitions {
		e, err := kv.Get(ctx, partKey(p))
		if err != nil {
			return false
		}
		var l lease
		if json.Unmarshal(e.Value(), &l) != nil {
			return false
		}
		for _, m := range ms {
			if m.Owns(p, now) != (m.Node() == l.Node) {
				return false
			}
		}
	}
	return true
}

// A member that reaches NATS over a slow link (20 ms round trips) keeps
// every partition: its 64 renewals take one round trip together, not one
// each (one each would take 1.3 s, past the 400 ms a renewal may take),
// and taking partitions over never delays them past a renew interval. The
// member runs with the default lease timings: the tests' shorter ones left
// too little room when the race detector and the other packages' tests
// shared the machine's two cores.
func TestLeasesHoldOverASlowLink(t *testing.T) {
	ns, err := bus.StartEmbedded(bus.EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "cluster-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	link := newSlowLink(t, ns.Addr().String(), 10*time.Millisecond)
	var loads atomic.Int64
	a := memberWith(t, "nats://"+link, Config{Node: "a"}, &loads)
	start := time.Now()
	waitOwned(t, 30*time.Second, func() bool { return a.OwnedCount() == bus.Partitions })
	t.Logf("all partitions owned %s after start", time.Since(start).Round(time.Millisecond))
	// Sample for four seconds (two lease lifetimes, ten renewals).
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if n := a.OwnedCount(); n != bus.Partitions {
			t.Fatalf("owned %d of %d partitions: a renewal came late", n, bus.Partitions)
		}
	}
	a.Close(context.Background())
}

// newSlowLink starts a loopback TCP proxy to target that delivers every
// byte d after it was sent, in both directions, and returns its address.
func newSlowLink(t *testing.T, target string, d time.Duration) string {
	return newLossyLink(t, target, d, 0, 0, 0, 0)
}

func newMember(t *testing.T, url, node, holder string) *Cluster {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := New(Config{Node: node, Holder: holder, LeaseTTL: time.Second, RenewInterval: 200 * time.Millisecond, Margin: 200 * time.Millisecond}, nc, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A second process under a live member's node name is refused with an
// error naming the node and the holder, and the first keeps its partitions;
// a process that takes the name of one that stopped renewing (a restart
// after kill -9) joins once the old entry would have expired.
func TestNodeNameHeldByLiveMember(t *testing.T) {
	ns, err := bus.StartEmbedded(bus.EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "cluster-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	first := newMember(t, ns.ClientURL(), "same", "host h1, pid 1")
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitOwned(t, 10*time.Second, func() bool { return first.OwnedCount() == bus.Partitions })

	second := newMember(t, ns.ClientURL(), "same", "host h2, pid 2")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = second.Start(ctx)
	var taken *NodeTakenError
	if !errors.As(err, &taken) {
		t.Fatalf("second member under a live name: err = %v, want a NodeTakenError", err)
	}
	if taken.Node != "same" || taken.Holder != "host h1, pid 1" {
		t.Fatalf("error names node %q holder %q", taken.Node, taken.Holder)
	}
	t.Log(err)
	if first.OwnedCount() != bus.Partitions || first.members.conflict.Load() {
		t.Fatalf("the first member was disturbed: owns %d, conflict %v", first.OwnedCount(), first.members.conflict.Load())
	}

	// The first stops renewing, as a killed process would: a new process
	// under its name joins, and takes the partitions once the leases expire.
	first.stop()
	first.done.Wait()
	third := newMember(t, ns.ClientURL(), "same", "host h1, pid 3")
	if err := third.Start(ctx); err != nil {
		t.Fatalf("restart under the name of a stopped member: %v", err)
	}
	waitOwned(t, 10*time.Second, func() bool { return third.OwnedCount() == bus.Partitions })
	third.Close(context.Background())
}

// When another live instance writes a member's entry anyway (two processes
// that claimed the name at the same instant), the member gives up every
// partition and reports on Failed.
func TestNodeNameOverwrittenLeavesCluster(t *testing.T) {
	ns, err := bus.StartEmbedded(bus.EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "cluster-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	m := newMember(t, ns.ClientURL(), "dup", "host h1, pid 1")
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitOwned(t, 10*time.Second, func() bool { return m.OwnedCount() == bus.Partitions })
	other, _ := json.Marshal(lease{Node: "dup", Expires: time.Now().Add(time.Hour).UnixMilli(), Instance: "other", Holder: "host h2, pid 2"})
	if _, err := m.members.kv.Put(context.Background(), "dup", other); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-m.Failed():
		var taken *NodeTakenError
		if !errors.As(err, &taken) || taken.Holder != "host h2, pid 2" {
			t.Fatalf("Failed reported %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no failure reported")
	}
	if n := m.OwnedCount(); n != 0 {
		t.Fatalf("still decides for %d partitions", n)
	}
	m.Close(context.Background())
}

// A server whose leases lapsed (its renewals failed while NATS did not
// answer) takes back the ones nobody wrote since without loading them from
// the worker: its buckets for them are still the latest. A lease another
// server wrote meanwhile is loaded as any takeover is.
func TestLapsedLeasesResumeWithoutALoad(t *testing.T) {
	ns := bustest.Start(t, "cluster-test")
	var loads atomic.Int64
	a := member(t, ns.URL(), "a", &loads)
	defer a.Close(context.Background())
	waitOwned(t, 10*time.Second, func() bool { return a.OwnedCount() == bus.Partitions })
	before := loads.Load()
	if before != bus.Partitions {
		t.Fatalf("%d loads for %d first acquisitions", before, bus.Partitions)
	}
	resumed := func() float64 { return testutil.ToFloat64(a.metrics.handovers.WithLabelValues("resumed")) }

	// Every lease lapses as after failed renewals; nobody else writes them.
	for p := range bus.Partitions {
		a.lose(p, "renewal failed (test)")
	}
	waitOwned(t, 5*time.Second, func() bool { return a.OwnedCount() == bus.Partitions })
	if got := loads.Load(); got != before {
		t.Fatalf("%d partitions loaded again, want none: nobody else owned them", got-before)
	}
	if got := resumed(); got != bus.Partitions {
		t.Fatalf("%v partitions resumed, want %d", got, bus.Partitions)
	}

	// A renewal NATS applied but whose answer never came (the lease names
	// the revision a last knew as the one it replaced): a resumes too.
	const q = 3
	for try := 0; ; try++ {
		a.leases.mu.Lock() // holds a's tick and watch still
		rev := a.leases.written[q].rev
		renewed, _ := json.Marshal(lease{Node: "a", Expires: time.Now().Add(time.Second).UnixMilli(), Instance: a.cfg.Instance, Prev: rev})
		_, err := a.leases.kv.Update(context.Background(), partKey(q), renewed, rev)
		if err == nil {
			a.mine[q].Store(0) // the renewal's error made a stop deciding for q
		}
		a.leases.mu.Unlock()
		if err == nil {
			break
		}
		if try == 20 {
			t.Fatalf("writing the unanswered renewal: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // a's own renewal was under way
	}
	waitOwned(t, 5*time.Second, func() bool { return a.Owns(q, time.Now()) })
	if got := loads.Load(); got != before {
		t.Fatalf("partition %d loaded again after a renewal whose answer was lost", q)
	}
	if got := resumed(); got != bus.Partitions+1 {
		t.Fatalf("%v partitions resumed, want %d", got, bus.Partitions+1)
	}

	// Another server took partition 7 and died: its lease is expired but
	// it may have decided for p, so taking p back loads it.
	const p = 7
	a.leases.mu.Lock()
	rev := a.leases.table[p].revision
	a.leases.mu.Unlock()
	other, _ := json.Marshal(lease{Node: "b", Expires: time.Now().Add(-time.Second).UnixMilli()})
	if _, err := a.leases.kv.Update(context.Background(), partKey(p), other, rev); err != nil {
		t.Fatal(err)
	}
	waitOwned(t, 5*time.Second, func() bool { return loads.Load() == before+1 && a.OwnedCount() == bus.Partitions })
	if got := resumed(); got != bus.Partitions+1 {
		t.Fatalf("%v partitions resumed, want %d: partition %d had another owner", got, bus.Partitions, p)
	}

	// Between losing p and taking it back, b writes p's lease: a must not
	// resume from memory.
	a.leases.mu.Lock()
	rev = a.leases.table[p].revision
	a.leases.mu.Unlock()
	a.lose(p, "renewal failed (test)")
	if _, err := a.leases.kv.Update(context.Background(), partKey(p), other, rev); err != nil {
		// a took p back first (it may, as it was its own).
		t.Logf("a resumed partition %d before the other write: %v", p, err)
	} else {
		waitOwned(t, 5*time.Second, func() bool { return loads.Load() == before+2 && a.OwnedCount() == bus.Partitions })
	}

	// a dies (kill -9: no lease given back) and starts again under its
	// name: the leases name it, but the new process has nothing in
	// memory, so every partition is loaded.
	a.stop()
	a.done.Wait()
	var reloads atomic.Int64
	a2 := member(t, ns.URL(), "a", &reloads)
	defer a2.Close(context.Background())
	waitOwned(t, 10*time.Second, func() bool { return a2.OwnedCount() == bus.Partitions })
	if got := reloads.Load(); got != bus.Partitions {
		t.Fatalf("the restarted server loaded %d partitions, want all %d", got, bus.Partitions)
	}
	if got := testutil.ToFloat64(a2.metrics.handovers.WithLabelValues("resumed")); got != 0 {
		t.Fatalf("the restarted server resumed %v partitions it has no state for", got)
	}
}

// When NATS stops answering both members for longer than a lease (the
// lease bucket's leader died), both lose their leases; once it answers
// again each takes its own back unchanged, and neither takes over the
// other's, which would make those checks wait for the worker to load them.
func TestSharedOutageResumesEachOwnPartitions(t *testing.T) {
	ns := bustest.Start(t, "cluster-test")
	var loads atomic.Int64
	target := strings.TrimPrefix(ns.URL(), "nats://")
	linkA, linkB := newPausableLink(t, target), newPausableLink(t, target)
	a := member(t, "nats://"+linkA.addr, "a", &loads)
	b := member(t, "nats://"+linkB.addr, "b", &loads)
	defer a.Close(context.Background())
	defer b.Close(context.Background())
	waitOwned(t, 10*time.Second, func() bool {
		return settled(a, b) && seesOwners(a, a, b) && seesOwners(b, a, b)
	})
	before := loads.Load()
	ownedA, ownedB := a.OwnedCount(), b.OwnedCount()

	linkA.pause(true)
	linkB.pause(true)
	time.Sleep(1500 * time.Millisecond) // the lease is 1 s
	if a.OwnedCount() != 0 || b.OwnedCount() != 0 {
		t.Fatalf("still deciding without NATS: a %d, b %d", a.OwnedCount(), b.OwnedCount())
	}
	linkA.pause(false)
	linkB.pause(false)
	waitOwned(t, 5*time.Second, func() bool { return settled(a, b) })
	if got := loads.Load() - before; got != 0 {
		t.Fatalf("%d partitions loaded after the outage, want none: each member's own were unchanged", got)
	}
	if a.OwnedCount() != ownedA || b.OwnedCount() != ownedB {
		t.Fatalf("after the outage a owns %d (had %d), b %d (had %d)", a.OwnedCount(), ownedA, b.OwnedCount(), ownedB)
	}
}

// pausableLink is a loopback TCP proxy that can cut its connections and
// refuse new ones for a while, as a NATS node that died would.
type pausableLink struct {
	addr   string
	mu     sync.Mutex
	paused bool
	conns  []net.Conn
}

func newPausableLink(t *testing.T, target string) *pausableLink {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	l := &pausableLink{addr: ln.Addr().String()}
	t.Cleanup(func() { l.pause(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.mu.Lock()
			paused := l.paused
			l.mu.Unlock()
			if paused {
				c.Close()
				continue
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			l.mu.Lock()
			l.conns = append(l.conns, c, u)
			l.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	return l
}

// pause cuts every connection and refuses new ones; pause(false) lets
// them in again.
func (l *pausableLink) pause(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.paused = on
	if on {
		for _, c := range l.conns {
			c.Close()
		}
		l.conns = nil
	}
}

// A server shut down while its loop is giving a partition back (here to a
// member that just joined) finishes that release: no lease of its is left
// to expire, so no partition waits a lease time for its next owner.
func TestCloseDuringAReleaseLeavesNoLease(t *testing.T) {
	ns, err := bus.StartEmbedded(bus.EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "cluster-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var releasing atomic.Int64
	inRelease := make(chan struct{}, bus.Partitions)
	// Like the engine's flush and wait for the worker: slow, and ended
	// by its context.
	slowFlush := func(ctx context.Context, p int) error {
		releasing.Add(1)
		inRelease <- struct{}{}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(150 * time.Millisecond):
			return nil
		}
	}
	a, err := New(Config{Node: "a", LeaseTTL: time.Second, RenewInterval: 200 * time.Millisecond, Margin: 200 * time.Millisecond}, nc, Hooks{Releasing: slowFlush})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitOwned(t, 10*time.Second, func() bool { return a.OwnedCount() == bus.Partitions })
	var loads atomic.Int64
	b := member(t, ns.ClientURL(), "b", &loads)
	<-inRelease // a is giving partitions back to b
	a.Close(context.Background())
	kv, err := a.js.KeyValue(context.Background(), OwnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	left := 0
	for p := range bus.Partitions {
		e, err := kv.Get(context.Background(), partKey(p))
		if err != nil {
			continue
		}
		var l lease
		if json.Unmarshal(e.Value(), &l) == nil && l.Node == "a" {
			left++
		}
	}
	if left > 0 {
		t.Fatalf("%d leases of the closed server are left to expire (%d releases began)", left, releasing.Load())
	}
	waitOwned(t, 5*time.Second, func() bool { return b.OwnedCount() == bus.Partitions })
	b.Close(context.Background())
}

// Customer placement is on only while every live member announces it: an
// older member (one that does not) turns it off for everyone until it
// leaves, and a member that does not place customers never turns it on.
func TestCustomerPlacementNeedsEveryMember(t *testing.T) {
	ns, err := bus.StartEmbedded(bus.EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "cluster-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	var loads atomic.Int64
	cfg := func(node string, placed bool) Config {
		return Config{Node: node, LeaseTTL: time.Second, RenewInterval: 100 * time.Millisecond, Margin: 200 * time.Millisecond, CustomerPlacement: placed}
	}
	a := memberWith(t, ns.ClientURL(), cfg("a", true), &loads)
	b := memberWith(t, ns.ClientURL(), cfg("b", true), &loads)
	waitOwned(t, 10*time.Second, func() bool { return a.CustomerPlacement() && b.CustomerPlacement() })
	old := memberWith(t, ns.ClientURL(), cfg("old", false), &loads)
	waitOwned(t, 10*time.Second, func() bool { return !a.CustomerPlacement() && !b.CustomerPlacement() })
	if old.CustomerPlacement() {
		t.Fatal("a member that does not place customers reports placement on")
	}
	old.Close(context.Background())
	waitOwned(t, 10*time.Second, func() bool { return a.CustomerPlacement() && b.CustomerPlacement() })
	a.Close(context.Background())
	b.Close(context.Background())
}
