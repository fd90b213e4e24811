package engine

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/bus/bustest"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/tenants"
)

// ownerEngine is an engine whose cluster member owns every partition, its
// forwarded decisions served through serve (which wraps serveForward, so
// a test can lose or delay answers), and a second member on the same NATS
// that forwards to it.
func ownerEngine(t *testing.T, serve func(e *Engine) func([]cluster.Item, []cluster.Result)) (*Engine, *cluster.Cluster) {
	t.Helper()
	snap, _ := snapshot(t)
	nc := bustest.InProcess(t, bus.EmbeddedConfig{DataDir: t.TempDir(), Name: "engine-test"})
	e := engineOn(t, nc, snap)
	c, err := cluster.New(cluster.Config{Node: "owner", Holder: "engine test"}, nc, cluster.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	e.useCluster(c)
	if err := c.Serve(serve(e)); err != nil {
		t.Fatal(err)
	}
	startMember(t, c)
	for deadline := time.Now().Add(15 * time.Second); c.OwnedCount() < bus.Partitions; {
		if time.Now().After(deadline) {
			t.Fatalf("the owner holds %d partitions, want %d", c.OwnedCount(), bus.Partitions)
		}
		select {
		case <-c.Changed():
		case <-time.After(50 * time.Millisecond):
		}
	}
	sender, err := cluster.New(cluster.Config{Node: "sender", Holder: "engine test"}, nc, cluster.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	return e, sender
}

// startMember starts c until the test ends.
func startMember(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Close(ctx)
	})
}

// remaining is what the anonymous tier of pol_1 (10 a minute) has left for
// ip on e, looked at without taking anything.
func remaining(t *testing.T, e *Engine, ip string) int64 {
	t.Helper()
	limits := e.view.Load().limitsFor("ten_a", "pol_1", "anonymous", "")
	var out [MaxLimits]quota.Outcome
	e.cache.CheckBytes([]byte(BucketKey("ten_a", "pol_1", KindIP, ip)), limits, t0.UnixNano(), 1, false, out[:1])
	if out[0].Allowed {
		return out[0].Remaining + 1
	}
	return out[0].Remaining
}

func item(ip string, id uint64, cost int64) cluster.Item {
	return cluster.Item{Key: BucketKey("ten_a", "pol_1", KindIP, ip), Tenant: "ten_a", Policy: "pol_1", Tier: "anonymous",
		Cost: cost, Consume: true, Now: t0.UnixNano(), ID: id}
}

