package worker

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/tenants"
)

// blackHole accepts TCP connections and never answers: an attempt to it
// holds its slot until the attempt's timeout.
type blackHole struct {
	l        net.Listener
	accepted atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
}

func newBlackHole(t *testing.T) *blackHole {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackHole{l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b.accepted.Add(1)
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, c := range b.conns {
			c.Close()
		}
	})
	return b
}

func (b *blackHole) url() string { return "https://" + b.l.Addr().String() + "/hook" }

// A tenant whose four endpoints accept connections and never answer, and
// who creates keys as fast as it can, holds at most its share of the
// delivery slots: another tenant's deliveries arrive within 2 s (p99)
// all along, with the default pool (32), share (8) and timeout (10 s),
// while not one of the noisy tenant's attempts has timed out yet.
func TestWebhookBlackHolesDoNotDelayOtherTenants(t *testing.T) {
	noisyNeighbours(t, 1, 4, 8)
}

// Four such tenants, one black-hole endpoint each: together they would
// take the whole pool (4 × 8), but the last 8 slots go only to tenants
// holding none, so they hold 25 at most and the quiet tenant's
// deliveries still arrive within 2 s (p99).
func TestWebhookManyNoisyTenantsLeaveTheReserve(t *testing.T) {
	noisyNeighbours(t, 4, 1, 25)
}

