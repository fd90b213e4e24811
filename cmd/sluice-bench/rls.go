package main

// "sluice-bench rls" loads Envoy's external rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on one or
// more loopback targets with the same workloads, and prints one Markdown
// table. rls-figures.sh runs it against Sluice's --grpc-addr and against the
// reference server (envoyproxy/ratelimit) with Redis, side by side.
//
// The workloads and the reference-format YAML they need live together here
// (-print-config writes the YAML), so the script cannot drift from them.
//
// Order of runs: each workload is run against every target in turn before
// the next workload starts, so a neighbour's load on this shared machine
// that comes and goes touches both targets alike. Each run dials its own
// connections and waits until they are ready before the clock starts.
//
// Closed loop: every caller sends its next request as soon as its answer is
// back. A run ends after -duration or -max-requests requests, whichever
// comes first; requests still in flight then are answered and counted.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// rlsTarget is one server to load: a label for the table and host:port.
type rlsTarget struct {
	Name string
	Addr string
}

// rlsConfig is what one "sluice-bench rls" run does.
type rlsConfig struct {
	Targets     []rlsTarget
	Key         string // sent to every target as authorization: Bearer; the reference ignores it
	Domain      string
	Workloads   []string
	Duration    time.Duration // per workload and target
	MaxRequests int           // per workload and target
	Conns       int           // gRPC connections (HTTP/2) per run
	Concurrency int           // callers in flight, spread over the connections
	Distinct    int           // descriptor values in the distinct and multi workloads
	PrintConfig bool

	// BatchURL, when set, adds Sluice's own POST /v1/check/batch for the
	// same callers, measured by Load (load.go).
	BatchURL  string
	BatchPath string
	BatchSize int
}

// targetsFlag collects repeated -target flags.
type targetsFlag []rlsTarget

func (t *targetsFlag) String() string {
	var s []string
	for _, x := range *t {
		s = append(s, x.Name+"="+x.Addr)
	}
	return strings.Join(s, ",")
}

func (t *targetsFlag) Set(v string) error {
	tg, err := parseTarget(v)
	if err != nil {
		return err
	}
	*t = append(*t, tg)
	return nil
}

// parseTarget reads "name=host:port" or "host:port" (named by its address)
// and refuses anything off this machine.
func parseTarget(v string) (rlsTarget, error) {
	name, addr, named := strings.Cut(v, "=")
	if !named {
		name, addr = v, v
	}
	if name == "" {
		return rlsTarget{}, fmt.Errorf("-target %q: empty name", v)
	}
	if err := checkLoopbackAddr(addr); err != nil {
		return rlsTarget{}, err
	}
	return rlsTarget{Name: name, Addr: addr}, nil
}

// checkLoopbackAddr refuses a gRPC target that is not host:port on the
// loopback: a load test pointed at a shared server by mistake is an outage.
func checkLoopbackAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return fmt.Errorf("-target %q is not host:port", addr)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("-target %q is not a loopback address", addr)
}

var allWorkloads = []string{"hot", "distinct", "over", "multi", "wide"}

