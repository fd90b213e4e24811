package worker

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Each tenant's writes of each kind are a token bucket: a burst of
// BurstSeconds seconds' worth, then Settles a second; a refusal says when
// to retry, takes nothing, and touches no other tenant or kind.
func TestWriteLimiterPerTenantAndKind(t *testing.T) {
	l := newWriteLimiter(WriteLimits{Settles: 10, Reserves: 100, ConfigWrites: 2, BurstSeconds: 2})
	t0 := time.Unix(1_800_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	steps := []struct {
		tenant string
		kind   writeKind
		n      int
		at     time.Time
		ok     bool
		retry  time.Duration // of a refusal
	}{
		{"a", writeSettle, 20, at(0), true, 0},                       // the burst: 2 s of 10
		{"a", writeSettle, 1, at(0), false, 100 * time.Millisecond},  // empty
		{"a", writeSettle, 1, at(50), false, 50 * time.Millisecond},  // half a token back
		{"b", writeSettle, 20, at(50), true, 0},                      // another tenant's own bucket
		{"a", writeReserve, 200, at(50), true, 0},                    // another kind's own bucket
		{"a", writeConfig, 4, at(50), true, 0},                       //
		{"a", writeConfig, 1, at(50), false, 500 * time.Millisecond}, //
		{"a", writeSettle, 1, at(100), true, 0},                      // refilled one
		{"a", writeSettle, 2, at(250), false, 50 * time.Millisecond}, // 1.5 there: refused whole
		{"a", writeSettle, 1, at(250), true, 0},                      // the refusal took nothing
		{"a", writeSettle, 21, at(10_000), false, 0},                 // more than the burst ever holds
		{"a", writeSettle, 20, at(10_000), true, 0},                  // full again
	}
	for i, s := range steps {
		err := l.take(s.tenant, s.kind, s.n, s.at)
		switch {
		case s.ok && err != nil:
			t.Fatalf("step %d: refused: %v", i, err)
		case !s.ok && err == nil:
			t.Fatalf("step %d: admitted past the limit", i)
		case !s.ok && s.retry > 0:
			if errs.Code(err) != errs.RateLimited {
				t.Fatalf("step %d: %v, want rate_limited", i, err)
			}
			if got := errs.RetryAfter(err); got < s.retry-time.Millisecond || got > s.retry+time.Millisecond {
				t.Fatalf("step %d: retry after %s, want %s", i, got, s.retry)
			}
		case !s.ok:
			if errs.Code(err) != errs.Invalid {
				t.Fatalf("step %d: %v, want invalid_request", i, err)
			}
		}
	}
}

// The table forgets tenants whose buckets are full again, so it holds the
// tenants active lately, not every tenant ever seen.
func TestWriteLimiterForgetsIdleTenants(t *testing.T) {
	l := newWriteLimiter(WriteLimits{Settles: 10, BurstSeconds: 1})
	t0 := time.Unix(1_800_000_000, 0)
	for i := range 5000 {
		if err := l.take(fmt.Sprintf("ten_%d", i), writeSettle, 1, t0.Add(time.Duration(i)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	// A bucket refills in a tenth of a second: at most the tenants of the
	// last 100 ms, plus those since the last trim, are held.
	const minTrim = 1024
	if n := l.held(); n > 2*minTrim {
		t.Fatalf("%d tenants held, want at most %d", n, 2*minTrim)
	}
}

// A tenant has at most perTenant turns at once; more wait in order, and
// past maxWaiting are refused at once. Another tenant is not held up.
func TestTenantTurnsBoundEachTenant(t *testing.T) {
	tt := newTenantTurns(2, 3)
	ctx := context.Background()
	var held []func()
	for range 2 {
		r, err := tt.acquire(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	got := make(chan int, 3)
	for i := range 3 {
		go func() {
			r, err := tt.acquire(ctx, "a")
			if err != nil {
				t.Error(err)
				return
			}
			got <- i
			r()
		}()
		eventually(t, time.Second, "waiting", func() bool {
			tt.mu.Lock()
			defer tt.mu.Unlock()
			return tt.m["a"].users == 3+i
		})
	}
	if _, err := tt.acquire(ctx, "a"); errs.Code(err) != errs.RateLimited || errs.RetryAfter(err) <= 0 {
		t.Fatalf("past maxWaiting: %v", err)
	}
	rb, err := tt.acquire(ctx, "b")
	if err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	rb()
	select {
	case i := <-got:
		t.Fatalf("waiter %d ran while both turns were held", i)
	case <-time.After(50 * time.Millisecond):
	}
	held[0]() // one turn free: the waiters take it one by one, in order
	for want := range 3 {
		if i := <-got; i != want {
			t.Fatalf("waiter %d ran %dth: not in order", i, want)
		}
	}
	held[1]()
	eventually(t, time.Second, "entries dropped", func() bool {
		tt.mu.Lock()
		defer tt.mu.Unlock()
		return len(tt.m) == 0
	})
	cctx, cancel := context.WithCancel(ctx)
	r1, _ := tt.acquire(ctx, "c")
	r2, _ := tt.acquire(ctx, "c")
	cancel()
	if _, err := tt.acquire(cctx, "c"); err == nil {
		t.Fatal("a waiter whose request ended took a turn")
	}
	r1()
	r2()
	if len(tt.m) != 0 {
		t.Fatalf("%d entries left", len(tt.m))
	}
}

// A group takes one write of each tenant in turn: a tenant with many
// queued fills the spare room but never delays another's past the next
// group. A tenant's queue, and all queues, are bounded.
func TestGroupQueueRoundRobin(t *testing.T) {
	q := newGroupQueue("settle", 4, 5, 8, func(context.Context, *sql.Tx, string) (string, error) { return "", nil })
	q.running = true
	push := func(tenant, req string) error {
		return q.push(&groupReq[string, string]{tenant: tenant, req: req, done: make(chan struct{})})
	}
	for i := range 5 {
		if err := push("a", fmt.Sprint("a", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := push("a", "a5"); errs.Code(err) != errs.Unavailable {
		t.Fatalf("past a tenant's bound: %v", err)
	}
	for _, r := range []string{"b0", "b1", "c0"} {
		if err := push(r[:1], r); err != nil {
			t.Fatal(err)
		}
	}
	if err := push("d", "d0"); errs.Code(err) != errs.Unavailable {
		t.Fatalf("past the total bound: %v", err)
	}
	var order []string
	for {
		g := q.next(nil)
		if len(g) == 0 {
			break
		}
		if len(g) > 4 {
			t.Fatalf("group of %d", len(g))
		}
		for _, r := range g {
			order = append(order, r.req)
		}
		order = append(order, "|")
	}
	want := "a0 b0 c0 a1 | b1 a2 a3 a4 |"
	if got := fmt.Sprint(order); got != "["+want+"]" {
		t.Fatalf("groups %s, want [%s]", got, want)
	}
	if q.queued != 0 || len(q.queues) != 0 || len(q.ring) != 0 {
		t.Fatalf("left: %d queued, %d queues, ring %v", q.queued, len(q.queues), q.ring)
	}
}

// A settle of an unknown reservation, and a replay, are answered from a
// read: while the store's writer is held by something else, they answer
// at once. A settle that writes waits for the writer, and many are
// committed together.
func TestSettleReadsFirstAndCommitsInGroups(t *testing.T) {
	e := newEnv(t, Config{})
	e.run(t)
	ctx := context.Background()
	cl := bus.NewClient(e.nc, 10*time.Second)
	var tn service.Written[service.TenantCreated]
	eventuallyOK(t, "worker serving", func() error {
		return bus.CallInto(ctx, cl, bus.OpTenantCreate, bus.TenantCreate{Name: "acme", OwnerEmail: "o@acme.test", OwnerPassword: "correct horse battery"}, &tn)
	})
	tenant := tn.Result.Tenant.ID
	now := time.Now().UTC()
	const n = 200
	for i := range n {
		r := reserve.Reservation{ID: fmt.Sprintf("rsv_%03d", i), TenantID: tenant, Hold: reserve.Hold{BucketKey: "k", PolicyID: "p", Policy: "p", Tier: "default", IdentityKind: "ip", IdentityID: "192.0.2.1"},
			Reserved: 10, Cap: 10, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		if err := bus.CallInto(ctx, cl, bus.OpReservationCreate, r, nil); err != nil {
			t.Fatal(err)
		}
	}
	settle := func(id string, actual int64) (reserve.Settled, error) {
		var out reserve.Settled
		err := bus.CallInto(ctx, cl, bus.OpReservationSettle, reserve.Settle{TenantID: tenant, ID: id, Actual: actual, At: now}, &out)
		return out, err
	}
	if _, err := settle("rsv_000", 4); err != nil {
		t.Fatal(err)
	}

	release := make(chan struct{})
	holding := make(chan struct{})
	go func() {
		_ = e.w.store.Exclusive(ctx, func() error { close(holding); <-release; return nil })
	}()
	<-holding
	if _, err := settle("rsv_nope", 1); errs.Code(err) != errs.NotFound {
		t.Fatalf("unknown reservation while the writer is held: %v", err)
	}
	if out, err := settle("rsv_000", 4); err != nil || !out.Replayed {
		t.Fatalf("replay while the writer is held: %+v %v", out, err)
	}
	if _, err := settle("rsv_000", 5); errs.Code(err) != errs.Conflict {
		t.Fatalf("another amount while the writer is held: %v", err)
	}
	// These wait for the writer, all queued; then they commit together.
	errc := make(chan error, n-1)
	for i := 1; i < n; i++ {
		go func() {
			_, err := settle(fmt.Sprintf("rsv_%03d", i), 7)
			errc <- err
		}()
	}
	eventually(t, 5*time.Second, "settles queued", func() bool {
		select {
		case err := <-errc:
			t.Fatalf("a settle answered while the writer was held: %v", err)
		default:
		}
		e.w.writes.settles.mu.Lock()
		defer e.w.writes.settles.mu.Unlock()
		return e.w.writes.settles.queued+e.w.writes.settles.committing == n-1
	})
	e.w.writes.settles.mu.Lock()
	groups0 := e.w.writes.settles.groups
	e.w.writes.settles.mu.Unlock()
	var commits0 int64
	if err := e.db.QueryRow(`SELECT COUNT(*) FROM reservations WHERE state = 'settled'`).Scan(&commits0); err != nil {
		t.Fatal(err)
	}
	close(release)
	for range n - 1 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	var settled int64
	if err := e.db.QueryRow(`SELECT COUNT(*) FROM reservations WHERE state = 'settled'`).Scan(&settled); err != nil {
		t.Fatal(err)
	}
	if commits0 != 1 || settled != n {
		t.Fatalf("settled %d before the writer was free, %d after; want 1 and %d", commits0, settled, n)
	}
	e.w.writes.settles.mu.Lock()
	groups := e.w.writes.settles.groups - groups0
	e.w.writes.settles.mu.Unlock()
	// The group that took the writer's turn first, then the rest at once.
	if groups > 2 {
		t.Fatalf("%d settles took %d transactions, want at most 2", n-1, groups)
	}
}

// Past its settle limit a tenant is refused with rate_limited and a retry
// time, before its settle is read; another tenant's settles go on. The
// operator's writes are not limited, a tenant's config writes are.
func TestWriteLimitsAtTheWorker(t *testing.T) {
	e := newEnv(t, Config{WriteLimits: WriteLimits{Settles: 5, ConfigWrites: 1, BurstSeconds: 2}})
	e.run(t)
	ctx := context.Background()
	cl := bus.NewClient(e.nc, 10*time.Second)
	var a, b service.Written[service.TenantCreated]
	eventuallyOK(t, "worker serving", func() error {
		return bus.CallInto(ctx, cl, bus.OpTenantCreate, bus.TenantCreate{Name: "a", OwnerEmail: "o@a.test", OwnerPassword: "correct horse battery"}, &a)
	})
	if err := bus.CallInto(ctx, cl, bus.OpTenantCreate, bus.TenantCreate{Name: "b", OwnerEmail: "o@b.test", OwnerPassword: "correct horse battery"}, &b); err != nil {
		t.Fatal(err)
	}
	settle := func(tenant string) error {
		return bus.CallInto(ctx, cl, bus.OpReservationSettle, reserve.Settle{TenantID: tenant, ID: "rsv_unknown", Actual: 1, At: time.Now()}, nil)
	}
	for range 10 {
		if err := settle(a.Result.Tenant.ID); errs.Code(err) != errs.NotFound {
			t.Fatalf("within the limit: %v", err)
		}
	}
	err := settle(a.Result.Tenant.ID)
	if errs.Code(err) != errs.RateLimited || errs.RetryAfter(err) <= 0 || errs.RetryAfter(err) > 250*time.Millisecond {
		t.Fatalf("past the limit: %v (retry after %s)", err, errs.RetryAfter(err))
	}
	if err := settle(b.Result.Tenant.ID); errs.Code(err) != errs.NotFound {
		t.Fatalf("another tenant: %v", err)
	}

	policy := func(tenant string, i int) error {
		return bus.CallInto(ctx, cl, bus.OpPolicyCreate, bus.PolicyWrite{TenantID: tenant, Policy: tenants.Policy{Name: fmt.Sprint("p", i), Path: fmt.Sprint("/p", i),
			Tiers: map[string]tenants.Limits{"default": {{Algorithm: "token_bucket", Limit: 10, Period: "1m"}}}}}, nil)
	}
	for i := range 2 {
		if err := policy(a.Result.Tenant.ID, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := policy(a.Result.Tenant.ID, 2); errs.Code(err) != errs.RateLimited {
		t.Fatalf("config write past the limit: %v", err)
	}
	if err := policy(b.Result.Tenant.ID, 0); err != nil {
		t.Fatalf("another tenant's config write: %v", err)
	}
	// The operator acting on the tenant is not limited by it.
	opCtx := tenants.WithActor(ctx, tenants.Actor{Kind: tenants.ActorOperator, Label: "operator"})
	opCl := bus.NewClient(e.nc, 10*time.Second)
	if err := bus.CallInto(opCtx, opCl, bus.OpPolicyCreate, bus.PolicyWrite{TenantID: a.Result.Tenant.ID, Policy: tenants.Policy{Name: "op", Path: "/op",
		Tiers: map[string]tenants.Limits{"default": {{Algorithm: "token_bucket", Limit: 10, Period: "1m"}}}}}, nil); err != nil {
		t.Fatalf("the operator's write: %v", err)
	}
}

// A write whose caller gave up before its group was taken is never
// committed (its answer would reach nobody); one already in a group is
// waited for, so no write commits unanswered.
func TestGroupQueueAbandonedWritesAreNotCommitted(t *testing.T) {
	q := newGroupQueue("settle", 4, 5, 8, func(context.Context, *sql.Tx, string) (string, error) { return "", nil })
	q.running = true
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := q.do(ctx, "a", "gone"); err == nil {
		t.Fatal("a write whose caller gave up answered")
	}
	if err := q.push(&groupReq[string, string]{tenant: "a", req: "kept", done: make(chan struct{})}); err != nil {
		t.Fatal(err)
	}
	g := q.next(nil)
	if len(g) != 1 || g[0].req != "kept" || q.queued != 0 {
		t.Fatalf("group %v, %d left queued", g, q.queued)
	}
	// Taken into a group, then its caller gives up: it still gets the
	// commit's answer.
	ctx, cancel = context.WithCancel(context.Background())
	answered := make(chan string, 1)
	go func() {
		res, err := q.do(ctx, "b", "taken")
		answered <- fmt.Sprint(res, err)
	}()
	eventually(t, time.Second, "queued", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.queued == 1
	})
	g = q.next(nil)
	cancel()
	select {
	case a := <-answered:
		t.Fatalf("answered %q before its group committed", a)
	case <-time.After(50 * time.Millisecond):
	}
	g[0].res = "committed"
	close(g[0].done)
	if a := <-answered; a != "committed<nil>" {
		t.Fatalf("answered %q, want the commit's answer", a)
	}
}

// Every config operation that writes for a tenant is limited per tenant,
// unless it is listed here with the reason it needs no config-write turn:
// a new operation that writes fails this test until it is one or the
// other.
func TestEveryTenantConfigWriteIsLimited(t *testing.T) {
	notConfigWrites := map[string]string{
		bus.OpSnapshot.Name: "a read", bus.OpVersion.Name: "a read",
		bus.OpTenantCreate.Name: "the operator's", bus.OpTenantSuspend.Name: "the operator's", bus.OpTenantResume.Name: "the operator's",
		bus.OpTenantDelete.Name: "the operator's", bus.OpTenantOpen.Name: "the operator's",
		bus.OpKeyNames.Name: "a read", bus.OpKeyCount.Name: "a read", bus.OpPolicyNames.Name: "a read",
		bus.OpReservationCreate.Name: "limited as a settle (writeSettle)", bus.OpReservationSettle.Name: "limited as a settle (writeSettle)",
		bus.OpReservationReopen.Name: "limited as a settle (writeSettle)", bus.OpReservationApply.Name: "limited as a settle (writeSettle)",
		bus.OpReservationCreateAll.Name: "limited as a settle (writeSettle)", bus.OpReservationCancel.Name: "limited as a settle (writeSettle)",
		bus.OpServiceKeyUsed.Name: "Sluice's own note of a key's use, batched by each server",
		bus.OpUserSignIn.Name:     "limited by the sign-in limiters", bus.OpUserPassword.Name: "a user's own, limited per user",
		bus.OpUserEmail.Name: "a user's own, limited per user", bus.OpUserEndSessions.Name: "a user's own, limited per user",
		bus.OpSetupOffer.Name: "the operator's first start", bus.OpSetupClaim.Name: "the operator's first start, limited per address",
	}
	reads := []string{".get", ".list", ".page", "_list", ".deliveries"}
	for _, op := range bus.ConfigOps {
		name := op.OpName()
		read := false
		for _, r := range reads {
			read = read || strings.HasSuffix(name, r)
		}
		_, excepted := notConfigWrites[name]
		switch {
		case configWriteOps[name] && (read || excepted):
			t.Errorf("%s is limited as a config write and also listed as not one", name)
		case !configWriteOps[name] && !read && !excepted:
			t.Errorf("%s writes for a tenant but is not limited per tenant (configWriteOps) nor listed with a reason here", name)
		}
	}
}
