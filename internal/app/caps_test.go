package app

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/tenants"
)

// The caps given as flags and environment reach the config, the flag
// winning; a bad value is refused at start.
func TestCapFlags(t *testing.T) {
	parse := func(args []string, env map[string]string) (Config, error) {
		c := DefaultConfig()
		err := c.ParseFlags("server", append([]string{"--data", t.TempDir()}, args...), func(k string) string { return env[k] }, io.Discard)
		return c, err
	}
	c, err := parse(nil, nil)
	if err != nil || c.Caps != (tenants.Caps{}).WithDefaults() {
		t.Fatalf("defaults: %+v, %v", c.Caps, err)
	}
	c, err = parse([]string{"--tenant-max-policies", "7", "--tenant-max-members", "3", "--tenant-max-open-reservations", "5"},
		map[string]string{"SLUICE_TENANT_MAX_POLICIES": "9", "SLUICE_TENANT_MAX_CONSUMER_KEYS": "50", "SLUICE_TENANT_MAX_LIMITS_PER_POLICY": "4"})
	if err != nil || c.Caps.Policies != 7 || c.Caps.Members != 3 || c.Caps.OpenReservations != 5 || c.Caps.ConsumerKeys != 50 || c.Caps.LimitsPerPolicy != 4 ||
		c.Caps.Blocks != tenants.DefaultMaxBlocks {
		t.Fatalf("set: %+v, %v", c.Caps, err)
	}
	if _, err := parse(nil, map[string]string{"SLUICE_TENANT_MAX_BLOCKS": "none"}); err == nil || !strings.Contains(err.Error(), "SLUICE_TENANT_MAX_BLOCKS") {
		t.Fatalf("bad env: %v", err)
	}
	if _, err := parse([]string{"--tenant-max-service-keys", "-1"}, nil); err == nil || !strings.Contains(err.Error(), "--tenant-max-service-keys") {
		t.Fatalf("bad flag: %v", err)
	}
}

// Every capped write through the API answers 409 conflict with a message
// naming the cap and its value, once the tenant holds what the cap allows.
func TestCapsThroughTheAPI(t *testing.T) {
	m := bootWith(t, func(c *Config) {
		c.Caps = tenants.Caps{Policies: 1, LimitsPerPolicy: 2, ConsumerKeys: 1, ServiceKeys: 2, Blocks: 1}
	})
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "capped", "owner_email": "o@capped.test", "owner_password": "a long passphrase"})
	sk, tenantID := tn["service_key"].(string), tn["id"].(string)
	tier := map[string]any{"algorithm": "token_bucket", "limit": 10, "period": "60s"}
	policy := func(name string, tiers int) string {
		ts := map[string]any{}
		for i := range tiers {
			ts[fmt.Sprint("t", i)] = tier
		}
		return fmt.Sprintf(`{"name": %q, "path": "/api/%s", "tiers": %s}`, name, name, mustJSON(ts))
	}
	wantCap := func(what, method, path, token, body, cap string, value int) {
		t.Helper()
		status, out := call(t, m, method, path, token, body)
		e, _ := out["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if status != 409 || errorCodeOf(out) != "conflict" || !strings.Contains(msg, fmt.Sprintf("tenant cap %q", cap)) || !strings.Contains(msg, fmt.Sprintf(" %d ", value)) {
			t.Fatalf("%s: %d %v, want 409 conflict naming the cap %q and %d", what, status, out, cap, value)
		}
	}

	wantCap("a policy of 3 limits", "POST", "/v1/policies", sk, policy("wide", 3), tenants.CapLimitsPerPolicy, 2)
	p := do(t, m, "POST", "/v1/policies", sk, map[string]any{"name": "one", "path": "/api/one", "tiers": map[string]any{"a": tier}})
	wantCap("a second policy", "POST", "/v1/policies", sk, policy("two", 1), tenants.CapPolicies, 1)
	wantCap("an update to 3 limits", "PUT", "/v1/policies/"+p["id"].(string), sk, policy("one", 3), tenants.CapLimitsPerPolicy, 2)

	do(t, m, "POST", "/v1/keys", sk, map[string]any{"name": "k1", "tier": "pro"})
	wantCap("a second consumer key", "POST", "/v1/keys", sk, `{"name": "k2", "tier": "pro"}`, tenants.CapConsumerKeys, 1)

	do(t, m, "POST", "/v1/service-keys", sk, nil)
	wantCap("a third service key", "POST", "/v1/service-keys", sk, "", tenants.CapServiceKeys, 2)
	wantCap("a third service key, by the operator", "POST", "/v1/admin/tenants/"+tenantID+"/service-keys", testToken, "", tenants.CapServiceKeys, 2)

	block := func(ip string) string {
		return fmt.Sprintf(`{"tenant_id": %q, "identity": {"kind": "ip", "id": %q}}`, tenantID, ip)
	}
	if status, out := call(t, m, "POST", "/v1/admin/blocks", testToken, block("192.0.2.1")); status != 201 {
		t.Fatalf("first block: %d %v", status, out)
	}
	wantCap("a second block", "POST", "/v1/admin/blocks", testToken, block("192.0.2.2"), tenants.CapBlocks, 1)
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
