package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/service/servicetest"
)

// waitEngine records the wait the API hands the engine and answers as a
// check that waited or was refused a wait.
type waitEngine struct {
	Engine
	got    []time.Duration
	answer engine.Answer
}

func (e *waitEngine) Ready() bool                               { return true }
func (e *waitEngine) TenantForServiceKey(string) (string, bool) { return "ten_a", true }
func (e *waitEngine) TenantSuspended(string) bool               { return false }

func (e *waitEngine) Check(_ context.Context, _ string, req *engine.CheckRequest, _ time.Time) (engine.Answer, error) {
	e.got = append(e.got, req.Wait)
	return e.answer, nil
}

func (e *waitEngine) CheckBatch(ctx context.Context, tenant string, reqs []engine.CheckRequest, now time.Time) ([]engine.Answer, error) {
	out := make([]engine.Answer, len(reqs))
	for i := range reqs {
		if reqs[i].Wait != 0 {
			e.got = append(e.got, reqs[i].Wait)
		}
		out[i] = e.answer
	}
	return out, nil
}

func post(t *testing.T, h http.Handler, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk_test")
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// A bad wait is a 400 naming the field, and reaches no engine.
func TestCheckWaitBadInput(t *testing.T) {
	eng := &waitEngine{answer: engine.Answer{Allowed: true, Reason: engine.ReasonOK}}
	h := New(Config{Engine: eng, Services: servicetest.New(time.Now).Services()})
	for _, body := range []string{
		`{"ip": "192.0.2.1", "path": "/x", "wait": "31s"}`,
		`{"ip": "192.0.2.1", "path": "/x", "wait": "0s"}`,
		`{"ip": "192.0.2.1", "path": "/x", "wait": "-1s"}`,
		`{"ip": "192.0.2.1", "path": "/x", "wait": "soon"}`,
		`{"ip": "192.0.2.1", "path": "/x", "wait": 500}`,
	} {
		rec := post(t, h, "/v1/check", body)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "wait") {
			t.Errorf("%s: %d %s", body, rec.Code, rec.Body)
		}
	}
	if rec := post(t, h, "/v1/check/batch", `{"checks": [{"ip": "192.0.2.1", "path": "/x"}, {"ip": "192.0.2.1", "path": "/x", "wait": "40s"}]}`); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "checks[1].wait") {
		t.Errorf("batch: %d %s", rec.Code, rec.Body)
	}
	if len(eng.got) != 0 {
		t.Fatalf("the engine was asked: %v", eng.got)
	}
	if rec := post(t, h, "/v1/check", `{"ip": "192.0.2.1", "path": "/x", "wait": "500ms"}`); rec.Code != http.StatusOK || len(eng.got) != 1 || eng.got[0] != 500*time.Millisecond {
		t.Fatalf("a good wait: %d %s %v", rec.Code, rec.Body, eng.got)
	}
}

// An answer says how long the check waited, and a refused wait says why,
// in the body and in a header.
func TestCheckWaitAnswer(t *testing.T) {
	eng := &waitEngine{answer: engine.Answer{Allowed: true, Reason: engine.ReasonOK, Waited: 1234 * time.Millisecond}}
	h := New(Config{Engine: eng, Services: servicetest.New(time.Now).Services()})
	rec := post(t, h, "/v1/check", `{"ip": "192.0.2.1", "path": "/x", "wait": "2s"}`)
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got["waited_ms"] != 1234.0 || got["wait_refused"] != nil {
		t.Fatalf("waited: %s", rec.Body)
	}
	eng.answer = engine.Answer{Reason: engine.ReasonRateLimited, RetryAfter: 5 * time.Second, WaitRefused: engine.WaitRefusedBucketFull}
	rec = post(t, h, "/v1/check", `{"ip": "192.0.2.1", "path": "/x", "wait": "2s"}`)
	got = nil
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got["wait_refused"] != engine.WaitRefusedBucketFull || got["waited_ms"] != nil ||
		rec.Header().Get(WaitRefusedHeader) != engine.WaitRefusedBucketFull || rec.Header().Get("Retry-After") != "5" {
		t.Fatalf("refused: %s %v", rec.Body, rec.Header())
	}
}

// Forward-auth waits when its URL says so, and refuses a bad wait there.
func TestForwardAuthWaitQuery(t *testing.T) {
	for _, c := range []struct {
		query string
		want  time.Duration
		code  int
	}{
		{"", 0, http.StatusOK},
		{"wait=750ms", 750 * time.Millisecond, http.StatusOK},
		{"jwt=bearer&wait=1s", time.Second, http.StatusOK},
		{"wait=1m", 0, http.StatusBadRequest},
	} {
		eng := &waitEngine{answer: engine.Answer{Allowed: true, Reason: engine.ReasonOK}}
		h := New(Config{Engine: eng, Services: servicetest.New(time.Now).Services()})
		req := httptest.NewRequest(http.MethodGet, ForwardAuthPath+"?"+c.query, nil)
		req.Header.Set(ServiceKeyHeader, "sk_test")
		req.Header.Set("X-Forwarded-Uri", "/x")
		req.RemoteAddr = "192.0.2.1:1234"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.code || (c.code == http.StatusOK && (len(eng.got) != 1 || eng.got[0] != c.want)) {
			t.Errorf("%q: %d %s %v", c.query, rec.Code, rec.Body, eng.got)
		}
	}
}
