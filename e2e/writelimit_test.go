package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A tenant's settles are limited across the cluster, not per server: with
// a worker limiting each tenant to 20 settles a second (bursts of 20),
// a tenant flooding settles through two servers at once gets, in all,
// about what one server alone would let through, and the rest answer 429
// with Retry-After. Another tenant's settles are not refused meanwhile.
func TestSettleLimitIsClusterWide(t *testing.T) {
	const rate = 20
	tp := &topology{t: t, natsAddr: freeAddr(t), natsDir: t.TempDir(), data: t.TempDir()}
	tp.startNATS()
	tp.worker = startWorker(t, tp.natsURL(), tp.data, "--tenant-settles-per-second", fmt.Sprint(rate), "--tenant-write-burst-seconds", "1")
	for i := range 2 {
		tp.servers = append(tp.servers, startServer(t, serverOpts{data: t.TempDir(), noWait: true, extra: []string{
			"--nats-url", tp.natsURL(), "--worker=external", "--node", fmt.Sprintf("s%d", i+1)}}))
	}
	for _, s := range tp.servers {
		s.waitReady(t, 60*time.Second)
	}
	noisy, quiet := createTenant(t, tp.servers[0], "noisy"), createTenant(t, tp.servers[0], "quiet")

	const flood = 2 * time.Second
	start := time.Now()
	var admitted, refused, other, noRetryAfter atomic.Int64
	var wg sync.WaitGroup
	for _, s := range tp.servers {
		for g := range 4 {
			wg.Go(func() {
				for i := 0; time.Since(start) < flood; i++ {
					r := call(t, "POST", s.base+"/v1/settle", noisy.Key, map[string]any{"reservation": fmt.Sprintf("rsv_none_%d_%d", g, i), "actual": 1})
					switch {
					case r.Status == http.StatusNotFound:
						admitted.Add(1) // read by the worker: past the limit
					case r.Status == http.StatusTooManyRequests && r.errCode() == "rate_limited":
						refused.Add(1)
						if r.Header.Get("Retry-After") == "" {
							noRetryAfter.Add(1)
						}
					default:
						other.Add(1)
					}
				}
			})
		}
	}
	var quietRefused int
	for time.Since(start) < flood {
		r := call(t, "POST", tp.servers[1].base+"/v1/settle", quiet.Key, map[string]any{"reservation": "rsv_none", "actual": 1})
		if r.Status != http.StatusNotFound {
			quietRefused++
		}
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	elapsed := time.Since(start)
	// The burst, then the rate for as long as the flood ran (answers in
	// flight when it ended included), with one more burst of slack.
	most := int64(rate + rate*elapsed.Seconds() + rate)
	t.Logf("through two servers in %s: %d admitted (at most %d), %d refused 429", elapsed.Round(time.Millisecond), admitted.Load(), most, refused.Load())
	if admitted.Load() > most {
		t.Errorf("%d settles admitted in %s, want at most %d: the limit is not cluster-wide", admitted.Load(), elapsed, most)
	}
	if admitted.Load() < rate || refused.Load() == 0 {
		t.Errorf("%d admitted, %d refused: the limit did not act as set", admitted.Load(), refused.Load())
	}
	if other.Load() > 0 || noRetryAfter.Load() > 0 {
		t.Errorf("%d answers neither 404 nor 429, %d refusals without Retry-After", other.Load(), noRetryAfter.Load())
	}
	if quietRefused > 0 {
		t.Errorf("the quiet tenant's settles: %d not answered 404", quietRefused)
	}
}
