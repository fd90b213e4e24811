package main

// The worker scenario: whether the SQLite worker keeps up with a flood of
// new callers. It starts a real server process (the single-process
// default: embedded NATS and worker) on loopback with a fresh data
// directory, creates a tenant and a policy of 100 checks per 30 days, and
// sends N checks from N distinct IPs through /v1/check/batch, 1000 checks
// per request: every check is allowed and leaves one bucket state for the
// worker to write. A flood sends as fast as the server answers; a paced
// run sends -rate checks per second. While it runs and until the worker
// has drained its backlog, the server's /metrics is sampled every 250 ms:
//
//   - checks/s: checks sent per second of sending;
//   - rows/s: bucket rows the worker committed per second, from its first
//     commit until the backlog was drained (sustained), and the best 5 s;
//   - peak backlog: the most bucket states published but not yet committed
//     (sluice_bucket_states_published_total minus the worker's rows), and
//     the oldest unapplied message's age when the worker reports it;
//   - drain: from the last check answered until the worker had committed
//     every published state.
//
//	go run ./cmd/sluice-bench worker -identities 1000000,3000000 -rate 0,14000

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"
)

type workerBenchConfig struct {
	Identities []int
	Rates      []float64 // checks per second; 0 = flood
	Server     string
	Clients    int
	Limit      time.Duration // per case, sending and draining together
	Keep       bool
	Period     time.Duration // the policy's period: short periods refill (and expire) buckets soon
	Settle     time.Duration // after draining, watch memory this long (0: not at all)
	Random     bool          // callers' IPs in scattered order instead of counting up
}

type workerRow struct {
	Identities  int
	Rate        float64
	Sent        int
	SendTook    time.Duration
	Sustained   float64
	Best5s      float64
	PeakBacklog int64
	PeakAge     float64 // seconds; -1 when the worker does not report it
	Drain       time.Duration
	Err         string
	Memory      []memoryStep // with -settle
}

func runWorkerBench(ctx context.Context, args []string, stdout io.Writer) error {
	var cfg workerBenchConfig
	fs := flag.NewFlagSet("sluice-bench worker", flag.ContinueOnError)
	sizes := fs.String("identities", "1000000", "comma-separated numbers of new callers per case (at most 16000000)")
	rates := fs.String("rate", "0", "comma-separated checks/s per case; 0 floods as fast as the server answers")
	fs.StringVar(&cfg.Server, "server", "", "sluice server binary (default: go build ./cmd/server)")
	fs.IntVar(&cfg.Clients, "clients", 4, "concurrent keep-alive clients sending batches")
	fs.DurationVar(&cfg.Limit, "limit", 15*time.Minute, "give up a case after this long (sending and draining)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the data directories and server logs")
	fs.DurationVar(&cfg.Period, "period", 720*time.Hour, "the policy's period (100 checks per period); with a short one (e.g. 1s) every bucket is full again soon after the flood and expires")
	order := fs.String("order", "sequential", "order of the callers' IPs: sequential (10.0.0.0, 10.0.0.1, …) or random (the same IPs, scattered: the worst case for SQLite's B-trees)")
	fs.DurationVar(&cfg.Settle, "settle", 0, "after the worker has drained, watch the server's memory this long while the burst expires (e.g. 3m with -period 1s)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if cfg.Identities, err = parseCounts("identities", *sizes, 1000, 16_000_000); err != nil {
		return err
	}
	for _, s := range strings.Split(*rates, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || r < 0 {
			return fmt.Errorf("-rate: %q is not a non-negative number", s)
		}
		cfg.Rates = append(cfg.Rates, r)
	}
	switch *order {
	case "sequential":
	case "random":
		cfg.Random = true
	default:
		return fmt.Errorf("-order: %q is neither sequential nor random", *order)
	}
	if cfg.Clients < 1 || cfg.Clients > 64 {
		return errors.New("-clients must be between 1 and 64")
	}
	tmp, err := os.MkdirTemp("", "sluice-worker-bench-")
	if err != nil {
		return err
	}
	if !cfg.Keep {
		defer os.RemoveAll(tmp)
	} else {
		fmt.Fprintf(stdout, "data directories and logs under %s\n", tmp)
	}
	if cfg.Server, err = serverBinary(cfg.Server, tmp); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "worker under new callers (each check a new IP, allowed: one bucket state); single process, embedded NATS and worker; %d clients, 1000 checks per request; IPs in %s order\n\n", cfg.Clients, *order)
	var rows []workerRow
	for _, n := range cfg.Identities {
		for _, rate := range cfg.Rates {
			if ctx.Err() != nil {
				break
			}
			data := filepath.Join(tmp, fmt.Sprintf("n%d-r%g", n, rate))
			r := workerCase(ctx, cfg, data, n, rate, stdout)
			rows = append(rows, r)
		}
	}
	printWorkerRows(stdout, rows)
	for _, r := range rows {
		if len(r.Memory) > 0 {
			fmt.Fprintf(stdout, "\nmemory, %d identities (%s):\n", r.Identities, paceName(r.Rate))
			printMemory(stdout, r.Memory)
		}
	}
	return nil
}

