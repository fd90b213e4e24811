package worker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/service"
)

// BenchmarkSettleAtTheWorker measures settles as the worker serves them
// (over NATS, without the HTTP server and the buckets): 32 callers at
// once, half of them settling reservations that exist and half unknown
// ones, as a tenant's flood would. Reports throughput and each kind's p50
// and p99.
//
//	go test ./internal/worker -run '^$' -bench BenchmarkSettleAtTheWorker -benchtime 20000x
func BenchmarkSettleAtTheWorker(b *testing.B) {
	e := newEnv(b, Config{WriteLimits: WriteLimits{Settles: 1_000_000, Reserves: 1_000_000, BurstSeconds: 60}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.w.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	cl := bus.NewClient(e.nc, 30*time.Second)
	var tn service.Written[service.TenantCreated]
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := bus.CallInto(context.Background(), cl, bus.OpTenantCreate, bus.TenantCreate{Name: "bench", OwnerEmail: "o@bench.test", OwnerPassword: "correct horse battery"}, &tn)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	tenant := tn.Result.Tenant.ID
	now := time.Now().UTC()
	ids := make([]string, b.N/2+1)
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(ids); i = int(next.Add(1) - 1) {
				ids[i] = fmt.Sprintf("rsv_%06d", i)
				r := reserve.Reservation{ID: ids[i], TenantID: tenant, Hold: reserve.Hold{BucketKey: "k", PolicyID: "p", Policy: "p", Tier: "default", IdentityKind: "ip", IdentityID: "192.0.2.1"},
					Reserved: 10, Cap: 10, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
				if err := bus.CallInto(context.Background(), cl, bus.OpReservationCreate, r, nil); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var mu sync.Mutex
	var known, unknown []time.Duration
	next.Store(0)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range 32 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
				id, isKnown := ids[i/2], i%2 == 0
				if !isKnown {
					id = fmt.Sprintf("rsv_unknown_%d", i)
				}
				t0 := time.Now()
				err := bus.CallInto(context.Background(), cl, bus.OpReservationSettle, reserve.Settle{TenantID: tenant, ID: id, Actual: 4, At: now}, nil)
				d := time.Since(t0)
				if isKnown && err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				if isKnown {
					known = append(known, d)
				} else {
					unknown = append(unknown, d)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "settles/s")
	e.w.writes.settles.mu.Lock()
	if g := e.w.writes.settles.groups; g > 0 {
		b.ReportMetric(float64(len(known))/float64(g), "settles/group")
	}
	e.w.writes.settles.mu.Unlock()
	for _, l := range []struct {
		name string
		lat  []time.Duration
	}{{"known", known}, {"unknown", unknown}} {
		if len(l.lat) == 0 {
			continue
		}
		slices.Sort(l.lat)
		b.ReportMetric(float64(l.lat[len(l.lat)/2].Microseconds()), l.name+"-p50-µs")
		b.ReportMetric(float64(l.lat[len(l.lat)*99/100].Microseconds()), l.name+"-p99-µs")
	}
}
