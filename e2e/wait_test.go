package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"
)

var (
	waitsCancelledRe = regexp.MustCompile(`(?m)^sluice_waits_total\{outcome="cancelled"\} (\d+)`)
	waitsAdmittedRe  = regexp.MustCompile(`(?m)^sluice_waits_total\{outcome="admitted"\} (\d+)`)
)

type waitAnswer struct {
	Allowed  bool   `json:"allowed"`
	Reason   string `json:"reason"`
	WaitedMS int64  `json:"waited_ms"`
	Refused  string `json:"wait_refused"`
}

// Waiting with real processes: a limit of 5 a second, and 20 checks that
// may wait 6 s each sent through three servers, 30 ms apart, are all
// admitted within about 4 s, in the order they were sent (one per 200 ms
// once the burst of 5 is spent), none past its deadline; a 21st whose
// client disconnects while it waits at the owner is not admitted.
func TestWaitingAcrossServers(t *testing.T) {
	tp := startTopology(t, 3, nil)
	s1 := tp.servers[0]
	tn := createTenant(t, s1, "waiting")
	policyID := createPolicy(t, s1, tn, map[string]any{
		"name": "waitfast", "path": "/waitfast", "consistency": "exact",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 5, "period": "1s"}},
	})
	const ip = "198.51.100.77"
	owner, others := tp.ownerAndOthers(tn.ID + "/" + policyID + "/ip:" + ip)
	waitFor(t, 2*time.Second, "policy on every server", func() bool {
		for _, s := range tp.servers {
			if c, err := tryCheck(s, tn, map[string]any{"ip": "192.0.2.250", "path": "/waitfast", "peek": true}); err != nil || c.Policy != "waitfast" {
				return false
			}
		}
		return true
	})
	before := 0
	for _, s := range tp.servers {
		before += metricInt(s, waitsCancelledRe, 0)
	}

	post := func(ctx context.Context, s *server, wait string) (waitAnswer, error) {
		body, _ := json.Marshal(map[string]any{"ip": ip, "method": "GET", "path": "/waitfast", "wait": wait})
		req, _ := http.NewRequestWithContext(ctx, "POST", s.base+"/v1/check", bytesReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tn.Key)
		resp, err := httpClient.Do(req)
		if err != nil {
			return waitAnswer{}, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return waitAnswer{}, fmt.Errorf("status %d", resp.StatusCode)
		}
		var a waitAnswer
		return a, json.NewDecoder(resp.Body).Decode(&a)
	}

	const n, wait = 20, 6 * time.Second
	type result struct {
		a    waitAnswer
		err  error
		sent time.Time
		done time.Time
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	start := time.Now()
	leaving := make(chan error, 1)
	for i := range n {
		s := tp.servers[i%len(tp.servers)]
		results[i].sent = time.Now()
		wg.Go(func() {
			a, err := post(t.Context(), s, wait.String())
			results[i] = result{a: a, err: err, sent: results[i].sent, done: time.Now()}
		})
		if i == 9 {
			// One through a server that is not the owner, whose client
			// leaves after 300 ms, long before its turn.
			go func() {
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				defer cancel()
				_, err := post(ctx, others[0], wait.String())
				leaving <- err
			}()
		}
		time.Sleep(30 * time.Millisecond)
	}
	wg.Wait()
	took := time.Since(start)
	if err := <-leaving; err == nil {
		t.Fatal("the leaving client got an answer")
	}
	var last time.Time
	for i, r := range results {
		if r.err != nil || !r.a.Allowed {
			t.Fatalf("waiter %d: %+v %v", i, r.a, r.err)
		}
		if r.done.Sub(r.sent) > wait+500*time.Millisecond {
			t.Errorf("waiter %d answered %s after it was sent, past its wait of %s", i, r.done.Sub(r.sent), wait)
		}
		if r.done.Before(last) {
			t.Errorf("waiter %d admitted before the one sent before it (%s earlier)", i, last.Sub(r.done))
		}
		last = r.done
	}
	t.Logf("20 waiters through 3 servers (owner %s): all admitted in %s", owner.base, took)
	if took > 4500*time.Millisecond {
		t.Errorf("admitting 20 at 5 a second took %s, want about 3 s", took)
	}
	waitFor(t, 2*time.Second, "the leaving waiter counted as cancelled", func() bool {
		after := 0
		for _, s := range tp.servers {
			after += metricInt(s, waitsCancelledRe, 0)
		}
		return after == before+1
	})
	// The first took the burst at once; every other was admitted at the
	// owner after waiting, and nobody else was: the leaving one took
	// nothing.
	waited := 0
	for _, r := range results {
		if r.a.WaitedMS > 0 {
			waited++
		}
	}
	if got := metricInt(owner, waitsAdmittedRe, 0); got != waited || waited < 10 {
		t.Fatalf("the owner admitted %d waiters, and %d answers say they waited", got, waited)
	}
}
