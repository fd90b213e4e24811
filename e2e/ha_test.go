package e2e

// High availability: node names that cannot collide, and Sluice's JetStream
// state on a real three-node NATS cluster that loses a node under load.
// Run alone with: go test ./e2e -run TestHA

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
)

// A second server started with a live server's --node refuses to start,
// naming the node and the process holding it, and the running server keeps
// every partition and answers every check.
func TestHANodeNameTaken(t *testing.T) {
	tp := startTopology(t, 1, nil)
	s1 := tp.servers[0]
	tn := createTenant(t, s1, "names")
	createPolicy(t, s1, tn, limitPolicy("exact", "exact", 100))

	dup := startServer(t, serverOpts{data: t.TempDir(), noWait: true, extra: []string{
		"--nats-url", tp.natsURL(), "--worker=external", "--node", "s1",
	}})
	select {
	case <-dup.done:
	case <-time.After(45 * time.Second):
		t.Fatalf("a second server under the name s1 is still running:\n%s", tail(dup.logs.String(), 20))
	}
	logs := dup.logs.String()
	if code := dup.cmd.ProcessState.ExitCode(); code == 0 {
		t.Fatalf("the second s1 exited with 0:\n%s", tail(logs, 20))
	}
	holder := fmt.Sprintf("pid %d", s1.cmd.Process.Pid)
	if !strings.Contains(logs, `node name "s1" is held by another live server`) || !strings.Contains(logs, holder) {
		t.Fatalf("the refusal does not name the node and its holder (%s):\n%s", holder, tail(logs, 20))
	}
	t.Logf("refused: %s", lastLine(logs, "sluice:"))
	if n := owned(s1); n != bus.Partitions {
		t.Fatalf("the running s1 owns %d partitions, want %d", n, bus.Partitions)
	}
	allowed, failed := spread(t, []*server{s1}, tn, 150, 20, func(int) map[string]any { return ipCheck("198.51.100.7", "/exact") })
	if allowed != 100 || failed != 0 {
		t.Fatalf("after the refused start: %d allowed, %d failed of 150, want 100 and 0", allowed, failed)
	}
}

func lastLine(logs, prefix string) string {
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], prefix) {
			return lines[i]
		}
	}
	return ""
}

