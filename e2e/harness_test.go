// Package e2e runs Sluice as its users do: it builds cmd/server and
// cmd/worker, starts them as real processes on loopback with temp data
// dirs, and drives them over HTTP. Every test is bounded in time and stops
// the processes it started.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const operatorToken = "op_e2e_operator_token_0123456789abcdef"

var bins struct {
	once   sync.Once
	dir    string
	server string
	worker string
	err    error
}

// build compiles the two commands once per test binary run.
func build(t testing.TB) (server, worker string) {
	t.Helper()
	bins.once.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-e2e-bin-")
		if err != nil {
			bins.err = err
			return
		}
		bins.dir = dir
		bins.server = filepath.Join(dir, "sluice-server")
		bins.worker = filepath.Join(dir, "sluice-worker")
		for out, pkg := range map[string]string{bins.server: "./cmd/server", bins.worker: "./cmd/worker"} {
			cmd := exec.Command("go", "build", "-o", out, pkg)
			cmd.Dir = ".."
			if b, err := cmd.CombinedOutput(); err != nil {
				bins.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
				return
			}
		}
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return bins.server, bins.worker
}

func TestMain(m *testing.M) {
	if os.Getenv(echoEnv) != "" {
		serveEcho()
	}
	if plan := os.Getenv(noisyPlanEnv); plan != "" {
		noisyTenantMain(plan)
	}
	if plan := os.Getenv(slotHolderEnv); plan != "" {
		slotHolderMain(plan)
	}
	code := m.Run()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	if referenceBin.dir != "" {
		os.RemoveAll(referenceBin.dir)
	}
	os.Exit(code)
}

// handedOut holds every address freeAddr has returned in this test process.
var handedOut = struct {
	sync.Mutex
	addrs map[string]bool
}{addrs: map[string]bool{}}

// freeAddr returns a loopback address with a port that was free a moment ago
// and that no earlier call in this test process returned. The kernel may give
// a port it just handed out again once its listener is closed; two processes
// told to listen on the same port (a NATS node's client and route ports, say)
// would then fail to start.
//
// Ports come from below the kernel's ephemeral range (32768 and up on
// Linux): a port picked there could be taken, before the process told to
// listen on it starts, by any outgoing connection or listener on port 0 of
// the many processes the tests run at once, which happened in CI.
func freeAddr(t testing.TB) string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 1000 {
		addr := fmt.Sprintf("127.0.0.1:%d", freePortLow+rand.IntN(freePortHigh-freePortLow))
		if handedOut.addrs[addr] {
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue // in use
		}
		l.Close()
		handedOut.addrs[addr] = true
		return addr
	}
	t.Fatal("no free loopback port that was not handed out already")
	return ""
}

// The ports freeAddr hands out: below Linux's ephemeral range.
const (
	freePortLow  = 20000
	freePortHigh = 32768
)

// proc is one started process.
type proc struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd
	logs *logBuffer
	done chan struct{}
}

type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func start(t testing.TB, name, bin string, args []string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	logs := &logBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{t: t, name: name, cmd: cmd, logs: logs, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("---- %s logs ----\n%s", name, tail(logs.String(), 60))
			keepLogs(t, name, logs.String())
		} else if os.Getenv("SLUICE_E2E_KEEP_LOGS") != "" {
			keepLogs(t, name, logs.String())
		}
	})
	return p
}

// keepLogs writes a failed test's whole process log into the directory
// SLUICE_E2E_LOGS names, when set: the tail above is often too short to
// follow a failure that began a minute earlier. With SLUICE_E2E_KEEP_LOGS
// set too, a passing test's logs are kept as well.
func keepLogs(t testing.TB, name, logs string) {
	dir := os.Getenv("SLUICE_E2E_LOGS")
	if dir == "" {
		return
	}
	file := filepath.Join(dir, fmt.Sprintf("%s-%s-%d.log", strings.ReplaceAll(t.Name(), "/", "_"), name, time.Now().UnixNano()))
	if err := os.MkdirAll(dir, 0o755); err == nil {
		err = os.WriteFile(file, []byte(logs), 0o644)
		if err == nil {
			t.Logf("%s's whole log: %s", name, file)
			return
		}
	}
	t.Logf("keeping %s's log in %s failed", name, dir)
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("%s did not exit within 30s of SIGTERM", p.name)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		p.t.Fatalf("%s exited with %d after SIGTERM\n%s", p.name, code, tail(p.logs.String(), 40))
	}
}

// kill sends SIGKILL (kill -9) and waits.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// server is a started cmd/server with its API address.
type server struct {
	*proc
	base string
	addr string
	data string
	args []string
	env  []string
}

type serverOpts struct {
	data   string
	addr   string
	extra  []string
	env    []string
	noWait bool // do not wait for /readyz (an external worker starts later)
}

func startServer(t testing.TB, o serverOpts) *server {
	t.Helper()
	bin, _ := build(t)
	if o.data == "" {
		o.data = t.TempDir()
	}
	if o.addr == "" {
		o.addr = freeAddr(t)
	}
	args := append([]string{"--addr", o.addr, "--data", o.data, "--node", "e2e"}, o.extra...)
	env := append([]string{"SLUICE_OPERATOR_TOKEN=" + operatorToken}, o.env...)
	s := &server{addr: o.addr, base: "http://" + o.addr, data: o.data, args: args, env: env}
	s.proc = start(t, "server", bin, args, env...)
	if !o.noWait {
		s.waitReady(t, 60*time.Second)
	}
	return s
}

