package echomw_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/sdk"
	"github.com/sluicehq/sluice/sdk/echomw"
)

// sluice answers like Sluice: the first check of each IP is allowed, the
// next ones denied.
func sluice(t *testing.T) *httptest.Server {
	seen := map[string]bool{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c struct{ IP, Path string }
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil || r.URL.Path != "/v1/check" || c.Path != "/api/heavy?mode=1" {
			t.Errorf("unexpected check %s %+v %v", r.URL.Path, c, err)
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("RateLimit-Policy", `"heavy";q=1;w=60`)
		if seen[c.IP] {
			h.Set("RateLimit", `"heavy";r=0;t=60`)
			h.Set("Retry-After", "60")
			w.Write([]byte(`{"allowed":false,"reason":"rate_limited","policy":"heavy","tier":"anonymous","identity":{"kind":"ip","id":"` + c.IP + `"},"limit":1,"remaining":0,"reset_ms":60000,"retry_after_ms":60000}`))
			return
		}
		seen[c.IP] = true
		h.Set("RateLimit", `"heavy";r=0;t=60`)
		w.Write([]byte(`{"allowed":true,"reason":"ok","policy":"heavy","tier":"anonymous","identity":{"kind":"ip","id":"` + c.IP + `"},"limit":1,"remaining":0,"reset_ms":60000,"retry_after_ms":0}`))
	}))
	t.Cleanup(ts.Close)
	return ts
}

func TestEchoMiddleware(t *testing.T) {
	ts := sluice(t)
	client := sdk.New(ts.URL, "sk_test", sdk.WithLogger(slog.New(slog.DiscardHandler)))
	e := echo.New()
	e.Use(echomw.New(client))
	calls := 0
	e.GET("/api/heavy", func(c echo.Context) error {
		calls++
		return c.String(http.StatusOK, "ok")
	})

	for i, want := range []int{200, 429} {
		r := httptest.NewRequest("GET", "/api/heavy?mode=1", nil)
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		if w.Code != want {
			t.Fatalf("request %d: status %d, want %d", i, w.Code, want)
		}
		if w.Header().Get("RateLimit-Policy") != `"heavy";q=1;w=60` || w.Header().Get("RateLimit") != `"heavy";r=0;t=60` {
			t.Errorf("request %d: headers %v", i, w.Header())
		}
		if want != 429 {
			continue
		}
		var p map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		if w.Header().Get("Content-Type") != "application/problem+json" || w.Header().Get("Retry-After") != "60" ||
			p["type"] != sdk.ProblemQuotaExceeded || p["status"] != 429.0 {
			t.Errorf("denial: %v %v", w.Header(), p)
		}
	}
	if calls != 1 {
		t.Errorf("handler ran %d times, want 1", calls)
	}
}

func TestEchoMiddlewareFailClosed(t *testing.T) {
	ts := sluice(t)
	ts.Close()
	client := sdk.New(ts.URL, "sk_test", sdk.FailClosed(), sdk.WithLogger(slog.New(slog.DiscardHandler)))
	e := echo.New()
	e.Use(echomw.New(client))
	e.GET("/api/heavy", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest("GET", "/api/heavy?mode=1", nil))
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503", w.Code)
	}
}

// The slot of a concurrency limit is released when the handler returns an
// error and when it panics (the panic goes on to Echo's recovery).
func TestEchoMiddlewareReleases(t *testing.T) {
	var released []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/release" {
			var b struct{ Lease string }
			json.NewDecoder(r.Body).Decode(&b)
			released = append(released, b.Lease)
			w.Write([]byte(`{"lease":"` + b.Lease + `","released":true,"status":"released","lease_expires_at":"2026-11-23T12:01:00Z"}`))
			return
		}
		w.Write([]byte(`{"allowed":true,"reason":"ok","policy":"export","tier":"anonymous","identity":{"kind":"ip","id":"192.0.2.1"},"limit":1,"remaining":0,"reset_ms":0,"retry_after_ms":0,"lease":"lse_x","lease_expires_at":"2026-11-23T12:01:00Z"}`))
	}))
	t.Cleanup(ts.Close)
	client := sdk.New(ts.URL, "sk_test", sdk.WithLogger(slog.New(slog.DiscardHandler)))
	e := echo.New()
	e.Use(echomw.New(client))
	e.GET("/fails", func(c echo.Context) error { return echo.NewHTTPError(http.StatusTeapot, "no") })
	e.GET("/panics", func(c echo.Context) error { panic("boom") })
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest("GET", "/fails", nil))
	if rec.Code != http.StatusTeapot || len(released) != 1 {
		t.Fatalf("a failing handler: %d, released %v", rec.Code, released)
	}
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("the panic did not go on: %v", p)
			}
		}()
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/panics", nil))
	}()
	if len(released) != 2 || released[1] != "lse_x" {
		t.Fatalf("a panicking handler: released %v", released)
	}
}
