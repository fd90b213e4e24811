package sdk

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	goodKey = "ck_good0123456789abcdefghijklmnopqrstu"
	badKey  = "ck_nope0123456789abcdefghijklmnopqrstu"
)

func quiet() Option { return WithLogger(slog.New(slog.DiscardHandler)) }

func newTestClient(t testing.TB, url string, opts ...Option) *Client {
	t.Helper()
	c := New(url, testServiceKey, append([]Option{quiet(), WithTimeout(2 * time.Second)}, opts...)...)
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func TestCheckAnswerFields(t *testing.T) {
	ts := newFakeSluice().start(t)
	c := newTestClient(t, ts.URL)
	ctx := context.Background()

	d, err := c.Check(ctx, CheckRequest{IP: "203.0.113.7", Method: "GET", Path: "/api/heavy?mode=x"})
	if err != nil {
		t.Fatal(err)
	}
	want := Decision{
		Allowed: true, Reason: ReasonOK, Policy: "heavy-example", Tier: "anonymous",
		Identity: Identity{Kind: "ip", ID: "203.0.113.7"},
		Limit:    2, Remaining: 1, Reset: 60 * time.Second,
	}
	got := d
	got.Header = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decision\n got %+v\nwant %+v", got, want)
	}
	if h := d.Header.Get("RateLimit-Policy"); h != `"heavy-example";q=2;w=60` {
		t.Errorf("RateLimit-Policy = %q", h)
	}
	items, err := d.LimitItems()
	if err != nil || len(items) != 1 || items[0].Name != "heavy-example" {
		t.Fatalf("LimitItems = %+v, %v", items, err)
	}
	if r, _ := items[0].Int("r"); r != 1 {
		t.Errorf("r = %d, want 1", r)
	}

	c.Check(ctx, CheckRequest{IP: "203.0.113.7", Path: "/api/heavy"})
	d, err = c.Check(ctx, CheckRequest{IP: "203.0.113.7", Path: "/api/heavy"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Reason != ReasonRateLimited || d.RetryAfter <= 0 || d.RetryAfter > time.Minute || d.Remaining != 0 {
		t.Errorf("third check: %+v", d)
	}
	if d.Header.Get("Retry-After") != "60" {
		t.Errorf("Retry-After = %q", d.Header.Get("Retry-After"))
	}

	d, err = c.Check(ctx, CheckRequest{IP: "203.0.113.7", Path: "/elsewhere"})
	if err != nil || !d.Allowed || d.Policy != "" || d.Reason != ReasonOK {
		t.Errorf("no policy: %+v, %v", d, err)
	}
}

func TestCheckRequestShape(t *testing.T) {
	f := newFakeSluice()
	ts := f.start(t)
	c := newTestClient(t, ts.URL)
	ctx := context.Background()
	c.Check(ctx, CheckRequest{APIKey: goodKey, IP: "2001:db8::1", Method: "POST", Path: "/a%2Fb/../c?q=%20x&q=y", Cost: 3})
	c.Check(ctx, CheckRequest{IP: "192.0.2.1", Path: "/plain"})
	c.Peek(ctx, CheckRequest{IP: "192.0.2.1", Path: "/\"quoted\"\\\x01é"})
	three := int64(3)
	want := []wireCheck{
		{APIKey: goodKey, IP: "2001:db8::1", Method: "POST", Path: "/a%2Fb/../c?q=%20x&q=y", Cost: &three},
		{IP: "192.0.2.1", Path: "/plain"},
		{IP: "192.0.2.1", Path: "/\"quoted\"\\\x01é", Peek: true},
	}
	if got := f.checks(); !reflect.DeepEqual(got, want) {
		t.Errorf("server received\n%+v\nwant\n%+v", got, want)
	}
}

func TestPeekConsumesNothing(t *testing.T) {
	ts := newFakeSluice().start(t)
	c := newTestClient(t, ts.URL, WithDenialCache(0))
	ctx := context.Background()
	req := CheckRequest{IP: "192.0.2.9", Path: "/api/heavy"}
	for range 5 {
		d, err := c.Peek(ctx, req)
		if err != nil || !d.Allowed || d.Remaining != 1 {
			t.Fatalf("peek: %+v, %v", d, err)
		}
	}
	for i, want := range []bool{true, true, false} {
		if d, _ := c.Check(ctx, req); d.Allowed != want {
			t.Errorf("check %d allowed = %v, want %v", i, d.Allowed, want)
		}
	}
	if d, _ := c.Peek(ctx, req); d.Allowed {
		t.Error("peek after exhaustion allowed")
	}
}

func TestCheckBatchOrder(t *testing.T) {
	ts := newFakeSluice().start(t)
	c := newTestClient(t, ts.URL)
	var reqs []CheckRequest
	for i := range 30 {
		ip := "192.0.2." + string(rune('0'+i%10))
		reqs = append(reqs, CheckRequest{IP: ip, Path: "/api/heavy"})
	}
	reqs = append(reqs, CheckRequest{APIKey: badKey, Path: "/x"}, CheckRequest{IP: "198.51.100.66", Path: "/x"})
	ds, err := c.CheckBatch(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != len(reqs) {
		t.Fatalf("%d results for %d checks", len(ds), len(reqs))
	}
	for i := range 30 {
		if ds[i].Identity.ID != reqs[i].IP {
			t.Errorf("result %d is for %q, want %q", i, ds[i].Identity.ID, reqs[i].IP)
		}
		// Each IP appears three times: allowed, allowed, denied.
		if want := i < 20; ds[i].Allowed != want {
			t.Errorf("result %d allowed = %v, want %v", i, ds[i].Allowed, want)
		}
		if ds[i].Header != nil {
			t.Errorf("result %d has a header", i)
		}
	}
	if ds[30].Reason != ReasonInvalidKey || ds[31].Reason != ReasonBlocked {
		t.Errorf("last reasons = %q, %q", ds[30].Reason, ds[31].Reason)
	}

	for _, n := range []int{0, MaxBatch + 1} {
		_, err := c.CheckBatch(context.Background(), make([]CheckRequest, n))
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalidRequest {
			t.Errorf("batch of %d: err = %v", n, err)
		}
	}
}

func TestFailureModes(t *testing.T) {
	for _, closed := range []bool{false, true} {
		mode := []Option{FailOpen()}
		if closed {
			mode = []Option{FailClosed()}
		}
		ts := newFakeSluice().start(t)
		c := newTestClient(t, ts.URL, mode...)
		ts.Close()

		d, err := c.Check(context.Background(), CheckRequest{IP: "192.0.2.1", Path: "/"})
		if err == nil || d.Allowed == closed || d.Reason != ReasonUnavailable || !d.Local {
			t.Errorf("closed=%v, server down: %+v, %v", closed, d, err)
		}
		ds, err := c.CheckBatch(context.Background(), []CheckRequest{{IP: "192.0.2.1", Path: "/"}, {IP: "192.0.2.2", Path: "/"}})
		if err == nil || len(ds) != 2 || ds[1].Allowed == closed || ds[1].Reason != ReasonUnavailable {
			t.Errorf("closed=%v, batch with server down: %+v, %v", closed, ds, err)
		}
		if s := c.Stats(); s.Failures != 3 || s.Checks != 3 {
			t.Errorf("stats = %+v", s)
		}
	}
}

func TestTimeoutHonoured(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer ts.Close()
	defer close(release)
	const timeout = 50 * time.Millisecond
	c := New(ts.URL, testServiceKey, quiet(), WithTimeout(timeout), FailClosed())
	defer c.CloseIdleConnections()

	start := time.Now()
	d, err := c.Check(context.Background(), CheckRequest{IP: "192.0.2.1", Path: "/"})
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want a deadline error", err)
	}
	if d.Allowed || d.Reason != ReasonUnavailable {
		t.Errorf("decision = %+v", d)
	}
	// Generous: the point is that the check does not wait for the server.
	if elapsed > timeout+time.Second {
		t.Errorf("check took %v with a %v timeout", elapsed, timeout)
	}
}

func TestErrorAnswersAreFailures(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		code   string
	}{
		{503, `{"error":{"code":"unavailable","message":"not ready"}}`, "unavailable"},
		{500, `<html>oops</html>`, "unavailable"},
		{401, `{"error":{"code":"unauthenticated","message":"bad key"}}`, "unauthenticated"},
		{200, `{"allowed": tru`, ""},
	} {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			w.Write([]byte(tc.body))
		}))
		c := newTestClient(t, ts.URL)
		d, err := c.Check(context.Background(), CheckRequest{IP: "192.0.2.1", Path: "/"})
		ts.Close()
		if err == nil || !d.Allowed || d.Reason != ReasonUnavailable {
			t.Errorf("%d %s: %+v, %v", tc.status, tc.body, d, err)
		}
		var e *Error
		if tc.code != "" && (!errors.As(err, &e) || e.Code != tc.code || e.Status != tc.status) {
			t.Errorf("%d %s: err = %#v, want code %s", tc.status, tc.body, err, tc.code)
		}
	}
}

