package worker

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// testClock is a clock a test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *testClock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// While a live server in the members bucket does not announce that it
// compiles concurrency limits (a server of an earlier version, during a
// rolling upgrade), the worker refuses every write that would put one in
// the config, a policy's or a key's override, with 409 naming the field,
// and changes nothing; other writes go on. A worker with no server yet
// (no members bucket) takes them, and so does one whose live servers all
// announce them. The worker and a server talk with their own NATS
// credentials, as in a deployment.
func TestConcurrencyRefusedWhileAServerCannotCompileIt(t *testing.T) {
	clock := &testClock{now: time.Now()}
	e := newRoleEnvConfig(t, Config{Now: clock.Now})
	ctx := context.Background()
	cl := bus.NewClient(e.server, 10*time.Second)
	var created service.Written[service.TenantCreated]
	eventuallyOK(t, "tenant created", func() error {
		return bus.CallInto(ctx, cl, bus.OpTenantCreate, bus.TenantCreate{Name: "acme", OwnerEmail: "owner@example.com", OwnerPassword: "correct horse battery"}, &created)
	})
	tenantID := created.Result.Tenant.ID
	slots := tenants.Limits{{Algorithm: tenants.Concurrency, Limit: 10}}
	rate := tenants.Limits{{Algorithm: tenants.TokenBucket, Limit: 10, Period: "1s"}}
	policy := func(name string, ls tenants.Limits) tenants.Policy {
		return tenants.Policy{Name: name, Path: "/" + name, Tiers: map[string]tenants.Limits{"pro": ls}}
	}
	createPolicy := func(p tenants.Policy) (tenants.Policy, error) {
		clock.Add(2 * memberReadFresh) // past the last read of the members
		w, err := bus.Call(ctx, cl, bus.OpPolicyCreate, bus.PolicyWrite{TenantID: tenantID, Policy: p})
		return w.Result, err
	}

	// No server has made the members bucket: nothing to wait for.
	first, err := createPolicy(policy("first", slots))
	if err != nil {
		t.Fatalf("no members bucket: %v", err)
	}

	// A server makes the bucket, as internal/cluster does, and two live
	// servers announce themselves: one of this version, one older.
	js, err := jetstream.New(e.server)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.MembersBucket, History: 1, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	announce := func(m bus.MemberEntry) {
		t.Helper()
		data, _ := json.Marshal(m)
		if _, err := kv.Put(ctx, m.Node, data); err != nil {
			t.Fatal(err)
		}
	}
	live := clock.Now().Add(time.Hour).UnixMilli()
	announce(bus.MemberEntry{Node: "s1", Expires: live, Concurrency: true})
	announce(bus.MemberEntry{Node: "s2", Expires: live})

	wantConflict := func(what, field string, err error) {
		t.Helper()
		if errs.Code(err) != errs.Conflict || !strings.HasPrefix(errs.Message(err), field+": ") || !strings.Contains(errs.Message(err), "upgrade every server") {
			t.Fatalf("%s: %v, want conflict naming %s", what, err, field)
		}
	}
	_, err = createPolicy(tenants.Policy{Name: "second", Path: "/second", Tiers: map[string]tenants.Limits{
		"pro": {{Name: "rate", Algorithm: tenants.TokenBucket, Limit: 10, Period: "1s"}, {Name: "slots", Algorithm: tenants.Concurrency, Limit: 10}}}})
	wantConflict("create", "tiers.pro[1].algorithm", err)
	plain, err := createPolicy(policy("plain", rate))
	if err != nil {
		t.Fatalf("a policy without a concurrency limit: %v", err)
	}
	clock.Add(2 * memberReadFresh)
	_, err = bus.Call(ctx, cl, bus.OpPolicyUpdate, bus.PolicyWrite{TenantID: tenantID, ID: plain.ID, Policy: policy("plain", slots)})
	wantConflict("update", "tiers.pro.algorithm", err)
	_, err = bus.Call(ctx, cl, bus.OpKeyCreate, service.KeyCreate{TenantID: tenantID, Name: "k", Tier: "pro", Overrides: map[string]tenants.Limits{"plain": slots}})
	wantConflict("key create", "overrides.plain.algorithm", err)
	key, err := bus.Call(ctx, cl, bus.OpKeyCreate, service.KeyCreate{TenantID: tenantID, Name: "k", Tier: "pro", Overrides: map[string]tenants.Limits{"plain": rate}})
	if err != nil {
		t.Fatalf("a key without a concurrency override: %v", err)
	}
	ov := map[string]tenants.Limits{"plain": slots}
	_, err = bus.Call(ctx, cl, bus.OpKeyUpdate, bus.KeyUpdate{TenantID: tenantID, ID: key.Result.Key.ID, Patch: tenants.KeyPatch{Overrides: &ov}})
	wantConflict("key update", "overrides.plain.algorithm", err)
	// A limit with a problem of its own answers that problem.
	_, err = createPolicy(policy("bad", tenants.Limits{{Algorithm: tenants.Concurrency, Limit: 10, Period: "1s"}}))
	if errs.Code(err) != errs.Invalid || !strings.HasPrefix(errs.Message(err), "tiers.pro.period: ") {
		t.Fatalf("a concurrency limit with a period: %v, want invalid naming its period", err)
	}

	// Nothing changed.
	pols, err := bus.Call(ctx, cl, bus.OpPolicyList, bus.TenantScoped{TenantID: tenantID})
	if err != nil || len(pols) != 2 {
		t.Fatalf("policies after the refusals: %+v, %v", pols, err)
	}
	for _, p := range pols {
		if p.ID == plain.ID && p.Tiers["pro"].HasConcurrency() {
			t.Fatalf("the refused update changed the policy: %+v", p)
		}
	}
	got, err := bus.Call(ctx, cl, bus.OpKeyGet, bus.TenantScoped{TenantID: tenantID, ID: key.Result.Key.ID})
	if err != nil || got.Overrides["plain"].HasConcurrency() {
		t.Fatalf("the refused key update changed the key: %+v, %v", got, err)
	}

	// The older server's entry runs out (it was killed): the writes go on.
	announce(bus.MemberEntry{Node: "s2", Expires: clock.Now().Add(-time.Second).UnixMilli()})
	if _, err := createPolicy(policy("third", slots)); err != nil {
		t.Fatalf("with the older server's entry run out: %v", err)
	}
	// It comes back upgraded, with a direct listener that reads leases.
	announce(bus.MemberEntry{Node: "s2", Expires: live, FwdLeases: true})
	if _, err := createPolicy(policy("fourth", slots)); err != nil {
		t.Fatalf("with every live server upgraded: %v", err)
	}
	clock.Add(2 * memberReadFresh)
	if _, err := bus.Call(ctx, cl, bus.OpKeyUpdate, bus.KeyUpdate{TenantID: tenantID, ID: key.Result.Key.ID, Patch: tenants.KeyPatch{Overrides: &ov}}); err != nil {
		t.Fatalf("key update with every live server upgraded: %v", err)
	}
	// An entry nobody can read counts as a server that supports nothing.
	if _, err := kv.Put(ctx, "s3", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	_, err = createPolicy(policy("fifth", slots))
	wantConflict("with an unreadable entry", "tiers.pro.algorithm", err)
	_ = first
}
