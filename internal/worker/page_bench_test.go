package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
)

// BenchmarkHydrationPages reads every persisted bucket in hydration pages
// (packed, in (partition, key) order), as a restarting server does: the
// worker's side of hydration speed.
//
//	go test -run '^$' -bench HydrationPages -benchtime 3x ./internal/worker/
func BenchmarkHydrationPages(b *testing.B) {
	const n = 200000
	e := newEnv(b, Config{})
	ctx := context.Background()
	future := time.Now().Add(time.Hour).UnixNano()
	recs := make([]bus.BucketRecord, n)
	for i := range recs {
		recs[i] = stateBatch(fmt.Sprintf("ten_0123456789abcdef/pol_0123456789/ip:10.%d.%d.%d", i>>16, byte(i>>8), byte(i)), 90, future).Buckets[0]
	}
	if err := WriteBuckets(ctx, e.db, recs, time.Now()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		after, got := "", 0
		for {
			page, err := e.w.bucketsPage(ctx, BucketsRequest{After: after, Order: bus.OrderPartitionKey, Packed: true})
			if err != nil {
				b.Fatal(err)
			}
			if err := bus.WalkPacked(page.Packed, func(bus.PackedRecord) error { got++; return nil }); err != nil {
				b.Fatal(err)
			}
			if after = page.Next; after == "" {
				break
			}
		}
		if got != n {
			b.Fatalf("read %d buckets, want %d", got, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/bucket")
}