func parseRLSFlags(args []string, stderr io.Writer) (rlsConfig, error) {
	var cfg rlsConfig
	var targets targetsFlag
	var workloads string
	fs := flag.NewFlagSet("sluice-bench rls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(&targets, "target", "ShouldRateLimit server as [name=]host:port, loopback only; repeat to compare (the first is the baseline)")
	fs.StringVar(&cfg.Key, "key", os.Getenv("SLUICE_SERVICE_KEY"), "service key sk_…, sent as authorization: Bearer [SLUICE_SERVICE_KEY]")
	fs.StringVar(&cfg.Domain, "domain", "sluice-bench", "rate limit domain of every request and of -print-config")
	fs.StringVar(&workloads, "workloads", strings.Join(allWorkloads, ","), "comma-separated, in order: hot, distinct, over, multi, wide")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long each workload loads each target")
	fs.IntVar(&cfg.MaxRequests, "max-requests", 5_000_000, "a run also stops after this many requests")
	fs.IntVar(&cfg.Conns, "conns", 4, "gRPC connections per run")
	fs.IntVar(&cfg.Concurrency, "concurrency", 32, "requests in flight (callers), spread over the connections")
	fs.IntVar(&cfg.Distinct, "distinct", 10_000, "remote_address values in the distinct and multi workloads")
	fs.BoolVar(&cfg.PrintConfig, "print-config", false, "print the reference-format YAML these workloads expect and exit")
	fs.StringVar(&cfg.BatchURL, "batch-url", "", "also load Sluice's POST /v1/check/batch at this base URL (loopback), for comparison")
	fs.StringVar(&cfg.BatchPath, "batch-path", "/api/open", "request target of the batch's checks (a policy that admits everything)")
	fs.IntVar(&cfg.BatchSize, "batch-size", 100, "checks per batch request")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg.Targets = targets
	cfg.Workloads = strings.Split(workloads, ",")
	for _, w := range cfg.Workloads {
		if !slices.Contains(allWorkloads, w) {
			return cfg, fmt.Errorf("-workloads: unknown %q (want %s)", w, strings.Join(allWorkloads, ", "))
		}
	}
	switch {
	case cfg.PrintConfig:
		return cfg, nil
	case len(cfg.Targets) == 0:
		return cfg, errors.New("name at least one -target host:port")
	case cfg.Domain == "":
		return cfg, errors.New("-domain must not be empty")
	case cfg.Duration <= 0 || cfg.Duration > 10*time.Minute:
		return cfg, errors.New("-duration must be between 0 and 10m")
	case cfg.MaxRequests < 1 || cfg.MaxRequests > 100_000_000:
		return cfg, errors.New("-max-requests must be between 1 and 100000000")
	case cfg.Conns < 1 || cfg.Conns > 64:
		return cfg, errors.New("-conns must be between 1 and 64")
	case cfg.Concurrency < 1 || cfg.Concurrency > 4096:
		return cfg, errors.New("-concurrency must be between 1 and 4096")
	case cfg.Distinct < 1 || cfg.Distinct > 1_000_000:
		return cfg, errors.New("-distinct must be between 1 and 1000000")
	case cfg.BatchSize < 1 || cfg.BatchSize > 1000:
		return cfg, errors.New("-batch-size must be between 1 and 1000")
	}
	if cfg.BatchURL != "" {
		if err := checkLoopback(cfg.BatchURL); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// rlsWorkload is a set of prepared requests; each call sends one picked at
// random. Messages are shared by the callers and never changed after
// they are built, so marshalling them concurrently is safe.
type rlsWorkload struct {
	Name        string
	About       string
	Descriptors int // per request
	requests    []*rlspb.RateLimitRequest
}

// The descriptor values the workloads send; rlsYAML gives each its rule.
const (
	hotPath     = "/open"
	limitedPath = "/limited"
)

// rlsYAML is the reference server's config for the workloads: a rule for
// every descriptor they send, so every descriptor costs a counter update.
func rlsYAML(domain string) string {
	return `# sluice-bench rls workloads (sluice-bench rls -print-config)
domain: ` + domain + `
descriptors:
  # hot, multi: one descriptor every request shares, far under its limit
  - key: path
    value: ` + hotPath + `
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
  # over: one descriptor over its limit, nearly every request denied
  # (per hour: a run rarely crosses into a new window)
  - key: path
    value: ` + limitedPath + `
    rate_limit:
      unit: hour
      requests_per_unit: 10
  # distinct, multi: a counter per client address
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 1000000
  # multi: a nested rule, a counter per address of the free plan
  - key: plan
    value: free
    descriptors:
      - key: remote_address
        rate_limit:
          unit: minute
          requests_per_unit: 100000000
`
}

func descriptor(kv ...string) *commonrl.RateLimitDescriptor {
	d := &commonrl.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonrl.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// address returns the i-th of the distinct client addresses, counted up
// from 10.0.0.1 as appendIP does.
func address(i int) string {
	n := uint32(i) + 1
	return fmt.Sprintf("10.%d.%d.%d", n>>16&0xff, n>>8&0xff, n&0xff)
}

func buildWorkload(name, domain string, distinct int) rlsWorkload {
	req := func(ds ...*commonrl.RateLimitDescriptor) *rlspb.RateLimitRequest {
		return &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: 1}
	}
	w := rlsWorkload{Name: name, Descriptors: 1}
	switch name {
	case "hot":
		w.About = "1 descriptor (path=" + hotPath + "), every request the same, under its limit"
		w.requests = []*rlspb.RateLimitRequest{req(descriptor("path", hotPath))}
	case "distinct":
		w.About = fmt.Sprintf("1 descriptor (remote_address), %d distinct values at random", distinct)
		for i := range distinct {
			w.requests = append(w.requests, req(descriptor("remote_address", address(i))))
		}
	case "over":
		w.About = "1 descriptor (path=" + limitedPath + ", 10 per hour), every request the same: denials"
		w.requests = []*rlspb.RateLimitRequest{req(descriptor("path", limitedPath))}
	case "multi":
		w.Descriptors = 3
		w.About = fmt.Sprintf("3 descriptors: remote_address, path=%s, plan=free+remote_address; %d addresses at random", hotPath, distinct)
		for i := range distinct {
			a := address(i)
			w.requests = append(w.requests, req(
				descriptor("remote_address", a),
				descriptor("path", hotPath),
				descriptor("plan", "free", "remote_address", a)))
		}
	case "wide":
		// As many descriptors per call as the HTTP batch row has checks
		// per request, so the two compare decision for decision.
		w.Descriptors = wideDescriptors
		w.About = fmt.Sprintf("%d descriptors (remote_address) per call, %d distinct values at random: the batch row's shape", wideDescriptors, distinct)
		for i := 0; i < distinct; i += wideDescriptors {
			ds := make([]*commonrl.RateLimitDescriptor, wideDescriptors)
			for k := range ds {
				ds[k] = descriptor("remote_address", address((i+k)%distinct))
			}
			w.requests = append(w.requests, req(ds...))
		}
	}
	return w
}

// wideDescriptors is the descriptors of one call of the wide workload.
const wideDescriptors = 100

// rlsResult is one workload's numbers on one target.
type rlsResult struct {
	Workload  string
	Target    string
	Elapsed   time.Duration
	Requests  int // answered OK or OVER_LIMIT
	Decisions int // descriptors (or batch checks) decided
	OK        int
	OverLimit int
	Errors    int             // gRPC errors and answers with another overall code
	FirstErr  string          // the first of them, for the notes under the table
	Latencies []time.Duration // of answered requests, sorted
}

func (r rlsResult) rate(n int) float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(n) / r.Elapsed.Seconds()
}

// quantile returns the q-quantile (0 < q ≤ 1) of sorted by nearest rank:
// the smallest value at or below which at least q of the values lie.
func quantile(sorted []time.Duration, q float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(n))) - 1
	return sorted[min(max(i, 0), n-1)]
}

