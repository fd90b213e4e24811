package app

import (
	"context"
	"database/sql"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// tenantRows counts what SQLite still holds of a tenant, per table.
func tenantRows(t *testing.T, m *Main, tenantID string) map[string]int {
	t.Helper()
	out := map[string]int{}
	err := m.worker.Store().WriteTx(context.Background(), func(tx *sql.Tx) error {
		for _, table := range []string{"tenants", "users", "service_keys", "consumer_keys", "policies", "blocks", "buckets", "counters", "counter_rollups"} {
			col := "tenant_id"
			if table == "tenants" {
				col = "id"
			}
			var n int
			if err := tx.QueryRow(`SELECT COUNT(*) FROM `+table+` WHERE `+col+` = ?`, tenantID).Scan(&n); err != nil {
				return err
			}
			out[table] = n
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The operator suspends a tenant through one server: within a second the
// other server refuses its service key with 403 (checks included), ends
// its users' sessions and refuses their sign-in, while another tenant is
// untouched. Resuming lets it back in; deleting removes it and everything
// it owned, on both servers, and leaves the other tenant alone.
func TestTenantSuspendResumeDeleteAcrossServers(t *testing.T) {
	a, b := bootPair(t, nil)
	const pw = "a long passphrase"
	tn := do(t, a, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "susp", "owner_email": "o@susp.test", "owner_password": pw})
	other := do(t, a, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "bystander", "owner_email": "o@bystander.test", "owner_password": pw})
	id, key := tn["id"].(string), tn["service_key"].(string)
	otherID, otherKey := other["id"].(string), other["service_key"].(string)
	policy := map[string]any{"name": "items", "path": "/api/items", "tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 100, "period": "60s"}}}
	do(t, a, "POST", "/v1/policies", key, policy)
	do(t, a, "POST", "/v1/policies", otherKey, policy)
	do(t, a, "POST", "/v1/keys", key, map[string]any{"name": "app", "tier": "pro"})
	do(t, a, "POST", "/v1/admin/blocks", testToken, map[string]any{"tenant_id": id, "identity": map[string]any{"kind": "ip", "id": "192.0.2.9"}, "reason": "test"})
	checkOn := func(m *Main, token string) int {
		st, _ := call(t, m, "POST", "/v1/check", token, `{"ip":"203.0.113.7","path":"/api/items"}`)
		return st
	}
	waitUntil(t, 5*time.Second, "b knows both tenants", func() bool { return checkOn(b, key) == 200 && checkOn(b, otherKey) == 200 })
	for range 3 {
		checkOn(a, key)
		checkOn(a, otherKey)
	}

	owner, otherOwner := newBrowser(t), newBrowser(t)
	owner.signIn(b, "o@susp.test", pw)
	otherOwner.signIn(b, "o@bystander.test", pw)
	if !owner.signedIn(b) || !otherOwner.signedIn(b) {
		t.Fatal("owners are not signed in")
	}

	// Suspend through a.
	st, body := call(t, a, "POST", "/v1/admin/tenants/"+id+"/suspend", testToken, "")
	if st != 200 || body["suspended_at"] == nil || body["name"] != "susp" {
		t.Fatalf("suspend: %d %v", st, body)
	}
	t0 := time.Now()
	waitUntil(t, time.Second, "b refuses the suspended tenant's check", func() bool { return checkOn(b, key) == 403 })
	t.Logf("suspension enforced by the other server after %s", time.Since(t0))
	st, body = call(t, b, "POST", "/v1/check", key, `{"ip":"203.0.113.7","path":"/api/items"}`)
	if st != 403 || errorCodeOf(body) != "forbidden" || !strings.Contains(body["error"].(map[string]any)["message"].(string), "suspended") {
		t.Fatalf("suspended check: %d %v", st, body)
	}
	if st, _ := call(t, b, "GET", "/v1/policies", key, ""); st != 403 {
		t.Fatalf("suspended tenant's policy list: %d", st)
	}
	waitUntil(t, time.Second, "b ends the suspended owner's session", func() bool { return !owner.signedIn(b) })
	if checkOn(b, otherKey) != 200 || !otherOwner.signedIn(b) {
		t.Fatal("suspending one tenant touched another")
	}
	// Sign-in is refused, and says why once the password is right.
	owner.get(b, "/ui/login")
	if st, _ := owner.post(b, "/ui/login", url.Values{"email": {"o@susp.test"}, "password": {pw}}); st != http.StatusForbidden {
		t.Fatalf("sign-in of a suspended tenant's owner: %d", st)
	}
	owner.get(b, "/ui/login")
	if st, _ := owner.post(b, "/ui/login", url.Values{"email": {"o@susp.test"}, "password": {"wrong passphrase!"}}); st != http.StatusUnauthorized {
		t.Fatalf("wrong password for a suspended tenant's owner: %d", st)
	}
	got := do(t, b, "GET", "/v1/admin/tenants/"+id, testToken, nil)
	if got["suspended_at"] == nil || got["policy_count"] != float64(1) || got["consumer_key_count"] != float64(1) || got["user_count"] != float64(1) {
		t.Fatalf("suspended tenant kept its data? %v", got)
	}
	// Suspending twice changes nothing.
	if st, again := call(t, a, "POST", "/v1/admin/tenants/"+id+"/suspend", testToken, ""); st != 200 || again["suspended_at"] != got["suspended_at"] {
		t.Fatalf("suspend twice: %d %v", st, again)
	}

	// Resume through b: a lets the key back in within a second.
	if st, body := call(t, b, "POST", "/v1/admin/tenants/"+id+"/resume", testToken, ""); st != 200 || body["suspended_at"] != nil {
		t.Fatalf("resume: %d %v", st, body)
	}
	waitUntil(t, time.Second, "a accepts the resumed tenant's key", func() bool { return checkOn(a, key) == 200 })
	owner.signIn(b, "o@susp.test", pw)
	if !owner.signedIn(a) {
		t.Fatal("the resumed tenant's owner cannot sign in")
	}

	// Delete through a: b forgets the tenant within a second.
	waitUntil(t, 10*time.Second, "the tenant's analytics and buckets reach SQLite", func() bool {
		r := tenantRows(t, a, id)
		return r["counters"] > 0 && r["buckets"] > 0
	})
	before := tenantRows(t, a, otherID)
	if st, _ := call(t, a, "DELETE", "/v1/admin/tenants/"+id, testToken, ""); st != http.StatusNoContent {
		t.Fatalf("delete: %d", st)
	}
	waitUntil(t, time.Second, "b refuses the deleted tenant's key", func() bool { return checkOn(b, key) == 401 })
	waitUntil(t, time.Second, "b ends the deleted owner's session", func() bool { return !owner.signedIn(b) })
	for table, n := range tenantRows(t, a, id) {
		if n != 0 {
			t.Errorf("after the delete, %s holds %d rows of the tenant", table, n)
		}
	}
	if st, _ := call(t, b, "GET", "/v1/admin/tenants/"+id, testToken, ""); st != 404 {
		t.Fatalf("deleted tenant still answers: %d", st)
	}
	if st, _ := call(t, a, "DELETE", "/v1/admin/tenants/"+id, testToken, ""); st != 404 {
		t.Fatalf("delete twice: %d", st)
	}
	// The other tenant is whole.
	after := tenantRows(t, a, otherID)
	for _, table := range []string{"tenants", "users", "service_keys", "policies"} {
		if after[table] != before[table] || after[table] == 0 {
			t.Errorf("the other tenant's %s: %d rows before the delete, %d after", table, before[table], after[table])
		}
	}
	if checkOn(b, otherKey) != 200 || !otherOwner.signedIn(b) {
		t.Fatal("deleting one tenant touched another")
	}
	list := do(t, b, "GET", "/v1/admin/tenants", testToken, nil)
	if ts := list["tenants"].([]any); len(ts) != 1 || ts[0].(map[string]any)["id"] != otherID {
		t.Fatalf("tenant list after the delete: %v", ts)
	}
}