// countingHandler counts log records.
type countingHandler struct {
	mu sync.Mutex
	n  int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(context.Context, slog.Record) error {
	h.mu.Lock()
	h.n++
	h.mu.Unlock()
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func TestFailureLogIsRateLimited(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	ts.Close()
	h := &countingHandler{}
	c := New(ts.URL, testServiceKey, WithLogger(slog.New(h)))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }

	for _, step := range []struct {
		advance time.Duration
		lines   int
	}{
		{0, 1}, {time.Second, 1}, {8 * time.Second, 1}, {time.Second, 2}, {time.Second, 2}, {10 * time.Second, 3},
	} {
		now = now.Add(step.advance)
		c.Check(context.Background(), CheckRequest{IP: "192.0.2.1", Path: "/"})
		if h.n != step.lines {
			t.Errorf("after +%v: %d log lines, want %d", step.advance, h.n, step.lines)
		}
	}
	if f := c.Stats().Failures; f != 6 {
		t.Errorf("failures = %d, want 6", f)
	}
}

func TestNewPanicsOnBadConfig(t *testing.T) {
	for _, tc := range []struct {
		url  string
		opts []Option
	}{
		{"localhost:8080", nil},
		{"ftp://x", nil},
		{"http://x", []Option{WithTrustedProxies("10.0.0.0/33")}},
		{"http://x", []Option{WithTrustedProxies("nope")}},
		{"http://x", []Option{WithTimeout(0)}},
		{"http://x", []Option{WithProxyHeader("X-Real-IP")}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%q, %d options) did not panic", tc.url, len(tc.opts))
				}
			}()
			New(tc.url, "sk", tc.opts...)
		}()
	}
}