func printWorkerRows(w io.Writer, rows []workerRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "identities\tpace\tsent in\tchecks/s sent\trows/s sustained\trows/s best 5s\tpeak backlog\tpeak oldest age\tdrain after last check\t")
	for _, r := range rows {
		pace := "flood"
		if r.Rate > 0 {
			pace = fmt.Sprintf("%g/s", r.Rate)
		}
		age := "n/a"
		if r.PeakAge >= 0 {
			age = fmt.Sprintf("%.1fs", r.PeakAge)
		}
		sent := 0.0
		if r.SendTook > 0 {
			sent = float64(r.Sent) / r.SendTook.Seconds()
		}
		drain := round(r.Drain).String()
		if r.Err != "" {
			drain = r.Err
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.0f\t%.0f\t%.0f\t%d\t%s\t%s\t\n", r.Identities, pace, round(r.SendTook), sent, r.Sustained, r.Best5s, r.PeakBacklog, age, drain)
	}
	tw.Flush()
}

// workerSample is one reading of the server's metrics.
type workerSample struct {
	at        time.Time
	published int64
	rows      int64
	age       float64 // -1 when absent
}

var (
	publishedRe = regexp.MustCompile(`(?m)^sluice_bucket_states_published_total ([0-9.e+]+)`)
	rowsRe      = regexp.MustCompile(`(?m)^sluice_worker_rows_written_total\{stream="SLUICE_STATE"\} ([0-9.e+]+)`)
	ageRe       = regexp.MustCompile(`(?m)^sluice_worker_stream_oldest_unapplied_seconds\{stream="SLUICE_STATE"\} ([0-9.e+]+)`)
)

