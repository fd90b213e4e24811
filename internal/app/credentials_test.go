package app

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
)

// call sends one API request and returns the status and decoded body.
func call(t testing.TB, m *Main, method, path, token string, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, "http://"+m.Addr()+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

func errorCodeOf(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// bootPair starts two servers on one NATS: a, with the embedded NATS and
// the worker, and b, with neither, as a second server of a cluster runs.
// They share the session signing key, as servers behind one load balancer must.
func bootPair(t *testing.T, tweak func(*Main)) (a, b *Main) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	natsAddr := ln.Addr().String()
	ln.Close()
	key := []byte("0123456789abcdef0123456789abcdef")
	start := func(cfg Config) *Main {
		cfg.Addr, cfg.Data, cfg.OperatorToken, cfg.SessionKey, cfg.Cluster = "127.0.0.1:0", t.TempDir(), testToken, key, "off"
		m, _ := runMain(t, cfg, tweak)
		return m
	}
	ca := DefaultConfig()
	ca.Node, ca.NatsListen = "a", natsAddr
	a = start(ca)
	cb := DefaultConfig()
	cb.Node, cb.NatsURL, cb.Worker = "b", "nats://"+natsAddr, "external"
	cb.NatsAuth.NKeyFile = filepath.Join(a.Config.Data, bus.ServerSeedName) // a's listener takes its server key
	b = start(cb)
	return a, b
}

// Service keys are listed, added and revoked through one server; the other
// server refuses a revoked key within a second and reports the keys it saw
// in use. Tenants never reach each other's keys.
func TestServiceKeyRotationAcrossServers(t *testing.T) {
	a, b := bootPair(t, func(m *Main) { m.keyUseInterval = 100 * time.Millisecond })
	tn := do(t, a, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "roll", "owner_email": "o@roll.test", "owner_password": "a long passphrase"})
	other := do(t, a, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "other", "owner_email": "o@other.test", "owner_password": "a long passphrase"})
	oldKey, tenantID := tn["service_key"].(string), tn["id"].(string)
	otherKey := other["service_key"].(string)
	waitUntil(t, 5*time.Second, "b knows the tenant", func() bool { st, _ := call(t, b, "GET", "/v1/service-keys", oldKey, ""); return st == 200 })

	list := func(m *Main, token string) []map[string]any {
		t.Helper()
		st, body := call(t, m, "GET", "/v1/service-keys", token, "")
		if st != 200 {
			t.Fatalf("list: %d %v", st, body)
		}
		var out []map[string]any
		for _, k := range body["service_keys"].([]any) {
			out = append(out, k.(map[string]any))
		}
		return out
	}
	keys := list(b, oldKey)
	if len(keys) != 1 || !strings.HasPrefix(oldKey, keys[0]["prefix"].(string)) || keys[0]["revoked_at"] != nil {
		t.Fatalf("first list: %v", keys)
	}
	oldID := keys[0]["id"].(string)
	if _, ok := keys[0]["hash"]; ok {
		t.Fatal("the list shows a hash")
	}

	// Add a key through a; it works on b at once (a answered after applying it).
	st, created := call(t, a, "POST", "/v1/service-keys", oldKey, "")
	if st != http.StatusCreated {
		t.Fatalf("create: %d %v", st, created)
	}
	newKey, newID := created["key"].(string), created["id"].(string)
	if !strings.HasPrefix(newKey, "sk_") || created["prefix"] != newKey[:8] {
		t.Fatalf("created: %v", created)
	}
	waitUntil(t, 5*time.Second, "b accepts the new key", func() bool { st, _ := call(t, b, "GET", "/v1/policies", newKey, ""); return st == 200 })

	// Another tenant's key id answers 404, and does nothing.
	otherID := list(a, otherKey)[0]["id"].(string)
	if st, body := call(t, a, "DELETE", "/v1/service-keys/"+otherID, oldKey, ""); st != 404 || errorCodeOf(body) != "not_found" {
		t.Fatalf("revoke another tenant's key: %d %v", st, body)
	}
	if st, _ := call(t, b, "GET", "/v1/policies", otherKey, ""); st != 200 {
		t.Fatal("a foreign revoke touched the other tenant's key")
	}

	// Revoke the old key on a: b refuses it within a second.
	st, revoked := call(t, a, "DELETE", "/v1/service-keys/"+oldID, newKey, "")
	if st != 200 || revoked["revoked_at"] == nil {
		t.Fatalf("revoke: %d %v", st, revoked)
	}
	t0 := time.Now()
	waitUntil(t, 5*time.Second, "b refuses the revoked key", func() bool { st, _ := call(t, b, "GET", "/v1/policies", oldKey, ""); return st == 401 })
	t.Logf("revoked key refused by the other server after %s", time.Since(t0))

	// The last active key stays.
	if st, body := call(t, a, "DELETE", "/v1/service-keys/"+newID, newKey, ""); st != 409 || errorCodeOf(body) != "conflict" {
		t.Fatalf("revoke the last key: %d %v", st, body)
	}

	// b saw the new key in use and reported it.
	waitUntil(t, 10*time.Second, "last use reported", func() bool {
		for _, k := range list(b, newKey) {
			if k["id"] == newID && k["last_used_at"] != nil {
				return true
			}
		}
		return false
	})

	// The operator does the same for any tenant; a service key is no
	// operator token.
	if st, _ := call(t, a, "GET", "/v1/admin/tenants/"+tenantID+"/service-keys", newKey, ""); st != 401 {
		t.Fatalf("service key on the operator's route: %d", st)
	}
	st, body := call(t, b, "GET", "/v1/admin/tenants/"+tenantID+"/service-keys", testToken, "")
	if st != 200 || len(body["service_keys"].([]any)) != 2 {
		t.Fatalf("operator list: %d %v", st, body)
	}
	st, opKey := call(t, b, "POST", "/v1/admin/tenants/"+tenantID+"/service-keys", testToken, "")
	if st != 201 {
		t.Fatalf("operator create: %d %v", st, opKey)
	}
	if st, _ := call(t, b, "DELETE", "/v1/admin/tenants/"+tenantID+"/service-keys/"+newID, testToken, ""); st != 200 {
		t.Fatalf("operator revoke: %d", st)
	}
	waitUntil(t, 5*time.Second, "a refuses the key the operator revoked", func() bool { st, _ := call(t, a, "GET", "/v1/policies", newKey, ""); return st == 401 })
	if st, _ := call(t, a, "GET", "/v1/policies", opKey["key"].(string), ""); st != 200 {
		t.Fatal("the operator's new key does not work")
	}
	if st, _ := call(t, a, "DELETE", "/v1/admin/tenants/"+tenantID+"/service-keys/"+otherID, testToken, ""); st != 404 {
		t.Fatalf("operator revoking a key under the wrong tenant: %d", st)
	}
	if st, _ := call(t, a, "GET", "/v1/admin/tenants/ten_missing/service-keys", testToken, ""); st != 404 {
		t.Fatalf("operator, unknown tenant: %d", st)
	}
}

