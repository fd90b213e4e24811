package app

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/web/static"
)

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

type answer struct {
	status int
	header http.Header
	body   string
}

func send(t *testing.T, req *http.Request) answer {
	t.Helper()
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func get(t *testing.T, base, path string, header ...string) answer {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return send(t, req)
}

// errorCodeOf is the code of an API.md error envelope, "" if body is not one.
func envelopeCode(body string) string {
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &env); err != nil || env.Error.Message == "" {
		return ""
	}
	return env.Error.Code
}

var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
	"X-Frame-Options":         "DENY",
	"X-Content-Type-Options":  "nosniff",
	"Referrer-Policy":         "same-origin",
}

// Every answer of the API listener carries the same security headers:
// the API, its errors, 404 and 405, the dashboard and its error pages,
// static files and the health endpoints.
func TestSecurityHeadersOnEveryAnswer(t *testing.T) {
	m := boot(t)
	base := "http://" + m.Addr()
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/healthz", 200},
		{"GET", "/readyz", 200},
		{"GET", "/metrics", 401},
		{"POST", "/v1/check", 415},
		{"GET", "/v1/check", 405},
		{"GET", "/v1/nope", 404},
		{"GET", "/v1/admin/tenants", 401},
		{"GET", "/nope", 404},
		{"GET", "/ui", 301},
		{"GET", "/ui/login", 200},
		{"GET", "/ui/policies", 303},
		{"GET", "/ui/nope", 404},
		{"GET", "/ui/logout", 405},
		{"GET", "/ui/static/" + static.Path("app.css"), 200},
		{"GET", "/ui/static/000000000000/nope.css", 404},
	} {
		req, _ := http.NewRequest(tc.method, base+tc.path, nil)
		a := send(t, req)
		if a.status != tc.status {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, a.status, tc.status)
		}
		for k, v := range securityHeaders {
			if got := a.header.Get(k); got != v {
				t.Errorf("%s %s: %s = %q, want %q", tc.method, tc.path, k, got, v)
			}
		}
		if a.header.Get("Strict-Transport-Security") != "" {
			t.Errorf("%s %s: HSTS over plain http", tc.method, tc.path)
		}
	}
}

// Without --public-url, only a request that says it came over https (a
// TLS-ending proxy's X-Forwarded-Proto) gets Secure cookies and HSTS; with
// an https --public-url every answer does.
func TestSecureCookiesAndHSTS(t *testing.T) {
	loginCookie := func(a answer) *http.Cookie {
		t.Helper()
		for _, c := range (&http.Response{Header: a.header}).Cookies() {
			if c.Name == "sluice_login" {
				return c
			}
		}
		t.Fatalf("no sign-in cookie: %d %v", a.status, a.header)
		return nil
	}
	m := boot(t)
	base := "http://" + m.Addr()
	plain := get(t, base, "/ui/login")
	if loginCookie(plain).Secure || plain.header.Get("Strict-Transport-Security") != "" {
		t.Errorf("plain http: Secure cookie or HSTS: %v", plain.header)
	}
	proxied := get(t, base, "/ui/login", "X-Forwarded-Proto", "https")
	if !loginCookie(proxied).Secure || proxied.header.Get("Strict-Transport-Security") != "max-age=31536000" {
		t.Errorf("behind a TLS proxy: %v", proxied.header)
	}
	if h := get(t, base, "/healthz", "X-Forwarded-Proto", "https").header.Get("Strict-Transport-Security"); h == "" {
		t.Error("no HSTS on the API behind a TLS proxy")
	}

	pub := bootWith(t, func(c *Config) { c.PublicURL = "https://sluice.example.com" })
	base = "http://" + pub.Addr()
	a := get(t, base, "/ui/login")
	if !loginCookie(a).Secure || a.header.Get("Strict-Transport-Security") != "max-age=31536000" {
		t.Errorf("https public URL: %v", a.header)
	}
	if h := get(t, base, "/v1/nope").header.Get("Strict-Transport-Security"); h == "" {
		t.Error("https public URL: no HSTS on an API error")
	}
}

// /metrics on the API listener is the operator's; --metrics-addr serves it
// without a token on a listener of its own.
func TestMetricsNeedTheOperatorToken(t *testing.T) {
	m := bootWith(t, func(c *Config) { c.MetricsAddr = "127.0.0.1:0" })
	base := "http://" + m.Addr()
	for _, auth := range []string{"", "Bearer op_not_the_operator_token_0123456789", "Basic b3A6b3A="} {
		a := get(t, base, "/metrics", "Authorization", auth)
		if a.status != http.StatusUnauthorized || envelopeCode(a.body) != "unauthenticated" || strings.Contains(a.body, "sluice_") {
			t.Errorf("/metrics with %q: %d %.200s", auth, a.status, a.body)
		}
	}
	a := get(t, base, "/metrics", "Authorization", "Bearer "+testToken)
	if a.status != http.StatusOK || !strings.Contains(a.body, "sluice_config_version") {
		t.Fatalf("/metrics with the operator token: %d %.200s", a.status, a.body)
	}
	if m.MetricsAddr() == "" {
		t.Fatal("metrics listener not started")
	}
	open := get(t, "http://"+m.MetricsAddr(), "/metrics")
	if open.status != http.StatusOK || !strings.Contains(open.body, "sluice_config_version") {
		t.Fatalf("--metrics-addr /metrics: %d %.200s", open.status, open.body)
	}
	if h := get(t, "http://"+m.MetricsAddr(), "/healthz"); h.status != http.StatusOK {
		t.Errorf("--metrics-addr /healthz: %d", h.status)
	}
}

