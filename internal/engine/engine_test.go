package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/bus/bustest"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/tenants"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// newTestEngine builds an engine on a real embedded NATS with a config view
// made from snap (no worker: these tests exercise decisions only).
func newTestEngine(tb testing.TB, snap tenants.Snapshot) *Engine {
	tb.Helper()
	nc := bustest.InProcess(tb, bus.EmbeddedConfig{DataDir: tb.TempDir(), Name: "engine-test"})
	return engineOn(tb, nc, snap)
}

// engineOn builds an engine on nc with a config view made from snap.
func engineOn(tb testing.TB, nc *nats.Conn, snap tenants.Snapshot) *Engine {
	tb.Helper()
	e, err := New(Config{Node: "test"}, nc)
	if err != nil {
		tb.Fatal(err)
	}
	v, err := viewFromSnapshot(snap)
	if err != nil {
		tb.Fatal(err)
	}
	e.view.Store(v)
	e.hyd.done.Store(true) // nothing persisted to load: these engines never Start
	return e
}

func limit(alg string, n int64, period string) tenants.Limits {
	return tenants.Limits{{Algorithm: alg, Limit: n, Period: period}}
}

func snapshot(tb testing.TB) (tenants.Snapshot, string) {
	_, _, hash, err := tenants.GenerateKey("ck_")
	if err != nil {
		tb.Fatal(err)
	}
	return tenants.Snapshot{
		Version: 1,
		Tenants: []tenants.Tenant{{ID: "ten_a", Name: "a"}, {ID: "ten_b", Name: "b"}},
		Policies: []tenants.Policy{
			{ID: "pol_1", TenantID: "ten_a", Name: "heavy", Method: "GET", Path: "/api/example", Query: map[string]string{"mode": "heavy"},
				Consistency: "exact", CreatedAt: t0, Tiers: map[string]tenants.Limits{
					"anonymous": limit("token_bucket", 10, "60s"),
					"default":   limit("token_bucket", 100, "60s"),
					"pro": {
						{Name: "burst", Algorithm: "token_bucket", Limit: 5, Period: "1s"},
						{Name: "daily", Algorithm: "fixed_window", Limit: 1000, Period: "1d"},
					},
				}},
			{ID: "pol_2", TenantID: "ten_a", Name: "shadowed", Method: "*", Path: "/shadow/*", Shadow: true, CreatedAt: t0,
				Tiers: map[string]tenants.Limits{"anonymous": limit("fixed_window", 1, "1h")}},
			{ID: "pol_3", TenantID: "ten_a", Name: "wide", Method: "*", Path: "/bench/*", CreatedAt: t0,
				Tiers: map[string]tenants.Limits{"anonymous": limit("token_bucket", 1_000_000_000, "1s")}},
		},
		Blocks: []tenants.Block{{ID: "blk_1", TenantID: "ten_a", Identity: tenants.Identity{Kind: "ip", ID: "2001:db8:1:2::1"}, Reason: "abuse", CreatedAt: t0}},
	}, hash
}