// browser is one dashboard user: a cookie jar against one server at a time.
type browser struct {
	t    *testing.T
	c    *http.Client
	csr  string
	last string // the last page's body
}

func newBrowser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// get fetches a page and keeps its form token.
func (b *browser) get(m *Main, path string) (int, string) {
	b.t.Helper()
	resp, err := b.c.Get("http://" + m.Addr() + path)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	b.last = string(raw)
	if mm := csrfRe.FindStringSubmatch(string(raw)); mm != nil {
		b.csr = mm[1]
	}
	return resp.StatusCode, resp.Header.Get("Location")
}

func (b *browser) post(m *Main, path string, form url.Values) (int, string) {
	b.t.Helper()
	form.Set("_csrf", b.csr)
	resp, err := b.c.PostForm("http://"+m.Addr()+path, form)
	if err != nil {
		b.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

func (b *browser) signIn(m *Main, email, password string) {
	b.t.Helper()
	b.get(m, "/ui/login")
	if st, _ := b.post(m, "/ui/login", url.Values{"email": {email}, "password": {password}}); st != http.StatusSeeOther {
		b.t.Fatalf("sign in as %s on %s: %d", email, m.Config.Node, st)
	}
}

// signedIn reports whether the browser's session opens a tenant page on m.
func (b *browser) signedIn(m *Main) bool {
	b.t.Helper()
	st, loc := b.get(m, "/ui/keys")
	if st != http.StatusOK && (st != http.StatusSeeOther || !strings.HasPrefix(loc, "/ui/login")) {
		b.t.Fatalf("GET /ui/keys on %s: %d to %q", m.Config.Node, st, loc)
	}
	return st == http.StatusOK
}

// A password change, a role change and a removal made through one server
// end the user's sessions on the other within a second.
func TestSessionVersionAcrossServers(t *testing.T) {
	a, b := bootPair(t, nil)
	do(t, a, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "sv", "owner_email": "o@sv.test", "owner_password": "a long passphrase"})
	owner, ownerOnB := newBrowser(t), newBrowser(t)
	owner.signIn(a, "o@sv.test", "a long passphrase")
	ownerOnB.signIn(b, "o@sv.test", "a long passphrase")
	if !ownerOnB.signedIn(b) || !ownerOnB.signedIn(a) {
		t.Fatal("a session does not work on both servers")
	}

	owner.get(a, "/ui/account")
	if st, _ := owner.post(a, "/ui/account/password", url.Values{"current_password": {"a long passphrase"}, "new_password": {"another long passphrase"}, "confirm_password": {"another long passphrase"}}); st != http.StatusSeeOther {
		t.Fatalf("password change: %d", st)
	}
	t0 := time.Now()
	waitUntil(t, 5*time.Second, "b ends the session after a password change", func() bool { return !ownerOnB.signedIn(b) })
	t.Logf("session ended on the other server after %s", time.Since(t0))
	if !owner.signedIn(a) || !owner.signedIn(b) {
		t.Fatal("the browser that changed the password lost its session")
	}

	// A member's sessions end with a role change and with removal.
	owner.get(a, "/ui/members")
	if st, _ := owner.post(a, "/ui/members", url.Values{"email": {"m@sv.test"}, "password": {"member passphrase"}}); st != http.StatusCreated {
		t.Fatalf("invite: %d", st)
	}
	member := newBrowser(t)
	member.signIn(b, "m@sv.test", "member passphrase")
	if !member.signedIn(b) {
		t.Fatal("the new member's session is refused")
	}
	owner.get(a, "/ui/members")
	mm := regexp.MustCompile(`data-user-id="([^"]+)" data-email="m@sv.test"`).FindStringSubmatch(owner.last)
	if mm == nil {
		t.Fatal("member not listed")
	}
	memberID := mm[1]
	owner.get(a, "/ui/members")
	if st, _ := owner.post(a, "/ui/members/"+memberID+"/role", url.Values{"role": {"owner"}}); st != http.StatusSeeOther {
		t.Fatalf("role change: %d", st)
	}
	waitUntil(t, 5*time.Second, "b ends the session after a role change", func() bool { return !member.signedIn(b) })
	member.signIn(b, "m@sv.test", "member passphrase")
	owner.get(a, "/ui/members")
	if st, _ := owner.post(a, "/ui/members/"+memberID+"/remove", url.Values{}); st != http.StatusSeeOther {
		t.Fatalf("remove: %d", st)
	}
	waitUntil(t, 5*time.Second, "b ends a removed member's session", func() bool { return !member.signedIn(b) })
}

// A restarted server fails closed: until it has loaded the signed-out
// sessions it sends every session to the sign-in page; then a signed-out
// cookie stays refused and the others work again. When the sign-outs cannot
// be loaded at all, people sign in anew, sessions from before stay refused,
// and a sign-out that cannot be recorded ends all of the user's sessions.
func TestRestartedServerFailsClosed(t *testing.T) {
	dir := t.TempDir()
	start := func(hold chan struct{}, wait time.Duration) (*Main, func()) {
		cfg := DefaultConfig()
		cfg.Addr, cfg.Data, cfg.Node, cfg.OperatorToken = "127.0.0.1:0", dir, "restart", testToken
		return runMain(t, cfg, func(m *Main) { m.revocationHold, m.revocationWait = hold, wait })
	}
	m, closeM := start(nil, 0)
	do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "restart", "owner_email": "o@restart.test", "owner_password": "a long passphrase"})
	kept, out := newBrowser(t), newBrowser(t)
	kept.signIn(m, "o@restart.test", "a long passphrase")
	out.signIn(m, "o@restart.test", "a long passphrase")
	if !kept.signedIn(m) || !out.signedIn(m) {
		t.Fatal("sessions refused before the restart")
	}
	uiURL := &url.URL{Scheme: "http", Host: m.Addr(), Path: "/ui/"}
	copied := out.c.Jar.Cookies(uiURL)
	if st, _ := out.post(m, "/ui/logout", url.Values{}); st != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", st)
	}
	out.c.Jar.SetCookies(uiURL, copied) // a copy of the signed-out cookie
	if out.signedIn(m) {
		t.Fatal("a signed-out cookie accepted")
	}
	out.c.Jar.SetCookies(uiURL, copied)
	closeM()

	hold := make(chan struct{})
	m, closeM = start(hold, time.Hour)
	if kept.signedIn(m) {
		t.Fatal("a restarted server accepted a session before loading the sign-outs")
	}
	if st, _ := kept.get(m, "/ui/login"); st != http.StatusOK {
		t.Fatalf("the sign-in page while the sign-outs load: %d", st)
	}
	// The browser dropped its refused cookie; sign in again before the
	// sign-outs load, then let them load.
	kept.signIn(m, "o@restart.test", "a long passphrase")
	close(hold)
	waitUntil(t, 10*time.Second, "sign-outs loaded", func() bool { ok, _ := m.revoked.State(); return ok })
	if !kept.signedIn(m) {
		t.Fatal("a session refused after the sign-outs loaded")
	}
	if out.signedIn(m) {
		t.Fatal("a signed-out cookie accepted after the restart")
	}
	closeM()

	// The sign-outs never load.
	m, _ = start(make(chan struct{}), 300*time.Millisecond)
	waitUntil(t, 10*time.Second, "sign-outs declared unavailable", func() bool { _, since := m.revoked.State(); return !since.IsZero() })
	if kept.signedIn(m) {
		t.Fatal("a session from before the outage accepted without the sign-outs")
	}
	time.Sleep(1100 * time.Millisecond) // session times are whole seconds
	fresh, other := newBrowser(t), newBrowser(t)
	fresh.signIn(m, "o@restart.test", "a long passphrase")
	other.signIn(m, "o@restart.test", "a long passphrase")
	if !fresh.signedIn(m) || !other.signedIn(m) {
		t.Fatal("a new session refused while the sign-outs are unavailable")
	}
	if st, _ := fresh.post(m, "/ui/logout", url.Values{}); st != http.StatusSeeOther {
		t.Fatalf("sign-out during the outage: %d", st)
	}
	waitUntil(t, 5*time.Second, "a sign-out during the outage ends every session of the user", func() bool { return !other.signedIn(m) })
}