func (s *benchServer) workerSample() (workerSample, error) {
	req, _ := http.NewRequest("GET", s.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return workerSample{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return workerSample{}, err
	}
	num := func(re *regexp.Regexp) float64 {
		m := re.FindSubmatch(b)
		if m == nil {
			return -1
		}
		f, _ := strconv.ParseFloat(string(m[1]), 64)
		return f
	}
	return workerSample{at: time.Now(), published: int64(max(num(publishedRe), 0)), rows: int64(max(num(rowsRe), 0)), age: num(ageRe)}, nil
}

func workerCase(ctx context.Context, cfg workerBenchConfig, data string, n int, rate float64, log io.Writer) workerRow {
	row := workerRow{Identities: n, Rate: rate, PeakAge: -1}
	fail := func(err error) workerRow {
		row.Err = "error: " + err.Error()
		return row
	}
	token := "op_bench_" + strconv.FormatUint(rand.Uint64(), 36) + strconv.FormatUint(rand.Uint64(), 36)
	if err := os.MkdirAll(data, 0o700); err != nil {
		return fail(err)
	}
	s, err := startBenchServer(cfg.Server, data, token)
	if err != nil {
		return fail(err)
	}
	defer func() { _, _ = s.stop(syscall.SIGTERM) }()
	if _, err := s.waitFor(60*time.Second, "ready", s.ready); err != nil {
		return fail(err)
	}
	var tn struct {
		ServiceKey string `json:"service_key"`
	}
	if err := s.call("POST", "/v1/admin/tenants", token, map[string]any{"name": "bench", "owner_email": "bench@bench.test", "owner_password": "a long passphrase"}, &tn); err != nil {
		return fail(err)
	}
	var pol struct {
		ID string `json:"id"`
	}
	if err := s.call("POST", "/v1/policies", tn.ServiceKey, map[string]any{"name": "monthly", "method": "*", "path": "/api/*",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 100, "period": cfg.Period.String()}}}, &pol); err != nil {
		return fail(err)
	}
	var mem memoryWatch
	if cfg.Settle > 0 {
		mem.step(s, "before the flood")
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.Limit)
	defer cancel()

	// Sampler: every 250 ms until the case ends.
	var (
		mu      sync.Mutex
		samples []workerSample
	)
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			if smp, err := s.workerSample(); err == nil {
				mu.Lock()
				samples = append(samples, smp)
				mu.Unlock()
			}
			if cfg.Settle > 0 {
				mem.peak(s)
			}
			select {
			case <-stopSampling:
				return
			case <-cctx.Done():
				return
			case <-t.C:
			}
		}
	}()

	// Senders: batches of 1000 new IPs, handed out in order.
	const batch = 1000
	var next atomic.Int64
	var sent, allowed atomic.Int64
	var sendErr atomic.Value
	var due chan time.Time
	if rate > 0 {
		due = make(chan time.Time, cfg.Clients)
		go schedule(cctx, rate/batch, due)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range cfg.Clients {
		wg.Go(func() {
			hc := &http.Client{Timeout: 60 * time.Second}
			var body bytes.Buffer
			for cctx.Err() == nil {
				if due != nil {
					select {
					case <-cctx.Done():
						return
					case t := <-due:
						time.Sleep(time.Until(t))
					}
				}
				from := int(next.Add(batch)) - batch
				if from >= n {
					return
				}
				to := min(from+batch, n)
				body.Reset()
				body.WriteString(`{"checks":[`)
				for i := from; i < to; i++ {
					if i > from {
						body.WriteByte(',')
					}
					ip := i
					if cfg.Random {
						ip = scatter(i)
					}
					body.WriteString(`{"ip":"` + benchIP(ip) + `","path":"/api/x"}`)
				}
				body.WriteString(`]}`)
				got, ok, err := send(hc, s.url+"/v1/check/batch", tn.ServiceKey, body.Bytes(), true)
				if err != nil {
					sendErr.Store(err)
					return
				}
				sent.Add(int64(got))
				allowed.Add(int64(ok))
			}
		})
	}
	wg.Wait()
	row.SendTook = time.Since(start)
	row.Sent = int(sent.Load())
	if err, _ := sendErr.Load().(error); err != nil {
		close(stopSampling)
		<-sampled
		return fail(err)
	}
	fmt.Fprintf(log, "%d identities (%s): %d checks sent in %s, %d allowed; draining\n", n, paceName(rate), row.Sent, round(row.SendTook), allowed.Load())

	// Drained once the server has published a state for every allowed
	// check and the worker has committed as many rows.
	lastCheck := time.Now()
	want := allowed.Load()
	for {
		mu.Lock()
		var last workerSample
		if len(samples) > 0 {
			last = samples[len(samples)-1]
		}
		mu.Unlock()
		if last.published >= want && last.rows >= last.published && last.at.After(lastCheck) {
			row.Drain = last.at.Sub(lastCheck)
			break
		}
		if cctx.Err() != nil {
			close(stopSampling)
			<-sampled
			row.Err = fmt.Sprintf("not drained within -limit %s (published %d, committed %d)", cfg.Limit, last.published, last.rows)
			return row
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stopSampling)
	<-sampled

	// Figures from the samples.
	var first *workerSample
	for i := range samples {
		smp := &samples[i]
		if first == nil && smp.rows > 0 {
			first = &samples[max(i-1, 0)]
		}
		row.PeakBacklog = max(row.PeakBacklog, smp.published-smp.rows)
		row.PeakAge = max(row.PeakAge, smp.age)
		for j := i; j >= 0; j-- {
			if d := smp.at.Sub(samples[j].at); d >= 5*time.Second {
				row.Best5s = max(row.Best5s, float64(smp.rows-samples[j].rows)/d.Seconds())
				break
			}
		}
	}
	lastS := samples[len(samples)-1]
	if first != nil && lastS.at.After(first.at) {
		row.Sustained = float64(lastS.rows-first.rows) / lastS.at.Sub(first.at).Seconds()
	}
	if cfg.Settle > 0 {
		row.Memory = mem.settle(ctx, s, cfg.Settle, log)
	}
	return row
}

// scatter maps 0…2^24-1 onto itself in a scattered order (multiplication
// by an odd number modulo 2^24 is a bijection), so distinct callers stay
// distinct.
func scatter(i int) int {
	return int((uint32(i) * 2654435761) & (1<<24 - 1))
}

func paceName(rate float64) string {
	if rate == 0 {
		return "flood"
	}
	return fmt.Sprintf("%g checks/s", rate)
}