// Bodies over 1 MiB answer 413 payload_too_large, sized or chunked; on
// the dashboard as a page.
func TestBodiesOverOneMiB(t *testing.T) {
	m := boot(t)
	base := "http://" + m.Addr()
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "small", "owner_email": "o@small.test", "owner_password": "a long passphrase"})
	sk := tn["service_key"].(string)
	big := bytes.Repeat([]byte(" "), 2<<20)
	jsonBody := append(append([]byte(`{"path":"/x","ip":"192.0.2.1","pad":"`), big...), `"}`...)
	post := func(path, token, contentType string, body []byte, chunked bool) answer {
		t.Helper()
		var rd io.Reader = bytes.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd) // hides the length: sent chunked
		}
		req, _ := http.NewRequest("POST", base+path, rd)
		if chunked {
			req.ContentLength = -1
		}
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Authorization", "Bearer "+token)
		return send(t, req)
	}
	for _, chunked := range []bool{false, true} {
		for path, token := range map[string]string{"/v1/check": sk, "/v1/check/batch": sk, "/v1/admin/tenants": testToken} {
			a := post(path, token, "application/json", jsonBody, chunked)
			if a.status != http.StatusRequestEntityTooLarge || envelopeCode(a.body) != "payload_too_large" {
				t.Errorf("POST %s, chunked %v: %d %.200s", path, chunked, a.status, a.body)
			}
			if a.header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("POST %s, chunked %v: no security headers", path, chunked)
			}
		}
		form := append([]byte("email=a%40b.test&password="), big...)
		a := post("/ui/login", "", "application/x-www-form-urlencoded", form, chunked)
		if a.status != http.StatusRequestEntityTooLarge || !strings.Contains(a.header.Get("Content-Type"), "text/html") || !strings.Contains(a.body, "larger than 1 MiB") {
			t.Errorf("sign-in form, chunked %v: %d %s %.300s", chunked, a.status, a.header.Get("Content-Type"), a.body)
		}
	}
	// A chunked body under the limit still works.
	req, _ := http.NewRequest("POST", base+"/v1/check", io.MultiReader(strings.NewReader(`{"path":"/x","ip":"192.0.2.1"}`)))
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+sk)
	if a := send(t, req); a.status != http.StatusOK {
		t.Errorf("small chunked check: %d %s", a.status, a.body)
	}
}

// signIn posts the dashboard's sign-in form and returns the status.
func signIn(t *testing.T, base, email, password string) int {
	t.Helper()
	form := get(t, base, "/ui/login")
	tok := csrfRe.FindStringSubmatch(form.body)
	if tok == nil {
		t.Fatal("no form token on the sign-in page")
	}
	req, _ := http.NewRequest("POST", base+"/ui/login", strings.NewReader(url.Values{"email": {email}, "password": {password}, "_csrf": {tok[1]}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, c := range (&http.Response{Header: form.header}).Cookies() {
		req.AddCookie(c)
	}
	return send(t, req).status
}

// Changing SLUICE_OPERATOR_EMAIL retires the previous operator login: after
// a restart with the new email, the old one can no longer sign in.
func TestOperatorLoginFollowsConfiguredEmail(t *testing.T) {
	data := t.TempDir()
	first := bootWith(t, func(c *Config) {
		c.Data, c.OperatorEmail, c.OperatorPassword = data, "old-ops@example.test", "old operator passphrase"
	})
	if st := signIn(t, "http://"+first.Addr(), "old-ops@example.test", "old operator passphrase"); st != http.StatusSeeOther {
		t.Fatalf("first operator sign-in: %d", st)
	}
	stop(t, first)

	second := bootWith(t, func(c *Config) {
		c.Data, c.OperatorEmail, c.OperatorPassword = data, "new-ops@example.test", "new operator passphrase"
	})
	base := "http://" + second.Addr()
	if st := signIn(t, base, "old-ops@example.test", "old operator passphrase"); st != http.StatusUnauthorized {
		t.Errorf("previous operator email signs in: %d", st)
	}
	if st := signIn(t, base, "new-ops@example.test", "new operator passphrase"); st != http.StatusSeeOther {
		t.Errorf("configured operator email: %d", st)
	}
}
