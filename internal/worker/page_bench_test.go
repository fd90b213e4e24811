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
	persistBuckets(b, e, n)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		after, got := "", 0
		for {
			page, err := e.w.buckets.page(ctx, bus.BucketsRequest{After: after, Order: bus.OrderPartitionKey, Packed: true})
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

// persistBuckets writes n live buckets, as the worker stores them.
func persistBuckets(b *testing.B, e *env, n int) {
	b.Helper()
	future := time.Now().Add(time.Hour).UnixNano()
	recs := make([]bus.BucketRecord, n)
	for i := range recs {
		recs[i] = stateBatch(benchKey(i), 90, future).Buckets[0]
	}
	if err := WriteBuckets(context.Background(), e.db, recs, time.Now()); err != nil {
		b.Fatal(err)
	}
}

func benchKey(i int) string {
	return fmt.Sprintf("ten_0123456789abcdef/pol_0123456789/ip:10.%d.%d.%d", i>>16, byte(i>>8), byte(i))
}

// BenchmarkFirstTouch fetches one bucket by key, as a hydrating server does
// for a check on a key its load has not reached yet, after full pages have
// been read.
//
//	go test -run '^$' -bench FirstTouch ./internal/worker/
func BenchmarkFirstTouch(b *testing.B) {
	const n = 20000
	e := newEnv(b, Config{})
	ctx := context.Background()
	persistBuckets(b, e, n)
	for after := ""; ; {
		page, err := e.w.buckets.page(ctx, bus.BucketsRequest{After: after, Order: bus.OrderPartitionKey, Packed: true})
		if err != nil {
			b.Fatal(err)
		}
		if after = page.Next; after == "" {
			break
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		page, err := e.w.buckets.page(ctx, bus.BucketsRequest{Keys: []string{benchKey(i % n)}, Packed: true})
		if err != nil {
			b.Fatal(err)
		}
		if len(page.Packed) == 0 {
			b.Fatal("the bucket was not found")
		}
	}
}
