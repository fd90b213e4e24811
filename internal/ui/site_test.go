package ui_test

// Handler tests against the whole product booted in-process (real worker,
// SQLite and NATS), driven over HTTP as a browser drives the dashboard:
// GET a page, read its form token, POST the form.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/sluicehq/sluice/internal/app"
)

const (
	opToken    = "op_ui_test_token_0123456789abcdefgh"
	opEmail    = "operator@ui.test"
	opPassword = "operator passphrase"
)

type site struct {
	t    *testing.T
	m    *app.Main
	base string
}

func bootSite(t *testing.T) *site { return bootSiteWith(t, nil) }

// bootSiteWith is bootSite with edit (when not nil) applied to the config.
func bootSiteWith(t *testing.T, edit func(*app.Config)) *site {
	t.Helper()
	return bootSiteOut(t, edit, io.Discard)
}

// bootSiteOut is bootSiteWith printing the banner to out.
func bootSiteOut(t *testing.T, edit func(*app.Config), out io.Writer) *site {
	t.Helper()
	cfg := app.DefaultConfig()
	cfg.Addr, cfg.Data, cfg.Node = "127.0.0.1:0", t.TempDir(), "uitest"
	cfg.OperatorToken, cfg.OperatorEmail, cfg.OperatorPassword = opToken, opEmail, opPassword
	if edit != nil {
		edit(&cfg)
	}
	m := app.NewMain(cfg, slog.New(slog.DiscardHandler))
	m.Out = out
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	waitFor(t, 30*time.Second, "ready", func() bool { return m.Engine().Ready() })
	return &site{t: t, m: m, base: "http://" + m.Addr()}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// api calls the JSON API.
func (s *site) api(method, path, token string, body any) map[string]any {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		s.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return out
}

type tenantInfo struct{ id, key, email, password string }

func (s *site) tenant(name string) tenantInfo {
	s.t.Helper()
	tn := tenantInfo{email: "owner@" + strings.ReplaceAll(name, " ", "") + ".test", password: "owner passphrase " + name}
	r := s.api("POST", "/v1/admin/tenants", opToken, map[string]any{"name": name, "owner_email": tn.email, "owner_password": tn.password})
	tn.id, tn.key = r["id"].(string), r["service_key"].(string)
	return tn
}

func (s *site) check(tn tenantInfo, body map[string]any) map[string]any {
	s.t.Helper()
	return s.api("POST", "/v1/check", tn.key, body)
}

// agent is one browser: a cookie jar and the last page's form token.
type agent struct {
	s     *site
	c     *http.Client
	token string
}

type page struct {
	status   int
	location string
	body     string
	doc      *html.Node
}

func (s *site) agent() *agent {
	jar, _ := cookiejar.New(nil)
	return &agent{s: s, c: &http.Client{Jar: jar, Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (a *agent) send(req *http.Request) page {
	a.s.t.Helper()
	resp, err := a.c.Do(req)
	if err != nil {
		a.s.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	p := page{status: resp.StatusCode, location: resp.Header.Get("Location"), body: string(raw)}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		p.doc, _ = html.Parse(bytes.NewReader(raw))
		if tok := p.inputValue("_csrf"); tok != "" {
			a.token = tok
		}
	}
	return p
}

func (a *agent) get(path string) page {
	a.s.t.Helper()
	req, _ := http.NewRequest("GET", a.s.base+path, nil)
	return a.send(req)
}

// post sends a form with the agent's current form token.
func (a *agent) post(path string, form url.Values) page {
	a.s.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["_csrf"]; !ok {
		form.Set("_csrf", a.token)
	}
	req, _ := http.NewRequest("POST", a.s.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return a.send(req)
}

func (a *agent) signIn(email, password string) {
	a.s.t.Helper()
	a.get("/ui/login")
	p := a.post("/ui/login", url.Values{"email": {email}, "password": {password}})
	if p.status != http.StatusSeeOther {
		a.s.t.Fatalf("sign in as %s: %d\n%s", email, p.status, p.body)
	}
	a.get(p.location) // picks up the session's form token
}

func want(t *testing.T, p page, status int, what string) page {
	t.Helper()
	if p.status != status {
		t.Fatalf("%s: status %d, want %d (location %q)\n%.2000s", what, p.status, status, p.location, p.body)
	}
	return p
}

// Elements by data-testid.

func (p page) all(pred func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && pred(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	if p.doc != nil {
		walk(p.doc)
	}
	return out
}

func attrOf(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func (p page) testID(id string) []*html.Node {
	return p.all(func(n *html.Node) bool { return attrOf(n, "data-testid") == id })
}

func (p page) has(id string) bool { return len(p.testID(id)) > 0 }

func (p page) text(id string) string {
	ns := p.testID(id)
	if len(ns) == 0 {
		return ""
	}
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(ns[0])
	return strings.Join(strings.Fields(b.String()), " ")
}

func (p page) attr(id, key string) string {
	ns := p.testID(id)
	if len(ns) == 0 {
		return ""
	}
	return attrOf(ns[0], key)
}

func (p page) inputValue(name string) string {
	ns := p.all(func(n *html.Node) bool { return n.Data == "input" && attrOf(n, "name") == name })
	if len(ns) == 0 {
		return ""
	}
	return attrOf(ns[0], "value")
}

// selected is the value of the chosen option of the select named name.
func (p page) selected(name string) string {
	for _, sel := range p.all(func(n *html.Node) bool { return n.Data == "select" && attrOf(n, "name") == name }) {
		for c := sel.FirstChild; c != nil; c = c.NextSibling {
			if c.Data == "option" {
				for _, a := range c.Attr {
					if a.Key == "selected" {
						return attrOf(c, "value")
					}
				}
			}
		}
	}
	return ""
}