func TestCheckDecisions(t *testing.T) {
	snap, _ := snapshot(t)
	plain, prefix, hash, _ := tenants.GenerateKey("ck_")
	exp := t0.Add(time.Hour)
	snap.ConsumerKeys = []tenants.ConsumerKeyRecord{
		{ConsumerKey: tenants.ConsumerKey{ID: "ckey_pro", TenantID: "ten_a", Tier: "pro", Prefix: prefix, Hash: hash, ExpiresAt: &exp}},
	}
	e := newTestEngine(t, snap)
	check := func(r CheckRequest, at time.Time) Answer {
		t.Helper()
		a, err := e.Check(t.Context(), "ten_a", &r, at)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}

	// Anonymous IP: 10 per 60 s, then a denial with the wait for one token.
	for i := 0; i < 10; i++ {
		if a := check(CheckRequest{IP: "192.0.2.1", Path: "/api/example?mode=heavy"}, t0); !a.Allowed || a.Tier != "anonymous" {
			t.Fatalf("check %d: %+v", i, a)
		}
	}
	a := check(CheckRequest{IP: "192.0.2.1", Path: "/api/example.json?mode=heavy"}, t0)
	if a.Allowed || a.Reason != ReasonRateLimited || a.RetryAfter != 6*time.Second || a.Limits[0].Name != "heavy" {
		t.Fatalf("11th: %+v", a)
	}

	// A pro key has two named limits; the answer lists both and reports
	// the one with the least remaining.
	a = check(CheckRequest{APIKey: plain, Path: "/api/example?mode=heavy"}, t0)
	if !a.Allowed || a.Tier != "pro" || len(a.Limits) != 2 || a.Limits[0].Name != "heavy.burst" || a.Limits[1].Name != "heavy.daily" || a.Limit != 5 || a.Remaining != 4 {
		t.Fatalf("pro key: %+v", a)
	}
	// The key expires: invalid_key, never downgraded to the IP.
	a = check(CheckRequest{APIKey: plain, IP: "192.0.2.9", Path: "/api/example?mode=heavy"}, exp)
	if a.Allowed || a.Reason != ReasonInvalidKey || a.IdentityID != "ckey_pro" {
		t.Fatalf("expired key: %+v", a)
	}
	// Another tenant's engine view does not know the key at all.
	if a, _ := e.Check(t.Context(), "ten_b", &CheckRequest{APIKey: plain, Path: "/x"}, t0); a.Reason != ReasonInvalidKey || a.IdentityID == "ckey_pro" {
		t.Fatalf("key in another tenant: %+v", a)
	}

	// An IPv6 block covers the whole /64.
	if a := check(CheckRequest{IP: "2001:db8:1:2:ffff::7", Path: "/anything"}, t0); a.Reason != ReasonBlocked || a.IdentityID != "2001:db8:1:2::/64" {
		t.Fatalf("blocked /64: %+v", a)
	}
	// Shadow: the second check would be denied but is answered allowed.
	check(CheckRequest{IP: "192.0.2.2", Path: "/shadow/a"}, t0)
	if a := check(CheckRequest{IP: "192.0.2.2", Path: "/shadow/b"}, t0); !a.Allowed || !a.ShadowDenied {
		t.Fatalf("shadow: %+v", a)
	}
	// No policy: allowed, no policy named.
	if a := check(CheckRequest{IP: "192.0.2.3", Path: "/api/example?mode=light"}, t0); !a.Allowed || a.Policy != "" {
		t.Fatalf("no policy: %+v", a)
	}
	// Peek consumes nothing.
	for i := 0; i < 3; i++ {
		if a := check(CheckRequest{IP: "192.0.2.4", Path: "/api/example?mode=heavy", Peek: true}, t0); a.Remaining != 9 {
			t.Fatalf("peek %d: remaining %d", i, a.Remaining)
		}
	}
}

func TestCheckRejectsBadInput(t *testing.T) {
	snap, _ := snapshot(t)
	e := newTestEngine(t, snap)
	for _, r := range []CheckRequest{
		{IP: "192.0.2.1"},
		{Path: "/x"},
		{IP: "nope", Path: "/x"},
		{IP: "fe80::1%eth0", Path: "/x"},
		{IP: "192.0.2.1", Path: "/x", Cost: -1},
		{IP: "192.0.2.1", Path: "/x", Method: "GE T"},
	} {
		if _, err := e.Check(t.Context(), "ten_a", &r, t0); err == nil {
			t.Errorf("%+v: accepted", r)
		}
	}
}