// noisyNeighbours runs noisy tenants, each with endpoints black holes,
// churning keys, beside a quiet tenant creating a key every 100 ms for
// 5 s, and checks the quiet tenant's delivery latency and the slots the
// noisy ones hold (at most maxHeld).
func noisyNeighbours(t *testing.T, noisyTenants, endpoints int, maxHeld int64) {
	ctx := context.Background()
	cfg := webhookConfig(t)
	cfg.Webhooks.Timeout = 10 * time.Second
	cfg.Webhooks.Poll = 200 * time.Millisecond // the default
	e := newEnv(t, cfg)
	e.run(t)
	var noisy []tenants.Tenant
	var holes []*blackHole
	for n := range noisyTenants {
		tn := e.tenant(t, "noisy"+strconv.Itoa(n))
		noisy = append(noisy, tn)
		for range endpoints {
			h := newBlackHole(t)
			holes = append(holes, h)
			if _, err := e.w.config.Services().Webhooks.Create(ctx, tn.ID, tenants.WebhookBody{URL: ptr(h.url()), Events: &[]string{tenants.EventKeyCreated}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	quiet := e.tenant(t, "quiet")
	r := newReceiver(t)
	e.hook(t, quiet.ID, r, tenants.EventKeyCreated)
	keys := e.w.config.Services().Keys
	held := func() int64 {
		var n int64
		for _, h := range holes {
			n += h.accepted.Load()
		}
		return n
	}

	// The noisy tenants churn keys: a delivery per endpoint each, one
	// queue per key, a backlog that grows all along.
	churnCtx, stopChurn := context.WithCancel(ctx)
	var churned atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; churnCtx.Err() == nil; i++ {
			tn := noisy[i%len(noisy)]
			if _, err := keys.Create(churnCtx, serviceKeyCreate(tn.ID, "noisy-"+strconv.Itoa(i))); err != nil && churnCtx.Err() == nil {
				t.Error(err)
				return
			}
			churned.Add(1)
			time.Sleep(5 * time.Millisecond)
		}
	})
	defer func() { stopChurn(); wg.Wait() }()
	eventually(t, 5*time.Second, "the noisy tenants' attempts hanging", func() bool { return held() >= min(maxHeld, 8) })

	created := map[string]time.Time{}
	for i := range 50 {
		k, err := keys.Create(ctx, serviceKeyCreate(quiet.ID, "quiet-"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		created[k.Result.Key.ID] = time.Now()
		time.Sleep(100 * time.Millisecond)
	}
	eventually(t, 10*time.Second, "the quiet tenant's deliveries", func() bool { return len(r.events()) >= len(created) })
	stopChurn()
	wg.Wait()

	var lat []time.Duration
	for _, ev := range r.events() {
		at, ok := created[ev.Data["id"].(string)]
		if !ok {
			t.Fatalf("unexpected delivery %+v", ev)
		}
		lat = append(lat, ev.At.Sub(at))
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[(len(lat)*99+99)/100-1]
	t.Logf("%d noisy tenants: %d keys created, %d attempts hanging; quiet tenant: %d deliveries, p50 %s, p99 %s",
		noisyTenants, churned.Load(), held(), len(lat), p50, p99)
	if p99 > 2*time.Second {
		t.Errorf("the quiet tenant's deliveries took %s (p99) while the noisy tenants' endpoints hung, want at most 2s", p99)
	}
	// Every attempt to a black hole holds its connection for 10 s, longer
	// than the test: each accepted connection is one slot held.
	if n := held(); n > maxHeld {
		t.Errorf("the noisy tenants held %d delivery slots, at most %d", n, maxHeld)
	}
}

// Free slots go round the tenants with something due, not to the oldest
// due delivery: with a pool of two slots, a tenant with a long, older
// backlog to a slow endpoint (300 ms an answer) does not hold another
// tenant's few deliveries behind it. The backlog's tenant sorts first, so
// that an order by tenant would serve it first too.
func TestWebhookSlotsGoRoundTheTenants(t *testing.T) {
	ctx := context.Background()
	cfg := webhookConfig(t)
	cfg.Webhooks.Timeout = 5 * time.Second
	cfg.Webhooks.Slots, cfg.Webhooks.TenantSlots = 2, 2
	e := newEnv(t, cfg)
	e.run(t)
	var busy, other tenants.Tenant
	for i := 0; busy.ID == "" || busy.ID > other.ID; i++ {
		busy, other = e.tenant(t, "busy"+strconv.Itoa(i)), e.tenant(t, "other"+strconv.Itoa(i))
	}
	slow, fast := newReceiver(t), newReceiver(t)
	slow.answer = func(int) int { time.Sleep(300 * time.Millisecond); return 200 }
	keys := e.w.config.Services().Keys
	e.hook(t, busy.ID, slow, tenants.EventKeyCreated)
	for i := range 30 {
		if _, err := keys.Create(ctx, serviceKeyCreate(busy.ID, "busy-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	e.hook(t, other.ID, fast, tenants.EventKeyCreated)
	for i := range 5 {
		if _, err := keys.Create(ctx, serviceKeyCreate(other.ID, "other-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "the other tenant's deliveries", func() bool { return len(fast.events()) == 5 })
	if n := len(slow.events()); n > 20 {
		t.Fatalf("the other tenant's 5 deliveries waited for %d of the busy tenant's 30", n)
	}
}

// Deliveries dropped past a tenant's outbox bound are counted in
// sluice_webhook_dropped_total and logged at WARN with the tenant, once.
func TestWebhookDropsCountedAndLogged(t *testing.T) {
	ctx := context.Background()
	cfg := webhookConfig(t)
	cfg.Webhooks.Housekeeping = 20 * time.Millisecond
	var logs syncBuffer
	cfg.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e := newEnv(t, cfg)
	e.run(t)
	tn := e.tenant(t, "acme")
	r := newReceiver(t)
	e.hook(t, tn.ID, r, tenants.EventKeyCreated)
	r.stop() // nothing is delivered: everything stays pending
	if err := e.w.store.Outbox().SetLimits(ctx, tn.ID, tenants.OutboxLimits{PendingRows: 5}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := e.w.config.Services().Keys.Create(ctx, serviceKeyCreate(tn.ID, "key-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	dropped := e.w.webhooks.Collectors()[3]
	eventually(t, 5*time.Second, "15 drops counted", func() bool { return testutil.ToFloat64(dropped) == 15 })
	time.Sleep(100 * time.Millisecond) // more looks change nothing
	if n := testutil.ToFloat64(dropped); n != 15 {
		t.Fatalf("%v drops counted", n)
	}
	var warned int
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "outbox is full") && strings.Contains(line, "tenant="+tn.ID) {
			warned++
		}
	}
	if warned == 0 {
		t.Fatalf("no warning logged:\n%s", logs.String())
	}
}

// A paused endpoint's pending deliveries wait, and it gets no new events;
// resumed, what was pending goes.
func TestPausedWebhookHoldsItsDeliveries(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, webhookConfig(t))
	e.run(t)
	tn := e.tenant(t, "acme")
	r := newReceiver(t)
	wh := e.hook(t, tn.ID, r, tenants.EventKeyCreated)
	addr := r.addr
	r.stop()
	svc, keys := e.w.config.Services().Webhooks, e.w.config.Services().Keys
	var pending []string
	for i := range 3 {
		k, err := keys.Create(ctx, serviceKeyCreate(tn.ID, "before-"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, k.Result.Key.ID)
	}
	if _, err := svc.Update(ctx, tn.ID, wh.ID, tenants.WebhookBody{Paused: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Create(ctx, serviceKeyCreate(tn.ID, "while-paused")); err != nil {
		t.Fatal(err)
	}
	// An attempt claimed before the pause may still be dialing (refused at
	// once, but a loaded machine can take a while to get to it): let it end
	// before the receiver is back.
	time.Sleep(500 * time.Millisecond)
	r.start(addr)
	time.Sleep(time.Second) // retries are due within 100–300 ms
	if got := r.events(); len(got) != 0 {
		t.Fatalf("a paused endpoint received %d deliveries", len(got))
	}
	if _, err := svc.Update(ctx, tn.ID, wh.ID, tenants.WebhookBody{Paused: ptr(false)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "what was pending, delivered", func() bool {
		return slices.Equal(keyIDs(r.events(), tenants.EventKeyCreated), sorted(pending))
	})
	time.Sleep(300 * time.Millisecond) // a few more polls
	if got := keyIDs(r.events(), tenants.EventKeyCreated); !slices.Equal(got, sorted(pending)) {
		t.Fatalf("received %v, want only what was pending before the pause %v", got, sorted(pending))
	}
}
