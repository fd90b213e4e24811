package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
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

// BenchmarkSDKConcurrent loads the in-process server through one SDK client
// from many goroutines at once (32 per core), with and without request
// sharing (WithBatching), 10 000 random IPs, all allowed. ns/op is the
// client's throughput inverted; p50 is per check.
//
//	go test ./internal/app -run '^$' -bench BenchmarkSDKConcurrent -benchtime 5s
func BenchmarkSDKConcurrent(b *testing.B) {
	m := boot(b)
	setupC, _, sk := sdkTenant(b, m, "concurrent")
	if _, err := setupC.CreatePolicy(context.Background(), sdk.Policy{
		Name: "open", Path: "/api/open",
		Tiers: map[string]sdk.Limits{"anonymous": {{Algorithm: "token_bucket", Limit: 1_000_000_000, Period: "1s"}}},
	}); err != nil {
		b.Fatal(err)
	}
	ips := make([]string, 10000)
	for i := range ips {
		ips[i] = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	}
	for _, mode := range []string{"plain", "batching"} {
		b.Run(mode, func(b *testing.B) {
			opts := []sdk.Option{sdk.WithTimeout(5 * time.Second), sdk.WithDenialCache(0)}
			if mode == "batching" {
				opts = append(opts, sdk.WithBatching())
			}
			c := sdk.New("http://"+m.Addr(), sk, opts...)
			defer c.CloseIdleConnections()
			var mu sync.Mutex
			var all []time.Duration
			var next atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var lat []time.Duration
				for pb.Next() {
					req := sdk.CheckRequest{IP: ips[next.Add(1)%int64(len(ips))], Path: "/api/open"}
					start := time.Now()
					if d, err := c.Check(context.Background(), req); err != nil || !d.Allowed {
						b.Errorf("%+v %v", d, err)
						return
					}
					lat = append(lat, time.Since(start))
				}
				mu.Lock()
				all = append(all, lat...)
				mu.Unlock()
			})
			slices.Sort(all)
			if len(all) > 0 {
				b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
			}
		})
	}
}
