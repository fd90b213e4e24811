package sdk

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// waitingSluice answers /v1/check after holding it for hold, as a Sluice
// whose bucket admits the check later, and records the waits it was sent.
func waitingSluice(t *testing.T, hold time.Duration) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var waits []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Wait string `json:"wait"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		mu.Lock()
		waits = append(waits, body.Wait)
		mu.Unlock()
		time.Sleep(hold)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"allowed":true,"reason":"ok","policy":"p","tier":"anonymous","identity":{"kind":"ip","id":"192.0.2.1"},`+
			`"limit":1,"remaining":0,"reset_ms":1000,"retry_after_ms":0,"waited_ms":250}`)
	}))
	t.Cleanup(ts.Close)
	return ts, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), waits...)
	}
}

// A check with a wait sends it, waits past the client's own timeout for
// its answer (the timeout grows by the wait), and reads waited_ms.
func TestCheckWait(t *testing.T) {
	ts, waits := waitingSluice(t, 250*time.Millisecond)
	c := New(ts.URL, testServiceKey, quiet(), WithTimeout(100*time.Millisecond))
	t.Cleanup(c.CloseIdleConnections)
	d, err := c.Check(t.Context(), CheckRequest{IP: "192.0.2.1", Path: "/x", Wait: 500 * time.Millisecond})
	if err != nil || !d.Allowed || d.Local || d.Waited != 250*time.Millisecond {
		t.Fatalf("%+v %v", d, err)
	}
	// Without a wait the same answer is past the timeout.
	if d, err := c.Check(t.Context(), CheckRequest{IP: "192.0.2.1", Path: "/x"}); err == nil || !d.Local {
		t.Fatalf("without a wait: %+v %v", d, err)
	}
	if got := waits(); len(got) != 2 || got[0] != "500ms" || got[1] != "" {
		t.Fatalf("sent waits %q", got)
	}
}

// The middleware's checks carry WithWait's wait.
func TestMiddlewareWait(t *testing.T) {
	ts, waits := waitingSluice(t, 0)
	c := New(ts.URL, testServiceKey, quiet(), WithWait(2*time.Second))
	t.Cleanup(c.CloseIdleConnections)
	h := c.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	if rec.Code != http.StatusNoContent {
		t.Fatalf("status %d", rec.Code)
	}
	if got := waits(); len(got) != 1 || got[0] != "2s" {
		t.Fatalf("sent waits %q", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a wait above MaxWait was accepted")
		}
	}()
	New(ts.URL, testServiceKey, WithWait(MaxWait+time.Second))
}
