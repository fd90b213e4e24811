package app

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sdk"
)

// BenchmarkSDKOverhead measures what the SDK adds to a check against the
// real server started in-process: the same allowed check as a hand-written
// HTTP call, through sdk.Client.Check, and through the net/http middleware
// (with the response recorded in memory). Reports p50 per check.
//
//	go test ./internal/app -run '^$' -bench BenchmarkSDKOverhead -benchtime 20000x
func BenchmarkSDKOverhead(b *testing.B) {
	m := boot(b)
	c, _, sk := sdkTenant(b, m, "overhead", sdk.WithTimeout(time.Second), sdk.WithDenialCache(0))
	if _, err := c.CreatePolicy(context.Background(), sdk.Policy{
		Name: "open", Path: "/api/open",
		Tiers: map[string]sdk.Limits{"anonymous": {{Algorithm: "token_bucket", Limit: 1_000_000_000, Period: "1s"}}},
	}); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"ip":"203.0.113.7","method":"GET","path":"/api/open"}`)
	url := "http://" + m.Addr() + "/v1/check"
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8, DisableCompression: true}}
	defer hc.CloseIdleConnections()

	measure := func(b *testing.B, one func()) {
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			start := time.Now()
			one()
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	}
	b.Run("raw-http", func(b *testing.B) {
		measure(b, func() {
			req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+sk)
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		})
	})
	b.Run("sdk-check", func(b *testing.B) {
		req := sdk.CheckRequest{IP: "203.0.113.7", Method: "GET", Path: "/api/open"}
		measure(b, func() {
			if d, err := c.Check(context.Background(), req); err != nil || !d.Allowed {
				b.Fatalf("%+v %v", d, err)
			}
		})
	})
	b.Run("sdk-middleware", func(b *testing.B) {
		h := c.Middleware(okHandler)
		r := httptest.NewRequest("GET", "/api/open", nil)
		r.RemoteAddr = "203.0.113.7:5000"
		measure(b, func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != 200 {
				b.Fatalf("status %d", w.Code)
			}
		})
	})
}
