package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// slots answers like Sluice for a concurrency limit of n: an allowed check
// takes a slot and answers a lease, a release gives it back.
type slots struct {
	mu       sync.Mutex
	n        int
	held     map[string]bool
	next     int
	ttls     []string
	released []string
	checks   int
}

func (s *slots) start(t *testing.T) *httptest.Server {
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts
}

func (s *slots) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/v1/check":
		var c struct {
			LeaseTTL string `json:"lease_ttl"`
		}
		json.NewDecoder(r.Body).Decode(&c)
		s.checks++
		s.ttls = append(s.ttls, c.LeaseTTL)
		if len(s.held) >= s.n {
			fmt.Fprint(w, `{"allowed":false,"reason":"concurrency_limited","policy":"export","tier":"anonymous","identity":{"kind":"ip","id":"192.0.2.1"},"limit":1,"remaining":0,"reset_ms":60000,"retry_after_ms":60000}`)
			return
		}
		s.next++
		id := fmt.Sprintf("lse_%d", s.next)
		s.held[id] = true
		fmt.Fprintf(w, `{"allowed":true,"reason":"ok","policy":"export","tier":"anonymous","identity":{"kind":"ip","id":"192.0.2.1"},"limit":1,"remaining":0,"reset_ms":60000,"retry_after_ms":0,"lease":%q,"lease_expires_at":"2026-11-23T12:01:00Z"}`, id)
	case "/v1/release":
		var b struct{ Lease string }
		json.NewDecoder(r.Body).Decode(&b)
		s.released = append(s.released, b.Lease)
		if !strings.HasPrefix(b.Lease, "lse_") {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":{"code":"not_found","message":"lease: no such lease"}}`)
			return
		}
		status := "already_released"
		if s.held[b.Lease] {
			status = "released"
			delete(s.held, b.Lease)
		}
		fmt.Fprintf(w, `{"lease":%q,"released":%v,"status":%q,"lease_expires_at":"2026-11-23T12:01:00Z"}`, b.Lease, status == "released", status)
	default:
		http.NotFound(w, r)
	}
}

func newSlots(n int) *slots { return &slots{n: n, held: map[string]bool{}} }

func TestAcquireRelease(t *testing.T) {
	s := newSlots(1)
	c := New(s.start(t).URL, "sk_test", WithLogger(slog.New(slog.DiscardHandler)))
	ctx := context.Background()
	req := CheckRequest{IP: "192.0.2.1", Path: "/export"}
	d, l, err := c.Acquire(ctx, req, 30*time.Second)
	if err != nil || !d.Allowed || l.ID != "lse_1" || !l.ExpiresAt.Equal(time.Date(2026, 11, 23, 12, 1, 0, 0, time.UTC)) {
		t.Fatalf("acquire: %+v %+v %v", d, l, err)
	}
	if s.ttls[0] != "30s" {
		t.Fatalf("lease_ttl sent %q, want 30s", s.ttls[0])
	}
	// Denied while the slot is held, and not from the denial memory: a
	// release frees it before the RetryAfter the denial said.
	for range 2 {
		if d, l, _ := c.Acquire(ctx, req, 0); d.Allowed || d.Reason != ReasonConcurrencyLimited || l.ID != "" || d.Local {
			t.Fatalf("second acquire: %+v", d)
		}
	}
	r, err := c.Release(ctx, l)
	if err != nil || !r.Released || r.Status != LeaseReleased {
		t.Fatalf("release: %+v %v", r, err)
	}
	if r, err := c.Release(ctx, l); err != nil || r.Released || r.Status != LeaseAlreadyReleased {
		t.Fatalf("release twice: %+v %v", r, err)
	}
	if d, _, _ := c.Acquire(ctx, req, 0); !d.Allowed || s.ttls[len(s.ttls)-1] != "" {
		t.Fatalf("after the release: %+v (ttl %q)", d, s.ttls[len(s.ttls)-1])
	}
	if r, err := c.Release(ctx, Lease{}); err != nil || r.Status != "" {
		t.Fatalf("a lease with no id: %+v %v", r, err)
	}
	var apiErr *Error
	if _, err := c.Release(ctx, Lease{ID: "nope"}); !errors.As(err, &apiErr) || apiErr.Code != "not_found" {
		t.Fatalf("an unknown lease: %v", err)
	}
}

// The middleware gives the slot back when the handler returns and when it
// panics; the panic goes on.
func TestMiddlewareReleases(t *testing.T) {
	s := newSlots(1)
	c := New(s.start(t).URL, "sk_test", WithLogger(slog.New(slog.DiscardHandler)))
	var inHandler []string
	ok := c.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		inHandler = append(inHandler, fmt.Sprint(len(s.held)))
		s.mu.Unlock()
		w.Write([]byte("ok"))
	}))
	for i := range 3 {
		w := httptest.NewRecorder()
		ok.ServeHTTP(w, httptest.NewRequest("GET", "http://app.test/export", nil))
		if w.Code != 200 {
			t.Fatalf("request %d: %d %s", i, w.Code, w.Body)
		}
	}
	if strings.Join(inHandler, ",") != "1,1,1" || len(s.held) != 0 || len(s.released) != 3 {
		t.Fatalf("slot held in the handler %v, after %d, released %v", inHandler, len(s.held), s.released)
	}

	boom := c.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("the panic did not go on: %v", p)
			}
		}()
		boom.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "http://app.test/export", nil))
	}()
	if len(s.held) != 0 || len(s.released) != 4 {
		t.Fatalf("a panicking handler kept its slot: held %v released %v", s.held, s.released)
	}
}

// A release that hangs holds the response for at most ten check timeouts;
// the slot then frees itself at its lease's expiry.
func TestMiddlewareReleaseIsBounded(t *testing.T) {
	stop := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/release" {
			select {
			case <-stop:
			case <-r.Context().Done():
			}
			return
		}
		fmt.Fprint(w, `{"allowed":true,"reason":"ok","policy":"export","tier":"anonymous","identity":{"kind":"ip","id":"192.0.2.1"},"limit":1,"remaining":0,"reset_ms":0,"retry_after_ms":0,"lease":"lse_1","lease_expires_at":"2026-11-23T12:01:00Z"}`)
	}))
	defer ts.Close()
	defer close(stop)
	c := New(ts.URL, "sk_test", WithTimeout(20*time.Millisecond), WithLogger(slog.New(slog.DiscardHandler)))
	h := c.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	start := time.Now()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "http://app.test/export", nil))
	if took := time.Since(start); w.Code != 200 || took > time.Second {
		t.Fatalf("answered %d after %v; want 200 within ten check timeouts (200 ms)", w.Code, took)
	}
}
