package e2e

// The cluster the fault tests run: three NATS nodes (JetStream, three
// replicas), one cmd/worker and three servers with --worker=external,
// either each in a network namespace of its own (netLab) or on loopback
// with every link through a delay proxy. And what the tests drive it with:
// a load of checks from many callers whose every answer is recorded, the
// peeks that compare servers, and the restart of every process.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
)

// The fault tests' load: 150 checks/s over 20 callers at a token bucket of
// 300 per hour, exact consistency.
const (
	faultRate    = 150.0
	faultCallers = 20
	faultLimit   = 300
	// faultDrain is what each caller takes at full speed before the load
	// starts: 4 s of load later, when the fault begins, a caller has about
	// 45 tokens left and runs out a few seconds into it. So the owner cut
	// off or paused has decided on buckets with tokens in them, whose states
	// it could not publish, and by the heal every caller is at zero, where
	// denials write nothing: an old state that comes back then stays, and
	// shows as tokens that should not be there.
	faultDrain = 225
)

// faultLossWindow is how long an owner's acknowledged decisions may go
// unpersisted and be forgotten by a fault: docs/GUARANTEES.md states it as
// the cluster's persist window (1 s), after which an owner that cannot
// persist stops deciding. The checker allows what one caller is admitted
// in that time at the test's rate, and holds every fault to it. When the
// documented bound changes, this changes with it.
const faultLossWindow = time.Second

// faultModel is the checker's model of the fault tests' limit: the loss
// bound is what one caller is admitted at the test's rate in
// faultLossWindow.
func faultModel() bucketModel {
	perCaller := faultRate / faultCallers
	return bucketModel{Limit: faultLimit, Period: time.Hour, Bound: int64(math.Ceil(perCaller * faultLossWindow.Seconds()))}
}

// natsNodeSpec is one nats-server's addresses.
type natsNodeSpec struct {
	name                   string
	client, monitor, route string // listen host:port
	clientAdv, routeAdv    string // advertised host:port, "" = the listen address
	routes                 []string
	dir                    string
}