// A forwarded decision whose answer comes back late is sent again with its
// id, and the owner answers the repeat as it answered the first without
// taking the units again; repeats arriving together, and a late copy, take
// nothing either. Items without an id (an older sender) are decided each
// time, which is what the table prevents.
func TestForwardedRepeatsApplyOnce(t *testing.T) {
	var mu sync.Mutex
	late := map[uint64]bool{} // ids whose first answer is held past the forward timeout
	e, sender := ownerEngine(t, func(e *Engine) func([]cluster.Item, []cluster.Result) {
		return func(items []cluster.Item, out []cluster.Result) {
			e.serveForward(items, out)
			mu.Lock()
			hold := len(items) == 1 && late[items[0].ID]
			delete(late, items[0].ID)
			mu.Unlock()
			if hold {
				time.Sleep(2500 * time.Millisecond) // past the sender's timeout
			}
		}
	})
	ctx := t.Context()

	// The first answer is late: the sender hears an error that does not
	// say "not sent", and sends the same item again.
	late[7] = true
	_, err := sender.Forward(ctx, "owner", item("192.0.2.1", 7, 3))
	if err == nil || errors.Is(err, cluster.ErrNotSent) {
		t.Fatalf("a forward whose answer came too late: err = %v, want a timeout that may have been decided", err)
	}
	res, err := sender.Forward(ctx, "owner", item("192.0.2.1", 7, 3))
	if err != nil || res.Status != cluster.StatusOK || !res.Allowed || res.Outcomes[0].Remaining != 7 {
		t.Fatalf("the repeat: %+v, %v", res, err)
	}
	if got := remaining(t, e, "192.0.2.1"); got != 7 {
		t.Fatalf("after a late answer and its repeat the bucket has %d of 10 left, want 7 (taken once)", got)
	}

	// Eight copies at once: one decision.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if r, err := sender.Forward(ctx, "owner", item("192.0.2.2", 8, 2)); err != nil || !r.Allowed || r.Outcomes[0].Remaining != 8 {
				t.Errorf("a copy: %+v, %v", r, err)
			}
		})
	}
	wg.Wait()
	if got := remaining(t, e, "192.0.2.2"); got != 8 {
		t.Fatalf("eight copies of one decision left %d of 10, want 8", got)
	}

	// Without ids, every copy is a decision of its own.
	for range 2 {
		if _, err := sender.Forward(ctx, "owner", item("192.0.2.3", 0, 2)); err != nil {
			t.Fatal(err)
		}
	}
	if got := remaining(t, e, "192.0.2.3"); got != 6 {
		t.Fatalf("two decisions without ids left %d, want 6", got)
	}
	if n := e.fwd.applied.size(); n != 2 {
		t.Fatalf("the applied table holds %d answers, want 2 (ids 7 and 8)", n)
	}

	// Nobody serves a node's subject: the error says the item went nowhere.
	if _, err := sender.Forward(ctx, "gone", item("192.0.2.4", 9, 1)); !errors.Is(err, cluster.ErrNotSent) {
		t.Fatalf("a forward to a node nobody serves: err = %v, want ErrNotSent", err)
	}
}

