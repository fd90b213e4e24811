package ui

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/httpsec"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

const liveSetupToken = "st_ABCDEFGHIJKLMNOPQRSTUVWXYZ"

// countingSetup is a worker's setup link with liveSetupToken live; it
// counts what it is asked.
type countingSetup struct {
	mu             sync.Mutex
	checks, claims int
	claimed        bool
	closed         atomic.Bool // what the server learnt at its start (Deps.SetupClosed)
}

func (s *countingSetup) Offer(context.Context, string) (bool, error) { return true, nil }

func (s *countingSetup) Check(_ context.Context, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks++
	if token != liveSetupToken || s.claimed {
		return errs.Errorf(errs.Unauthenticated, "this setup link is no longer valid")
	}
	return nil
}

func (s *countingSetup) Claim(_ context.Context, token, email, _ string) (service.Written[service.UserRecord], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims++
	if token != liveSetupToken || s.claimed {
		return service.Written[service.UserRecord]{}, errs.Errorf(errs.Unauthenticated, "this setup link is no longer valid")
	}
	s.claimed = true
	u := tenants.User{ID: "usr_op", Email: email, Role: tenants.RoleOperator, SessionVersion: 1}
	return service.Written[service.UserRecord]{Result: service.UserRecord{User: u, SessionVersion: 1}}, nil
}

func (s *countingSetup) counts() (checks, claims int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checks, s.claims
}

