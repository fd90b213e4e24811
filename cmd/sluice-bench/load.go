package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Result is one target's numbers.
type Result struct {
	Target    string
	Elapsed   time.Duration
	Requests  int // HTTP requests answered 200
	Checks    int // checks decided (Requests × batch size in batch mode)
	Allowed   int
	Denied    int
	Errors    int             // transport errors and non-200 answers
	Latencies []time.Duration // of answered requests, sorted
}

// Quantile returns the q-quantile latency (0 ≤ q ≤ 1).
func (r Result) Quantile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(q * float64(len(r.Latencies)-1))
	return r.Latencies[i]
}

// RPS is answered requests per second.
func (r Result) RPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

type workerStats struct {
	requests, checks, allowed, denied, errors int
	latencies                                 []time.Duration
}

// requestTimeout bounds one request, so a run ends at most this long after
// its duration even when the target hangs.
const requestTimeout = 5 * time.Second

// Load runs cfg's load against baseURL for cfg.Duration. baseURL may list
// several servers separated by commas (a cluster); worker w sends to the
// w-th, round-robin.
func Load(ctx context.Context, cfg Config, target, baseURL, key string) Result {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        cfg.Workers,
		MaxIdleConnsPerHost: cfg.Workers,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: requestTimeout}
	var endpoints []string
	for _, u := range strings.Split(baseURL, ",") {
		e := strings.TrimRight(u, "/") + "/v1/check"
		if cfg.Mode == "batch" {
			e += "/batch"
		}
		endpoints = append(endpoints, e)
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()

	// In open loop, due carries each request's scheduled send time.
	var due chan time.Time
	if cfg.Rate > 0 {
		due = make(chan time.Time)
		go schedule(ctx, cfg.Rate, due)
	}

	start := time.Now()
	stats := make([]workerStats, cfg.Workers)
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Go(func() {
			st := &stats[w]
			endpoint := endpoints[w%len(endpoints)]
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			var body []byte
			for {
				sent := time.Now()
				if due != nil {
					var ok bool
					if sent, ok = <-due; !ok {
						return
					}
					if wait := time.Until(sent); wait > 0 {
						select {
						case <-time.After(wait):
						case <-ctx.Done():
							return
						}
						// On time: the timer's own lateness is not the server's.
						sent = time.Now()
					}
				} else if ctx.Err() != nil {
					return
				}
				body = appendBody(body[:0], cfg, rng)
				n, allowed, err := send(hc, endpoint, key, body, cfg.Mode == "batch")
				if err != nil {
					st.errors++
					if due == nil {
						time.Sleep(time.Millisecond) // do not spin on a target that refuses
					}
					continue
				}
				st.latencies = append(st.latencies, time.Since(sent))
				st.requests++
				st.checks += n
				st.allowed += allowed
				st.denied += n - allowed
			}
		})
	}
	wg.Wait()

	r := Result{Target: target, Elapsed: time.Since(start)}
	for _, st := range stats {
		r.Requests += st.requests
		r.Checks += st.checks
		r.Allowed += st.allowed
		r.Denied += st.denied
		r.Errors += st.errors
		r.Latencies = append(r.Latencies, st.latencies...)
	}
	slices.Sort(r.Latencies)
	return r
}

// schedule hands out each request's due time, rate per second, until ctx
// ends. It never skips a slot: if workers fall behind, requests queue and
// their latency counts the wait.
func schedule(ctx context.Context, rate float64, due chan<- time.Time) {
	defer close(due)
	interval := time.Duration(float64(time.Second) / rate)
	for next := time.Now(); ; next = next.Add(interval) {
		select {
		case due <- next:
		case <-ctx.Done():
			return
		}
	}
}

// appendBody appends one request body: a check, or a batch of them.
func appendBody(b []byte, cfg Config, rng *rand.Rand) []byte {
	if cfg.Mode == "check" {
		return appendCheck(b, cfg, rng)
	}
	b = append(b, `{"checks":[`...)
	for i := range cfg.BatchSize {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendCheck(b, cfg, rng)
	}
	return append(b, "]}"...)
}

func appendCheck(b []byte, cfg Config, rng *rand.Rand) []byte {
	b = append(b, `{"method":"GET","path":`...)
	b = strconv.AppendQuote(b, cfg.Path)
	b = append(b, `,"ip":"`...)
	b = appendIP(b, cfg.Identities, rng)
	return append(b, `"}`...)
}

// appendIP writes the caller: 198.51.100.1 when there is one hot identity,
// else one of k addresses counted up from 10.0.0.1.
func appendIP(b []byte, k int, rng *rand.Rand) []byte {
	if k == 0 {
		return append(b, "198.51.100.1"...)
	}
	n := uint32(rng.IntN(k)) + 1
	b = append(b, "10."...)
	b = strconv.AppendUint(b, uint64(n>>16&0xff), 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(n>>8&0xff), 10)
	b = append(b, '.')
	return strconv.AppendUint(b, uint64(n&0xff), 10)
}

type answer struct {
	Allowed bool `json:"allowed"`
}

// send posts one body and returns how many checks were decided and how
// many allowed.
func send(hc *http.Client, endpoint, key string, body []byte, batch bool) (n, allowed int, err error) {
	req, err := http.NewRequest(http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	if batch {
		var b struct {
			Results []answer `json:"results"`
		}
		if err := json.Unmarshal(data, &b); err != nil {
			return 0, 0, err
		}
		for _, a := range b.Results {
			if a.Allowed {
				allowed++
			}
		}
		return len(b.Results), allowed, nil
	}
	var a answer
	if err := json.Unmarshal(data, &a); err != nil {
		return 0, 0, err
	}
	if a.Allowed {
		allowed = 1
	}
	return 1, allowed, nil
}

func printTable(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\treq/s\tchecks/s\tp50\tp90\tp99\tmax\tallowed\tdenied\terrors\tvs floor\t")
	var floor float64
	for _, r := range results {
		if r.Target == "floor (echo)" {
			floor = r.RPS()
		}
	}
	for _, r := range results {
		ratio := "-"
		if floor > 0 {
			ratio = fmt.Sprintf("%.2fx", r.RPS()/floor)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%v\t%v\t%v\t%v\t%d\t%d\t%d\t%s\t\n",
			r.Target, r.RPS(), float64(r.Checks)/max(r.Elapsed.Seconds(), 1e-9),
			round(r.Quantile(0.50)), round(r.Quantile(0.90)), round(r.Quantile(0.99)), round(r.Quantile(1)),
			r.Allowed, r.Denied, r.Errors, ratio)
	}
	tw.Flush()
}

// round keeps latencies readable: microseconds below 10 ms.
func round(d time.Duration) time.Duration {
	if d < 10*time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(100 * time.Microsecond)
}
