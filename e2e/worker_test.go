package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"
)

// With the worker as its own process, stopping it (kill -9) for 10 s under
// traffic loses nothing: JetStream keeps the backlog, the worker commits it
// when it is back, every decision is counted, and bucket state survives a
// later server restart.
func TestExternalWorkerOutage(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	natsAddr := freeAddr(t)
	s := startServer(t, serverOpts{data: data, extra: []string{"--worker=external", "--nats-listen", natsAddr}, noWait: true})
	key := waitWorkerKey(t, s)
	w := startWorker(t, "nats://"+natsAddr, data, "--nats-nkey", key)
	s.waitReady(t, 60*time.Second)

	tn := createTenant(t, s, "outage")
	createPolicy(t, s, tn, map[string]any{
		"name": "x", "path": "/api/x",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 5, "period": "60s"}},
	})
	from := time.Now().Add(-time.Minute).UTC()
	begin := time.Now()

	const ips = 20
	var mu sync.Mutex
	allowedBy := map[string]int{}
	var allowed, denied int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			for i := g; ; i += 4 {
				select {
				case <-stop:
					return
				default:
				}
				ip := fmt.Sprintf("198.51.100.%d", i%ips)
				c, _ := check(t, s, tn, ipCheck(ip, "/api/x"))
				mu.Lock()
				if c.Allowed {
					allowed++
					allowedBy[ip]++
				} else {
					denied++
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	time.Sleep(2 * time.Second)
	w.kill()
	t.Log("worker killed; traffic continues for 10 s")
	time.Sleep(10 * time.Second)
	startWorker(t, "nats://"+natsAddr, data, "--nats-nkey", key)
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("client saw %d allowed, %d denied", allowed, denied)
	if denied == 0 || allowed == 0 {
		t.Fatalf("traffic did not exercise both outcomes: %d allowed, %d denied", allowed, denied)
	}

	// Every decision reaches SQLite once the worker is back.
	var gotA, gotD int64
	waitFor(t, 20*time.Second, "analytics totals equal the decisions made", func() bool {
		q := url.Values{"from": {from.Format(time.RFC3339)}, "to": {time.Now().Add(time.Minute).UTC().Format(time.RFC3339)}, "step": {"1m"}}
		r := call(t, "GET", s.base+"/v1/analytics/timeseries?"+q.Encode(), tn.Key, nil)
		var ts struct {
			Points []struct{ Allowed, Denied int64 } `json:"points"`
		}
		if r.Status != 200 || json.Unmarshal(r.Raw, &ts) != nil {
			return false
		}
		gotA, gotD = 0, 0
		for _, p := range ts.Points {
			gotA += p.Allowed
			gotD += p.Denied
		}
		return gotA == int64(allowed) && gotD == int64(denied)
	})
	t.Logf("analytics: %d allowed, %d denied", gotA, gotD)

	// Bucket state made it to SQLite too: after a server restart no IP gets
	// more than its capacity plus what 5 per 60 s refills over the test.
	s.stop()
	s.restart(t)
	for i := 0; i < ips; i++ {
		ip := fmt.Sprintf("198.51.100.%d", i)
		for j := 0; j < 6; j++ {
			if c, _ := check(t, s, tn, ipCheck(ip, "/api/x")); c.Allowed {
				allowedBy[ip]++
			}
		}
		bound := 5 + int(time.Since(begin)/(12*time.Second))
		if allowedBy[ip] > bound {
			t.Errorf("%s: %d allowed over %s, more than 5 + refill = %d: state was lost", ip, allowedBy[ip], time.Since(begin).Round(time.Second), bound)
		}
	}
}
