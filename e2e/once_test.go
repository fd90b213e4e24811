package e2e

// Every unit counted once, under the faults that make a message late,
// lost or repeated. Clients reserve an estimate and settle it with the
// amount really used, retrying an unavailable settle as the SDK does,
// against three servers while links between the servers stall past the
// forward timeout and deliver late (a loopback cluster whose forwarding
// connections go through stalling proxies), or while an owner is killed
// with kill -9, paused with SIGSTOP or cut off silently (a network lab).
// Each client keeps its own ledger: the units its answered reserves took
// and its answered settles moved, and, apart, what its unanswered ones may
// have moved. Afterwards every key's quota and its daily usage must equal
// its ledger: within what unanswered requests may have moved, and, where
// an owner was killed, paused or cut off, within what the documented loss
// bound lets that owner forget. A check, reserve or settle applied twice
// shows as units the ledger cannot explain.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const (
	onceKeys     = 10
	onceEstimate = 100
	onceCap      = 150
	// onceRetryFor is how long a client retries an unavailable settle.
	onceRetryFor = 20 * time.Second
)

// onceLedger is one key's client-side ledger.
type onceLedger struct {
	mu sync.Mutex
	// sure is what answered requests moved; maybeLo and maybeHi bound what
	// unanswered ones may have moved (maybeLo ≤ 0 ≤ maybeHi).
	sure, maybeLo, maybeHi int64
	// moves are the answered movements with their time, to bound what a
	// fault can make an owner forget.
	moves                                  []onceMove
	reserves, settles, retries, unanswered int
	// applied and maybeApplied count settles with a difference: answered,
	// and never answered.
	applied, maybeApplied int
}

type onceMove struct {
	at    time.Time
	units int64
}

func (l *onceLedger) add(at time.Time, units int64) {
	l.mu.Lock()
	l.sure += units
	l.moves = append(l.moves, onceMove{at, units})
	l.mu.Unlock()
}

func (l *onceLedger) maybe(units int64) {
	l.mu.Lock()
	l.maybeLo += min(units, 0)
	l.maybeHi += max(units, 0)
	l.unanswered++
	l.mu.Unlock()
}

// forgettable is what a fault at each of faults could make an owner forget
// of this key's answered movements: those in the loss window around it
// (docs/GUARANTEES.md: an owner forgets at most what it decided in the 1 s
// before it stopped deciding, which is within 1 s of a pause or a cut;
// usage counters flush every second; so 1.5 s either side of the fault).
func (l *onceLedger) forgettable(faults []time.Time) (lo, hi int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.moves {
		for _, f := range faults {
			if m.at.After(f.Add(-1500*time.Millisecond)) && m.at.Before(f.Add(1500*time.Millisecond)) {
				// Forgetting a charge lowers the count, a refund raises it.
				lo -= max(m.units, 0)
				hi -= min(m.units, 0)
				break
			}
		}
	}
	return lo, hi
}

// onceKey is a consumer key and its ledger.
type onceKey struct {
	id, key string
	ledger  onceLedger
}

// onceSetup makes a tenant with a month quota no client reaches, so that
// every reserve is allowed and every unit is the ledger's, and its keys.
func onceSetup(t *testing.T, servers []*server, name string) (tenant, []*onceKey) {
	t.Helper()
	s := servers[0]
	tn := createTenant(t, s, name)
	createPolicy(t, s, tn, map[string]any{"name": "llm", "path": "/llm", "consistency": "exact",
		"tiers": map[string]any{"default": []map[string]any{
			{"name": "monthly", "algorithm": "fixed_window", "limit": 1_000_000_000, "calendar": "month"}}}})
	var keys []*onceKey
	for i := range onceKeys {
		r := mustStatus(t, call(t, "POST", s.base+"/v1/keys", tn.Key, map[string]any{"name": fmt.Sprintf("k%d", i), "tier": "default"}), 201)
		keys = append(keys, &onceKey{id: r.str("id"), key: r.str("key")})
	}
	waitFor(t, 10*time.Second, "the policy and keys on every server", func() bool {
		for _, s := range servers {
			for _, k := range keys {
				c, err := tryCheck(s, tn, map[string]any{"api_key": k.key, "path": "/llm", "peek": true})
				if err != nil || c.Policy != "llm" || !c.Allowed {
					return false
				}
			}
		}
		return true
	})
	return tn, keys
}

