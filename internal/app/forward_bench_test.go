package app

import (
	"bytes"
	"net/http"
	"testing"
)

// benchWriter is a ResponseWriter that keeps nothing but the status, and
// whose header map is reused, so the benchmark counts the handler's
// allocations rather than a recorder's.
type benchWriter struct {
	h    http.Header
	code int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *benchWriter) WriteHeader(code int)        { w.code = code }

// rewindBody is a request body that can be read again after Seek(0, 0).
type rewindBody struct{ *bytes.Reader }

func (rewindBody) Close() error { return nil }

// BenchmarkForwardAuthVsCheck compares /v1/forward-auth with POST
// /v1/check deciding the same request on the real server's handler
// (embedded NATS, worker and SQLite behind it), allowed and denied, without
// the network, so allocations are the handler's own.
//
//	go test ./internal/app -run '^$' -bench BenchmarkForwardAuthVsCheck -benchmem -benchtime 2000x
func BenchmarkForwardAuthVsCheck(b *testing.B) {
	m := boot(b)
	tn := do(b, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "bench", "owner_email": "o@bench.test", "owner_password": "a long passphrase"})
	sk := tn["service_key"].(string)
	do(b, m, "POST", "/v1/policies", sk, map[string]any{
		"name": "open", "method": "GET", "path": "/api/open",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 1_000_000_000, "period": "1s"}},
	})
	do(b, m, "POST", "/v1/policies", sk, map[string]any{
		"name": "shut", "method": "GET", "path": "/api/shut",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 1, "period": "24h"}},
	})
	h := m.http.Handler

	for _, tc := range []struct {
		name, path string
		fwdStatus  int
	}{
		{"allowed", "/api/open", http.StatusOK},
		{"denied", "/api/shut", http.StatusTooManyRequests},
	} {
		b.Run("check/"+tc.name, func(b *testing.B) {
			body := rewindBody{bytes.NewReader([]byte(`{"ip":"203.0.113.7","method":"GET","path":"` + tc.path + `"}`))}
			r, _ := http.NewRequest("POST", "http://"+m.Addr()+"/v1/check", body)
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Authorization", "Bearer "+sk)
			r.RemoteAddr = "127.0.0.1:5000"
			w := &benchWriter{h: http.Header{}}
			for b.Loop() {
				_, _ = body.Seek(0, 0)
				clear(w.h)
				h.ServeHTTP(w, r)
				if w.code != http.StatusOK {
					b.Fatalf("status %d", w.code)
				}
			}
		})
		b.Run("forward-auth/"+tc.name, func(b *testing.B) {
			r, _ := http.NewRequest("GET", "http://"+m.Addr()+"/v1/forward-auth", nil)
			r.Header.Set("X-Sluice-Service-Key", sk)
			r.Header.Set("X-Forwarded-Method", "GET")
			r.Header.Set("X-Forwarded-Uri", tc.path)
			r.RemoteAddr = "203.0.113.7:5000"
			w := &benchWriter{h: http.Header{}}
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, r)
				if w.code != http.StatusOK && w.code != tc.fwdStatus {
					b.Fatalf("status %d", w.code)
				}
			}
		})
	}
}
