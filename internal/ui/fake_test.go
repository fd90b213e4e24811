package ui

// A stand-in for the worker and the engine, for tests about the handlers
// themselves (sign-in, sessions, form tokens). Tests about data go through
// the whole product instead (handlers_test.go).

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/net/html"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/httpsec"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/service/servicetest"
	"github.com/sluicehq/sluice/internal/tenants"
)

const (
	fakeEmail    = "owner@fake.test"
	fakePassword = "a long passphrase"
)

// newFakeWorker knows one tenant and its owner.
func newFakeWorker() *servicetest.Memory {
	m := servicetest.New(nil)
	m.AddTenant(tenants.Tenant{ID: "ten_1", Name: "fake"})
	m.AddUser(tenants.User{ID: "usr_1", TenantID: "ten_1", Email: fakeEmail, Role: tenants.RoleOwner}, fakePassword)
	return m
}

// fakeEngine holds each user's session version; usr_1 starts at 1.
type fakeEngine struct {
	mu       sync.Mutex
	versions map[string]int64
}

func (f *fakeEngine) SessionVersion(id string) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.versions[id]
	return v, ok
}

func (f *fakeEngine) setVersion(id string, v int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.versions[id] = v
}

func (*fakeEngine) Check(context.Context, string, *engine.CheckRequest, time.Time) (engine.Answer, error) {
	return engine.Answer{Allowed: true, Reason: engine.ReasonOK}, nil
}

func (*fakeEngine) WaitVersion(context.Context, int64) {}

func (*fakeEngine) PeekCaller(string, engine.Caller, time.Time) (engine.CallerState, error) {
	return engine.CallerState{}, errs.Errorf(errs.NotFound, "no such caller")
}

// testUI is the dashboard on a bare Echo with the fakes and a clock the
// test moves.
type testUI struct {
	t    *testing.T
	e    *echo.Echo
	key  []byte
	now  time.Time
	work *servicetest.Memory
	eng  *fakeEngine
	rev  *memRevoker
	// peer and xff, when set, are the connection's address and the
	// X-Forwarded-For header of every request do makes.
	peer, xff string
	// slept is every sign-in delay the handlers waited.
	slept []time.Duration
}

// memRevoker keeps signed-out sessions in memory (the cluster-wide store is
// tested in internal/bus against a real NATS). A test may make it not
// loaded, or unavailable since some time.
type memRevoker struct {
	mu          sync.Mutex
	m           map[string]time.Time
	loading     bool
	unavailable time.Time
}

func (r *memRevoker) State() (bool, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.loading || !r.unavailable.IsZero() {
		return false, r.unavailable
	}
	return true, time.Time{}
}

func (r *memRevoker) set(loading bool, unavailable time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.loading, r.unavailable = loading, unavailable
}

func (r *memRevoker) Revoke(_ context.Context, sid string, until time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[sid] = until
	return nil
}

func (r *memRevoker) Revoked(sid string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.m[sid]
	return ok
}

func newTestUI(t *testing.T, userLimit, ipLimit int64) *testUI {
	t.Helper()
	return newTestUIWith(t, userLimit, ipLimit, nil)
}

// newTestUIWith is newTestUI with the dashboard behind the trusted proxies.
func newTestUIWith(t *testing.T, userLimit, ipLimit int64, trusted []netip.Prefix) *testUI {
	t.Helper()
	u := &testUI{t: t, e: echo.New(), key: []byte("0123456789abcdef0123456789abcdef"), now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), work: newFakeWorker(), eng: &fakeEngine{versions: map[string]int64{"usr_1": 1}}, rev: &memRevoker{m: map[string]time.Time{}}}
	u.e.Use(httpsec.Headers(httpsec.Transport{})) // as api.New does
	err := Register(u.e, Deps{
		Engine: u.eng, Services: u.work.Services(), SessionKey: u.key, Revocations: u.rev,
		LoginLimit:     quota.Limit{Algorithm: quota.TokenBucket, Limit: userLimit, Period: 5 * time.Minute},
		LoginIPLimit:   quota.Limit{Algorithm: quota.TokenBucket, Limit: ipLimit, Period: 5 * time.Minute},
		TrustedProxies: trusted,
		Now:            func() time.Time { return u.now },
		Sleep: func(_ context.Context, d time.Duration) error {
			u.slept = append(u.slept, d)
			u.now = u.now.Add(d)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// sessions is the same signer the handlers use.
func (u *testUI) sessions() *sessions {
	return newSessions(u.key, 12*time.Hour, func() time.Time { return u.now })
}

// do serves one request; cookies are sent as given.
func (u *testUI) do(method, target string, form url.Values, cookies ...*http.Cookie) *httptest.ResponseRecorder {
	u.t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	r := httptest.NewRequest(method, target, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, c := range cookies {
		r.AddCookie(c)
	}
	if u.peer != "" {
		r.RemoteAddr = u.peer
	}
	if u.xff != "" {
		r.Header.Set("X-Forwarded-For", u.xff)
	}
	w := httptest.NewRecorder()
	u.e.ServeHTTP(w, r)
	return w
}

func cookieNamed(w *httptest.ResponseRecorder, name string) *http.Cookie {
	for _, c := range w.Result().Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// formToken reads the _csrf input of a page.
func formTokenIn(t *testing.T, body string) string {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var tok string
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "input" && attr(n, "name") == csrfField && tok == "" {
			tok = attr(n, "value")
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if tok == "" {
		t.Fatalf("no form token in page:\n%s", body)
	}
	return tok
}

func attr(n *html.Node, name string) string {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val
		}
	}
	return ""
}

var tlsState = tls.ConnectionState{HandshakeComplete: true}