// BenchmarkEngineCheck is the whole in-memory decision for one request:
// request validation, identity, block lookup, target normalization, policy
// match, bucket key and hot-cache decision, counters.
func BenchmarkEngineCheck(b *testing.B) {
	snap, _ := snapshot(b)
	e := newTestEngine(b, snap)
	for _, n := range []int{1, 10_000} {
		ips := make([]string, n)
		for i := range ips {
			ips[i] = fmt.Sprintf("10.0.%d.%d", i>>8, i&255)
		}
		b.Run(fmt.Sprintf("identities=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			now := t0
			i := 0
			for b.Loop() {
				r := CheckRequest{IP: ips[i%n], Path: "/bench/items?page=2", Method: "GET"}
				if _, err := e.Check(context.Background(), "ten_a", &r, now); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
	_ = quota.Never
}

// A server whose state and counter streams are gone (NATS lost its data)
// makes them again when a flush finds no stream, and its pending batches go
// out at the next flush.
func TestFlushMakesLostStreamsAgain(t *testing.T) {
	snap, _ := snapshot(t)
	e := newTestEngine(t, snap)
	ctx := context.Background()
	for _, name := range []string{bus.StateStream, bus.CounterStream} {
		if _, err := e.pub.js.Stream(ctx, name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("stream %s before the test: %v", name, err)
		}
	}
	if a, err := e.Check(t.Context(), "ten_a", &CheckRequest{IP: "192.0.2.1", Path: "/api/example?mode=heavy"}, time.Now()); err != nil || !a.Allowed {
		t.Fatalf("check: %+v %v", a, err)
	}
	e.pub.flushStates(ctx) // finds no stream, makes the streams
	e.pub.flushCounters(ctx)
	if got := e.Stats().StatesPublished; got != 0 {
		t.Fatalf("%d states published with no stream", got)
	}
	e.pub.flushStates(ctx)
	e.pub.flushCounters(ctx)
	if st := e.Stats(); st.StatesPublished != 1 || st.CounterRowsPublished != 1 {
		t.Fatalf("after the streams came back: %+v, want 1 state and 1 counter row", st)
	}
	for _, name := range []string{bus.StateStream, bus.CounterStream} {
		s, err := e.pub.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if n := s.CachedInfo().State.Msgs; n != 1 {
			t.Fatalf("stream %s holds %d messages, want 1", name, n)
		}
	}
}

// While NATS is away, the counters of new decisions merge into the
// aggregate instead of piling up a batch per flush; once NATS is back,
// every decision reaches the stream exactly once.
func TestCountersMergeWhileNATSIsAway(t *testing.T) {
	ns := bustest.Start(t, "engine-test")
	nc, err := nats.Connect(ns.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	snap, _ := snapshot(t)
	e := engineOn(t, nc, snap)
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, e.pub.js, 1); err != nil {
		t.Fatal(err)
	}
	decisions := 0
	check := func(n int) {
		for range n {
			if _, err := e.Check(t.Context(), "ten_a", &CheckRequest{IP: "192.0.2.1", Path: "/api/example?mode=heavy"}, time.Now()); err != nil {
				t.Fatal(err)
			}
			decisions++
		}
	}

	ns.Stop()
	for range 6 {
		check(3)
		fctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		e.pub.flushCounters(fctx)
		cancel()
	}
	if n := len(e.pub.pendingCounters); n != 1 {
		t.Fatalf("%d counter batches pending after 6 failed flushes, want the first one only", n)
	}

	ns.Start()
	deadline := time.Now().Add(10 * time.Second)
	for e.pub.flushCounters(ctx); len(e.pub.pendingCounters) > 0; e.pub.flushCounters(ctx) {
		if time.Now().After(deadline) {
			t.Fatal("counters not published after NATS came back")
		}
		time.Sleep(50 * time.Millisecond)
	}
	s, err := e.pub.js.Stream(ctx, bus.CounterStream)
	if err != nil {
		t.Fatal(err)
	}
	var counted int64
	for seq := uint64(1); seq <= s.CachedInfo().State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var b bus.CounterBatch
		if err := json.Unmarshal(m.Data, &b); err != nil {
			t.Fatal(err)
		}
		for _, r := range b.Rows {
			counted += r.Allowed + r.Denied
		}
	}
	if counted != int64(decisions) {
		t.Fatalf("the stream counts %d decisions, %d were made", counted, decisions)
	}
}

// Keys that are not the tenant's count as one identity in analytics,
// however many distinct ones are presented; answers still name the prefix.
func TestInvalidKeysCountAsOneIdentity(t *testing.T) {
	snap, _ := snapshot(t)
	e := newTestEngine(t, snap)
	for i := range 200 {
		k := fmt.Sprintf("ck_%040d", i)
		a, err := e.Check(t.Context(), "ten_a", &CheckRequest{APIKey: k, Path: "/api/example?mode=heavy"}, t0)
		if err != nil {
			t.Fatal(err)
		}
		if a.Reason != ReasonInvalidKey || a.IdentityKind != KindKey || a.IdentityID != keyPrefix(k) {
			t.Fatalf("check %d: %+v", i, a)
		}
	}
	rows := e.counters.drain()
	if len(rows) != 1 {
		t.Fatalf("%d counter cells for 200 invalid keys, want 1: %+v", len(rows), rows)
	}
	if r := rows[0]; r.IdentityKind != KindKey || r.IdentityID != InvalidKeyIdentity || r.Denied != 200 || r.Allowed != 0 {
		t.Fatalf("cell %+v, want key/%s with 200 denied", r, InvalidKeyIdentity)
	}
}

// A caller whose tier a policy does not list, with no default tier to fall
// back on, is unlimited or denied as the policy says, and its answer names
// its own tier, not a "default" the policy does not have.
func TestUnlistedTiers(t *testing.T) {
	snap, _ := snapshot(t)
	plain, prefix, hash, _ := tenants.GenerateKey("ck_")
	snap.ConsumerKeys = []tenants.ConsumerKeyRecord{
		{ConsumerKey: tenants.ConsumerKey{ID: "ckey_ent", TenantID: "ten_a", Tier: "enterprise", Prefix: prefix, Hash: hash}},
	}
	only := map[string]tenants.Limits{"pro": limit("token_bucket", 5, "60s")}
	snap.Policies = append(snap.Policies,
		tenants.Policy{ID: "pol_open", TenantID: "ten_a", Name: "open", Method: "*", Path: "/open/*", CreatedAt: t0, Tiers: only, UnlistedTiers: tenants.UnlistedAllow},
		tenants.Policy{ID: "pol_closed", TenantID: "ten_a", Name: "closed", Method: "*", Path: "/closed/*", CreatedAt: t0, Tiers: only, UnlistedTiers: tenants.UnlistedDeny},
		tenants.Policy{ID: "pol_shadow", TenantID: "ten_a", Name: "closed-shadow", Method: "*", Path: "/shadowed/*", CreatedAt: t0, Tiers: only, UnlistedTiers: tenants.UnlistedDeny, Shadow: true},
	)
	e := newTestEngine(t, snap)
	check := func(r CheckRequest) Answer {
		t.Helper()
		a, err := e.Check(t.Context(), "ten_a", &r, t0)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for i := 0; i < 20; i++ {
		if a := check(CheckRequest{APIKey: plain, Path: "/open/x"}); !a.Allowed || a.Tier != "enterprise" || a.Policy != "open" || len(a.Limits) != 0 {
			t.Fatalf("allow: %+v", a)
		}
	}
	if a := check(CheckRequest{APIKey: plain, Path: "/closed/x"}); a.Allowed || a.Reason != ReasonRateLimited || a.Tier != "enterprise" || a.RetryAfter != quota.Never {
		t.Fatalf("deny, key: %+v", a)
	}
	if a := check(CheckRequest{IP: "192.0.2.9", Path: "/closed/x"}); a.Allowed || a.Tier != TierAnonymous {
		t.Fatalf("deny, IP: %+v", a)
	}
	if a := check(CheckRequest{APIKey: plain, Path: "/shadowed/x"}); !a.Allowed || !a.ShadowDenied {
		t.Fatalf("deny in shadow mode: %+v", a)
	}
}

// BenchmarkCheckLongInputs is the whole check with each input at the
// longest the API accepts, next to ordinary inputs with a canonical path
// of the same total length ("canonical"): a 256-byte api_key (a valid key,
// and an unknown one), an ip padded with spaces (ip has no bound of its own
// below the 1 MiB body), and an 8 KiB path of format suffixes.
func BenchmarkCheckLongInputs(b *testing.B) {
	snap, _ := snapshot(b)
	plain, _, hash, _ := tenants.GenerateKey("ck_")
	long := plain + strings.Repeat("x", 256-len(plain))
	longHash := tenants.HashKey(long)
	snap.ConsumerKeys = []tenants.ConsumerKeyRecord{
		{ConsumerKey: tenants.ConsumerKey{ID: "ckey_a", TenantID: "ten_a", Tier: "pro", Prefix: plain[:8], Hash: hash}},
		{ConsumerKey: tenants.ConsumerKey{ID: "ckey_b", TenantID: "ten_a", Tier: "pro", Prefix: long[:8], Hash: longHash}},
	}
	e := newTestEngine(b, snap)
	path := func(n int) string { return "/bench" + strings.Repeat("/items", (n-6)/6) }
	const maxPath = 8192
	for _, c := range []struct {
		name string
		r    CheckRequest
	}{
		{"canonical/ip", CheckRequest{IP: "203.0.113.7", Path: path(maxPath)}},
		{"canonical/key", CheckRequest{APIKey: plain, Path: path(maxPath)}},
		{"long-key", CheckRequest{APIKey: long, Path: path(maxPath - 256 + len(plain))}},
		{"long-unknown-key", CheckRequest{APIKey: "ck_" + strings.Repeat("z", 253), Path: path(maxPath - 256 + len(plain))}},
		{"padded-ip", CheckRequest{IP: strings.Repeat(" ", maxPath) + "203.0.113.7", Path: "/bench"}},
		{"suffix-path", CheckRequest{IP: "203.0.113.7", Path: "/bench/x" + strings.Repeat(".a", (maxPath-8)/2)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := c.r
				if _, err := e.Check(context.Background(), "ten_a", &r, t0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
