package engine

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/bus/bustest"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/worker"
)

// hydrateEnv is a real embedded NATS (small max_payload, so a few thousand
// buckets take many pages), a real SQLite file with a tenant, a policy and
// n persisted buckets that each consumed 10 of 100 per day, and a worker.
type hydrateEnv struct {
	ns       *server.Server
	nats     *bustest.Server // when the env runs NATS on TCP, to restart it
	db       *sql.DB
	tenantID string
	policyID string
	keys     []string // persisted bucket keys, in key order
	ips      map[string]string
	stopW    func()
}

func newHydrateEnv(t *testing.T, n int) *hydrateEnv { return newHydrateEnvOn(t, n, false) }

// newHydrateEnvOn is newHydrateEnv; with restartable, NATS listens on
// loopback and every connection reconnects, so the test may restart it.
func newHydrateEnvOn(t *testing.T, n int, restartable bool) *hydrateEnv {
	t.Helper()
	dir := t.TempDir()
	env := &hydrateEnv{ips: map[string]string{}}
	if restartable {
		env.nats = bustest.StartConfig(t, bus.EmbeddedConfig{Name: "hydrate-test", MaxPayload: 64 << 10})
	} else {
		ns, err := bus.StartEmbedded(bus.EmbeddedConfig{DataDir: dir, Name: "hydrate-test", MaxPayload: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ns.Shutdown)
		env.ns = ns
	}
	db, err := sqlitedb.Open(context.Background(), filepath.Join(dir, "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st := tenants.NewStore(db)
	ctx := context.Background()
	now := time.Now()
	tn, _, _, err := st.Tenants().Create(ctx, "acme", "owner@acme.test", "a long passphrase", now)
	if err != nil {
		t.Fatal(err)
	}
	pol, _, err := st.Policies().Create(ctx, tn.ID, tenants.Policy{Name: "daily", Method: "GET", Path: "/api/*",
		Tiers: map[string]tenants.Limits{"anonymous": limit("token_bucket", 100, "24h")}}, now)
	if err != nil {
		t.Fatal(err)
	}
	env.db, env.tenantID, env.policyID = db, tn.ID, pol.ID
	lim := []bus.LimitWire{{Algorithm: "token_bucket", Limit: 100, PeriodNS: int64(24 * time.Hour)}}
	recs := make([]bus.BucketRecord, n)
	for i := range recs {
		ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		key := BucketKey(tn.ID, pol.ID, KindIP, ip)
		env.ips[key] = ip
		env.keys = append(env.keys, key)
		recs[i] = bus.BucketRecord{Key: key, TenantID: tn.ID, Limits: lim,
			States: []bus.StateWire{{Tokens: 90, At: now.UnixNano()}}, FullAt: now.Add(3 * time.Hour).UnixNano()}
	}
	if err := worker.WriteBuckets(ctx, db, recs, now); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(env.keys, bus.CompareBucketKeys) // the order the load goes in
	env.startWorker(t)
	return env
}

func (env *hydrateEnv) conn(t *testing.T) *nats.Conn {
	t.Helper()
	if env.nats != nil {
		nc, err := bus.Connect(env.nats.URL(), nil, "hydrate-test", bus.Auth{}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	nc, err := nats.Connect(env.ns.ClientURL(), nats.InProcessServer(env.ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func (env *hydrateEnv) startWorker(t *testing.T) {
	t.Helper()
	nc := env.conn(t)
	w, err := worker.New(worker.Config{}, env.db, nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	var once sync.Once
	env.stopW = func() { once.Do(func() { cancel(); <-done; nc.Close() }) }
	t.Cleanup(env.stopW)
}

func (env *hydrateEnv) startEngine(t *testing.T, hook func(after string)) *Engine {
	t.Helper()
	e, err := New(Config{Node: "hydrate"}, env.conn(t))
	if err != nil {
		t.Fatal(err)
	}
	e.hyd.beforePage = hook
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	})
	return e
}

func (env *hydrateEnv) remaining(t *testing.T, e *Engine, key string) int64 {
	t.Helper()
	a, err := e.Check(t.Context(), env.tenantID, &CheckRequest{IP: env.ips[key], Path: "/api/x"}, time.Now())
	if err != nil {
		t.Fatalf("check %s: %v", key, err)
	}
	if !a.Allowed || a.Policy != "daily" {
		t.Fatalf("check %s: %+v", key, a)
	}
	return a.Remaining
}

func waitHydrated(t *testing.T, e *Engine) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !e.Hydrated() {
		if time.Now().After(deadline) {
			t.Fatalf("not hydrated after 60s: %d loaded", e.hyd.loaded.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A server answers before its hydration ends, and a check on a bucket the
// load has not reached sees the persisted consumption, never a full bucket;
// the bulk load then keeps what checks did meanwhile.
func TestChecksWhileHydratingSeePersistedState(t *testing.T) {
	env := newHydrateEnv(t, 3000)
	gate := make(chan struct{})
	var once sync.Once
	e := env.startEngine(t, func(string) { once.Do(func() { <-gate }) })
	if !e.Ready() || e.Hydrated() {
		t.Fatalf("after Start: ready %v, hydrated %v; want ready and still loading", e.Ready(), e.Hydrated())
	}
	loaded := e.hyd.loaded.Load()
	if loaded == 0 || loaded >= int64(len(env.keys)) {
		t.Fatalf("first page loaded %d of %d buckets; want some, not all", loaded, len(env.keys))
	}
	// The last keys in key order are not loaded yet: each check loads its
	// bucket first and consumes from the persisted 90 tokens.
	late := env.keys[len(env.keys)-20:]
	for _, k := range late {
		if r := env.remaining(t, e, k); r != 89 {
			t.Fatalf("first check of %s while hydrating: remaining %d, want 89", k, r)
		}
	}
	if got := e.hyd.touched.Load(); got != int64(len(late)) {
		t.Fatalf("first-touch loads: %d, want %d", got, len(late))
	}
	// A key the first page covered is answered from memory.
	if r := env.remaining(t, e, env.keys[0]); r != 89 {
		t.Fatalf("first key: remaining %d, want 89", r)
	}
	// A reset of a key the load has not reached yet holds, even against a
	// page read before the worker deleted the row.
	resetKey := env.keys[len(env.keys)-30]
	var w service.Written[bus.None]
	if err := bus.CallInto(context.Background(), bus.NewClient(env.conn(t), 5*time.Second), bus.OpBucketReset,
		bus.BucketReset{TenantID: env.tenantID, Policy: "daily", Identity: tenants.Identity{Kind: KindIP, ID: env.ips[resetKey]}}, &w); err != nil {
		t.Fatal(err)
	}
	e.WaitVersion(context.Background(), w.Version)
	stale := []quota.Limit{{Algorithm: quota.TokenBucket, Limit: 100, Period: 24 * time.Hour}}
	if e.hyd.insert(resetKey, stale, []quota.State{{Tokens: 90, At: time.Now().UnixNano()}}, 0) {
		t.Fatal("a page read before the reset brought the old state back")
	}
	close(gate)
	waitHydrated(t, e)
	if r := env.remaining(t, e, resetKey); r != 99 {
		t.Fatalf("reset key after hydration: remaining %d, want 99", r)
	}
	if got, want := e.hyd.loaded.Load()+e.hyd.touched.Load(), int64(len(env.keys)-1); got != want {
		t.Fatalf("loaded %d + first touch %d buckets, want %d in all (every persisted one but the reset one)", e.hyd.loaded.Load(), e.hyd.touched.Load(), want)
	}
	for _, k := range late {
		if r := env.remaining(t, e, k); r != 88 {
			t.Fatalf("second check of %s after hydration: remaining %d, want 88 (the load must not replace it)", k, r)
		}
	}
	for _, k := range env.keys[len(env.keys)/2 : len(env.keys)/2+20] {
		if r := env.remaining(t, e, k); r != 89 {
			t.Fatalf("check of %s after hydration: remaining %d, want 89", k, r)
		}
	}
}

// A hydration whose worker goes away mid-load retries from the page it
// stopped at, without starting over, and ends with every bucket loaded.
func TestHydrationResumesWhereItStopped(t *testing.T) {
	env := newHydrateEnv(t, 3000)
	var mu sync.Mutex
	var afters []string
	stopped := make(chan struct{})
	restart := make(chan struct{})
	e := env.startEngine(t, func(after string) {
		mu.Lock()
		afters = append(afters, after)
		n := len(afters)
		mu.Unlock()
		switch n {
		case 3:
			env.stopW() // this page finds no worker
		case 4:
			close(stopped) // the retry waits for the new worker
			<-restart
		}
	})
	<-stopped
	env.startWorker(t)
	close(restart)
	waitHydrated(t, e)
	if got := e.hyd.loaded.Load(); got != int64(len(env.keys)) {
		t.Fatalf("loaded %d buckets, want %d", got, len(env.keys))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(afters) < 4 {
		t.Fatalf("pages asked: %d, want a retry", len(afters))
	}
	if afters[3] != afters[2] {
		t.Fatalf("after the failed page the load asked after %q, want %q (where it stopped)", afters[3], afters[2])
	}
	for i, a := range afters {
		if a == "" {
			t.Fatalf("page %d started over from the first key", i)
		}
	}
	if n := e.cache.Len(); n != len(env.keys) {
		t.Fatalf("cache holds %d buckets, want %d", n, len(env.keys))
	}
	if r := env.remaining(t, e, env.keys[len(env.keys)-1]); r != 89 {
		t.Fatalf("last key: remaining %d, want 89", r)
	}
}

// NATS restarted in the middle of a hydration: the server, already
// answering, keeps its place, asks again from where it stopped once NATS
// is back, and ends with every bucket loaded and every caller's quota
// intact.
func TestHydrationOutlivesANATSRestart(t *testing.T) {
	env := newHydrateEnvOn(t, 3000, true)
	var mu sync.Mutex
	var afters []string
	restarted := make(chan struct{})
	e := env.startEngine(t, func(after string) {
		mu.Lock()
		afters = append(afters, after)
		n := len(afters)
		mu.Unlock()
		if n == 3 {
			env.nats.Stop() // this page and its retries find no NATS
			go func() {
				time.Sleep(1500 * time.Millisecond)
				env.nats.Start()
				close(restarted)
			}()
		}
	})
	<-restarted
	waitHydrated(t, e)
	if got := e.hyd.loaded.Load(); got != int64(len(env.keys)) {
		t.Fatalf("loaded %d buckets, want %d", got, len(env.keys))
	}
	mu.Lock()
	defer mu.Unlock()
	// The page in flight either waited out the restart or was asked for
	// again; either way the load went on from where it was, never back.
	for i := 1; i < len(afters); i++ {
		if afters[i] == "" || bus.CompareBucketKeys(afters[i], afters[i-1]) < 0 {
			t.Fatalf("page %d asked after %q, following %q: the load went back", i, afters[i], afters[i-1])
		}
	}
	if r := env.remaining(t, e, env.keys[len(env.keys)-1]); r != 89 {
		t.Fatalf("last key after the restart: remaining %d, want 89", r)
	}
}

// A worker that reads packed state batches says so, and the server then
// publishes them packed: a restarted server finds the consumption they
// carried.
func TestStatesTravelPackedToAWorkerThatReadsThem(t *testing.T) {
	env := newHydrateEnv(t, 10)
	e := env.startEngine(t, nil)
	deadline := time.Now().Add(10 * time.Second)
	for !e.pub.packedStates.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the server never learned that the worker reads packed state batches")
		}
		time.Sleep(10 * time.Millisecond)
	}
	key := env.keys[0]
	if r := env.remaining(t, e, key); r != 89 {
		t.Fatalf("first check: remaining %d, want 89", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Close(ctx); err != nil { // publishes what is pending and waits for the worker
		t.Fatal(err)
	}
	e2 := env.startEngine(t, nil)
	waitHydrated(t, e2)
	if r := env.remaining(t, e2, key); r != 88 {
		t.Fatalf("after a restart: remaining %d, want 88", r)
	}
}

// While the server hydrates, a new caller of a tenant at its bound of
// buckets is decided on the tenant's overflow bucket as persisted, loaded
// first as a caller's own bucket is, never on a fresh one.
func TestHydratingTenantAtItsBoundLoadsTheOverflowBucket(t *testing.T) {
	env := newHydrateEnv(t, 3000)
	// A caller with no bucket, whose partition the first page does not
	// reach (pages go in partition order), and the overflow bucket it
	// would share, persisted with 5 of 100 tokens left.
	var ip, key string
	for i := 0; ; i++ {
		ip = fmt.Sprintf("192.0.2.%d", i)
		if key = BucketKey(env.tenantID, env.policyID, KindIP, ip); bus.Partition([]byte(key)) == bus.Partitions-1 {
			break
		}
	}
	of := findOverflowKey(overflowID{tenant: env.tenantID, policy: env.policyID, tier: TierAnonymous, part: bus.Partition([]byte(key))})
	if of == nil {
		t.Fatal("no overflow key in the caller's partition")
	}
	now := time.Now()
	lim := []bus.LimitWire{{Algorithm: "token_bucket", Limit: 100, PeriodNS: int64(24 * time.Hour)}}
	if err := worker.WriteBuckets(context.Background(), env.db, []bus.BucketRecord{{Key: string(of), TenantID: env.tenantID, Limits: lim,
		States: []bus.StateWire{{Tokens: 5, At: now.UnixNano()}}, FullAt: now.Add(24 * time.Hour).UnixNano()}}, now); err != nil {
		t.Fatal(err)
	}

	gate := make(chan struct{})
	var once sync.Once
	e, err := New(Config{Node: "hydrate", TenantBuckets: 10}, env.conn(t))
	if err != nil {
		t.Fatal(err)
	}
	e.hyd.beforePage = func(string) { once.Do(func() { <-gate }) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(gate)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	})
	if e.Hydrated() || e.hyd.loaded.Load() < 10 {
		t.Fatalf("after Start: hydrated %v with %d loaded; want the first page only, past the bound of 10", e.Hydrated(), e.hyd.loaded.Load())
	}
	if e.cache.Has(of) {
		t.Fatal("the first page holds the overflow bucket; the test needs it unloaded")
	}
	a, err := e.Check(t.Context(), env.tenantID, &CheckRequest{IP: ip, Path: "/api/x"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !a.Allowed || a.Remaining != 4 {
		t.Fatalf("a new caller past the bound while hydrating: %+v; want allowed with 4 left of the overflow bucket's persisted 5", a)
	}
	if e.cache.Has([]byte(key)) {
		t.Fatal("the caller past the bound got a bucket of its own")
	}
}
