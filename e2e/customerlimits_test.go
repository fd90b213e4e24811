package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
)

// customerSetup makes, through s1, a policy /metered whose pro tier counts
// perKey a day per key and perCustomer a day per customer, a customer and
// five keys of it, and waits until every server decides them with the
// customer. It answers the policy's id, the customer's id and the keys.
func customerSetup(t *testing.T, tp *topology, tn tenant, perKey, perCustomer int) (policyID, cus string, keys []string) {
	t.Helper()
	s1 := tp.servers[0]
	policyID = createPolicy(t, s1, tn, map[string]any{
		"name": "metered", "path": "/metered", "consistency": "exact",
		"tiers": map[string]any{"pro": []any{
			map[string]any{"name": "key", "algorithm": "fixed_window", "limit": perKey, "period": "24h"},
			map[string]any{"name": "org", "algorithm": "fixed_window", "limit": perCustomer, "period": "24h", "per": "customer"},
		}},
	})
	cus = mustStatus(t, call(t, "POST", s1.base+"/v1/customers", tn.Key, map[string]any{"external_id": "org_42", "name": "Org 42", "tier": "pro"}), 201).str("id")
	keys = make([]string, 5)
	for i := range keys {
		keys[i] = mustStatus(t, call(t, "POST", s1.base+"/v1/keys", tn.Key, map[string]any{"name": fmt.Sprintf("app %d", i), "tier": "pro", "customer_id": cus}), 201).str("key")
	}
	waitFor(t, 10*time.Second, "the keys and the policy on every server, customer placement on", func() bool {
		for _, s := range tp.servers {
			for _, k := range keys {
				r := call(t, "POST", s.base+"/v1/check", tn.Key, map[string]any{"api_key": k, "path": "/metered", "peek": true})
				if r.Status != 200 || len(r.Header.Values("Ratelimit")) == 0 || r.Body["customer"] == nil {
					return false
				}
			}
		}
		return true
	})
	return policyID, cus, keys
}

// A customer's limit over three real servers: 300 concurrent checks
// through five keys of one customer whose per-customer limit is 50 admit
// exactly 50, and the keys' own (per-key) windows together counted exactly
// the 50 admitted checks: none was charged for a check its customer's
// limit denied.
func TestClusterCustomerLimitExact(t *testing.T) {
	tp := startTopology(t, 3, nil)
	tn := createTenant(t, tp.servers[0], "customers")
	_, _, keys := customerSetup(t, tp, tn, 1000, 50)
	got, failed := spread(t, tp.servers, tn, 300, 60, func(i int) map[string]any {
		return map[string]any{"api_key": keys[i%5], "path": "/metered"}
	})
	if got != 50 || failed != 0 {
		t.Fatalf("%d allowed (%d failed) of 300 through five keys of one customer, want exactly 50", got, failed)
	}
	// Each key's own window, read by a peek on any server: what it took.
	keyLeft := regexp.MustCompile(`"metered\.key";r=(\d+)`)
	taken := 0
	for i, k := range keys {
		r := call(t, "POST", tp.servers[i%3].base+"/v1/check", tn.Key, map[string]any{"api_key": k, "path": "/metered", "peek": true})
		m := keyLeft.FindStringSubmatch(r.Header.Get("Ratelimit"))
		if r.Status != 200 || m == nil {
			t.Fatalf("peek of key %d: %d %s %q", i, r.Status, r.Raw, r.Header.Get("Ratelimit"))
		}
		left, _ := strconv.Atoi(m[1])
		taken += 1000 - left
	}
	if taken != 50 {
		t.Fatalf("the keys' own windows took %d in all, want the 50 admitted", taken)
	}
}

// The owner of a customer's partition killed (kill -9) under load through
// the customer's five keys: the others take its partitions over, checks
// are answered again within 3 s, and the customer's limit of 3000 holds
// within the bound of one bucket (the dead owner's unflushed interval).
// At about 1500 checks a second the kill comes while the customer's
// bucket still admits.
func TestClusterCustomerOwnerKilled(t *testing.T) {
	tp := startTopology(t, 3, nil)
	tn := createTenant(t, tp.servers[0], "customer-failover")
	policyID, cus, keys := customerSetup(t, tp, tn, 1_000_000, 3000)
	victim, live := tp.ownerAndOthers(string(bus.AppendCustomerBucketKey(nil, tn.ID, policyID, cus)))

	var allowed, failed, total atomic.Int64
	var lastFail atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				targets := tp.servers
				if isDone(victim) {
					targets = live
				}
				c, err := tryCheck(targets[(g+i)%len(targets)], tn, map[string]any{"api_key": keys[(g+i)%5], "path": "/metered"})
				total.Add(1)
				if err != nil {
					failed.Add(1)
					if now := time.Now().UnixNano(); now > lastFail.Load() {
						lastFail.Store(now)
					}
				} else if c.Allowed {
					allowed.Add(1)
				}
				time.Sleep(4 * time.Millisecond)
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	atKill := allowed.Load()
	victim.kill()
	killedAt := time.Now()
	took := tp.waitBalanced(10*time.Second, live...)
	time.Sleep(2 * time.Second)
	beforeStop := failed.Load()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("%d checks: %d allowed (%d before the kill), %d failed; partitions taken over in %s",
		total.Load(), allowed.Load(), atKill, failed.Load(), took.Round(time.Millisecond))
	answered := time.Duration(0)
	if lf := lastFail.Load(); lf > 0 {
		answered = max(time.Unix(0, lf).Sub(killedAt), 0)
	}
	if answered > 3*time.Second {
		t.Errorf("checks failed until %s after the kill, target 3s", answered.Round(time.Millisecond))
	}
	if failed.Load() != beforeStop {
		t.Errorf("checks kept failing after the hand-over: %d more", failed.Load()-beforeStop)
	}
	if a := allowed.Load(); a < 3000 || a > 3000+400 {
		t.Errorf("allowed %d; the customer's limit 3000 + the unflushed-state bound 400", a)
	}
}