// newSetupUI is newTestUI with the setup link of setup and the setup page
// limited to looks per address per 5 minutes.
func newSetupUI(t *testing.T, setup *countingSetup, looks int64) *testUI {
	t.Helper()
	u := &testUI{t: t, e: echo.New(), key: []byte("0123456789abcdef0123456789abcdef"), now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		work: newFakeWorker(), eng: &fakeEngine{versions: map[string]int64{"usr_op": 1}}, rev: &memRevoker{m: map[string]time.Time{}}}
	u.e.Use(httpsec.Headers(httpsec.Transport{}))
	svc := u.work.Services()
	svc.Setup = setup
	if err := Register(u.e, Deps{
		Engine: u.eng, Services: svc, SessionKey: u.key, Revocations: u.rev,
		LoginLimit:     quota.Limit{Algorithm: quota.TokenBucket, Limit: 5, Period: 5 * time.Minute},
		LoginIPLimit:   quota.Limit{Algorithm: quota.TokenBucket, Limit: 20, Period: 5 * time.Minute},
		SetupLookLimit: quota.Limit{Algorithm: quota.TokenBucket, Limit: looks, Period: 5 * time.Minute},
		SetupClosed:    setup.closed.Load,
		Now:            func() time.Time { return u.now },
		Sleep: func(_ context.Context, d time.Duration) error {
			u.slept = append(u.slept, d)
			u.now = u.now.Add(d)
			return nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	return u
}

// Opening the setup page is limited per client address: past the limit it
// answers 429 with Retry-After, before the worker is asked; another
// address is not touched. A token not shaped like one is answered without
// the worker.
func TestSetupPageLimitedPerAddress(t *testing.T) {
	setup := &countingSetup{}
	u := newSetupUI(t, setup, 3)
	u.peer = "198.51.100.7:4000"
	if w := u.do(http.MethodGet, "/ui/setup?token=nonsense", nil); w.Code != http.StatusGone {
		t.Fatalf("a malformed token: %d", w.Code)
	}
	if w := u.do(http.MethodGet, "/ui/setup?token=st_AAAAAAAAAAAAAAAAAAAAAAAAAA", nil); w.Code != http.StatusGone {
		t.Fatalf("a wrong token: %d", w.Code)
	}
	if checks, _ := setup.counts(); checks != 1 {
		t.Fatalf("the worker was asked %d times, want once (the malformed token is answered here)", checks)
	}
	if w := u.do(http.MethodGet, "/ui/setup?token="+liveSetupToken, nil); w.Code != http.StatusOK {
		t.Fatalf("the live link: %d", w.Code)
	}
	w := u.do(http.MethodGet, "/ui/setup?token="+liveSetupToken, nil)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("past the limit: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	if checks, _ := setup.counts(); checks != 2 {
		t.Fatalf("the worker was asked %d times, want 2 (a refusal asks nothing)", checks)
	}
	u.peer = "203.0.113.9:4000"
	if w := u.do(http.MethodGet, "/ui/setup?token="+liveSetupToken, nil); w.Code != http.StatusOK {
		t.Fatalf("another address: %d", w.Code)
	}
	u.now = u.now.Add(5 * time.Minute)
	u.peer = "198.51.100.7:4000"
	if w := u.do(http.MethodGet, "/ui/setup?token="+liveSetupToken, nil); w.Code != http.StatusOK {
		t.Fatalf("the first address, refilled: %d", w.Code)
	}
}

// Wrong tokens from many addresses, as many as each may send, cost the
// real operator's claim nothing: it waits no delay and succeeds.
func TestSetupWrongTokensDoNotSlowTheClaim(t *testing.T) {
	setup := &countingSetup{}
	u := newSetupUI(t, setup, 100)
	post := func(token string) int {
		w := u.do(http.MethodGet, "/ui/setup?token="+liveSetupToken, nil)
		if w.Code != http.StatusOK {
			t.Fatalf("the live link: %d", w.Code)
		}
		f := url.Values{"token": {token}, "email": {"op@sluice.test"}, "password": {"operator passphrase"},
			"password_again": {"operator passphrase"}, csrfField: {formTokenIn(t, w.Body.String())}}
		return u.do(http.MethodPost, "/ui/setup", f, cookieNamed(w, loginCookie)).Code
	}
	for a := range 10 {
		u.peer = "198.51.100." + string(rune('0'+a)) + ":4000"
		for range 5 {
			if code := post("st_AAAAAAAAAAAAAAAAAAAAAAAAAA"); code != http.StatusGone {
				t.Fatalf("a wrong token: %d", code)
			}
		}
		if code := post("st_AAAAAAAAAAAAAAAAAAAAAAAAAA"); code != http.StatusTooManyRequests {
			t.Fatalf("the sixth from one address: %d", code)
		}
	}
	u.peer = "203.0.113.9:4000"
	if code := post(liveSetupToken); code != http.StatusSeeOther {
		t.Fatalf("the real claim: %d", code)
	}
	if len(u.slept) != 0 {
		t.Fatalf("the claim, or a guess, waited %v", u.slept)
	}
	if _, claims := setup.counts(); claims != 51 {
		t.Fatalf("%d claims reached the worker, want 50 guesses and the real one", claims)
	}
}

// A dashboard write the worker refuses past the tenant's write limit
// answers a 429 page with the worker's retry time as Retry-After.
func TestRateLimitedPageCarriesRetryAfter(t *testing.T) {
	u := newTestUI(t, 5, 20)
	u.e.GET("/ui/limited-for-test", func(echo.Context) error {
		return errs.Limited(1500*time.Millisecond, "config write: more than 20 a second for this tenant across the cluster")
	})
	w := u.do(http.MethodGet, "/ui/limited-for-test", nil)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "2" {
		t.Fatalf("%d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
}

// Once the server knows the link is dead everywhere (an operator login
// existed at its start, or a claim succeeded through it), the page and
// the form answer 410 without asking the worker.
func TestSetupDeadLinkAnsweredWithoutTheWorker(t *testing.T) {
	setup := &countingSetup{}
	u := newSetupUI(t, setup, 100)
	w := u.do(http.MethodGet, "/ui/setup?token="+liveSetupToken, nil)
	if w.Code != http.StatusOK {
		t.Fatalf("the live link: %d", w.Code)
	}
	f := url.Values{"token": {liveSetupToken}, "email": {"op@sluice.test"}, "password": {"operator passphrase"},
		"password_again": {"operator passphrase"}, csrfField: {formTokenIn(t, w.Body.String())}}
	if code := u.do(http.MethodPost, "/ui/setup", f, cookieNamed(w, loginCookie)).Code; code != http.StatusSeeOther {
		t.Fatalf("the claim: %d", code)
	}
	checks, claims := setup.counts()
	for _, tok := range []string{liveSetupToken, "st_AAAAAAAAAAAAAAAAAAAAAAAAAA"} {
		if w := u.do(http.MethodGet, "/ui/setup?token="+tok, nil); w.Code != http.StatusGone {
			t.Fatalf("after the claim, %s: %d", tok, w.Code)
		}
	}
	if c, _ := setup.counts(); c != checks {
		t.Fatalf("the worker was asked %d more times after the claim", c-checks)
	}

	setup = &countingSetup{}
	setup.closed.Store(true)
	u = newSetupUI(t, setup, 100)
	if w := u.do(http.MethodGet, "/ui/setup?token="+liveSetupToken, nil); w.Code != http.StatusGone {
		t.Fatalf("an operator login exists: %d", w.Code)
	}
	if c, cl := setup.counts(); c != 0 || cl != 0 || claims != 1 {
		t.Fatalf("asked the worker: %d checks, %d claims", c, cl)
	}
}
