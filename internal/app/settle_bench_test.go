package app

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sdk"
)

// BenchmarkReserveSettle measures the charge-after-the-response round
// trips against the real server started in-process, through the SDK: a
// plain check (for comparison), a reserve (a check plus the worker's write
// of the reservation), and a settle (the worker's write plus the bucket
// adjustment), one at a time (p50 and p99 per call) and from several
// callers at once (throughput).
//
//	go test ./internal/app -run '^$' -bench BenchmarkReserveSettle -benchtime 3000x
func BenchmarkReserveSettle(b *testing.B) {
	m := boot(b)
	ctx := context.Background()
	c, _, _ := sdkTenant(b, m, "llmbench", sdk.WithTimeout(2*time.Second), sdk.WithDenialCache(0))
	if _, err := c.CreatePolicy(ctx, sdk.Policy{Name: "tokens", Path: "/v1/chat",
		Tiers: map[string]sdk.Limits{"anonymous": {{Algorithm: "fixed_window", Limit: 1_000_000_000_000, Calendar: "month"}}}}); err != nil {
		b.Fatal(err)
	}
	req := sdk.CheckRequest{IP: "203.0.113.9", Path: "/v1/chat"}
	waitUntil(b, 2*time.Second, "the policy", func() bool { d, _ := c.Peek(ctx, req); return d.Policy == "tokens" })
	report := func(b *testing.B, lat []time.Duration) {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
	}
	b.Run("check", func(b *testing.B) {
		var lat []time.Duration
		for b.Loop() {
			start := time.Now()
			if d, err := c.Check(ctx, sdk.CheckRequest{IP: req.IP, Path: req.Path, Cost: 1000}); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
			lat = append(lat, time.Since(start))
		}
		report(b, lat)
	})
	// Sixteen callers reserving at once: throughput (reservations/s).
	b.Run("reserve-parallel", func(b *testing.B) {
		b.SetParallelism(8)
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if d, r, err := c.Reserve(ctx, req, 1000, sdk.ReserveOptions{}); err != nil || !d.Allowed || r.ID == "" {
					b.Error(d, r, err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "reserves/s")
	})
	var held []sdk.Reservation
	b.Run("reserve", func(b *testing.B) {
		var lat []time.Duration
		held = held[:0]
		for b.Loop() {
			start := time.Now()
			d, r, err := c.Reserve(ctx, req, 1000, sdk.ReserveOptions{Cap: 4000})
			if err != nil || !d.Allowed || r.ID == "" {
				b.Fatal(d, r, err)
			}
			lat = append(lat, time.Since(start))
			held = append(held, r)
		}
		report(b, lat)
	})
	b.Run("settle", func(b *testing.B) {
		var lat []time.Duration
		i := 0
		for b.Loop() {
			if i == len(held) {
				_, r, err := c.Reserve(ctx, req, 1000, sdk.ReserveOptions{Cap: 4000})
				if err != nil {
					b.Fatal(err)
				}
				held = append(held, r)
			}
			start := time.Now()
			if _, err := c.Settle(ctx, held[i], int64(i%4000)); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
			i++
		}
		report(b, lat)
	})
	// Eight callers settling at once: throughput (settles/s), what the
	// worker's grouping of settles is for.
	b.Run("settle-parallel", func(b *testing.B) {
		rs := make([]sdk.Reservation, b.N)
		for i := range rs {
			_, r, err := c.Reserve(ctx, req, 1000, sdk.ReserveOptions{Cap: 4000})
			if err != nil {
				b.Fatal(err)
			}
			rs[i] = r
		}
		var next atomic.Int64
		b.SetParallelism(4)
		b.ResetTimer()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := next.Add(1) - 1
				if _, err := c.Settle(ctx, rs[i], i%4000); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "settles/s")
	})
}