// Three servers started without --node (one host, so one host name) get
// names of their own, share the partitions and decide exactly.
func TestHADefaultNodeNames(t *testing.T) {
	tp := &topology{t: t, natsAddr: freeAddr(t), natsDir: t.TempDir(), data: t.TempDir()}
	tp.startNATS()
	tp.worker = startWorker(t, tp.natsURL(), tp.data)
	for range 3 {
		tp.servers = append(tp.servers, startServer(t, serverOpts{data: t.TempDir(), noWait: true, extra: []string{
			"--nats-url", tp.natsURL(), "--worker=external", "--node", "",
		}}))
	}
	for _, s := range tp.servers {
		s.waitReady(t, 60*time.Second)
	}
	took := tp.waitBalanced(30 * time.Second)
	names := map[string]bool{}
	for _, node := range tp.partitionOwners() {
		names[node] = true
	}
	if len(names) != 3 {
		t.Fatalf("partitions are leased to %d names, want 3: %v", len(names), names)
	}
	t.Logf("three servers, default names %v, balanced in %s", keys(names), took.Round(time.Millisecond))
	tn := createTenant(t, tp.servers[0], "defaults")
	createPolicy(t, tp.servers[0], tn, limitPolicy("exact", "exact", 50))
	waitFor(t, 2*time.Second, "policy on every server", func() bool {
		for _, s := range tp.servers {
			if c, err := tryCheck(s, tn, map[string]any{"ip": "192.0.2.250", "path": "/exact", "peek": true}); err != nil || c.Policy != "exact" {
				return false
			}
		}
		return true
	})
	allowed, failed := spread(t, tp.servers, tn, 300, 30, func(int) map[string]any { return ipCheck("198.51.100.8", "/exact") })
	if allowed != 50 || failed != 0 {
		t.Fatalf("300 checks over three default-named servers: %d allowed, %d failed, want exactly 50 and 0", allowed, failed)
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// natsCluster is three nats-server processes on loopback, each with
// JetStream and its own store, configured as docs/NATS.md and
// deploy/nats-cluster.conf say: client TLS with certificates from one CA,
// the worker and server users with their role permissions, and routes with
// mutual TLS. Sluice's processes connect with the credentials of their role.
type natsCluster struct {
	t       testing.TB
	pki     testPKI
	conf    string // docs/NATS.md's configuration, paths pointed at pki
	names   []string
	clients []string // host:port
	routes  []string
	dirs    []string
	procs   []*proc
}

const haWorkerPass, haServerPass = "ha-worker-secret", "ha-server-secret"

func startNATSCluster(t testing.TB) *natsCluster {
	t.Helper()
	nc := &natsCluster{t: t, pki: newTestPKI(t)}
	nc.conf = docNATSConfig(t, nc.pki)
	for i := range 3 {
		nc.names = append(nc.names, fmt.Sprintf("n%d", i+1))
		nc.clients = append(nc.clients, freeAddr(t))
		nc.routes = append(nc.routes, freeAddr(t))
		nc.dirs = append(nc.dirs, t.TempDir())
	}
	for i := range 3 {
		nc.procs = append(nc.procs, nil)
		nc.start(i)
	}
	// JetStream answers once the cluster has elected its meta leader.
	waitFor(t, 60*time.Second, "JetStream on the NATS cluster", func() bool {
		for i, p := range nc.procs {
			select {
			case <-p.done:
				t.Fatalf("NATS node %s exited while the cluster formed (its logs follow)", nc.names[i])
			default:
			}
		}
		c, err := nc.connect()
		if err != nil {
			return false
		}
		defer c.Close()
		js, _ := jetstream.New(c)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = js.AccountInfo(ctx)
		return err == nil
	})
	// Nothing gets in without a credential.
	if c, err := nats.Connect(nc.url(), nats.RootCAs(nc.pki.ca), nats.ClientCert(nc.pki.clientCert, nc.pki.clientKey), nats.Timeout(5*time.Second)); err == nil {
		c.Close()
		t.Fatal("the NATS cluster accepted a client without credentials")
	}
	return nc
}

// start runs node i with deploy/nats-cluster.conf, its listen address and
// routes pointed at loopback and its include at docs/NATS.md's
// configuration with a store of the node's own.
func (nc *natsCluster) start(i int) {
	t := nc.t
	base, err := os.ReadFile(nc.conf)
	if err != nil {
		t.Fatal(err)
	}
	own := strings.ReplaceAll(string(base), filepath.Join(nc.pki.dir, "jetstream"), nc.dirs[i])
	ownPath := filepath.Join(nc.pki.dir, "nats-"+nc.names[i]+".conf")
	if err := os.WriteFile(ownPath, []byte(own), 0o600); err != nil {
		t.Fatal(err)
	}
	cluster, err := os.ReadFile("../deploy/nats-cluster.conf")
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for _, r := range nc.routes {
		routes = append(routes, "    nats-route://"+r)
	}
	conf := string(cluster)
	for from, to := range map[string]string{
		"include ./nats.conf":  "include ./nats-" + nc.names[i] + ".conf",
		"listen: 0.0.0.0:6222": "listen: " + nc.routes[i],
		"    nats-route://nats-1:6222\n    nats-route://nats-2:6222\n    nats-route://nats-3:6222": strings.Join(routes, "\n"),
		"/etc/nats/tls/nats-cert.pem": nc.pki.serverCert,
		"/etc/nats/tls/nats-key.pem":  nc.pki.serverKey,
		"/etc/nats/tls/ca.pem":        nc.pki.ca,
	} {
		if !strings.Contains(conf, from) {
			t.Fatalf("deploy/nats-cluster.conf does not say %q", from)
		}
		conf = strings.ReplaceAll(conf, from, to)
	}
	path := filepath.Join(nc.pki.dir, "nats-cluster-"+nc.names[i]+".conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(nc.clients[i])
	nc.procs[i] = start(t, "nats-"+nc.names[i], buildNATS(t), []string{"-c", path, "-a", host, "-p", port, "--name", nc.names[i]},
		"SLUICE_WORKER_NATS_PASSWORD="+haWorkerPass, "SLUICE_SERVER_NATS_PASSWORD="+haServerPass)
}

// url lists the three client URLs, as Sluice's processes are given them.
func (nc *natsCluster) url() string {
	urls := make([]string, len(nc.clients))
	for i, c := range nc.clients {
		urls[i] = "tls://" + c
	}
	return strings.Join(urls, ",")
}

// tlsArgs are the TLS flags of every Sluice process on the cluster.
func (nc *natsCluster) tlsArgs() []string {
	return []string{"--nats-ca", nc.pki.ca, "--nats-cert", nc.pki.clientCert, "--nats-key", nc.pki.clientKey}
}

// connect is the test's own connection, as the worker user (it makes and
// inspects streams).
func (nc *natsCluster) connect() (*nats.Conn, error) {
	return nats.Connect(nc.url(), nats.RootCAs(nc.pki.ca), nats.ClientCert(nc.pki.clientCert, nc.pki.clientKey),
		nats.UserInfo("sluice-worker", haWorkerPass), nats.Timeout(5*time.Second))
}

// streamInfo reads a stream's info from the cluster.
func (nc *natsCluster) streamInfo(name string) (*jetstream.StreamInfo, error) {
	c, err := nc.connect()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	js, _ := jetstream.New(c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return s.CachedInfo(), nil
}

// kill -9 of one NATS node of three, the one leading the partition-lease
// bucket (the worst case for checks), while two servers take checks and
// config writes: every stream and bucket has three replicas, no
// acknowledged config change is lost, the caller's total over both servers
// is exactly the limit, and checks fail only for a bounded time. The
// servers forward to each other directly over TLS, as in docker-compose.yml.
func TestHANATSNodeKilled(t *testing.T) {
	ncl := startNATSCluster(t)
	// A bucket and a stream made before with one replica, as an older
	// Sluice or a single NATS left them: the worker raises both.
	func() {
		c, err := ncl.connect()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		js, _ := jetstream.New(c)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.MembersBucket, History: 1, Storage: jetstream.MemoryStorage, Replicas: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: bus.CounterStream, Subjects: []string{bus.CounterSubjectPrefix + ">"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Replicas: 1}); err != nil {
			t.Fatal(err)
		}
	}()
	data := t.TempDir()
	_, wbin := build(t)
	worker := start(t, "worker", wbin, append([]string{"--nats-url", ncl.url(), "--data", data}, ncl.tlsArgs()...),
		"SLUICE_OPERATOR_TOKEN="+operatorToken, "SLUICE_NATS_USER=sluice-worker", "SLUICE_NATS_PASSWORD="+haWorkerPass)
	var servers []*server
	for i := range 2 {
		servers = append(servers, startServer(t, serverOpts{data: t.TempDir(), noWait: true,
			// Direct forwarding over TLS with the server's certificate,
			// as docker-compose.yml runs it.
			extra: append([]string{"--nats-url", ncl.url(), "--worker=external", "--node", fmt.Sprintf("s%d", i+1),
				"--cluster-listen", "127.0.0.1:0", "--cluster-listen-cert", ncl.pki.clientCert, "--cluster-listen-key", ncl.pki.clientKey}, ncl.tlsArgs()...),
			env: []string{"SLUICE_NATS_USER=sluice-server", "SLUICE_NATS_PASSWORD=" + haServerPass},
		}))
	}
	for _, s := range servers {
		s.waitReady(t, 60*time.Second)
	}
	tp := &topology{t: t, servers: servers}
	tp.waitBalanced(30 * time.Second)

	// Every stream and bucket Sluice made has three replicas.
	for _, name := range bus.SluiceStreams() {
		var info *jetstream.StreamInfo
		waitFor(t, 10*time.Second, name+" made", func() bool {
			var err error
			info, err = ncl.streamInfo(name)
			return err == nil
		})
		if info.Config.Replicas != 3 {
			t.Fatalf("%s has %d replicas, want 3 (the cluster's size)", name, info.Config.Replicas)
		}
	}
	for _, stream := range []string{bus.KVStream(bus.MembersBucket), bus.CounterStream} {
		if !strings.Contains(worker.logs.String(), `"stream":"`+stream+`","replicas":1,"want":3`) {
			t.Fatalf("the worker did not report %s's single replica:\n%s", stream, tail(worker.logs.String(), 30))
		}
	}

	const limit = 1500
	tn := createTenant(t, servers[0], "ha")
	// A token bucket over 30 days refills 0.015 tokens in this test: the
	// limit is what can pass, exactly.
	policy := limitPolicy("exact", "exact", limit)
	policy["tiers"] = map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": limit, "period": "720h"}}
	createPolicy(t, servers[0], tn, policy)
	waitFor(t, 2*time.Second, "policy on both servers", func() bool {
		for _, s := range servers {
			if c, err := tryCheck(s, tn, map[string]any{"ip": "192.0.2.250", "path": "/exact", "peek": true}); err != nil || c.Policy != "exact" {
				return false
			}
		}
		return true
	})
	ip := "203.0.113.77"

	var allowed, total atomic.Int64
	var failMu sync.Mutex
	var failures []time.Time
	var acked [][2]string // id and secret of consumer keys whose creation was acknowledged
	var ackMu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c, err := tryCheck(servers[(g+i)%2], tn, ipCheck(ip, "/exact"))
				total.Add(1)
				if err != nil {
					failMu.Lock()
					failures = append(failures, time.Now())
					failMu.Unlock()
				} else if c.Allowed {
					allowed.Add(1)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r := call(t, "POST", servers[i%2].base+"/v1/keys", tn.Key, map[string]any{"name": fmt.Sprintf("k%d", i), "tier": "pro"})
			if r.Status == 201 {
				ackMu.Lock()
				acked = append(acked, [2]string{r.str("id"), r.str("key")})
				ackMu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	time.Sleep(2 * time.Second)
	owners, err := ncl.streamInfo(bus.KVStream(bus.OwnersBucket))
	if err != nil || owners.Cluster == nil {
		t.Fatalf("lease bucket info: %v", err)
	}
	victim := -1
	for i, n := range ncl.names {
		if n == owners.Cluster.Leader {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatalf("lease bucket leader %q is not one of %v", owners.Cluster.Leader, ncl.names)
	}
	var led []string
	for _, name := range bus.SluiceStreams() {
		if info, err := ncl.streamInfo(name); err == nil && info.Cluster != nil && info.Cluster.Leader == ncl.names[victim] {
			led = append(led, name)
		}
	}
	before := allowed.Load()
	ncl.procs[victim].kill()
	killedAt := time.Now()
	t.Logf("killed NATS node %s, leader of %v, after %d allowed", ncl.names[victim], led, before)

	// Checks are answered again once JetStream has new leaders and the
	// servers hold their leases again: the load runs until no check has
	// failed for 5 s (at least 8 s after the kill, at most 60 s).
	lastFailure := func() time.Time {
		failMu.Lock()
		defer failMu.Unlock()
		var last time.Time
		for _, f := range failures {
			if f.After(last) {
				last = f
			}
		}
		return last
	}
	waitFor(t, 60*time.Second, "5 s without a failed check", func() bool {
		return time.Since(killedAt) > 8*time.Second && time.Since(lastFailure()) > 5*time.Second
	})
	close(stop)
	wg.Wait()

	var window time.Duration
	if lastFail := lastFailure(); !lastFail.IsZero() {
		window = lastFail.Sub(killedAt)
	}
	t.Logf("%d checks, %d failed; last failure %s after the kill", total.Load(), len(failures), window.Round(time.Millisecond))
	if window > 20*time.Second {
		t.Errorf("checks failed for %s after the kill, bound 20s", window.Round(time.Millisecond))
	}

	// Exactness: whatever is left of the limit, and not one more.
	for {
		a, failed := spread(t, servers, tn, 200, 20, func(int) map[string]any { return ipCheck(ip, "/exact") })
		if failed != 0 {
			t.Fatalf("%d checks failed after recovery", failed)
		}
		allowed.Add(a)
		if a == 0 {
			break
		}
	}
	// Never more than the limit. A check answered 503 may still have used a
	// token (the owner decided it, and its answer was lost with the node),
	// so the admitted count may fall short by at most the failed checks.
	nFailed := int64(len(failures))
	got := allowed.Load()
	if got > limit || got < limit-nFailed {
		t.Fatalf("allowed %d over both servers across the NATS node's death, want %d (or up to %d fewer, the failed checks)", got, limit, nFailed)
	}
	t.Logf("admitted %d of limit %d (%d checks failed)", got, limit, nFailed)

	// Every acknowledged config change is there, on both servers. The
	// worker may still be waiting for NATS to elect new leaders for its
	// lease and replication log (it answers 503 meanwhile): wait for it.
	ackMu.Lock()
	want := append([][2]string(nil), acked...)
	ackMu.Unlock()
	var lastRead string
	back, ok := poll(60*time.Second, func() bool {
		r := call(t, "GET", servers[0].base+"/v1/keys", tn.Key, nil)
		lastRead = fmt.Sprintf("%d %.200s", r.Status, r.Raw)
		return r.Status == 200
	})
	if !ok {
		// The process logs follow at the end, servers first; the worker's
		// last lines, which tell why, go here, before anything is cut.
		t.Fatalf("the worker answering after the NATS node's death: not within 60s; the last read answered %s; the worker's last lines:\n%s",
			lastRead, tail(worker.logs.String(), 25))
	}
	t.Logf("config reads answered again %s after the checks ended", back.Round(time.Millisecond))
	for _, s := range servers {
		r := mustStatus(t, call(t, "GET", s.base+"/v1/keys", tn.Key, nil), 200)
		have := map[string]bool{}
		if items, ok := r.Body["keys"].([]any); ok {
			for _, it := range items {
				if m, ok := it.(map[string]any); ok {
					id, _ := m["id"].(string)
					have[id] = true
				}
			}
		}
		for _, k := range want {
			if !have[k[0]] {
				t.Fatalf("key %s was acknowledged but %s does not list it (%d listed, %d acknowledged)", k[0], s.addr, len(have), len(want))
			}
			// And the server's own config view has it.
			c, err := tryCheck(s, tn, map[string]any{"api_key": k[1], "path": "/exact", "peek": true})
			if err != nil || c.Reason == "invalid_key" {
				t.Fatalf("key %s was acknowledged but %s refuses it: %+v %v", k[0], s.addr, c, err)
			}
		}
	}
	t.Logf("%d acknowledged key creations, all listed on both servers", len(want))
	// The server that does not own the caller's partition forwarded its
	// checks to the one that does, on their TLS connection.
	var batches, direct float64
	for _, s := range servers {
		st := forwardStats(t, s)
		batches += st.count
		direct += st.direct
	}
	if batches == 0 || direct < batches/2 {
		t.Errorf("%v of %v forward batches went direct", direct, batches)
	}
	t.Logf("%v of %v forward batches went direct (TLS)", direct, batches)
	// The role permissions allowed everything Sluice did through all this.
	for _, p := range []*proc{worker, servers[0].proc, servers[1].proc} {
		if l := strings.ToLower(p.logs.String()); strings.Contains(l, "permissions violation") || strings.Contains(l, "authorization violation") {
			t.Errorf("%s hit a NATS permission:\n%s", p.name, tail(p.logs.String(), 20))
		}
	}
}

// --nats-replicas and SLUICE_NATS_REPLICAS are taken by both binaries, the
// flag winning, and a count NATS cannot mean is refused before anything
// starts.
func TestHAReplicasFlags(t *testing.T) {
	server, worker := build(t)
	for _, tc := range []struct {
		args []string
		env  string
		ok   bool
	}{
		{[]string{"--nats-replicas", "3"}, "", true},
		{nil, "SLUICE_NATS_REPLICAS=1", true},
		{[]string{"--nats-replicas", "2"}, "SLUICE_NATS_REPLICAS=9", true},
		{[]string{"--nats-replicas", "9"}, "", false},
		{nil, "SLUICE_NATS_REPLICAS=-1", false},
		{nil, "SLUICE_NATS_REPLICAS=three", false},
	} {
		for name, bin := range map[string]string{"server": server, "worker": worker} {
			args := append([]string{"--nats-url", "nats://127.0.0.1:4222", "--data", t.TempDir()}, tc.args...)
			if name == "server" {
				args = append(args, "--worker=external")
			}
			cmd := exec.Command(bin, append(args, "--check-config")...)
			cmd.Env = append(os.Environ(), tc.env)
			out, err := cmd.CombinedOutput()
			if ok := err == nil && strings.Contains(string(out), "configuration ok"); ok != tc.ok {
				t.Errorf("%s %v %s: accepted %v, want %v\n%s", name, tc.args, tc.env, ok, tc.ok, out)
			}
			if !tc.ok && !strings.Contains(strings.ToLower(string(out)), "replicas") {
				t.Errorf("%s %v %s: the refusal does not name the setting: %s", name, tc.args, tc.env, out)
			}
		}
	}
}
