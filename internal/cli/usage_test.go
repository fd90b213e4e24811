package cli

import (
	"encoding/csv"
	"strings"
	"testing"
	"time"
)

// sluice usage prints every page of the day's usage: with pages of one
// row it still lists both keys and the IP caller, then the total; --csv
// writes the API's CSV file, one header row for all pages; bad flags are
// usage errors.
func TestUsageVerb(t *testing.T) {
	env := tenant(t, "usageverb")
	if status, body := api(t, env, "POST", "/v1/policies", "", map[string]any{"name": "api", "path": "/api/*",
		"tiers": map[string]any{"pro": map[string]any{"algorithm": "fixed_window", "limit": 100, "calendar": "month"},
			"anonymous": map[string]any{"algorithm": "fixed_window", "limit": 100, "period": "1h"}}}); status != 201 {
		t.Fatalf("policy: %d %v", status, body)
	}
	var secrets []string
	for _, name := range []string{"alpha", "beta"} {
		r := sluice(t, env, "", "keys", "create", "--name", name, "--tier", "pro")
		if r.code != 0 {
			t.Fatalf("keys create: %d %s", r.code, r.stderr)
		}
		secrets = append(secrets, strings.TrimSpace(r.stdout))
	}
	deadline := time.Now().Add(3 * time.Second)
	for !has(sluice(t, env, "", "check", "--api-key", secrets[0], "--path", "/api/x", "--peek").stdout, "policy api") {
		if time.Now().After(deadline) {
			t.Fatal("the policy never reached the server")
		}
		time.Sleep(20 * time.Millisecond)
	}
	sluice(t, env, "", "check", "--api-key", secrets[0], "--path", "/api/x", "--cost", "3")
	sluice(t, env, "", "check", "--api-key", secrets[1], "--path", "/api/x", "--cost", "4")
	sluice(t, env, "", "check", "--ip", "192.0.2.5", "--path", "/api/x", "--cost", "5")
	day := time.Now().UTC().Format(time.DateOnly)
	var r result
	for deadline = time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r = sluice(t, env, "", "usage", "--from", day, "--page", "1")
		if has(r.stdout, ": 12 units") || time.Now().After(deadline) {
			break
		}
	}
	if r.code != 0 || !has(r.stdout, "alpha (ck_") || !has(r.stdout, "beta (ck_") || !has(r.stdout, day+" (callers without a key) api 5") ||
		!strings.HasPrefix(r.stdout, "Usage from "+day+" to "+day+" (UTC): 12 units") || strings.Count(r.stdout, "DAY") != 1 {
		t.Fatalf("usage in pages of one row: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = sluice(t, env, "", "usage", "--from", day, "--to", day, "--csv", "--page", "2")
	recs, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
	if r.code != 0 || err != nil || len(recs) != 4 || strings.Join(recs[0], ",") != "day,key_id,key_name,key_prefix,policy,units" {
		t.Fatalf("usage --csv: %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	r = sluice(t, env, "", "usage", "--from", day, "--group", "policy")
	if r.code != 0 || !has(r.stdout, day+" api 12") {
		t.Fatalf("usage --group policy: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"usage", "--month", "May"}, {"usage", "--month", "2027-01", "--from", day},
		{"usage", "--from", day, "--csv", "--json"}, {"usage", "--from", day, "--group", "tier"}, {"usage", "--from", day, "extra"}} {
		if r := sluice(t, env, "", args...); r.code != ExitUsage {
			t.Errorf("%v: %d, want a usage error\n%s", args, r.code, r.stderr)
		}
	}
	if r := sluice(t, env, "", "usage", "--from", "yesterday"); r.code != ExitError || !has(r.stderr, "400 invalid_request: from:") {
		t.Errorf("a bad date: %d\n%s", r.code, r.stderr)
	}
}
