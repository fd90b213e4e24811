package app

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

var csrfRe = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

// Sign-out through the real server revokes the session token itself: the
// same cookie presented again is sent to the sign-in page, though its
// signature and expiry are still good.
func TestSignOutRevokesSessionOnServer(t *testing.T) {
	m := boot(t)
	do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{
		"name": "signout", "owner_email": "owner@signout.test", "owner_password": "a long passphrase",
	})
	base := "http://" + m.Addr()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, cookies ...*http.Cookie) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	post := func(path string, form url.Values, cookies ...*http.Cookie) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for _, c := range cookies {
			req.AddCookie(c)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	cookie := func(resp *http.Response, name string) *http.Cookie {
		for _, c := range resp.Cookies() {
			if c.Name == name && c.Value != "" {
				return c
			}
		}
		t.Fatalf("no %s cookie in %d answer", name, resp.StatusCode)
		return nil
	}
	token := func(page string) string {
		m := csrfRe.FindStringSubmatch(page)
		if m == nil {
			t.Fatal("no form token on the page")
		}
		return m[1]
	}

	resp, page := get("/ui/login")
	resp = post("/ui/login", url.Values{"email": {"owner@signout.test"}, "password": {"a long passphrase"}, "_csrf": {token(page)}}, cookie(resp, "sluice_login"))
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	session := cookie(resp, "sluice_session")
	// The revocation store opens in the background at start; until it has,
	// sessions are refused.
	waitUntil(t, 10*time.Second, "session revocations loaded", func() bool { return m.revoked.r.Load() != nil })
	resp, page = get("/ui/keys", session)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("signed in, /ui/keys: %d", resp.StatusCode)
	}
	if resp := post("/ui/logout", url.Values{"_csrf": {token(page)}}, session); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", resp.StatusCode)
	}
	resp, _ = get("/ui/keys", session)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/login") {
		t.Fatalf("signed-out cookie reused: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}
