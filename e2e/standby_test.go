package e2e

// The standby worker: two cmd/worker processes with their own SQLite files
// on one NATS, two servers. The active worker is killed with -9 under check
// load and a stream of config writes; the standby takes over, nothing
// acknowledged is lost, and a clean SIGTERM hands over faster.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/sqlitedb"
)

// haWorker is a cmd/worker with its own data directory and metrics address.
type haWorker struct {
	*proc
	data, metrics string
}

func startHAWorker(t *testing.T, natsURL, name string) *haWorker {
	t.Helper()
	w := &haWorker{data: t.TempDir(), metrics: freeAddr(t)}
	w.proc = startWorker(t, natsURL, w.data, "--metrics-addr", w.metrics, "--name", name)
	w.proc.name = name
	return w
}

func (w *haWorker) restart(t *testing.T, natsURL string) {
	t.Helper()
	w.proc = startWorker(t, natsURL, w.data, "--metrics-addr", w.metrics, "--name", w.proc.name)
}

var activeRe = regexp.MustCompile(`(?m)^sluice_worker_active (\d+)`)

// active reads the worker's role from its /metrics.
func (w *haWorker) active() bool {
	resp, err := http.Get("http://" + w.metrics + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := activeRe.FindSubmatch(b)
	return m != nil && string(m[1]) == "1"
}

// standing reports whether the worker runs as a caught-up standby.
func (w *haWorker) standing() bool {
	return strings.Contains(w.logs.String(), `"msg":"worker is standby"`)
}

// tryCall is call without failing the test: a request that gets no answer
// is an error.
func tryCall(method, url, token string, body any) (response, error) {
	var rd io.Reader
	if body != nil {
		data, _ := jsonMarshal(body)
		rd = bytesReader(data)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, url, rd)
	if err != nil {
		return response{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := response{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	_ = json.Unmarshal(raw, &r.Body)
	return r, nil
}

// keyWriter creates consumer keys in a loop, through both servers in turn,
// and records which were acknowledged.
type keyWriter struct {
	mu       sync.Mutex
	acked    []string
	ackedAt  []time.Time
	refused  int // clean 503 unavailable answers
	bad      []string
	stop     chan struct{}
	finished chan struct{}
}

func startKeyWriter(servers []*server, tn tenant) *keyWriter {
	kw := &keyWriter{stop: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(kw.finished)
		for i := 0; ; i++ {
			select {
			case <-kw.stop:
				return
			default:
			}
			s := servers[i%len(servers)]
			r, err := tryCall("POST", s.base+"/v1/keys", tn.Key, map[string]any{"name": fmt.Sprintf("k%d", i), "tier": "pro"})
			kw.mu.Lock()
			switch {
			case err != nil:
				kw.bad = append(kw.bad, fmt.Sprintf("key %d: no answer: %v", i, err))
			case r.Status == 201:
				kw.acked = append(kw.acked, r.str("id"))
				kw.ackedAt = append(kw.ackedAt, time.Now())
			case r.Status == 503 && r.errCode() == "unavailable":
				kw.refused++
			default:
				kw.bad = append(kw.bad, fmt.Sprintf("key %d: %d %s", i, r.Status, r.Raw))
			}
			kw.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return kw
}

func (kw *keyWriter) end() {
	close(kw.stop)
	<-kw.finished
}

// firstAckAfter is when the first write after t was acknowledged.
func (kw *keyWriter) firstAckAfter(t time.Time) (time.Time, bool) {
	kw.mu.Lock()
	defer kw.mu.Unlock()
	for _, at := range kw.ackedAt {
		if at.After(t) {
			return at, true
		}
	}
	return time.Time{}, false
}

// tableKeys reads each table's rows from a SQLite file, keyed by the
// table's first column(s) as text: what a comparison of two files needs.
func tableKeys(t *testing.T, path string) map[string]map[string]bool {
	t.Helper()
	db, err := sqlitedb.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]map[string]bool{}
	keyCols := map[string]string{
		"tenants": "id", "policies": "id", "consumer_keys": "id", "service_keys": "id", "users": "id",
		"blocks": "id", "buckets_live": "key", "settings": "key",
	}
	for table, col := range keyCols {
		rows, err := db.Query(`SELECT ` + col + ` FROM ` + table)
		if err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		out[table] = map[string]bool{}
		for rows.Next() {
			var k sql.NullString
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			out[table][k.String] = true
		}
		rows.Close()
	}
	return out
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if os.IsNotExist(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestHAStandbyWorker kills the active worker with -9 under check load and
// config writes: the standby is active within 5 s, every acknowledged key
// exists there, config writes work again, a limit consumed across the
// failover is exact after a server hydrates from the new active, and the
// dead worker's file holds nothing the new one lacks. Then a SIGTERM of the
// new active hands over back, faster.
func TestHAStandbyWorker(t *testing.T) {
	testStart := time.Now()
	tp := &topology{t: t, natsAddr: freeAddr(t), natsDir: t.TempDir()}
	tp.startNATS()
	w1 := startHAWorker(t, tp.natsURL(), "w1")
	waitFor(t, 30*time.Second, "the first worker is active", w1.active)
	w2 := startHAWorker(t, tp.natsURL(), "w2")
	waitFor(t, 30*time.Second, "the second worker stands by", w2.standing)
	if w2.active() {
		t.Fatal("both workers are active")
	}
	for i := range 2 {
		s := startServer(t, serverOpts{data: t.TempDir(), noWait: true, extra: []string{
			"--nats-url", tp.natsURL(), "--worker=external", "--node", fmt.Sprintf("s%d", i+1),
		}})
		tp.servers = append(tp.servers, s)
	}
	for _, s := range tp.servers {
		s.waitReady(t, 60*time.Second)
	}
	tp.waitBalanced(30 * time.Second)

	const limit = 100000
	tn := createTenant(t, tp.servers[0], "standby")
	createPolicy(t, tp.servers[0], tn, map[string]any{
		"name": "exact", "path": "/exact",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": limit, "period": "365d"}},
	})
	ip := "203.0.113.77"
	waitFor(t, 5*time.Second, "the policy on both servers", func() bool {
		for _, s := range tp.servers {
			if c, err := tryCheck(s, tn, map[string]any{"ip": "192.0.2.1", "path": "/exact", "peek": true}); err != nil || c.Limit != limit {
				return false
			}
		}
		return true
	})

	// Check load for one caller over both servers, and key creations.
	var allowed, failed atomic.Int64
	stopChecks := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stopChecks:
					return
				default:
				}
				c, err := tryCheck(tp.servers[(g+i)%2], tn, ipCheck(ip, "/exact"))
				if err != nil {
					failed.Add(1)
				} else if c.Allowed {
					allowed.Add(1)
				}
				time.Sleep(3 * time.Millisecond)
			}
		})
	}
	kw := startKeyWriter(tp.servers, tn)
	time.Sleep(2 * time.Second)

	w1.kill()
	killedAt := time.Now()
	took := waitFor(t, 20*time.Second, "the standby is active", w2.active)
	t.Logf("kill -9 of the active worker: the standby was active %s later", took.Round(time.Millisecond))
	waitFor(t, 15*time.Second, "a config write acknowledged after the kill", func() bool {
		_, ok := kw.firstAckAfter(killedAt)
		return ok
	})
	firstAck, _ := kw.firstAckAfter(killedAt)
	t.Logf("first config write acknowledged %s after the kill", firstAck.Sub(killedAt).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	kw.end()
	close(stopChecks)
	wg.Wait()

	kw.mu.Lock()
	acked, refused, bad := append([]string(nil), kw.acked...), kw.refused, kw.bad
	kw.mu.Unlock()
	t.Logf("config writes: %d acknowledged, %d answered 503 unavailable during the hand-over", len(acked), refused)
	if len(bad) > 0 {
		t.Errorf("config writes that got neither the answer nor a clean 503: %v", bad)
	}
	if took > 5*time.Second {
		t.Errorf("the standby took %s to become active, target 5s", took)
	}
	if failed.Load() > 0 {
		t.Errorf("%d checks failed while the worker changed", failed.Load())
	}

	// Every acknowledged key is on the new active, through both servers.
	for _, s := range tp.servers {
		r := mustStatus(t, call(t, "GET", s.base+"/v1/keys", tn.Key, nil), 200)
		have := map[string]bool{}
		for _, k := range r.Body["keys"].([]any) {
			have[k.(map[string]any)["id"].(string)] = true
		}
		for _, id := range acked {
			if !have[id] {
				t.Errorf("acknowledged key %s is missing on the new active worker", id)
			}
		}
	}

	// The dead worker's file as it was left, for the comparison below.
	deadCopy := filepath.Join(t.TempDir(), "dead.db")
	copyFile(t, filepath.Join(w1.data, "sluice.db"), deadCopy)
	copyFile(t, filepath.Join(w1.data, "sluice.db-wal"), deadCopy+"-wal")

	// Bucket state: both servers stop (publishing every pending state and
	// waiting for the worker's commit); one starts again and hydrates from
	// the new active. What remains is exactly the limit less what was
	// admitted.
	for _, s := range tp.servers {
		s.stop()
	}
	s1 := tp.servers[0]
	s1.restart(t)
	var c checkResult
	waitFor(t, 20*time.Second, "the restarted server answers", func() bool {
		var err error
		c, err = tryCheck(s1, tn, map[string]any{"ip": ip, "path": "/exact", "peek": true})
		return err == nil
	})
	t.Logf("limit %d: %d admitted across the failover, %d remaining after a restart hydrated from the new active", limit, allowed.Load(), c.Remaining)
	// A peek answers as a check would: its remaining counts itself.
	if want := limit - allowed.Load() - 1; c.Remaining != want {
		t.Errorf("remaining %d after hydration, want %d (limit %d - %d admitted - the peek itself)", c.Remaining, want, limit, allowed.Load())
	}
	if allowed.Load() < 1000 {
		t.Errorf("only %d checks admitted: the load did not run", allowed.Load())
	}
	// Decision counters too: the dead worker's unacknowledged counter
	// batches were committed by the new active exactly once.
	var counted, denied int64
	waitFor(t, 30*time.Second, "analytics count every decision", func() bool {
		counted, denied = analyticsTotals(t, s1, tn, testStart.Add(-time.Minute))
		return counted >= allowed.Load()
	})
	t.Logf("analytics: %d allowed, %d denied; the clients saw %d allowed", counted, denied, allowed.Load())
	if counted != allowed.Load() || denied != 0 {
		t.Errorf("analytics count %d allowed and %d denied, want %d and 0: a counter batch was lost or counted twice across the failover", counted, denied, allowed.Load())
	}

	// A clean SIGTERM of the new active hands over to the first worker,
	// back as a standby (it caught up from the log), faster.
	w1.restart(t, tp.natsURL())
	waitFor(t, 30*time.Second, "the first worker stands by again", w1.standing)
	if w1.active() {
		t.Fatal("both workers are active")
	}
	_ = w2.cmd.Process.Signal(syscall.SIGTERM)
	termAt := time.Now()
	tookTerm := waitFor(t, 20*time.Second, "the first worker is active again", w1.active)
	t.Logf("SIGTERM of the active worker: the standby was active %s later", tookTerm.Round(time.Millisecond))
	select {
	case <-w2.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not exit after SIGTERM")
	}
	r := mustStatus(t, call(t, "POST", s1.base+"/v1/keys", tn.Key, map[string]any{"name": "after", "tier": "pro"}), 201)
	t.Logf("config write after the SIGTERM hand-over acknowledged %s after the signal", time.Since(termAt).Round(time.Millisecond))
	acked = append(acked, r.str("id"))
	if tookTerm >= took {
		t.Errorf("a SIGTERM hand-over took %s, no faster than a kill -9's %s", tookTerm, took)
	}
	s1.stop()
	w1.stop()

	// The files: the dead worker's holds nothing the new active's lacks,
	// and every acknowledged key is in both live files.
	dead := tableKeys(t, deadCopy)
	second := tableKeys(t, filepath.Join(w2.data, "sluice.db"))
	first := tableKeys(t, filepath.Join(w1.data, "sluice.db"))
	tables := make([]string, 0, len(dead))
	for tb := range dead {
		tables = append(tables, tb)
	}
	sort.Strings(tables)
	for _, tb := range tables {
		t.Logf("%-14s rows: dead worker %d, new active %d, old worker after catching up %d", tb, len(dead[tb]), len(second[tb]), len(first[tb]))
		for k := range dead[tb] {
			if !second[tb][k] {
				t.Errorf("table %s: %q is in the dead worker's file but not in the new active's", tb, k)
			}
		}
		for k := range second[tb] {
			if !first[tb][k] {
				t.Errorf("table %s: %q is in the new active's file but not in the old worker's, which caught up from the log", tb, k)
			}
		}
	}
	for _, id := range acked[:len(acked)-1] {
		if !second["consumer_keys"][id] {
			t.Errorf("acknowledged key %s is not in the new active's file", id)
		}
	}
	for _, id := range acked {
		if !first["consumer_keys"][id] {
			t.Errorf("acknowledged key %s is not in the first worker's file", id)
		}
	}
}

// cmd/worker's standby settings: flags, their SLUICE_* twins (the flag
// winning), and refusals that name the setting.
func TestHAWorkerFlags(t *testing.T) {
	_, worker := build(t)
	for _, tc := range []struct {
		args []string
		env  string
		ok   bool
		name string // named in the refusal
	}{
		{[]string{"--lease-ttl", "5s", "--name", "w-a"}, "", true, ""},
		{nil, "SLUICE_WORKER_LEASE_TTL=2s", true, ""},
		{[]string{"--lease-ttl", "4s"}, "SLUICE_WORKER_LEASE_TTL=1ms", true, ""},
		{[]string{"--ha=false"}, "", true, ""},
		{nil, "SLUICE_HA=false", true, ""},
		{[]string{"--lease-ttl", "100ms"}, "", false, "lease-ttl"},
		{[]string{"--lease-ttl", "2m"}, "", false, "lease-ttl"},
		{nil, "SLUICE_WORKER_LEASE_TTL=soon", false, "SLUICE_WORKER_LEASE_TTL"},
		{nil, "SLUICE_HA=maybe", false, "SLUICE_HA"},
		{nil, "SLUICE_OPERATOR_TOKEN=op_short", false, "SLUICE_OPERATOR_TOKEN"},
	} {
		args := append([]string{"--nats-url", "nats://127.0.0.1:4222", "--data", t.TempDir()}, tc.args...)
		cmd := exec.Command(worker, append(args, "--check-config")...)
		cmd.Env = append(os.Environ(), tc.env)
		out, err := cmd.CombinedOutput()
		if ok := err == nil && strings.Contains(string(out), "configuration ok"); ok != tc.ok {
			t.Errorf("%v %s: accepted %v, want %v\n%s", tc.args, tc.env, ok, tc.ok, out)
		}
		if !tc.ok && !strings.Contains(string(out), tc.name) {
			t.Errorf("%v %s: the refusal does not name %s: %s", tc.args, tc.env, tc.name, out)
		}
	}
}