var onceClient = &http.Client{Timeout: 10 * time.Second}

// post sends body to one server and answers the status and the decoded
// body; status 0 is no answer.
func oncePost(s *server, tn tenant, path string, body any) (int, map[string]any) {
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", s.base+path, bytesReader(data))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tn.Key)
	resp, err := onceClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// onceClients runs one client per key until stop closes: reserve the
// estimate on a random server, then settle it with a random amount up to
// the cap, retrying an unavailable or unanswered settle on random servers
// for onceRetryFor. It fails the test on any answer the ledger cannot
// account for (a settle refused as a conflict, an unknown reservation).
func onceClients(t *testing.T, servers func() []*server, tn tenant, keys []*onceKey, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 31))
			pick := func() *server { ss := servers(); return ss[rng.IntN(len(ss))] }
			for {
				select {
				case <-stop:
					return
				default:
				}
				k.ledger.mu.Lock()
				k.ledger.reserves++
				k.ledger.mu.Unlock()
				code, c := oncePost(pick(), tn, "/v1/check", map[string]any{"api_key": k.key, "path": "/llm",
					"reserve": onceEstimate, "reserve_cap": onceCap})
				rsv, _ := c["reservation"].(string)
				switch {
				case code == 200 && c["allowed"] == true && rsv != "":
					k.ledger.add(time.Now(), onceEstimate)
				case code == 200:
					t.Errorf("key %s: a reserve answered %v", k.id, c)
					return
				default:
					k.ledger.maybe(onceEstimate) // may have been taken, never recorded
					time.Sleep(50 * time.Millisecond)
					continue
				}
				actual := rng.Int64N(onceCap + 1)
				diff := actual - onceEstimate
				body := map[string]any{"reservation": rsv, "actual": actual}
				landed := false
				for deadline := time.Now().Add(onceRetryFor); time.Now().Before(deadline); {
					code, r := oncePost(pick(), tn, "/v1/settle", body)
					k.ledger.mu.Lock()
					k.ledger.settles++
					k.ledger.mu.Unlock()
					if code == 200 {
						if d, _ := r["difference"].(float64); int64(d) != diff {
							t.Errorf("key %s: settle %s answered difference %v, want %d", k.id, rsv, r["difference"], diff)
						}
						landed = true
						break
					}
					if code != 0 && code != http.StatusServiceUnavailable {
						t.Errorf("key %s: settle %s answered %d %v", k.id, rsv, code, r)
						return
					}
					k.ledger.mu.Lock()
					k.ledger.retries++
					k.ledger.mu.Unlock()
					time.Sleep(100 * time.Millisecond)
				}
				if landed {
					k.ledger.add(time.Now(), diff)
				} else {
					k.ledger.maybe(diff)
				}
				if diff != 0 {
					k.ledger.mu.Lock()
					if landed {
						k.ledger.applied++
					} else {
						k.ledger.maybeApplied++
					}
					k.ledger.mu.Unlock()
				}
			}
		})
	}
	return &wg
}

