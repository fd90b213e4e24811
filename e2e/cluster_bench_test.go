package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
)

// BenchmarkClusterCheck measures what forwarding adds to a check. Two
// servers, one worker and one NATS run as processes; checks go one at a
// time over keep-alive HTTP to s1, for identities whose partition s1 owns
// (decided in s1's memory) and for identities s2 owns (forwarded to s2 and
// answered back), and, for comparison, under a "local" policy that never
// forwards. It runs twice: with the servers' direct connections (the
// default) and with --cluster-listen off, where every forward is a NATS
// request/reply. Reports p50 and p99 per check, and for forwarded checks
// the owner round trip as s1 measured it (sluice_cluster_forward_seconds,
// median interpolated in its buckets) and the share of forward requests that went direct.
//
// "owned-forwarded-in-turns" takes owned and forwarded checks in turns and
// reports the difference of their medians beside a bare TCP round trip
// between two processes taken in the same turns, the floor of any forward.
//
//	go test ./e2e -run '^$' -bench BenchmarkClusterCheck -benchtime 3000x
func BenchmarkClusterCheck(b *testing.B) {
	b.Run("direct", func(b *testing.B) { benchClusterCheck(b, true) })
	b.Run("nats-only", func(b *testing.B) { benchClusterCheck(b, false) })
}

func benchClusterCheck(b *testing.B, direct bool) {
	var args []string
	if !direct {
		args = []string{"--cluster-listen", "off"}
	}
	tp := startTopology(b, 2, nil, args...)
	s1 := tp.servers[0]
	tn := createTenant(b, s1, "bench")
	exactID := createPolicy(b, s1, tn, limitPolicy("exact", "exact", 1_000_000_000))
	createPolicy(b, s1, tn, limitPolicy("local", "local", 1_000_000_000))
	waitFor(b, 2*time.Second, "policies on s1", func() bool {
		c, err := tryCheck(s1, tn, map[string]any{"ip": "192.0.2.1", "path": "/local", "peek": true})
		return err == nil && c.Policy == "local"
	})

	owners := tp.partitionOwners()
	var mine, theirs []string
	for i := 0; len(mine) < 256 || len(theirs) < 256; i++ {
		ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		switch owners[bus.Partition([]byte(tn.ID+"/"+exactID+"/ip:"+ip))] {
		case "s1":
			mine = append(mine, ip)
		case "s2":
			theirs = append(theirs, ip)
		}
	}
	mine, theirs = mine[:256], theirs[:256]
	// A few forwards first: the direct connection is made in the
	// background while the first ones go over NATS.
	for i := range 20 {
		if _, err := tryCheck(s1, tn, map[string]any{"ip": theirs[i], "path": "/exact"}); err != nil {
			b.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	cases := []struct {
		name, path string
		ips        []string
	}{
		{"exact-owned", "/exact", mine},
		{"exact-forwarded", "/exact", theirs},
		{"local", "/local", theirs},
	}
	if !direct {
		cases = cases[:2] // the others do not depend on the transport
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			before := forwardStats(b, s1)
			lat := make([]time.Duration, 0, b.N)
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				r, err := tryCheck(s1, tn, map[string]any{"ip": c.ips[i%len(c.ips)], "path": c.path})
				if err != nil || !r.Allowed {
					b.Fatalf("check: %+v, %v", r, err)
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			if after := forwardStats(b, s1); after.count > before.count {
				n := after.count - before.count
				b.ReportMetric(after.p50(before)*1e6, "owner-rtt-p50-µs")
				b.ReportMetric((after.direct-before.direct)/n*100, "direct-%")
			}
		})
	}
	if !direct {
		return
	}

	// The same two kinds of check taken in turns, so that the machine's
	// drift between sub-benchmarks (its loopback latency moves by tens of
	// µs within minutes) weighs on both alike: "added-p50-µs" is what
	// forwarding adds to the median check.
	// Each turn also takes a bare TCP round trip to an echo process, which
	// sits idle between turns as s2 does: the floor of a forward from an
	// idle process to another ("tcp-p50-µs").
	b.Run("owned-forwarded-in-turns", func(b *testing.B) {
		echo := dialEcho(b)
		owned := make([]time.Duration, 0, b.N)
		fwd := make([]time.Duration, 0, b.N)
		bare := make([]time.Duration, 0, b.N)
		for i := 0; b.Loop(); i++ {
			bare = append(bare, echo())
			for k, ips := range [][]string{mine, theirs} {
				start := time.Now()
				r, err := tryCheck(s1, tn, map[string]any{"ip": ips[i%len(ips)], "path": "/exact"})
				if err != nil || !r.Allowed {
					b.Fatalf("check: %+v, %v", r, err)
				}
				if k == 0 {
					owned = append(owned, time.Since(start))
				} else {
					fwd = append(fwd, time.Since(start))
				}
			}
		}
		slices.Sort(owned)
		slices.Sort(fwd)
		slices.Sort(bare)
		b.ReportMetric(float64(bare[len(bare)/2].Microseconds()), "tcp-p50-µs")
		o, f := owned[len(owned)/2], fwd[len(fwd)/2]
		b.ReportMetric(float64(o.Microseconds()), "owned-p50-µs")
		b.ReportMetric(float64(f.Microseconds()), "forwarded-p50-µs")
		b.ReportMetric(float64((f - o).Microseconds()), "added-p50-µs")
	})

	// The floor of any forward between two processes: a bare TCP round
	// trip with a forward-sized payload between this process and an echo
	// process of its own, on loopback, one at a time.
	// The same round trips back to back, where neither process has time
	// to fall idle.
	b.Run("tcp-round-trip-back-to-back", func(b *testing.B) {
		echo := dialEcho(b)
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			lat = append(lat, echo())
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	})

	// The transport's own floor: one NATS request/reply through the same
	// nats-server, between two connections, with a forward-sized payload.
	b.Run("nats-request-reply", func(b *testing.B) {
		resp, err := nats.Connect(tp.natsURL())
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Close()
		if _, err := resp.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
			b.Fatal(err)
		}
		resp.Flush()
		req, err := nats.Connect(tp.natsURL())
		if err != nil {
			b.Fatal(err)
		}
		defer req.Close()
		payload := make([]byte, 160)
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			start := time.Now()
			if _, err := req.Request("bench.echo", payload, 2*time.Second); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	})
}

