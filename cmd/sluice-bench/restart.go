package main

// The restart scenario: how long a server with millions of live buckets
// takes to answer again after SIGTERM and after kill -9, and whether every
// caller still sees its quota. It starts real server processes (the
// single-process default: embedded NATS and worker) on loopback with a
// fresh data directory, creates a tenant and a policy of 100 checks per
// 30 days through the API, stops the server, writes N persisted buckets into
// its SQLite file as the worker stores them (each caller consumed 10), and
// then restarts the server and measures:
//
//   - ready: from the process start until /readyz answers 200;
//   - hydrated: until every persisted bucket is in memory
//     (sluice_hydration_complete on /metrics);
//   - RSS once hydrated, and memory and disk bytes per bucket;
//   - exactness: right after ready and again once hydrated, sampled callers
//     are checked and must have 89 left (100 - 10 persisted - 1 now);
//   - for the start after SIGTERM, how long that SIGTERM took: the time a
//     clean restart is down is that plus ready.
//
//	go run ./cmd/sluice-bench restart -buckets 1000000,3000000,10000000

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/worker"
)

type restartConfig struct {
	Buckets []int
	Server  string // server binary; built from ./cmd/server when empty
	Samples int
	Keep    bool
}

type restartRow struct {
	Buckets     int
	How         string // "SIGTERM" or "kill -9"
	Ready       time.Duration
	Hydrated    time.Duration
	RSS         int64
	MemPer      int64
	DiskPer     int64
	ExactEarly  string
	ExactLater  string
	StopTook    time.Duration
	FirstTouch  int64
	HydrateRate float64
}

func runRestart(ctx context.Context, args []string, stdout io.Writer) error {
	var cfg restartConfig
	fs := flag.NewFlagSet("sluice-bench restart", flag.ContinueOnError)
	sizes := fs.String("buckets", "1000000,3000000", "comma-separated numbers of persisted buckets")
	fs.StringVar(&cfg.Server, "server", "", "sluice server binary (default: go build ./cmd/server)")
	fs.IntVar(&cfg.Samples, "samples", 500, "callers checked for exactness after each restart")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the data directories")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if cfg.Buckets, err = parseCounts("buckets", *sizes, 1, 50_000_000); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "sluice-restart-")
	if err != nil {
		return err
	}
	if !cfg.Keep {
		defer os.RemoveAll(tmp)
	}
	if cfg.Server, err = serverBinary(cfg.Server, tmp); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "restart with persisted buckets (100 per 30 days, each caller consumed 10); single process, embedded NATS and worker\n\n")
	var rows []restartRow
	for _, n := range cfg.Buckets {
		r, err := restartCase(ctx, cfg, filepath.Join(tmp, fmt.Sprintf("n%d", n)), n, stdout)
		rows = append(rows, r...)
		if err != nil {
			printRestart(stdout, rows)
			return err
		}
	}
	printRestart(stdout, rows)
	return nil
}

func printRestart(w io.Writer, rows []restartRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "buckets\tstart\tready\thydrated\tbuckets/s\tfirst touch\tRSS MiB\tmem B/bucket\tdisk B/bucket\texact at ready\texact hydrated\tSIGTERM took\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%.0f\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t\n", r.Buckets, r.How,
			r.Ready.Round(time.Millisecond), r.Hydrated.Round(time.Millisecond), r.HydrateRate, r.FirstTouch,
			r.RSS>>20, r.MemPer, r.DiskPer, r.ExactEarly, r.ExactLater, r.StopTook.Round(time.Millisecond))
	}
	tw.Flush()
}

// benchServer is one server process of the scenario.
type benchServer struct {
	cmd   *exec.Cmd
	url   string
	token string
	done  chan struct{}
	start time.Time
}

