package cli

import (
	"strings"
	"testing"
	"time"
)

// sluice webhooks lists the tenant's endpoints, and deliveries lists one
// endpoint's deliveries newest first through every page, or the newest
// --limit; bad arguments are usage errors.
func TestWebhooksVerb(t *testing.T) {
	env := tenant(t, "hooksverb")
	status, body := api(t, env, "POST", "/v1/webhooks", "", map[string]any{"url": "https://127.0.0.1:8443/hook",
		"description": "billing", "events": []string{"key.created"}})
	if status != 201 {
		t.Fatalf("webhook: %d %v", status, body)
	}
	id := body["id"].(string)
	r := sluice(t, env, "", "webhooks")
	if r.code != 0 || !has(r.stdout, id+" https://127.0.0.1:8443/hook key.created whsec_") || !has(r.stdout, "active") {
		t.Fatalf("webhooks: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, name := range []string{"one", "two", "three"} {
		if r := sluice(t, env, "", "keys", "create", "--name", name, "--tier", "pro"); r.code != 0 {
			t.Fatalf("keys create: %d %s", r.code, r.stderr)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r = sluice(t, env, "", "webhooks", "deliveries", id)
		if strings.Count(r.stdout, "key.created") == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r.code != 0 || strings.Count(r.stdout, "key.created") != 3 || !has(r.stdout, "ID EVENT STATUS ATTEMPTS") {
		t.Fatalf("webhooks deliveries: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = sluice(t, env, "", "webhooks", "deliveries", id, "--limit", "2"); r.code != 0 || strings.Count(r.stdout, "key.created") != 2 {
		t.Fatalf("webhooks deliveries --limit 2: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = sluice(t, env, "", "webhooks", "deliveries", "wh_nope"); r.code != 1 || !has(r.stderr, "not_found") && !has(r.stderr, "no such") {
		t.Fatalf("an unknown endpoint: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"webhooks", "deliveries"}, {"webhooks", "list", "x"}, {"webhooks", "rotate"},
		{"webhooks", "deliveries", id, "--limit", "-1"}} {
		if r := sluice(t, env, "", args...); r.code != ExitUsage {
			t.Errorf("%v: exit %d, want %d\n%s", args, r.code, ExitUsage, r.stderr)
		}
	}
}