// rlsRequestTimeout bounds one call, so a run ends at most this long after
// its duration even when the target hangs.
const rlsRequestTimeout = 5 * time.Second

func runRLS(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, err := parseRLSFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	if cfg.PrintConfig {
		_, err := io.WriteString(stdout, rlsYAML(cfg.Domain))
		return err
	}
	var names []string
	for _, t := range cfg.Targets {
		names = append(names, t.Name+" "+t.Addr)
	}
	fmt.Fprintf(stdout, "ShouldRateLimit, domain %s, to %s: %d connections, %d callers in flight, closed loop, %v or %d requests per workload and target, whichever first\n",
		cfg.Domain, strings.Join(names, ", "), cfg.Conns, cfg.Concurrency, cfg.Duration, cfg.MaxRequests)
	fmt.Fprintf(stdout, "load generator: %s, GOMAXPROCS %d, on %d CPUs (%s), sharing them with the targets\n\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), cpuModel())

	var results []rlsResult
	var workloads []rlsWorkload
	for _, name := range cfg.Workloads {
		w := buildWorkload(name, cfg.Domain, cfg.Distinct)
		workloads = append(workloads, w)
		for _, t := range cfg.Targets {
			if ctx.Err() != nil {
				break
			}
			results = append(results, loadRLS(ctx, cfg, t, w))
		}
	}
	if cfg.BatchURL != "" && ctx.Err() == nil {
		results = append(results, loadBatch(ctx, cfg))
	}
	printRLSTable(stdout, cfg, workloads, results)
	return ctx.Err()
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "model unknown"
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "model unknown"
}

// dialRLS opens n connections to addr and waits until all are ready.
func dialRLS(ctx context.Context, addr string, n int) ([]*grpc.ClientConn, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	for range n {
		// passthrough: the address is an IP or localhost, no resolver needed.
		c, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeAll()
			return nil, err
		}
		conns = append(conns, c)
		c.Connect()
		for s := c.GetState(); s != connectivity.Ready; s = c.GetState() {
			if !c.WaitForStateChange(ctx, s) {
				closeAll()
				return nil, fmt.Errorf("connecting to %s: still %v after 5s", addr, s)
			}
		}
	}
	return conns, nil
}

type rlsWorkerStats struct {
	requests, ok, over, errors int
	firstErr                   string
	latencies                  []time.Duration
}