// startWorker starts cmd/worker against a NATS URL with a data dir. The
// worker applies the operator bootstrap, so it gets the operator token.
func startWorker(t testing.TB, natsURL, data string, extra ...string) *proc {
	t.Helper()
	_, bin := build(t)
	return start(t, "worker", bin, append([]string{"--nats-url", natsURL, "--data", data}, extra...), "SLUICE_OPERATOR_TOKEN="+operatorToken)
}

// waitWorkerKey waits until a server whose embedded NATS listens has made
// the worker's nkey seed under its data dir, and returns the file.
func waitWorkerKey(t testing.TB, s *server) string {
	t.Helper()
	path := filepath.Join(s.data, "nats-worker.nk")
	waitFor(t, 30*time.Second, "the server makes "+path, func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
	return path
}

// restart starts the same server again (same data, address and flags).
func (s *server) restart(t testing.TB) {
	t.Helper()
	bin, _ := build(t)
	s.proc = start(t, "server", bin, s.args, s.env...)
	s.waitReady(t, 60*time.Second)
}

func (s *server) waitReady(t testing.TB, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			t.Fatalf("server exited during start:\n%s", tail(s.logs.String(), 40))
		default:
		}
		resp, err := http.Get(s.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("server not ready after %s:\n%s", d, tail(s.logs.String(), 40))
}

var httpClient = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 200, MaxConnsPerHost: 200},
}

// response is a decoded API answer.
type response struct {
	Status int
	Header http.Header
	Body   map[string]any
	Raw    []byte
}

func (r response) str(path ...string) string {
	var v any = r.Body
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[p]
	}
	s, _ := v.(string)
	return s
}

func (r response) errCode() string { return r.str("error", "code") }

// call sends one request; body may be nil, a string (sent raw) or a value
// (sent as JSON).
func call(t testing.TB, method, url, token string, body any, headers ...string) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := response{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &r.Body)
	}
	return r
}

func mustStatus(t testing.TB, r response, want int) response {
	t.Helper()
	if r.Status != want {
		t.Fatalf("status %d, want %d: %s", r.Status, want, r.Raw)
	}
	return r
}

// tenant is a created tenant with its service key.
type tenant struct {
	ID, Key string
}

func createTenant(t testing.TB, s *server, name string) tenant {
	t.Helper()
	r := mustStatus(t, call(t, "POST", s.base+"/v1/admin/tenants", operatorToken, map[string]any{
		"name": name, "owner_email": name + "@example.com", "owner_password": "correct horse battery staple",
	}), 201)
	return tenant{ID: r.str("id"), Key: r.str("service_key")}
}

// heavyPolicy is the seed report's endpoint: 10 per 60 s per IP.
var heavyPolicy = map[string]any{
	"name": "heavy-example", "method": "GET", "path": "/api/example", "query": map[string]string{"mode": "heavy"},
	"tiers": map[string]any{
		"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 10, "period": "60s"},
		"pro":       map[string]any{"algorithm": "sliding_window", "limit": 1000, "period": "1m"},
	},
}

func createPolicy(t testing.TB, s *server, tn tenant, p map[string]any) string {
	t.Helper()
	r := mustStatus(t, call(t, "POST", s.base+"/v1/policies", tn.Key, p), 201)
	return r.str("id")
}

type checkResult struct {
	Allowed      bool   `json:"allowed"`
	Reason       string `json:"reason"`
	Policy       any    `json:"policy"`
	Tier         string `json:"tier"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetMS      int64  `json:"reset_ms"`
	RetryAfterMS *int64 `json:"retry_after_ms"`
}

func check(t testing.TB, s *server, tn tenant, body map[string]any) (checkResult, response) {
	t.Helper()
	r := mustStatus(t, call(t, "POST", s.base+"/v1/check", tn.Key, body), 200)
	var c checkResult
	if err := json.Unmarshal(r.Raw, &c); err != nil {
		t.Fatalf("decode check answer %s: %v", r.Raw, err)
	}
	return c, r
}

// burst sends n checks concurrently and counts the allowed ones.
func burst(t testing.TB, s *server, tn tenant, n int, body func(i int) map[string]any) (allowed int) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	errCh := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Go(func() {
			data, _ := json.Marshal(body(i))
			req, _ := http.NewRequest("POST", s.base+"/v1/check", bytes.NewReader(data))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+tn.Key)
			resp, err := httpClient.Do(req)
			if err != nil {
				errCh <- err
				return
			}
			defer resp.Body.Close()
			var c checkResult
			if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != 200 {
				errCh <- fmt.Errorf("status %d: %v", resp.StatusCode, err)
				return
			}
			if c.Allowed {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errCh)
	for err := range errCh {
		t.Fatalf("burst: %v", err)
	}
	return allowed
}

func ipCheck(ip, path string) map[string]any {
	return map[string]any{"ip": ip, "method": "GET", "path": path}
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	took, ok := poll(d, cond)
	if !ok {
		t.Fatalf("%s: not within %s", what, d)
	}
	return took
}

// poll is waitFor for a caller that reports the failure itself: it tells
// how long cond took to hold, and whether it did within d.
func poll(d time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < d {
		if cond() {
			return time.Since(start), true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, false
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
