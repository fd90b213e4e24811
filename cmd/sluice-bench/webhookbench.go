package main

// The webhooks scenario: whether webhook delivery keeps up with a stream
// of quota threshold events without slowing checks. It starts NATS and a
// whole server in this process (embedded worker, SQLite in a temporary
// directory), a local HTTPS receiver, a tenant with an open policy and an
// endpoint for quota.threshold at 80 %, then runs two phases of -duration
// each with the same closed-loop check load (-workers clients on
// /v1/check, every check allowed):
//
//   - checks alone;
//   - checks while -rate threshold events/s are published to the quota
//     stream, every 10 ms a batch, each batch twice (two "servers" that saw
//     the same crossings, as the worker must send each once), every event
//     for a key of its own.
//
// It prints checks/s and check latency for both phases, and for the
// events: delivered/s while publishing, the delivery latency (from the
// decision's time in the crossing to the receiver's answer) at p50, p99
// and max, duplicates received, and how long after the last publish the
// last delivery arrived.
//
//	go run ./cmd/sluice-bench webhooks -rate 1000 -duration 10s

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/app"
	"github.com/sluicehq/sluice/internal/bus"
)

type webhookBenchConfig struct {
	Rate     int
	Duration time.Duration
	Workers  int
	// CheckRate paces the checks (per second, all clients together); 0
	// sends them as fast as answers come back.
	CheckRate float64
	Keep      bool
}

func runWebhookBench(ctx context.Context, args []string, stdout io.Writer) error {
	var cfg webhookBenchConfig
	fs := flag.NewFlagSet("sluice-bench webhooks", flag.ContinueOnError)
	fs.IntVar(&cfg.Rate, "rate", 1000, "quota threshold events per second")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "each phase's length")
	fs.IntVar(&cfg.Workers, "workers", 8, "concurrent keep-alive check clients")
	fs.Float64Var(&cfg.CheckRate, "check-rate", 0, "checks per second, paced (latency counted from when each was due); 0 = as fast as answers come back")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the data directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.Rate < 100 || cfg.Rate > 100_000 || cfg.Duration <= 0 || cfg.Workers < 1 {
		return errors.New("want -rate between 100 and 100000, a positive -duration and -workers")
	}
	dir, err := os.MkdirTemp("", "sluice-webhook-bench-")
	if err != nil {
		return err
	}
	if !cfg.Keep {
		defer os.RemoveAll(dir)
	}

	// The receiver: answers 204 at once and notes when each event came.
	var mu sync.Mutex
	var latencies []time.Duration
	seen := map[string]int{}
	var delivered atomic.Int64
	var lastAt atomic.Int64
	recv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		now := time.Now()
		var ev struct {
			Data struct {
				KeyID string `json:"key_id"`
			} `json:"data"`
		}
		_ = json.Unmarshal(body, &ev)
		mu.Lock()
		seen[ev.Data.KeyID]++
		if sent, ok := sentAt.Load(ev.Data.KeyID); ok {
			latencies = append(latencies, now.Sub(sent.(time.Time)))
		}
		mu.Unlock()
		delivered.Add(1)
		lastAt.Store(now.UnixNano())
		w.WriteHeader(http.StatusNoContent)
	}))
	recv.EnableHTTP2 = false
	recv.StartTLS()
	defer recv.Close()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: recv.Certificate().Raw}), 0o600); err != nil {
		return err
	}

	// The server's embedded NATS listens on loopback, so that this program
	// can publish to the quota stream as another server would, with the
	// server's role key.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	natsAddr := ln.Addr().String()
	ln.Close()

	const token = "op_webhook_bench_0123456789abcdefghij"
	scfg := app.DefaultConfig()
	scfg.Addr, scfg.Data, scfg.Node = "127.0.0.1:0", filepath.Join(dir, "server"), "bench"
	scfg.NatsListen = natsAddr
	scfg.OperatorToken = token
	scfg.Webhooks.AllowPrivate, scfg.Webhooks.CAFile = true, ca
	m := app.NewMain(scfg, slog.New(slog.DiscardHandler))
	m.Out = io.Discard
	if err := m.Run(ctx); err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = m.Close(cctx)
	}()
	for !m.Engine().Ready() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}
	base := "http://" + m.Addr()
	var tn map[string]any
	if err := postJSON(base+"/v1/admin/tenants", token, `{"name":"bench","owner_email":"bench@bench.test","owner_password":"a long passphrase"}`, &tn); err != nil {
		return err
	}
	sk, tenantID := tn["service_key"].(string), tn["id"].(string)
	if err := postJSON(base+"/v1/policies", sk, `{"name":"open","path":"/api/open","tiers":{"anonymous":{"algorithm":"token_bucket","limit":1000000000,"period":"1s"}}}`, nil); err != nil {
		return err
	}
	if err := postJSON(base+"/v1/webhooks", sk, `{"url":"`+recv.URL+`/hook","events":["quota.threshold"],"thresholds":[80]}`, nil); err != nil {
		return err
	}
	time.Sleep(time.Second)

	keys, err := bus.EnsureRoleKeys(scfg.Data)
	if err != nil {
		return err
	}
	nc, err := bus.Connect("nats://"+natsAddr, nil, "webhook-bench", bus.Auth{NKeyFile: keys.ServerSeedFile}, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}

	checksAlone := runChecks(ctx, base, sk, cfg.Workers, cfg.CheckRate, cfg.Duration)

	// Events: every 10 ms a batch of rate/100 crossings, published by two
	// "servers".
	published := 0
	publish := func(stop <-chan struct{}) error {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		begin := time.Now()
		start, end := begin.Add(-time.Hour).Unix(), begin.Add(30*24*time.Hour).Unix()
		for batch := 0; ; batch++ {
			select {
			case <-stop:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
			}
			// As many as are due by now: a tick that came late sends more.
			at := time.Now()
			cs := make([]bus.QuotaCrossing, int(float64(cfg.Rate)*at.Sub(begin).Seconds())-published)
			for i := range cs {
				key := "ck_bench_" + strconv.Itoa(published+i)
				sentAt.Store(key, at)
				cs[i] = bus.QuotaCrossing{TenantID: tenantID, KeyID: key, Policy: "open", Limit: "monthly", Calendar: "month",
					Quota: 100, Before: 79, After: 80, PeriodStart: start, PeriodEnd: end, At: at.UnixNano()}
			}
			published += len(cs)
			for _, node := range []string{"a", "b"} {
				data, _ := json.Marshal(bus.QuotaBatch{V: bus.WireVersion, Node: node, Crossings: cs})
				if _, err := js.PublishAsync(bus.QuotaSubjectPrefix+node, data, jetstream.WithMsgID(node+"-"+strconv.Itoa(batch))); err != nil {
					return err
				}
			}
		}
	}
	// Deliveries counted after the first 2 s of publishing, when the
	// pipeline is full, give the sustained rate.
	var steadyFrom atomic.Int64
	go func() {
		select {
		case <-time.After(2 * time.Second):
			steadyFrom.Store(delivered.Load())
		case <-ctx.Done():
		}
	}()
	if path := os.Getenv("SLUICE_BENCH_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	stop := make(chan struct{})
	pubDone := make(chan error, 1)
	pubStart := time.Now()
	go func() { pubDone <- publish(stop) }()
	checksWith := runChecks(ctx, base, sk, cfg.Workers, cfg.CheckRate, cfg.Duration)
	close(stop)
	if err := <-pubDone; err != nil {
		return err
	}
	pubEnd := time.Now()
	steady := float64(delivered.Load()-steadyFrom.Load()) / (pubEnd.Sub(pubStart) - 2*time.Second).Seconds()
	deadline := time.Now().Add(2 * time.Minute)
	for delivered.Load() < int64(published) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	drain := time.Duration(lastAt.Load() - pubEnd.UnixNano())

	mu.Lock()
	defer mu.Unlock()
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	slices.Sort(latencies)
	q := func(p float64) time.Duration {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[min(len(latencies)-1, int(p*float64(len(latencies))))]
	}
	pace := "as fast as answered"
	if cfg.CheckRate > 0 {
		pace = fmt.Sprintf("paced at %.0f/s", cfg.CheckRate)
	}
	fmt.Fprintf(stdout, "webhooks: %d threshold events/s for %s (each batch published by two nodes), %d check clients %s; GOMAXPROCS %d\n\n",
		cfg.Rate, cfg.Duration, cfg.Workers, pace, runtime.GOMAXPROCS(0))
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tchecks/s\tcheck p50\tcheck p99\t")
	fmt.Fprintf(tw, "checks alone\t%.0f\t%s\t%s\t\n", checksAlone.rate, fmtDur(checksAlone.p50), fmtDur(checksAlone.p99))
	fmt.Fprintf(tw, "checks + events\t%.0f\t%s\t%s\t\n", checksWith.rate, fmtDur(checksWith.p50), fmtDur(checksWith.p99))
	tw.Flush()
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "events published\tpublished/s\tdelivered\tduplicates\tdelivered/s after the first 2 s\tlatency p50\tp99\tmax\tlast delivery after last publish\t")
	fmt.Fprintf(tw, "%d\t%.0f\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t\n", published, float64(published)/pubEnd.Sub(pubStart).Seconds(), delivered.Load(), dups,
		steady, fmtDur(q(0.5)), fmtDur(q(0.99)), fmtDur(q(1)), fmtDur(max(drain, 0)))
	return tw.Flush()
}