// loadRLS runs workload w against target t.
func loadRLS(ctx context.Context, cfg rlsConfig, t rlsTarget, w rlsWorkload) rlsResult {
	r := rlsResult{Workload: w.Name, Target: t.Name}
	conns, err := dialRLS(ctx, t.Addr, cfg.Conns)
	if err != nil {
		r.Errors, r.FirstErr = 1, err.Error()
		return r
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	callCtx := ctx
	if cfg.Key != "" {
		callCtx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+cfg.Key)
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()

	var issued atomic.Int64
	stats := make([]rlsWorkerStats, cfg.Concurrency)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range cfg.Concurrency {
		wg.Go(func() {
			st := &stats[i]
			client := rlspb.NewRateLimitServiceClient(conns[i%len(conns)])
			rng := rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
			for runCtx.Err() == nil && issued.Add(1) <= int64(cfg.MaxRequests) {
				req := w.requests[rng.IntN(len(w.requests))]
				// Not runCtx: a call in flight when the run ends is answered and counted.
				c, cancelCall := context.WithTimeout(callCtx, rlsRequestTimeout)
				sent := time.Now()
				resp, err := client.ShouldRateLimit(c, req)
				latency := time.Since(sent)
				cancelCall()
				if err == nil && resp.GetOverallCode() != rlspb.RateLimitResponse_OK && resp.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
					err = fmt.Errorf("overall_code %v", resp.GetOverallCode())
				}
				if err != nil {
					if ctx.Err() != nil {
						return // interrupted: not the target's error
					}
					st.errors++
					if st.firstErr == "" {
						st.firstErr = err.Error()
					}
					time.Sleep(time.Millisecond) // do not spin on a target that refuses
					continue
				}
				st.requests++
				st.latencies = append(st.latencies, latency)
				if resp.GetOverallCode() == rlspb.RateLimitResponse_OK {
					st.ok++
				} else {
					st.over++
				}
			}
		})
	}
	wg.Wait()
	r.Elapsed = time.Since(start)
	for _, st := range stats {
		r.Requests += st.requests
		r.OK += st.ok
		r.OverLimit += st.over
		r.Errors += st.errors
		if r.FirstErr == "" {
			r.FirstErr = st.firstErr
		}
		r.Latencies = append(r.Latencies, st.latencies...)
	}
	r.Decisions = r.Requests * w.Descriptors
	slices.Sort(r.Latencies)
	return r
}

// batchWorkload names the row of Sluice's own batch endpoint.
const batchWorkload = "batch"

// loadBatch measures POST /v1/check/batch with the existing HTTP load:
// the same callers in flight and as many distinct client addresses.
func loadBatch(ctx context.Context, cfg rlsConfig) rlsResult {
	res := Load(ctx, Config{
		Workers: cfg.Concurrency, Duration: cfg.Duration, Mode: "batch", BatchSize: cfg.BatchSize,
		Identities: cfg.Distinct, Path: cfg.BatchPath,
	}, "sluice", cfg.BatchURL, cfg.Key)
	r := rlsResult{
		Workload: batchWorkload, Target: "sluice (HTTP)", Elapsed: res.Elapsed,
		Requests: res.Requests, Decisions: res.Checks, OK: res.Allowed, OverLimit: res.Denied,
		Errors: res.Errors, Latencies: res.Latencies,
	}
	if res.Errors > 0 {
		r.FirstErr = "HTTP errors: run sluice-bench -mode batch alone to see them"
	}
	return r
}

// printRLSTable writes the Markdown table, a row per workload and target,
// then what each workload sends and the first error of any run that had
// one. The last column compares decisions per second with the first
// target on the same workload (the batch row with the distinct workload).
func printRLSTable(w io.Writer, cfg rlsConfig, workloads []rlsWorkload, results []rlsResult) {
	base := cfg.Targets[0].Name
	baseline := map[string]float64{}
	for _, r := range results {
		if r.Target == base {
			baseline[r.Workload] = r.rate(r.Decisions)
		}
	}
	fmt.Fprintf(w, "| workload | target | req/s | decisions/s | p50 ms | p99 ms | p99.9 ms | OK | OVER_LIMIT | errors | decisions/s vs %s |\n", base)
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range results {
		vs := "-"
		against := r.Workload
		if r.Workload == batchWorkload {
			against = "distinct"
		}
		if b := baseline[against]; b > 0 && r.Target != base {
			vs = fmt.Sprintf("%.2fx", r.rate(r.Decisions)/b)
		}
		p50, p99, p999 := "-", "-", "-"
		if len(r.Latencies) > 0 {
			p50, p99, p999 = ms(quantile(r.Latencies, 0.50)), ms(quantile(r.Latencies, 0.99)), ms(quantile(r.Latencies, 0.999))
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %s | %s | %s | %d | %d | %d | %s |\n",
			r.Workload, r.Target, r.rate(r.Requests), r.rate(r.Decisions), p50, p99, p999,
			r.OK, r.OverLimit, r.Errors, vs)
	}
	fmt.Fprintln(w)
	for _, wl := range workloads {
		fmt.Fprintf(w, "- %s: %s\n", wl.Name, wl.About)
	}
	if cfg.BatchURL != "" {
		fmt.Fprintf(w, "- %s: Sluice's POST /v1/check/batch, %d checks of %s per request from %d client IPs at random (one check is one decision; latency is the whole batch's); compared with the distinct workload\n",
			batchWorkload, cfg.BatchSize, cfg.BatchPath, cfg.Distinct)
	}
	for _, r := range results {
		if r.FirstErr != "" {
			fmt.Fprintf(w, "- first error, %s on %s: %s\n", r.Workload, r.Target, r.FirstErr)
		}
	}
}

// ms writes a latency in milliseconds: three decimals below 1 ms, else two.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	if v < 1 {
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
