package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
)

const testToken = "op_app_test_token_0123456789abcdef"

// boot starts the whole product in-process on a free port with a temp dir.
func boot(t testing.TB) *Main { return bootWith(t, nil) }

// bootWith is boot with edit (when not nil) applied to the config first.
func bootWith(t testing.TB, edit func(*Config)) *Main {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.Data = t.TempDir()
	cfg.Node = "apptest"
	cfg.OperatorToken = testToken
	if edit != nil {
		edit(&cfg)
	}
	m, _ := runMain(t, cfg, nil)
	return m
}

// runMain runs a Main for cfg until the test ends (tweak, when not nil,
// adjusts it before Run), waits until it is ready, and returns it with its
// close-once function, which stop also finds.
func runMain(t testing.TB, cfg Config, tweak func(*Main)) (*Main, func()) {
	t.Helper()
	m := NewMain(cfg, slog.New(slog.DiscardHandler))
	m.Out = io.Discard
	if tweak != nil {
		tweak(m)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	closeMain := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := m.Close(ctx); err != nil {
				t.Errorf("close %s: %v", m.Config.Node, err)
			}
		})
	}
	t.Cleanup(closeMain)
	closers.Store(m, closeMain)
	waitUntil(t, 30*time.Second, m.Config.Node+" ready", m.Engine().Ready)
	return m, closeMain
}

// closers holds each booted Main's close-once function, for stop.
var closers sync.Map

// stop shuts a booted Main down now rather than at cleanup.
func stop(t *testing.T, m *Main) {
	t.Helper()
	f, ok := closers.Load(m)
	if !ok {
		t.Fatal("stop: not booted")
	}
	f.(func())()
}

// do sends one API request through call and fails the test unless it
// succeeds.
func do(t testing.TB, m *Main, method, path, token string, body any) map[string]any {
	t.Helper()
	raw := ""
	if body != nil {
		b, _ := json.Marshal(body)
		raw = string(b)
	}
	status, out := call(t, m, method, path, token, raw)
	if status >= 300 {
		t.Fatalf("%s %s: %d %v", method, path, status, out)
	}
	return out
}

// setup creates a tenant with a 10-per-60s policy on /api/x.
func setup(t *testing.T, m *Main) string {
	t.Helper()
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "app", "owner_email": "o@app.test", "owner_password": "a long passphrase"})
	tenantID := tn["id"].(string)
	do(t, m, "POST", "/v1/policies", tn["service_key"].(string), map[string]any{
		"name": "x", "path": "/api/x",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 10, "period": "60s"}},
	})
	return tenantID
}

func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Denied checks must cost no state writes: abuse must not cost writes.
func TestDeniedChecksWriteNoState(t *testing.T) {
	m := boot(t)
	tenant := setup(t, m)
	e := m.Engine()
	now := time.Now()
	allowed := 0
	for i := 0; i < 10; i++ {
		a, err := e.Check(t.Context(), tenant, &engine.CheckRequest{IP: "192.0.2.1", Path: "/api/x"}, now)
		if err != nil {
			t.Fatal(err)
		}
		if a.Allowed {
			allowed++
		}
	}
	if allowed != 10 {
		t.Fatalf("allowed %d, want 10", allowed)
	}
	waitUntil(t, 5*time.Second, "allowed state published and committed", func() bool {
		return e.Stats().StatesPublished >= 1 && m.worker.Stats().StateRows >= 1
	})
	published, rows := e.Stats().StatesPublished, m.worker.Stats().StateRows

	for i := 0; i < 500; i++ {
		a, err := e.Check(t.Context(), tenant, &engine.CheckRequest{IP: "192.0.2.1", Path: "/api/x"}, now)
		if err != nil {
			t.Fatal(err)
		}
		if a.Allowed {
			t.Fatal("a check past the limit was allowed")
		}
	}
	time.Sleep(5 * m.Config.FlushInterval)
	if got := e.Stats().StatesPublished; got != published {
		t.Fatalf("500 denied checks published %d bucket states, want 0", got-published)
	}
	if got := m.worker.Stats().StateRows; got != rows {
		t.Fatalf("500 denied checks wrote %d SQLite bucket rows, want 0", got-rows)
	}
	// The denials are still counted for analytics.
	waitUntil(t, 5*time.Second, "denials counted", func() bool { return m.worker.Stats().CounterRows > 0 })
}