// conf is the node's configuration: JetStream, a system account for the
// test's leader moves, and an application account every unauthenticated
// client lands in (Sluice's processes connect without credentials).
func (s natsNodeSpec) conf() string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %q\nlisten: %q\nhttp: %q\n", s.name, s.client, s.monitor)
	if s.clientAdv != "" {
		fmt.Fprintf(&b, "client_advertise: %q\n", s.clientAdv)
	}
	fmt.Fprintf(&b, "jetstream { store_dir: %q }\n", s.dir)
	b.WriteString(`accounts {
  SYS: { users: [{user: "sys", password: "sys"}] }
  APP: { jetstream: enabled, users: [{user: "app", password: "app"}] }
}
system_account: SYS
no_auth_user: "app"
`)
	fmt.Fprintf(&b, "cluster {\n  name: \"sluice-faults\"\n  listen: %q\n", s.route)
	if s.routeAdv != "" {
		fmt.Fprintf(&b, "  advertise: %q\n", s.routeAdv)
	}
	b.WriteString("  routes: [\n")
	for _, r := range s.routes {
		fmt.Fprintf(&b, "    \"nats-route://%s\"\n", r)
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

type faultNATS struct {
	spec natsNodeSpec
	host string // lab host
	proc *proc
}

// faultServer is a server of the fault cluster.
type faultServer struct {
	*server
	name string
	host string // lab host, "" on loopback
}

// faultCluster is the three NATS nodes, the worker and the three servers.
type faultCluster struct {
	t          *testing.T
	lab        *netLab // nil on loopback
	pki        testPKI
	nats       []*faultNATS
	sluiceNATS string // the NATS URLs Sluice's processes are given
	testNATS   string // the NATS URLs the test connects to
	worker     *proc
	workerArgs []string
	servers    []*faultServer
}

// run starts a process on a lab host, or on loopback.
func (fc *faultCluster) run(host, name, bin string, args []string, env ...string) *proc {
	if fc.lab != nil {
		return fc.lab.run(host, name, bin, args, env...)
	}
	return start(fc.t, name, bin, args, env...)
}

// startLabCluster starts the cluster in a network lab.
func startLabCluster(t *testing.T) *faultCluster {
	t.Helper()
	repeatFailures(t)
	lab := newNetLab(t)
	fc := &faultCluster{t: t, lab: lab, pki: newTestPKI(t)}
	lab.addHost("test", 254, netAPI, netBus)
	for i := range 3 {
		lab.addHost(fmt.Sprintf("n%d", i+1), 11+i, netBus, netRoute)
	}
	lab.addHost("w1", 21, netBus)
	for i := range 3 {
		lab.addHost(fmt.Sprintf("s%d", i+1), 31+i, netAPI, netBus)
	}
	lab.wire()
	var routes, urls []string
	for i := range 3 {
		routes = append(routes, lab.ip(netRoute, 11+i)+":6222")
		urls = append(urls, "nats://"+lab.ip(netBus, 11+i)+":4222")
	}
	fc.sluiceNATS, fc.testNATS = strings.Join(urls, ","), strings.Join(urls, ",")
	for i := range 3 {
		host := fmt.Sprintf("n%d", i+1)
		bus := lab.ip(netBus, 11+i)
		fc.nats = append(fc.nats, &faultNATS{host: host, spec: natsNodeSpec{
			name: host, client: bus + ":4222", monitor: bus + ":8222", route: lab.ip(netRoute, 11+i) + ":6222",
			routes: routes, dir: t.TempDir(),
		}})
	}
	fc.start(func(i int) (listen, advertise string) {
		return lab.ip(netBus, 31+i) + ":7422", ""
	}, func(i int) string { return lab.ip(netAPI, 31+i) + ":8080" })
	return fc
}

// start starts the NATS nodes, the worker and the servers, and waits until
// the servers share every partition.
func (fc *faultCluster) start(clusterListen func(i int) (listen, advertise string), httpAddr func(i int) string) {
	t := fc.t
	t.Helper()
	for _, n := range fc.nats {
		conf := filepath.Join(n.spec.dir, "nats.conf")
		if err := os.WriteFile(conf, []byte(n.spec.conf()), 0o600); err != nil {
			t.Fatal(err)
		}
		n.proc = fc.run(n.host, n.spec.name, buildNATS(t), []string{"-c", conf})
	}
	waitFor(t, 60*time.Second, "JetStream on the NATS cluster", func() bool {
		for _, n := range fc.nats {
			if isExited(n.proc) {
				t.Fatalf("NATS node %s exited while the cluster formed", n.spec.name)
			}
		}
		nc, err := nats.Connect(fc.testNATS, nats.Timeout(2*time.Second))
		if err != nil {
			return false
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = js.AccountInfo(ctx)
		return err == nil
	})
	serverBin, workerBin := build(t)
	fc.workerArgs = []string{"--nats-url", fc.sluiceNATS, "--data", t.TempDir(), "--name", "w1", "--nats-replicas", "3"}
	fc.worker = fc.run("w1", "worker", workerBin, fc.workerArgs, "SLUICE_OPERATOR_TOKEN="+operatorToken)
	for i := range 3 {
		name := fmt.Sprintf("s%d", i+1)
		listen, adv := clusterListen(i)
		addr := httpAddr(i)
		args := []string{"--addr", addr, "--data", t.TempDir(), "--node", name, "--nats-url", fc.sluiceNATS,
			"--worker=external", "--nats-replicas", "3", "--cluster-listen", listen}
		if adv != "" {
			args = append(args, "--cluster-advertise", adv)
		}
		if fc.lab != nil {
			args = append(args, "--cluster-listen-cert", fc.pki.clientCert, "--cluster-listen-key", fc.pki.clientKey)
		}
		s := &faultServer{name: name, server: &server{addr: addr, base: "http://" + addr, args: args,
			env: []string{"SLUICE_OPERATOR_TOKEN=" + operatorToken}}}
		if fc.lab != nil {
			s.host = name
		}
		s.data = args[3]
		s.proc = fc.run(s.host, name, serverBin, args, s.env...)
		fc.servers = append(fc.servers, s)
	}
	fc.waitServing(90 * time.Second)
}

// waitServing waits until every server is ready and the servers share the
// partitions.
func (fc *faultCluster) waitServing(d time.Duration) {
	fc.t.Helper()
	for _, s := range fc.servers {
		s.waitReady(fc.t, d)
	}
	tp := &topology{t: fc.t}
	for _, s := range fc.servers {
		tp.servers = append(tp.servers, s.server)
	}
	tp.waitBalanced(d)
}

func isExited(p *proc) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// mostPartitions is the server owning the most partitions.
func (fc *faultCluster) mostPartitions() (*faultServer, int) {
	var best *faultServer
	n := -1
	for _, s := range fc.servers {
		if o := owned(s.server); o > n {
			best, n = s, o
		}
	}
	return best, n
}

// setup makes a tenant with the fault tests' policy and waits until every
// server enforces it. It returns the tenant, the policy's path and the
// callers (fresh IPs).
func (fc *faultCluster) setup(name string) (tenant, string, []string) {
	return fc.setupWith(name, "exact")
}

// setupWith is setup with a policy of the given consistency ("exact" or
// "local"), named and matched by it: the path is "/" + consistency.
func (fc *faultCluster) setupWith(name, consistency string) (tenant, string, []string) {
	t := fc.t
	t.Helper()
	s1 := fc.servers[0].server
	tn := createTenant(t, s1, name)
	createPolicy(t, s1, tn, limitPolicy(consistency, consistency, faultLimit))
	waitFor(t, 10*time.Second, "the policy on every server", func() bool {
		for _, s := range fc.servers {
			if c, err := tryCheck(s.server, tn, map[string]any{"ip": "192.0.2.250", "path": "/" + consistency, "peek": true}); err != nil || c.Policy != consistency {
				return false
			}
		}
		return true
	})
	var callers []string
	for i := range faultCallers {
		callers = append(callers, fmt.Sprintf("198.18.0.%d", i+1))
	}
	return tn, "/" + consistency, callers
}

// drain sends perCaller checks for every caller at full speed, round-robin
// over the servers, recording them.
func (fc *faultCluster) drain(h *history, tn tenant, path string, callers []string, perCaller int) time.Duration {
	started := time.Now()
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range 30 {
		wg.Go(func() {
			for j := range jobs {
				s := fc.servers[j%len(fc.servers)]
				h.record(s.name, s.base, tn, callers[j%len(callers)], path, false)
			}
		})
	}
	for j := range perCaller * len(callers) {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	return time.Since(started)
}

// load sends checks at a steady rate, whatever the answers take: caller
// after caller, each caller's checks going to the servers in turn.
type load struct {
	stop     chan struct{}
	done     chan struct{}
	skipped  atomic.Int64
	inflight atomic.Int64
}

func (fc *faultCluster) startLoad(h *history, tn tenant, path string, callers []string) *load {
	ld := &load{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(ld.done)
		tick := time.NewTicker(time.Second * 1000 / time.Duration(1000*faultRate))
		defer tick.Stop()
		var wg sync.WaitGroup
		defer wg.Wait()
		n := len(callers)
		for i := 0; ; i++ {
			select {
			case <-ld.stop:
				return
			case <-tick.C:
			}
			caller := callers[i%n]
			s := fc.servers[(i%n+i/n)%len(fc.servers)]
			if ld.inflight.Load() >= 1500 {
				ld.skipped.Add(1)
				continue
			}
			ld.inflight.Add(1)
			wg.Go(func() {
				defer ld.inflight.Add(-1)
				h.record(s.name, s.base, tn, caller, path, false)
			})
		}
	}()
	return ld
}

func (ld *load) end() {
	close(ld.stop)
	<-ld.done
}

// settle keeps the load running after a heal until no check has failed for
// 3 s, at least min and at most max after the heal.
func settle(h *history, healAt time.Time, min, max time.Duration) {
	for {
		since := time.Since(healAt)
		if since >= max {
			return
		}
		if since >= min {
			var last time.Time
			for _, a := range h.all() {
				if !a.ok() && a.End.After(last) {
					last = a.End
				}
			}
			if time.Since(last) >= 3*time.Second {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// peekRound peeks every caller on every server, one server after the other
// for each caller, the callers at once.
func (fc *faultCluster) peekRound(h *history, tn tenant, path string, callers []string, servers []*faultServer) []answer {
	var mu sync.Mutex
	var out []answer
	var wg sync.WaitGroup
	for _, c := range callers {
		wg.Go(func() {
			for _, s := range servers {
				a := h.record(s.name, s.base, tn, c, path, true)
				mu.Lock()
				out = append(out, a)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// agreement peeks every caller on every server in rounds, until a round
// agrees or three rounds were taken, and checks them.
func (fc *faultCluster) agreement(h *history, tn tenant, path string, callers []string) []violation {
	var rounds [][]answer
	for range 3 {
		round := fc.peekRound(h, tn, path, callers, fc.servers)
		rounds = append(rounds, round)
		if len(checkAgreement([][]answer{round})) == 0 && allAgree(round) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	fc.t.Logf("after the heal, %d round(s) of peeks on every server; remaining per caller: %s", len(rounds), remainingList(rounds[len(rounds)-1], callers))
	return checkAgreement(rounds)
}

// remainingList is each caller's remaining in a round of peeks, the
// servers' answers separated by slashes where they differ.
func remainingList(round []answer, callers []string) string {
	by := map[string][]string{}
	for _, a := range round {
		v := fmt.Sprint(a.Remaining)
		if !a.ok() {
			v = fmt.Sprintf("(%d)", a.Status)
		}
		if vs := by[a.Caller]; len(vs) == 0 || vs[len(vs)-1] != v {
			by[a.Caller] = append(vs, v)
		}
	}
	var out []string
	for _, c := range callers {
		out = append(out, strings.Join(by[c], "/"))
	}
	return "[" + strings.Join(out, " ") + "]"
}

func allAgree(round []answer) bool {
	by := map[string][]answer{}
	for _, a := range round {
		by[a.Caller] = append(by[a.Caller], a)
	}
	for _, as := range by {
		if spreadOf(as) != 0 {
			return false
		}
	}
	return true
}

// stopProc sends SIGTERM and waits up to 30 s for a clean exit.
func stopProc(p *proc) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.kill()
		return fmt.Errorf("%s did not exit within 30 s of SIGTERM", p.name)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("%s exited with %d after SIGTERM:\n%s", p.name, code, tail(p.logs.String(), 20))
	}
	return nil
}

// restartAll stops every server (SIGTERM, at once), then the worker, and
// starts them again on their data; it returns once the servers share the
// partitions again.
func (fc *faultCluster) restartAll() {
	t := fc.t
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(fc.servers))
	for i, s := range fc.servers {
		wg.Go(func() { errs[i] = stopProc(s.proc) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			failf(t, "restart: %v", err)
		}
	}
	if err := stopProc(fc.worker); err != nil {
		failf(t, "restart: %v", err)
	}
	serverBin, workerBin := build(t)
	fc.worker = fc.run("w1", "worker", workerBin, fc.workerArgs, "SLUICE_OPERATOR_TOKEN="+operatorToken)
	for _, s := range fc.servers {
		s.proc = fc.run(s.host, s.name, serverBin, s.args, s.env...)
	}
	fc.waitServing(90 * time.Second)
}

// durability peeks every caller on one server, restarts every process, and
// peeks every caller on every server again.
func (fc *faultCluster) durability(h *history, tn tenant, path string, callers []string) []violation {
	// A clean stop waits for the worker to commit what the server holds,
	// so restart once the worker answers again (after a fault in NATS its
	// lease and log may take a while to have leaders).
	// JetStream may elect again a while after a heal, so the worker must
	// have answered for 5 s in a row.
	var since time.Time
	waitFor(fc.t, 90*time.Second, "the worker to answer config reads for 5 s", func() bool {
		if !fc.workerAnswers(tn) {
			since = time.Time{}
			return false
		}
		if since.IsZero() {
			since = time.Now()
		}
		return time.Since(since) >= 5*time.Second
	})
	// NATS itself may still move stream leaders 10-15 s after a heal (the
	// node that was cut off comes back with higher Raft terms), and checks
	// wait 2 s for an owner meanwhile: peek again until every peek of the
	// round is answered, as after the restart below. Under the whole
	// suite's load the worker lost its lease to such an election after it
	// had answered config reads for 5 s, and takeovers could not load for
	// over 15 s (2026-11-29), so the wait is 45 s.
	before := fc.peekRound(h, tn, path, callers, fc.servers[:1])
	for deadline := time.Now().Add(45 * time.Second); time.Now().Before(deadline) && anyFailed(before); {
		time.Sleep(500 * time.Millisecond)
		before = fc.peekRound(h, tn, path, callers, fc.servers[:1])
	}
	fc.restartAll()
	// Just after a restart a partition can still be between owners (the
	// check waits 2 s, then answers 503): peek again, for up to 30 s, until
	// every peek is answered. A wrong answer is never retried away: only
	// rounds with a failed peek are repeated, and the last is checked.
	after := fc.peekRound(h, tn, path, callers, fc.servers)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && anyFailed(after); {
		time.Sleep(500 * time.Millisecond)
		after = fc.peekRound(h, tn, path, callers, fc.servers)
	}
	fc.t.Logf("remaining per caller before every process restarted: %s, after: %s", remainingList(before, callers), remainingList(after, callers))
	return checkDurable(before, after, faultModel())
}

func anyFailed(as []answer) bool {
	for _, a := range as {
		if !a.ok() {
			return true
		}
	}
	return false
}

// workerAnswers reports whether every server gets an answer from the
// worker to a config read.
func (fc *faultCluster) workerAnswers(tn tenant) bool {
	client := &http.Client{Timeout: 5 * time.Second}
	for _, s := range fc.servers {
		req, _ := http.NewRequest("GET", s.base+"/v1/policies", nil)
		req.Header.Set("Authorization", "Bearer "+tn.Key)
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false
		}
	}
	return true
}

// readyLog polls a server's /readyz.
type readyLog struct {
	mu     sync.Mutex
	at     []time.Time
	status []int
	stop   chan struct{}
	done   chan struct{}
}

func pollReady(base string, every time.Duration) *readyLog {
	rl := &readyLog{stop: make(chan struct{}), done: make(chan struct{})}
	client := &http.Client{Timeout: time.Second}
	go func() {
		defer close(rl.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			code := 0
			at := time.Now()
			if resp, err := client.Get(base + "/readyz"); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
			}
			rl.mu.Lock()
			rl.at, rl.status = append(rl.at, at), append(rl.status, code)
			rl.mu.Unlock()
			select {
			case <-rl.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return rl
}

func (rl *readyLog) end() {
	close(rl.stop)
	<-rl.done
}

// first is the first poll at or after from whose answer is (want) or is
// not (!want) 200.
func (rl *readyLog) first(from time.Time, ready bool) (time.Time, bool) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	for i, at := range rl.at {
		if !at.Before(from) && (rl.status[i] == 200) == ready {
			return at, true
		}
	}
	return time.Time{}, false
}

// counts is how many polls between from and to answered 200 and not.
func (rl *readyLog) counts(from, to time.Time) (ready, not int) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	for i, at := range rl.at {
		if at.Before(from) || at.After(to) {
			continue
		}
		if rl.status[i] == 200 {
			ready++
		} else {
			not++
		}
	}
	return
}

// report logs a fault test's figures: each server's failure windows
// relative to the fault, its recovery after the heal, and the callers
// closest to their bound; and it fails the test on every violation found.
func report(t *testing.T, fault, heal time.Time, answers []answer, violations []violation) {
	t.Helper()
	reportModel(t, faultModel(), fault, heal, answers, violations)
}

// reportModel is report with the admitted bound of m.
func reportModel(t *testing.T, m bucketModel, fault, heal time.Time, answers []answer, violations []violation) {
	t.Helper()
	rel := func(x time.Time) string { return fmt.Sprintf("%+.1fs", x.Sub(fault).Seconds()) }
	var total, failed int
	perServer := map[string][2]int{}
	for _, a := range answers {
		if a.Peek {
			continue
		}
		total++
		c := perServer[a.Server]
		c[0]++
		if !a.ok() {
			failed++
			c[1]++
		}
		perServer[a.Server] = c
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d checks, %d not answered 200 (times relative to the fault; the heal at %s)\n", total, failed, rel(heal))
	fmt.Fprintf(&b, "%-6s %8s %8s  %s\n", "server", "checks", "failed", "windows without answers (from, to, length, failed checks, first error)")
	var names []string
	for s := range perServer {
		names = append(names, s)
	}
	sort.Strings(names)
	windows := failureWindows(answers)
	for _, s := range names {
		var ws []string
		for _, w := range windows {
			if w.Server == s {
				ws = append(ws, fmt.Sprintf("[%s, %s] %.1fs %d (%s)", rel(w.From), rel(w.To), w.To.Sub(w.From).Seconds(), w.Failed, w.FirstError))
			}
		}
		if len(ws) == 0 {
			ws = []string{"none"}
		}
		fmt.Fprintf(&b, "%-6s %8d %8d  %s\n", s, perServer[s][0], perServer[s][1], strings.Join(ws, "; "))
	}
	for _, s := range names {
		rec := time.Duration(0)
		for _, w := range windows {
			if w.Server == s && w.To.After(heal) {
				rec = w.To.Sub(heal)
			}
		}
		fmt.Fprintf(&b, "%s: every check answered again %.1fs after the heal\n", s, rec.Seconds())
	}
	_, stats := checkAdmitted(answers, m)
	fmt.Fprintf(&b, "admitted vs bound (limit %d + refill + bound %d), worst callers:\n", m.Limit, m.Bound)
	for i, st := range stats {
		if i == 3 {
			break
		}
		fmt.Fprintf(&b, "  %s: %d admitted, bound %.1f (%d answers, %d failed)\n", st.Caller, st.Admitted, st.Bound, st.Answers, st.Failed)
	}
	t.Log("\n" + b.String())
	byKind := map[string][]violation{}
	for _, v := range violations {
		byKind[v.Kind] = append(byKind[v.Kind], v)
	}
	for _, kind := range []string{"admitted", "remaining", "agreement", "durability"} {
		vs := byKind[kind]
		if len(vs) == 0 {
			continue
		}
		var lines []string
		for i, v := range vs {
			if i == 5 {
				lines = append(lines, fmt.Sprintf("… and %d more", len(vs)-5))
				break
			}
			lines = append(lines, "  "+v.String())
		}
		failf(t, "history: %d callers break the %s check:\n%s", len(vs), kind, strings.Join(lines, "\n"))
	}
}

// historyViolations runs the admitted and remaining checks on a history.
func historyViolations(answers []answer) []violation {
	m := faultModel()
	v, _ := checkAdmitted(answers, m)
	return append(v, checkRemaining(answers, m)...)
}

// windowsOf is a server's failure windows.
func windowsOf(answers []answer, server string) []window {
	var out []window
	for _, w := range failureWindows(answers) {
		if w.Server == server {
			out = append(out, w)
		}
	}
	return out
}

// delayProxy is a TCP proxy that delays what it carries, in each direction
// on its own: every chunk read is written 50 ± 20 ms later, and about one
// chunk in 20 a further 200–300 ms later, in order (a late chunk holds up
// the ones behind it, as a retransmitted segment does).
type delayProxy struct {
	addr   string
	target string
	ln     net.Listener
	slow   *atomic.Bool // delay only while set
	delay  func(*rand.Rand) time.Duration
	mu     sync.Mutex
	conns  []net.Conn
}

func newDelayProxy(t testing.TB, target string, slow *atomic.Bool) *delayProxy {
	t.Helper()
	return newDelayProxyWith(t, target, slow, linkDelay)
}

// newDelayProxyWith is a delay proxy whose chunks wait delay each while slow is set.
func newDelayProxyWith(t testing.TB, target string, slow *atomic.Bool, delay func(*rand.Rand) time.Duration) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{addr: ln.Addr().String(), target: target, ln: ln, slow: slow, delay: delay}
	t.Cleanup(p.close)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go delayCopy(u, c, p.slow, p.delay)
			go delayCopy(c, u, p.slow, p.delay)
		}
	}()
	return p
}

func (p *delayProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// linkDelay is one chunk's delay: 50 ± 20 ms, and for 5 % of chunks a
// further 200–300 ms.
func linkDelay(r *rand.Rand) time.Duration {
	d := 30*time.Millisecond + time.Duration(r.Int64N(int64(40*time.Millisecond)))
	if r.IntN(100) < 5 {
		d += 200*time.Millisecond + time.Duration(r.Int64N(int64(100*time.Millisecond)))
	}
	return d
}

// delayCopy copies src to dst, each chunk delayed by delay while slow is
// set, and none overtaking another.
func delayCopy(dst, src net.Conn, slow *atomic.Bool, delay func(*rand.Rand) time.Duration) {
	type chunk struct {
		due  time.Time
		data []byte
	}
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x5107))
		var last time.Time
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				due := time.Now()
				if slow.Load() {
					due = due.Add(delay(r))
				}
				if due.Before(last) {
					due = last
				}
				last = due
				q <- chunk{due: due, data: buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.due))
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
	for range q {
	}
}

// startSlowCluster starts the cluster on loopback with every link through a
// delay proxy: servers and the worker to NATS, NATS routes, and the
// servers' direct forwarding connections. NATS advertises the proxies, so a
// client that moves to another node goes through a proxy too. The proxies
// delay while slow is set.
func startSlowCluster(t *testing.T, slow *atomic.Bool) *faultCluster {
	t.Helper()
	repeatFailures(t)
	fc := &faultCluster{t: t, pki: newTestPKI(t)}
	var specs []natsNodeSpec
	var clientProxies, routeProxies, direct []string
	for i := range 3 {
		s := natsNodeSpec{name: fmt.Sprintf("n%d", i+1), client: freeAddr(t), monitor: freeAddr(t), route: freeAddr(t), dir: t.TempDir()}
		s.clientAdv = newDelayProxy(t, s.client, slow).addr
		s.routeAdv = newDelayProxy(t, s.route, slow).addr
		clientProxies = append(clientProxies, "nats://"+s.clientAdv)
		routeProxies = append(routeProxies, s.routeAdv)
		direct = append(direct, "nats://"+s.client)
		specs = append(specs, s)
	}
	for i := range specs {
		for j, r := range routeProxies {
			if j != i {
				specs[i].routes = append(specs[i].routes, r)
			}
		}
		fc.nats = append(fc.nats, &faultNATS{spec: specs[i]})
	}
	fc.sluiceNATS, fc.testNATS = strings.Join(clientProxies, ","), strings.Join(direct, ",")
	listens := make([]string, 3)
	advs := make([]string, 3)
	for i := range 3 {
		listens[i] = freeAddr(t)
		advs[i] = newDelayProxy(t, listens[i], slow).addr
	}
	fc.start(func(i int) (string, string) { return listens[i], advs[i] }, func(i int) string { return freeAddr(t) })
	return fc
}

// stallDelay is one chunk's delay on a stalling link: one chunk in ten
// waits 2.3–2.8 s, past the servers' 2 s forward timeout, the others none
// (but they wait behind it: nothing overtakes).
func stallDelay(r *rand.Rand) time.Duration {
	if r.IntN(10) == 0 {
		return 2300*time.Millisecond + time.Duration(r.Int64N(int64(500*time.Millisecond)))
	}
	return 0
}

// startStallingCluster starts the cluster on loopback with the servers'
// direct forwarding connections through stalling proxies (stallDelay)
// while stall is set; NATS links are direct, so leases hold and forwards
// that fall back to NATS are not delayed.
func startStallingCluster(t *testing.T, stall *atomic.Bool) *faultCluster {
	t.Helper()
	repeatFailures(t)
	fc := &faultCluster{t: t, pki: newTestPKI(t)}
	var specs []natsNodeSpec
	var urls, routes []string
	for i := range 3 {
		s := natsNodeSpec{name: fmt.Sprintf("n%d", i+1), client: freeAddr(t), monitor: freeAddr(t), route: freeAddr(t), dir: t.TempDir()}
		urls = append(urls, "nats://"+s.client)
		routes = append(routes, s.route)
		specs = append(specs, s)
	}
	for i := range specs {
		for j, r := range routes {
			if j != i {
				specs[i].routes = append(specs[i].routes, r)
			}
		}
		fc.nats = append(fc.nats, &faultNATS{spec: specs[i]})
	}
	fc.sluiceNATS = strings.Join(urls, ",")
	fc.testNATS = fc.sluiceNATS
	listens := make([]string, 3)
	advs := make([]string, 3)
	for i := range 3 {
		listens[i] = freeAddr(t)
		advs[i] = newDelayProxyWith(t, listens[i], stall, stallDelay).addr
	}
	fc.start(func(i int) (string, string) { return listens[i], advs[i] }, func(i int) string { return freeAddr(t) })
	return fc
}

// natsMonitor reads a NATS node's monitoring endpoint into v.
func natsMonitor(addr, path string, v any) error {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// metaLeader is the JetStream meta leader as a node sees it.
func metaLeader(n *faultNATS) string {
	var jsz struct {
		Meta *struct {
			Leader string `json:"leader"`
		} `json:"meta_cluster"`
	}
	if natsMonitor(n.spec.monitor, "/jsz", &jsz) != nil || jsz.Meta == nil {
		return ""
	}
	return jsz.Meta.Leader
}

// sluiceClients lists the names of Sluice's connections to a node.
func sluiceClients(n *faultNATS) []string {
	var connz struct {
		Conns []struct {
			Name string `json:"name"`
		} `json:"connections"`
	}
	if natsMonitor(n.spec.monitor, "/connz?limit=1000", &connz) != nil {
		return nil
	}
	var out []string
	for _, c := range connz.Conns {
		if strings.HasPrefix(c.Name, "sluice") {
			out = append(out, c.Name)
		}
	}
	sort.Strings(out)
	return out
}

// streamLeader is the leader of a stream.
func (fc *faultCluster) streamLeader(stream string) string {
	nc, err := nats.Connect(fc.testNATS, nats.Timeout(2*time.Second))
	if err != nil {
		return ""
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil || s.CachedInfo().Cluster == nil {
		return ""
	}
	return s.CachedInfo().Cluster.Leader
}

// moveLeaders makes node the JetStream meta leader and the leader of the
// lease bucket's stream, by asking the current leaders to step down in its
// favour.
func (fc *faultCluster) moveLeaders(node *faultNATS) {
	t := fc.t
	t.Helper()
	want := node.spec.name
	stepdown := func(user, subject string, done func() bool) {
		for attempt := 0; !done(); attempt++ {
			if attempt == 5 {
				t.Fatalf("%s: %s did not become leader", subject, want)
			}
			nc, err := nats.Connect(fc.testNATS, nats.UserInfo(user, user), nats.Timeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := json.Marshal(map[string]any{"placement": map[string]any{"preferred": want}})
			msg, err := nc.Request(subject, body, 5*time.Second)
			nc.Close()
			if err != nil {
				t.Logf("%s: %v", subject, err)
			} else if strings.Contains(string(msg.Data), `"error"`) {
				t.Logf("%s: %s", subject, msg.Data)
			}
			for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && !done(); {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	stepdown("sys", "$JS.API.META.LEADER.STEPDOWN", func() bool { return metaLeader(node) == want })
	owners := bus.KVStream(bus.OwnersBucket)
	stepdown("app", "$JS.API.STREAM.LEADER.STEPDOWN."+owners, func() bool { return fc.streamLeader(owners) == want })
}

// keepHistory writes every answer of a test to a CSV file in the directory
// SLUICE_E2E_LOGS names, when set, so a failure can be followed caller by
// caller next to the processes' logs (keepLogs).
func keepHistory(t *testing.T, answers []answer) {
	dir := os.Getenv("SLUICE_E2E_LOGS")
	if dir == "" {
		return
	}
	var b strings.Builder
	b.WriteString("caller,server,start,end,status,peek,allowed,remaining,reset_ms,error\n")
	for _, a := range answers {
		fmt.Fprintf(&b, "%s,%s,%s,%s,%d,%v,%v,%d,%d,%q\n", a.Caller, a.Server, a.Start.Format(time.RFC3339Nano), a.End.Format(time.RFC3339Nano),
			a.Status, a.Peek, a.Allowed, a.Remaining, a.ResetMS, a.Err)
	}
	file := filepath.Join(dir, fmt.Sprintf("%s-history-%d.csv", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano()))
	if err := os.MkdirAll(dir, 0o755); err == nil && os.WriteFile(file, []byte(b.String()), 0o644) == nil {
		t.Logf("every answer: %s", file)
	}
}

// failures keeps each fault test's failure messages so that they can be
// repeated after the process logs a failed test prints: a runner that shows
// only the end of a long output should still show why the test failed.
var failures struct {
	sync.Mutex
	byTest map[testing.TB][]string
}

// failf fails t like t.Errorf and keeps the message for repeatFailures.
func failf(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	failures.Lock()
	if failures.byTest == nil {
		failures.byTest = map[testing.TB][]string{}
	}
	failures.byTest[t] = append(failures.byTest[t], msg)
	failures.Unlock()
	t.Errorf("%s", msg)
}

// repeatFailures registers a cleanup that logs t's failures again. Called
// before any process starts, it runs after their log dumps.
func repeatFailures(t testing.TB) {
	t.Cleanup(func() {
		failures.Lock()
		msgs := failures.byTest[t]
		delete(failures.byTest, t)
		failures.Unlock()
		if len(msgs) > 0 {
			t.Logf("---- %s failed (repeated after the logs above) ----\n%s", t.Name(), strings.Join(msgs, "\n"))
		}
	})
}