// A model of the owner's side against a ledger: random forwarded items —
// checks, peeks and settles (charges past the limit and refunds) — each
// sent once or more, their copies late, duplicated and in batches with
// other items, while the owner restarts or the partition changes hands (a
// new term, the applied table forgotten). The owner's bucket must end
// exactly where a second cache that saw only each item's first copy ends
// (or, for a denial that took nothing, its copies as new decisions), and
// every copy of what moved a bucket must answer as its first did. A check is sent again only
// to the owner it was first sent to, within its wait, so its copies never
// cross a restart (the documented bound); a settle's copies are the
// client's retries and cross anything. Without the applied table, or
// without the settles' marks (the owner's durable record of applied
// settles), it fails at once.
func TestAppliedTableModel(t *testing.T) {
	e, _ := ownerEngine(t, func(e *Engine) func([]cluster.Item, []cluster.Result) { return e.serveForward })
	answerMarks(t, e)
	for p := range e.pub.terms {
		e.pub.terms[p].Store(1)
	}
	// Two buckets that run out (100 a minute), where copies must answer
	// as their first, and two that never do (10⁹), where every unit shows.
	type bucket struct{ key, policy, tier string }
	keys := []bucket{
		{BucketKey("ten_a", "pol_1", KindIP, "198.51.100.1"), "pol_1", "default"},
		{BucketKey("ten_a", "pol_1", KindIP, "198.51.100.2"), "pol_1", "default"},
		{BucketKey("ten_a", "pol_3", KindIP, "198.51.100.3"), "pol_3", "anonymous"},
		{BucketKey("ten_a", "pol_3", KindIP, "198.51.100.4"), "pol_3", "anonymous"},
	}
	limitsOf := func(b bucket) []quota.Limit { return e.view.Load().limitsFor("ten_a", b.policy, b.tier, "") }
	byKey := map[string]bucket{}
	for _, b := range keys {
		byKey[b.key] = b
	}
	oracle := quota.NewCache()
	rng := rand.New(rand.NewPCG(1, 2))
	answers := map[uint64]cluster.Result{}
	type sentItem struct {
		it    cluster.Item
		epoch int
	}
	var sent []sentItem // items sent at least once, to repeat later
	epoch, restarts := 0, 0
	now := t0.UnixNano()
	for i := range 3000 {
		if rng.IntN(100) == 0 {
			// A restart or a hand-over and back: the owner forgets its
			// table and decides under a new term.
			e.fwd.applied = appliedTable{}
			for p := range e.pub.terms {
				e.pub.terms[p].Add(1)
			}
			epoch++
			restarts++
		}
		n := 1 + rng.IntN(4)
		batch := make([]cluster.Item, 0, n)
		for range n {
			if len(sent) > 0 && rng.IntN(3) == 0 {
				if s := sent[rng.IntN(len(sent))]; s.epoch == epoch || s.it.Settle {
					batch = append(batch, s.it) // a late or duplicated copy, or a client's retry
					continue
				}
			}
			id := uint64(i*8 + len(batch) + 1)
			b := keys[rng.IntN(len(keys))]
			it := cluster.Item{Key: b.key, Tenant: "ten_a", Policy: b.policy, Tier: b.tier,
				Cost: int64(1 + rng.IntN(5)), Consume: rng.IntN(8) != 0, Now: now, ID: id}
			if rng.IntN(5) == 0 {
				it.Settle, it.Consume, it.Since, it.Ref = true, true, now, "rsv_"+strconv.FormatUint(id, 10)
				if rng.IntN(2) == 0 {
					it.Cost = -it.Cost
				}
			}
			sent = append(sent, sentItem{it, epoch})
			batch = append(batch, it)
		}
		res := make([]cluster.Result, len(batch))
		e.serveForward(batch, res)
		for k, it := range batch {
			if res[k].Status != cluster.StatusOK {
				t.Fatalf("item %+v: status %d", it, res[k].Status)
			}
			if !it.Consume {
				continue
			}
			if first, seen := answers[it.ID]; seen && (first.Allowed || it.Settle) {
				if !it.Settle && (first.Allowed != res[k].Allowed || first.Outcomes[0] != res[k].Outcomes[0]) {
					t.Fatalf("a copy of %d answered %+v, its first %+v", it.ID, res[k], first)
				}
				continue
			}
			// A first decision, or a copy of a denial that took nothing:
			// that one was never remembered, and the copy is decided anew.
			answers[it.ID] = res[k]
			var out [1]quota.Outcome
			limits := limitsOf(byKey[it.Key])
			switch {
			case it.Settle && it.Cost > 0:
				oracle.Force(it.Key, limits, now, it.Cost)
			case it.Settle:
				var given [1]float64
				oracle.RefundSince([]byte(it.Key), limits, now, -it.Cost, it.Since, given[:])
			default:
				oracle.CheckBytes([]byte(it.Key), limits, now, it.Cost, true, out[:])
			}
		}
	}
	if restarts == 0 {
		t.Fatal("the model never restarted the owner")
	}
	for _, b := range keys {
		var got, want [1]quota.Outcome
		e.cache.CheckBytes([]byte(b.key), limitsOf(b), now, 0, false, got[:])
		oracle.CheckBytes([]byte(b.key), limitsOf(b), now, 0, false, want[:])
		if got[0].Remaining != want[0].Remaining {
			t.Fatalf("%s: the owner's bucket has %d left, the ledger of first decisions %d (%d restarts)", b.key, got[0].Remaining, want[0].Remaining, restarts)
		}
	}
}