type fwdStats struct {
	count, direct float64
	buckets       map[float64]float64 // upper bound (s) -> cumulative count
}

// p50 estimates the median forward round trip since before from the
// histogram's buckets, interpolating linearly within the bucket.
func (s fwdStats) p50(before fwdStats) float64 {
	var bounds []float64
	for le := range s.buckets {
		bounds = append(bounds, le)
	}
	slices.Sort(bounds)
	half := (s.count - before.count) / 2
	lo, below := 0.0, 0.0
	for _, le := range bounds {
		n := s.buckets[le] - before.buckets[le]
		if n >= half {
			return lo + (le-lo)*(half-below)/max(n-below, 1)
		}
		lo, below = le, n
	}
	return lo
}

var (
	fwdBucketRe = regexp.MustCompile(`(?m)^sluice_cluster_forward_seconds_bucket\{le="([0-9.e+-]+)"\} (\S+)`)
	fwdCountRe  = regexp.MustCompile(`(?m)^sluice_cluster_forward_seconds_count (\S+)`)
	fwdDirectRe = regexp.MustCompile(`(?m)^sluice_cluster_forward_requests_total\{transport="direct"\} (\S+)`)
)

// forwardStats reads s's forward round trips from /metrics.
func forwardStats(t testing.TB, s *server) fwdStats {
	req, _ := http.NewRequest("GET", s.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	num := func(re *regexp.Regexp) float64 {
		m := re.FindSubmatch(body)
		if m == nil {
			return 0
		}
		f, _ := strconv.ParseFloat(string(m[1]), 64)
		return f
	}
	st := fwdStats{count: num(fwdCountRe), direct: num(fwdDirectRe), buckets: map[float64]float64{}}
	for _, m := range fwdBucketRe.FindAllSubmatch(body, -1) {
		le, _ := strconv.ParseFloat(string(m[1]), 64)
		n, _ := strconv.ParseFloat(string(m[2]), 64)
		st.buckets[le] = n
	}
	return st
}

// echoEnv makes the test binary an echo process (see TestMain); a value
// that is a host:port is the address it listens on.
const echoEnv = "SLUICE_E2E_ECHO"

// startEcho starts this test binary again as an echo process on loopback
// and returns its address. The process ends when its connection closes.
func startEcho(b *testing.B) string {
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), echoEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	return addr[:len(addr)-1]
}

// dialEcho starts an echo process and returns a function that takes one
// round trip of a forward-sized payload to it.
func dialEcho(b *testing.B) func() time.Duration {
	conn, err := net.Dial("tcp", startEcho(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	payload := make([]byte, 120)
	reply := make([]byte, len(payload))
	return func() time.Duration {
		start := time.Now()
		if _, err := conn.Write(payload); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(conn, reply); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
}

// serveEcho answers one connection on loopback by echoing what it reads,
// then exits.
func serveEcho() {
	addr := "127.0.0.1:0"
	if v := os.Getenv(echoEnv); strings.Contains(v, ":") {
		addr = v // a fixed address (the network lab's echo host)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	c, err := ln.Accept()
	if err != nil {
		os.Exit(1)
	}
	_, _ = io.Copy(c, c)
	os.Exit(0)
}