// sentAt is when each benchmark key's crossing was published.
var sentAt sync.Map

type checkFigures struct {
	rate     float64
	p50, p99 time.Duration
}

// runChecks sends allowed checks from workers clients for d, paced at
// rate per second when rate > 0 (each check's latency then counts from
// when it was due, so falling behind shows).
func runChecks(ctx context.Context, base, sk string, workers int, rate float64, d time.Duration) checkFigures {
	var wg sync.WaitGroup
	lats := make([][]time.Duration, workers)
	end := time.Now().Add(d)
	for w := range workers {
		wg.Go(func() {
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			body := []byte(`{"ip":"198.51.100.` + strconv.Itoa(w+1) + `","path":"/api/open"}`)
			due := time.Now()
			for time.Now().Before(end) && ctx.Err() == nil {
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/check", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+sk)
				req.Header.Set("Content-Type", "application/json")
				t0 := time.Now()
				if rate > 0 {
					time.Sleep(time.Until(due))
					t0 = due
					due = due.Add(time.Duration(float64(workers) / rate * float64(time.Second)))
				}
				resp, err := c.Do(req)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lats[w] = append(lats[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	if len(all) == 0 {
		return checkFigures{}
	}
	return checkFigures{rate: float64(len(all)) / d.Seconds(), p50: all[len(all)/2], p99: all[len(all)*99/100]}
}

func postJSON(url, token, body string, out any) error {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%d µs", d.Microseconds())
}