// TestStateWritesPerAllowedCheck reports how many bucket-state writes (to
// JetStream and then to SQLite) an allowed check causes under a load of 10k
// identities, each checking 20 times within about a second.
func TestStateWritesPerAllowedCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	m := boot(t)
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "load", "owner_email": "o@load.test", "owner_password": "a long passphrase"})
	tenant := tn["id"].(string)
	do(t, m, "POST", "/v1/policies", tn["service_key"].(string), map[string]any{
		"name": "x", "path": "/api/x",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 1000, "period": "1s"}},
	})
	e := m.Engine()
	const identities, rounds = 10000, 20
	ips := make([]string, identities)
	for i := range ips {
		ips[i] = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	}
	allowed := 0
	start := time.Now()
	for r := 0; r < rounds; r++ {
		for _, ip := range ips {
			a, err := e.Check(t.Context(), tenant, &engine.CheckRequest{IP: ip, Path: "/api/x"}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if a.Allowed {
				allowed++
			}
		}
	}
	took := time.Since(start)
	if allowed != identities*rounds {
		t.Fatalf("allowed %d of %d", allowed, identities*rounds)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitUntil(t, 20*time.Second, "everything flushed", func() bool {
		return e.Stats().StatesPublished > 0 && e.Cache().Len() > 0 && m.engine.Stats().StatesPublished == e.Stats().StatesPublished
	})
	_ = ctx
	time.Sleep(3 * m.Config.FlushInterval)
	published := e.Stats().StatesPublished
	waitUntil(t, 20*time.Second, "worker caught up", func() bool { return m.worker.Stats().StateRows > 0 })
	time.Sleep(time.Second)
	rows := m.worker.Stats().StateRows
	t.Logf("%d allowed checks over %d identities in %s: %d states published (%.3f per allowed check), %d SQLite rows written (%.3f per allowed check)",
		allowed, identities, took.Round(time.Millisecond), published, float64(published)/float64(allowed), rows, float64(rows)/float64(allowed))
	if float64(rows)/float64(allowed) >= 0.5 {
		t.Errorf("SQLite writes per allowed check = %.3f, want well under 1", float64(rows)/float64(allowed))
	}
}

// Through the API: a policy that denies tiers it does not list denies a key
// of another tier, names that tier, and says no wait helps; the policy
// reads back with its choice, and the default is allow.
func TestUnlistedTiersThroughTheAPI(t *testing.T) {
	m := boot(t)
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "unlisted", "owner_email": "o@unlisted.test", "owner_password": "a long passphrase"})
	sk := tn["service_key"].(string)
	tiers := map[string]any{"pro": map[string]any{"algorithm": "token_bucket", "limit": 5, "period": "60s"}}
	closed := do(t, m, "POST", "/v1/policies", sk, map[string]any{"name": "closed", "path": "/closed", "tiers": tiers, "unlisted_tiers": "deny"})
	open := do(t, m, "POST", "/v1/policies", sk, map[string]any{"name": "open", "path": "/open", "tiers": tiers})
	if closed["unlisted_tiers"] != "deny" || open["unlisted_tiers"] != "allow" {
		t.Fatalf("stored: %v, %v", closed["unlisted_tiers"], open["unlisted_tiers"])
	}
	key := do(t, m, "POST", "/v1/keys", sk, map[string]any{"name": "big", "tier": "enterprise"})["key"].(string)
	a := do(t, m, "POST", "/v1/check", sk, map[string]any{"api_key": key, "path": "/closed"})
	if a["allowed"] != false || a["reason"] != "rate_limited" || a["tier"] != "enterprise" || a["retry_after_ms"] != nil {
		t.Fatalf("closed: %v", a)
	}
	if a := do(t, m, "POST", "/v1/check", sk, map[string]any{"api_key": key, "path": "/open"}); a["allowed"] != true || a["tier"] != "enterprise" {
		t.Fatalf("open: %v", a)
	}
}
