package engine

import (
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
)

// benchWaits is an engine whose waits run on the wall clock, and the
// limits of pol_w (1 a second) and pol_f (10 a second in bursts of 1).
func benchWaits(b *testing.B, cfg WaitConfig) (*Engine, *Waits) {
	snap := fastSnapshot(b)
	snap.Policies = append(snap.Policies, waitSnapshot(b).Policies[3:]...)
	e := newTestEngine(b, snap)
	w := NewWaits(cfg)
	w.clock, w.eng = wallClock{now: time.Now}, e
	e.waits = w
	return e, w
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWait10kWaiters is what 10 000 checks waiting on one server
// cost: heap bytes and the CPU time to queue and answer each (in 100
// buckets of 100, as forwarded waiters are held, without a goroutine), and
// the process's CPU while they wait against the same with none waiting
// (cpu-ms/s; the embedded NATS server of the test runs in the process):
// no waiter spins.
func BenchmarkWait10kWaiters(b *testing.B) {
	const n, buckets = 10_000, 100
	e, w := benchWaits(b, WaitConfig{PerBucket: n, PerTenant: n, Total: n})
	limits := e.view.Load().limitsFor("ten_a", "pol_w", "anonymous", "")
	keys := make([][]byte, buckets)
	var out [MaxLimits]quota.Outcome
	for i := range keys {
		keys[i] = []byte(BucketKey("ten_a", "pol_w", KindIP, "192.0.2."+strconv.Itoa(i+1)))
		d := decision{key: keys[i], tenantID: "ten_a", limits: limits, cost: 1, consume: true}
		d.now = time.Now().UnixNano()
		e.decideCache(&d, out[:1]) // the bucket's one token
	}
	done := func(*waitResult) {}
	var heap, idle, base float64
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		c0 := cpuTime()
		time.Sleep(200 * time.Millisecond)
		base = float64(cpuTime()-c0) / float64(time.Millisecond) * 5
		b.StartTimer()
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		for i := range n {
			d := decision{key: keys[i%buckets], tenantID: "ten_a", limits: limits, cost: 1, consume: true, wait: MaxWait}
			for { // a bucket that refilled meanwhile admits at once
				if _, _, queued := w.enter(&d, out[:1], MaxWait, 0, done); queued {
					break
				}
			}
		}
		runtime.ReadMemStats(&m1)
		heap = float64(m1.HeapAlloc-m0.HeapAlloc) / n
		b.StopTimer()
		runtime.GC() // the collection the queuing's garbage calls for is not the waiters' cost
		c0 = cpuTime()
		time.Sleep(200 * time.Millisecond)
		idle = float64(cpuTime()-c0) / float64(time.Millisecond) * 5
		b.StartTimer()
		w.denyAll(nil, WaitRefusedShuttingDown, false)
	}
	b.ReportMetric(heap, "B/waiter")
	b.ReportMetric(idle, "cpu-ms/s-waiting")
	b.ReportMetric(base, "cpu-ms/s-none-waiting")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/waiter")
}

// BenchmarkWaitAdmission is how late a waiter is admitted after its
// bucket can allow it: the instant its retry-after named, to the call
// that answers it (pol_f, one a 100 ms).
func BenchmarkWaitAdmission(b *testing.B) {
	e, w := benchWaits(b, WaitConfig{})
	limits := e.view.Load().limitsFor("ten_a", "pol_f", "anonymous", "")
	key := []byte(BucketKey("ten_a", "pol_f", KindIP, "192.0.2.1"))
	var out [MaxLimits]quota.Outcome
	var late []time.Duration
	got := make(chan time.Time, 1)
	done := func(r *waitResult) {
		if r.allowed {
			got <- time.Now()
		}
	}
	for b.Loop() {
		d := decision{key: key, tenantID: "ten_a", limits: limits, cost: 1, consume: true, now: time.Now().UnixNano()}
		for {
			if allowed, _ := e.decideCache(&d, out[:1]); !allowed {
				break
			}
			d.now = time.Now().UnixNano()
		}
		d = decision{key: key, tenantID: "ten_a", limits: limits, cost: 1, consume: true, wait: time.Second}
		_, _, queued := w.enter(&d, out[:1], time.Second, 0, done)
		if !queued {
			b.Fatal("not queued")
		}
		due := time.Unix(0, d.now).Add(out[0].RetryAfter)
		late = append(late, (<-got).Sub(due))
	}
	slices.Sort(late)
	b.ReportMetric(float64(late[len(late)/2].Microseconds()), "µs-late-p50")
	b.ReportMetric(float64(late[len(late)*99/100].Microseconds()), "µs-late-p99")
}