// answerMarks answers settles' marks on e's NATS as a worker that has seen
// each reservation settled and applied by nobody yet would: yes to the
// first owner that asks for a reservation, no to any other (engine tests
// run without a worker; the worker's side is internal/reserve's
// TestMarkApplied).
func answerMarks(t *testing.T, e *Engine) {
	t.Helper()
	var mu sync.Mutex
	by := map[string]string{}
	sub, err := e.nc.Subscribe(bus.OpReservationApply.Subject(), func(m *nats.Msg) {
		var a reserve.Apply
		_ = json.Unmarshal(m.Data, &a)
		mu.Lock()
		who := a.Node + "@" + strconv.FormatUint(a.Term, 10)
		if by[a.TenantID+"/"+a.ID] == "" {
			by[a.TenantID+"/"+a.ID] = who
		}
		yes := by[a.TenantID+"/"+a.ID] == who
		mu.Unlock()
		_ = m.Respond(bus.EncodeReply(reserve.Applying{Yes: yes}, nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// One stripe holds at most two generations of appliedPerStripe answers,
// however fast they come: a full generation turns early.
func TestAppliedTableBounded(t *testing.T) {
	var tab appliedTable
	now := time.Now()
	n := uint64(len(tab.stripes))
	for i := range uint64(5 * appliedPerStripe) {
		s := tab.lock(i*n, now) // every id in stripe 0
		s.put(i*n, cluster.Result{Allowed: true})
		s.mu.Unlock()
	}
	if got := tab.size(); got > 2*appliedPerStripe {
		t.Fatalf("stripe 0 holds %d answers, want at most %d", got, 2*appliedPerStripe)
	}
	// The newest generation is all there: a repeat within it is found.
	last := uint64(5*appliedPerStripe-1) * n
	if _, ok := tab.lookup(last); !ok {
		t.Fatal("the last answer is gone")
	}
}

// An owner whose config has no limits for a check yet (a policy made a
// moment ago, not yet applied there) is asked again until it has them: the
// sender never decides the bucket in its own cache. If the owner never
// gets them within the wait, the check answers unavailable, still
// deciding nothing.
func TestOwnerWithoutLimitsIsAskedAgain(t *testing.T) {
	owner, _ := ownerEngine(t, func(e *Engine) func([]cluster.Item, []cluster.Result) { return e.serveForward })
	snap, _ := snapshot(t)
	snap.Policies = append(snap.Policies, tenants.Policy{ID: "pol_new", TenantID: "ten_a", Name: "new", Method: "*", Path: "/new/*",
		Consistency: "exact", CreatedAt: t0, Tiers: map[string]tenants.Limits{"anonymous": limit("token_bucket", 5, "60s")}})
	sender := engineOn(t, owner.nc, snap)
	sender.cfg.Node = "sender"
	c, err := cluster.New(cluster.Config{Node: "sender", Holder: "engine test"}, owner.nc, cluster.Hooks{CanLoad: func() bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.SetCluster(c); err != nil {
		t.Fatal(err)
	}
	startMember(t, c)
	key := func(ip string) []byte { return []byte(BucketKey("ten_a", "pol_new", KindIP, ip)) }
	for deadline := time.Now().Add(10 * time.Second); ; {
		if o, ok := c.Owner(bus.Partition(key("192.0.2.7"))); ok && o == "owner" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sender never learned the partition's owner")
		}
		time.Sleep(20 * time.Millisecond)
	}
	check := func(ip string) (Answer, error) {
		r := CheckRequest{IP: ip, Path: "/new/x"}
		return sender.Check(t.Context(), "ten_a", &r, time.Now())
	}
	applied := make(chan struct{})
	go func() {
		time.Sleep(300 * time.Millisecond)
		v, err := viewFromSnapshot(snap)
		if err != nil {
			t.Error(err)
		}
		owner.view.Store(v)
		close(applied)
	}()
	before := owner.view.Load()
	a, err := check("192.0.2.7")
	<-applied
	if err != nil || !a.Allowed || a.Remaining != 4 {
		t.Fatalf("a check the owner could decide once its config arrived: %+v, %v", a, err)
	}
	if sender.cache.Len() != 0 || owner.cache.Len() == 0 {
		t.Fatalf("the sender's cache holds %d buckets and the owner's %d: the sender decided", sender.cache.Len(), owner.cache.Len())
	}

	owner.view.Store(before) // the owner never learns of pol_new now
	start := time.Now()
	if _, err := check("192.0.2.8"); !errs.Is(err, errs.Unavailable) {
		t.Fatalf("a check the owner cannot decide: err = %v, want unavailable", err)
	}
	if took := time.Since(start); took < HandoverWait/2 {
		t.Fatalf("gave up after %s, want about the hand-over wait (%s)", took, HandoverWait)
	}
	if sender.cache.Len() != 0 {
		t.Fatal("the sender decided a bucket it does not own")
	}
}

// A tenant at its bound of buckets: a forwarded check of a new caller is
// decided on the tenant's overflow bucket, and its late repeat and copies
// sent together are answered from the applied table, so the shared bucket
// moves once per decision, exactly as a caller's own bucket does.
func TestForwardedRepeatsAtTheBoundApplyOnce(t *testing.T) {
	var mu sync.Mutex
	late := map[uint64]bool{}
	e, sender := ownerEngine(t, func(e *Engine) func([]cluster.Item, []cluster.Result) {
		return func(items []cluster.Item, out []cluster.Result) {
			e.serveForward(items, out)
			mu.Lock()
			hold := len(items) == 1 && late[items[0].ID]
			delete(late, items[0].ID)
			mu.Unlock()
			if hold {
				time.Sleep(2500 * time.Millisecond) // past the sender's timeout
			}
		}
	})
	e.bound.max = 1
	ctx := t.Context()
	if r, err := sender.Forward(ctx, "owner", item("192.0.2.10", 20, 1)); err != nil || !r.Allowed {
		t.Fatalf("the first caller, under the bound: %+v, %v", r, err)
	}
	// Both new callers fall in one partition: they share its overflow bucket.
	p := bus.Partition([]byte(BucketKey("ten_a", "pol_1", KindIP, "192.0.2.11")))
	var second string
	for i := 12; second == ""; i++ {
		if ip := "192.0.2." + strconv.Itoa(i); bus.Partition([]byte(BucketKey("ten_a", "pol_1", KindIP, ip))) == p {
			second = ip
		}
	}
	of := findOverflowKey(overflowID{tenant: "ten_a", policy: "pol_1", tier: "anonymous", part: p})
	left := func() int64 {
		limits := e.view.Load().limitsFor("ten_a", "pol_1", "anonymous", "")
		var out [MaxLimits]quota.Outcome
		e.cache.CheckBytes(of, limits, t0.UnixNano(), 1, false, out[:1])
		if out[0].Allowed {
			return out[0].Remaining + 1
		}
		return out[0].Remaining
	}

	late[21] = true
	if _, err := sender.Forward(ctx, "owner", item("192.0.2.11", 21, 3)); err == nil || errors.Is(err, cluster.ErrNotSent) {
		t.Fatalf("a forward whose answer came too late: err = %v", err)
	}
	if r, err := sender.Forward(ctx, "owner", item("192.0.2.11", 21, 3)); err != nil || !r.Allowed || r.Outcomes[0].Remaining != 7 {
		t.Fatalf("the repeat: %+v, %v", r, err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if r, err := sender.Forward(ctx, "owner", item(second, 22, 2)); err != nil || !r.Allowed || r.Outcomes[0].Remaining != 5 {
				t.Errorf("a copy: %+v, %v", r, err)
			}
		})
	}
	wg.Wait()
	if got := left(); got != 5 {
		t.Fatalf("the overflow bucket has %d of 10 left after a late repeat and eight copies, want 5 (3 and 2, each taken once)", got)
	}
	if e.cache.Has([]byte(BucketKey("ten_a", "pol_1", KindIP, "192.0.2.11"))) || e.cache.Has([]byte(BucketKey("ten_a", "pol_1", KindIP, second))) {
		t.Fatal("a caller past the bound got a bucket of its own")
	}
}
