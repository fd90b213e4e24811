package app

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sdk"
)

// BenchmarkAcquireRelease measures a concurrency limit's round trips
// against the real server started in-process, through the SDK: a plain
// check of a rate limit (for comparison), and an acquire followed by its
// release, one at a time (p50 and p99 of each).
//
//	go test ./internal/app -run '^$' -bench BenchmarkAcquireRelease -benchtime 3000x
func BenchmarkAcquireRelease(b *testing.B) {
	m := boot(b)
	ctx := context.Background()
	c, _, _ := sdkTenant(b, m, "slotbench", sdk.WithTimeout(2*time.Second), sdk.WithDenialCache(0))
	if _, err := c.CreatePolicy(ctx, sdk.Policy{Name: "rate", Path: "/v1/chat",
		Tiers: map[string]sdk.Limits{"anonymous": {{Algorithm: "token_bucket", Limit: 1_000_000_000, Period: "1s"}}}}); err != nil {
		b.Fatal(err)
	}
	if _, err := c.CreatePolicy(ctx, sdk.Policy{Name: "slots", Path: "/v1/stream",
		Tiers: map[string]sdk.Limits{"anonymous": {{Algorithm: "concurrency", Limit: 10}}}}); err != nil {
		b.Fatal(err)
	}
	rate := sdk.CheckRequest{IP: "203.0.113.9", Path: "/v1/chat"}
	slots := sdk.CheckRequest{IP: "203.0.113.9", Path: "/v1/stream"}
	waitUntil(b, 2*time.Second, "the policies", func() bool {
		d, _ := c.Peek(ctx, rate)
		e, _ := c.Peek(ctx, slots)
		return d.Policy == "rate" && e.Policy == "slots"
	})
	report := func(b *testing.B, name string, lat []time.Duration) {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, name+"-p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, name+"-p99-µs")
	}
	b.Run("check", func(b *testing.B) {
		var lat []time.Duration
		for b.Loop() {
			start := time.Now()
			if d, err := c.Check(ctx, rate); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
			lat = append(lat, time.Since(start))
		}
		report(b, "check", lat)
	})
	b.Run("acquire+release", func(b *testing.B) {
		var acq, rel, both []time.Duration
		for b.Loop() {
			start := time.Now()
			d, l, err := c.Acquire(ctx, slots, time.Minute)
			if err != nil || !d.Allowed || l.ID == "" {
				b.Fatal(d, err)
			}
			mid := time.Now()
			if r, err := c.Release(ctx, l); err != nil || !r.Released {
				b.Fatal(r, err)
			}
			end := time.Now()
			acq, rel, both = append(acq, mid.Sub(start)), append(rel, end.Sub(mid)), append(both, end.Sub(start))
		}
		report(b, "acquire", acq)
		report(b, "release", rel)
		report(b, "pair", both)
	})
}