// onceCounted reads each key's month quota use and its units in the daily
// usage (yesterday to tomorrow, in UTC: the tenant's zone).
func onceCounted(t *testing.T, s *server, tn tenant, keys []*onceKey) (used, units map[string]int64) {
	t.Helper()
	used, units = map[string]int64{}, map[string]int64{}
	for _, k := range keys {
		r := mustStatus(t, call(t, "GET", s.base+"/v1/keys/"+k.id+"/usage", tn.Key, nil), 200)
		var u struct {
			Usage []struct {
				Limit string `json:"limit"`
				Used  int64  `json:"used"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(r.Raw, &u); err != nil {
			t.Fatalf("key usage: %v: %s", err, r.Raw)
		}
		for _, l := range u.Usage {
			if l.Limit == "monthly" {
				used[k.id] = l.Used
			}
		}
	}
	day := func(d int) string { return time.Now().UTC().AddDate(0, 0, d).Format("2006-01-02") }
	r := mustStatus(t, call(t, "GET", s.base+"/v1/usage?group=key&from="+day(-1)+"&to="+day(1), tn.Key, nil), 200)
	var h struct {
		Usage []struct {
			KeyID string `json:"key_id"`
			Units int64  `json:"units"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(r.Raw, &h); err != nil {
		t.Fatalf("usage: %v: %s", err, r.Raw)
	}
	for _, row := range h.Usage {
		units[row.KeyID] += row.Units
	}
	return used, units
}

// onceCheck holds every key's quota use and daily usage to its ledger,
// widened by what faults could make an owner forget, after waiting for
// the counts to settle.
func onceCheck(t *testing.T, s *server, tn tenant, keys []*onceKey, faults []time.Time) {
	t.Helper()
	var used, units map[string]int64
	// Usage reaches the worker within a couple of seconds; read until two
	// reads 2 s apart agree.
	for range 10 {
		time.Sleep(2 * time.Second)
		u2, n2 := onceCounted(t, s, tn, keys)
		if fmt.Sprint(u2, n2) == fmt.Sprint(used, units) {
			break
		}
		used, units = u2, n2
	}
	var reserves, settles, retries, unanswered int
	for _, k := range keys {
		l := &k.ledger
		flo, fhi := l.forgettable(faults)
		lo, hi := l.sure+l.maybeLo+flo, l.sure+l.maybeHi+fhi
		t.Logf("key %s: ledger %d (unanswered may move %+d..%+d, faults may forget %+d..%+d), quota used %d, daily usage %d; %d reserves, %d settle calls, %d retried",
			k.id, l.sure, l.maybeLo, l.maybeHi, flo, fhi, used[k.id], units[k.id], l.reserves, l.settles, l.retries)
		if u := used[k.id]; u < lo || u > hi {
			t.Errorf("key %s: the quota counted %d units, the ledger allows %d..%d: a unit was counted twice or lost past the bound", k.id, u, lo, hi)
		}
		if u := units[k.id]; u < lo || u > hi {
			t.Errorf("key %s: daily usage says %d units, the ledger allows %d..%d", k.id, u, lo, hi)
		}
		reserves, settles, retries, unanswered = reserves+l.reserves, settles+l.settles, retries+l.retries, unanswered+l.unanswered
	}
	t.Logf("in all: %d reserves, %d settle calls, %d retried, %d requests never answered", reserves, settles, retries, unanswered)
}

var (
	repeatsRe = regexp.MustCompile(`(?m)^sluice_forward_repeats_total (\d+)`)
	settlesRe = regexp.MustCompile(`(?m)^sluice_settles_applied_total (\d+)`)
)

// sumMetric sums a counter over the servers.
func sumMetric(t *testing.T, servers []*server, re *regexp.Regexp) int {
	n := 0
	for _, s := range servers {
		r := call(t, "GET", s.base+"/metrics", operatorToken, nil)
		if m := re.FindSubmatch(r.Raw); m != nil {
			v, _ := strconv.Atoi(string(m[1]))
			n += v
		}
	}
	return n
}

// forwardRepeats sums the servers' forwarded decisions answered as repeats.
func forwardRepeats(t *testing.T, servers []*server) int { return sumMetric(t, servers, repeatsRe) }

// The links between servers stall: one chunk in ten of every forwarding
// connection waits 2.3–2.8 s, past the 2 s forward timeout, and is then
// delivered. Forwards time out, are sent again, and their first copies
// arrive late; no partition changes hands (NATS is not delayed), so no
// fault may forget anything: every key's count must equal its ledger, up
// to what unanswered requests may have moved.
func TestCountedOnceOverStallingLinks(t *testing.T) {
	var stall atomic.Bool
	fc := startStallingCluster(t, &stall)
	servers := fc.plainServers()
	tn, keys := onceSetup(t, servers, "stalls")
	before := forwardRepeats(t, servers)
	appliedBefore := sumMetric(t, servers, settlesRe)
	stop := make(chan struct{})
	wg := onceClients(t, func() []*server { return servers }, tn, keys, stop)
	time.Sleep(2 * time.Second)
	stall.Store(true)
	time.Sleep(12 * time.Second)
	stall.Store(false)
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	repeats := forwardRepeats(t, servers) - before
	t.Logf("forwarded decisions answered as repeats: %d", repeats)
	if repeats == 0 {
		t.Error("no forward was sent again during the stalls: the test did not exercise a late answer")
	}
	// Count the settles the servers applied: every answered one once, an
	// unanswered one at most once, none twice.
	applied := sumMetric(t, servers, settlesRe) - appliedBefore
	var answered, unanswered int
	for _, k := range keys {
		answered, unanswered = answered+k.ledger.applied, unanswered+k.ledger.maybeApplied
	}
	t.Logf("settles with a difference: %d answered, %d never answered; the servers applied %d", answered, unanswered, applied)
	if applied < answered || applied > answered+unanswered {
		t.Errorf("the servers applied %d settles, want %d to %d: a settle was applied twice or not at all", applied, answered, answered+unanswered)
	}
	onceCheck(t, servers[0], tn, keys, nil)
}

// An owner killed with kill -9 (and started again), then one paused with
// SIGSTOP, then one cut off silently from NATS and the other servers,
// while the clients reserve and settle: each key's count equals its
// ledger within what unanswered requests may have moved and what each
// fault's owner may forget (its last second).
func TestCountedOnceUnderOwnerFaults(t *testing.T) {
	fc := startLabCluster(t)
	servers := fc.plainServers()
	tn, keys := onceSetup(t, servers, "faults")
	var mu sync.Mutex
	live := append([]*server(nil), servers...)
	alive := func() []*server { mu.Lock(); defer mu.Unlock(); return append([]*server(nil), live...) }
	setLive := func(ss []*server) { mu.Lock(); live = ss; mu.Unlock() }
	without := func(v *faultServer) []*server {
		var out []*server
		for _, s := range fc.servers {
			if s != v {
				out = append(out, s.server)
			}
		}
		return out
	}
	stop := make(chan struct{})
	wg := onceClients(t, alive, tn, keys, stop)
	var faults []time.Time
	time.Sleep(3 * time.Second)

	victim, n := fc.mostPartitions()
	setLive(without(victim))
	faults = append(faults, time.Now())
	victim.proc.kill()
	t.Logf("killed %s (owner of %d partitions) with kill -9", victim.name, n)
	time.Sleep(6 * time.Second)
	serverBin, _ := build(t)
	victim.proc = fc.run(victim.host, victim.name, serverBin, victim.args, victim.env...)
	victim.waitReady(t, 60*time.Second)
	setLive(servers)
	time.Sleep(4 * time.Second)

	victim, n = fc.mostPartitions()
	faults = append(faults, time.Now())
	if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Logf("paused %s (owner of %d partitions)", victim.name, n)
	time.Sleep(6 * time.Second)
	if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)

	victim, n = fc.mostPartitions()
	faults = append(faults, time.Now())
	fc.lab.cut(victim.host, netBus)
	t.Logf("cut %s (owner of %d partitions) off", victim.name, n)
	time.Sleep(8 * time.Second)
	fc.lab.heal(victim.host, netBus)
	time.Sleep(5 * time.Second)
	close(stop)
	wg.Wait()
	fc.waitServing(60 * time.Second)
	onceCheck(t, servers[0], tn, keys, faults)
}

// plainServers is the cluster's servers as the harness's server type.
func (fc *faultCluster) plainServers() []*server {
	var out []*server
	for _, s := range fc.servers {
		out = append(out, s.server)
	}
	return out
}