func TestBaseURLWithPrefix(t *testing.T) {
	var got string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.Path
		w.Write([]byte(`{"allowed":true,"reason":"ok","policy":null}`))
	}))
	defer ts.Close()
	c := newTestClient(t, ts.URL+"/sluice/")
	if _, err := c.Check(context.Background(), CheckRequest{IP: "192.0.2.1", Path: "/"}); err != nil {
		t.Fatal(err)
	}
	if got != "/sluice/v1/check" {
		t.Errorf("path = %q", got)
	}
	if !strings.HasPrefix(c.base, ts.URL) {
		t.Errorf("base = %q", c.base)
	}
}

// TestConcurrentChecks shares one client between goroutines (run with
// -race): pooled buffers, the interner and the denial memory must hold up.
func TestConcurrentChecks(t *testing.T) {
	ts := newFakeSluice().start(t)
	c := newTestClient(t, ts.URL)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				ip := "192.0.2." + string(rune('0'+g))
				req := CheckRequest{IP: ip, Path: []string{"/api/heavy", "/api/multi", "/x"}[i%3]}
				d, err := c.Check(context.Background(), req)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Identity.ID != ip {
					t.Errorf("answer for %q came back for %q", ip, d.Identity.ID)
				}
			}
		})
	}
	wg.Wait()
	if s := c.Stats(); s.Checks != 400 || s.Failures != 0 || s.LocalDenials == 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestCanceledCallerIsNoFailure(t *testing.T) {
	ts := newFakeSluice().start(t)
	c := newTestClient(t, ts.URL, FailClosed())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, err := c.Check(ctx, CheckRequest{IP: "192.0.2.1", Path: "/"})
	if !errors.Is(err, context.Canceled) || d.Allowed || d.Reason != ReasonUnavailable {
		t.Errorf("%+v, %v", d, err)
	}
	if f := c.Stats().Failures; f != 0 {
		t.Errorf("a canceled caller counted %d failures", f)
	}
}