func startBenchServer(bin, data, token string) (*benchServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.OpenFile(filepath.Join(data+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--addr", addr, "--data", data)
	cmd.Env = append(os.Environ(), "SLUICE_OPERATOR_TOKEN="+token)
	cmd.Stdout, cmd.Stderr = logf, logf
	s := &benchServer{cmd: cmd, url: "http://" + addr, token: token, done: make(chan struct{})}
	s.start = time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() { _ = cmd.Wait(); logf.Close(); close(s.done) }()
	return s, nil
}

// waitFor polls cond every 10 ms until it holds, the process exits, or
// limit passes; it returns the time since the process started.
func (s *benchServer) waitFor(limit time.Duration, what string, cond func() bool) (time.Duration, error) {
	deadline := time.Now().Add(limit)
	for !cond() {
		select {
		case <-s.done:
			return 0, fmt.Errorf("server exited while waiting for %s (see %s.log)", what, s.cmd.Args[4])
		default:
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s: not within %s", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(s.start), nil
}

func (s *benchServer) ready() bool {
	resp, err := http.Get(s.url + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

var metricRe = regexp.MustCompile(`(?m)^sluice_hydration_complete ([0-9.e+]+)`)

func (s *benchServer) hydrated() bool {
	req, _ := http.NewRequest("GET", s.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := metricRe.FindSubmatch(b)
	return m != nil && string(m[1]) == "1"
}

func (s *benchServer) firstTouch() int64 {
	req, _ := http.NewRequest("GET", s.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^sluice_hydration_first_touch_total ([0-9.e+]+)`).FindSubmatch(b)
	if m == nil {
		return -1
	}
	f, _ := strconv.ParseFloat(string(m[1]), 64)
	return int64(f)
}

// stop sends sig and waits for the process to exit.
func (s *benchServer) stop(sig syscall.Signal) (time.Duration, error) {
	t := time.Now()
	if err := s.cmd.Process.Signal(sig); err != nil {
		return 0, err
	}
	select {
	case <-s.done:
		return time.Since(t), nil
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		return 0, errors.New("server did not stop within 60s of the signal; killed")
	}
}

func (s *benchServer) rss() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func (s *benchServer) call(method, path, token string, body any, out any) error {
	return apiCall(context.Background(), http.DefaultClient, method, s.url+path, token, body, out)
}

func benchIP(i int) string {
	return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
}

// exact checks sample callers (indexes from idx) and reports how many had
// exactly 89 checks left.
func (s *benchServer) exact(sk string, idx []int) string {
	checks := make([]map[string]any, len(idx))
	for i, k := range idx {
		checks[i] = map[string]any{"ip": benchIP(k), "path": "/api/x"}
	}
	var res struct {
		Results []struct {
			Allowed   bool  `json:"allowed"`
			Remaining int64 `json:"remaining"`
		} `json:"results"`
	}
	if err := s.call("POST", "/v1/check/batch", sk, map[string]any{"checks": checks}, &res); err != nil {
		return "error: " + err.Error()
	}
	ok := 0
	for _, r := range res.Results {
		if r.Allowed && r.Remaining == 89 {
			ok++
		}
	}
	return fmt.Sprintf("%d/%d", ok, len(idx))
}

func restartCase(ctx context.Context, cfg restartConfig, data string, n int, log io.Writer) ([]restartRow, error) {
	token := "op_bench_" + strconv.FormatUint(rand.Uint64(), 36) + strconv.FormatUint(rand.Uint64(), 36)
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	s, err := startBenchServer(cfg.Server, data, token)
	if err != nil {
		return nil, err
	}
	if _, err := s.waitFor(60*time.Second, "first start ready", s.ready); err != nil {
		return nil, err
	}
	var tn struct {
		ID         string `json:"id"`
		ServiceKey string `json:"service_key"`
	}
	if err := s.call("POST", "/v1/admin/tenants", token, map[string]any{"name": "bench", "owner_email": "bench@bench.test", "owner_password": "a long passphrase"}, &tn); err != nil {
		return nil, err
	}
	var pol struct {
		ID string `json:"id"`
	}
	if err := s.call("POST", "/v1/policies", tn.ServiceKey, map[string]any{"name": "daily", "method": "*", "path": "/api/*",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 100, "period": "720h"}}}, &pol); err != nil {
		return nil, err
	}
	emptyRSS := s.rss()
	if _, err := s.stop(syscall.SIGTERM); err != nil {
		return nil, err
	}
	t := time.Now()
	if err := seedBuckets(ctx, filepath.Join(data, "sluice.db"), tn.ID, pol.ID, n); err != nil {
		return nil, fmt.Errorf("seed %d buckets: %w", n, err)
	}
	fmt.Fprintf(log, "%d buckets written in %s\n", n, time.Since(t).Round(time.Millisecond))
	st, err := os.Stat(filepath.Join(data, "sluice.db"))
	if err != nil {
		return nil, err
	}
	diskPer := st.Size() / int64(n)

	var rows []restartRow
	next := 0 // sample callers are fresh in every round
	sample := func() []int {
		out := make([]int, cfg.Samples)
		for i := range out {
			out[i] = (next*7919 + 104729*i) % n // spread over the key space
		}
		next++
		return out
	}
	// Three starts: the first after the buckets were written (the setup
	// server had stopped with SIGTERM), then after kill -9 of a hydrated
	// server, then after SIGTERM of one ("stop took" is that stop).
	how, stopTook := "first start", time.Duration(0)
	for round := 0; round < 3 && ctx.Err() == nil; round++ {
		s, err = startBenchServer(cfg.Server, data, token)
		if err != nil {
			return rows, err
		}
		r := restartRow{Buckets: n, How: how, DiskPer: diskPer, StopTook: stopTook}
		if r.Ready, err = s.waitFor(10*time.Minute, "ready", s.ready); err != nil {
			_, _ = s.stop(syscall.SIGKILL)
			return rows, err
		}
		r.ExactEarly = s.exact(tn.ServiceKey, sample())
		if r.Hydrated, err = s.waitFor(30*time.Minute, "hydrated", s.hydrated); err != nil {
			_, _ = s.stop(syscall.SIGKILL)
			return rows, err
		}
		r.HydrateRate = float64(n) / r.Hydrated.Seconds()
		r.FirstTouch = s.firstTouch()
		r.ExactLater = s.exact(tn.ServiceKey, sample())
		r.RSS = s.rss()
		r.MemPer = (r.RSS - emptyRSS) / int64(n)
		rows = append(rows, r)
		fmt.Fprintf(log, "%d buckets, %s: ready %s, hydrated %s\n", n, how, r.Ready.Round(time.Millisecond), r.Hydrated.Round(time.Millisecond))
		sig := syscall.SIGKILL
		how = "after kill -9"
		if round == 1 {
			sig, how = syscall.SIGTERM, "after SIGTERM"
		}
		if stopTook, err = s.stop(sig); err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// seedBuckets writes n persisted buckets, each with 90 of 100 tokens left,
// as the worker stores them.
func seedBuckets(ctx context.Context, path, tenantID, policyID string, n int) error {
	db, err := sqlitedb.Open(ctx, path)
	if err != nil {
		return err
	}
	defer db.Close()
	now := time.Now()
	lim := []bus.LimitWire{{Algorithm: "token_bucket", Limit: 100, PeriodNS: int64(720 * time.Hour)}}
	const chunk = 200_000
	recs := make([]bus.BucketRecord, 0, chunk)
	for i := 0; i < n; i++ {
		recs = append(recs, bus.BucketRecord{Key: engine.BucketKey(tenantID, policyID, engine.KindIP, benchIP(i)), TenantID: tenantID,
			Limits: lim, States: []bus.StateWire{{Tokens: 90, At: now.UnixNano()}}, FullAt: now.Add(72 * time.Hour).UnixNano()})
		if len(recs) == chunk || i == n-1 {
			if err := worker.WriteBuckets(ctx, db, recs, now); err != nil {
				return err
			}
			recs = recs[:0]
		}
	}
	return nil
}

// parseCounts reads a comma-separated list of whole numbers from lo to hi,
// the value of flag name.
func parseCounts(name, list string, lo, hi int) ([]int, error) {
	var out []int
	for _, s := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("-%s: %q is not a number between %d and %d", name, s, lo, hi)
		}
		out = append(out, n)
	}
	return out, nil
}

// serverBinary is path, or when it is empty a server built from
// ./cmd/server into dir.
func serverBinary(path, dir string) (string, error) {
	if path != "" {
		return path, nil
	}
	path = filepath.Join(dir, "sluice-server")
	if b, err := exec.Command("go", "build", "-o", path, "./cmd/server").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/server: %v\n%s", err, b)
	}
	return path, nil
}
