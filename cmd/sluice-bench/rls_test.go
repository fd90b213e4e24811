package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestQuantile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var d []time.Duration
		for _, n := range ns {
			d = append(d, time.Duration(n)*time.Millisecond)
		}
		return d
	}
	hundred := make([]int, 100)
	thousand := make([]int, 1000)
	for i := range thousand {
		if i < 100 {
			hundred[i] = i + 1
		}
		thousand[i] = i + 1
	}
	for _, tc := range []struct {
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{nil, 0.5, 0},
		{ms(7), 0.5, 7 * time.Millisecond},
		{ms(7), 0.999, 7 * time.Millisecond},
		{ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond}, // nearest rank: ceil(0.5×4) = 2nd
		{ms(1, 2, 3, 4), 1, 4 * time.Millisecond},
		{ms(hundred...), 0.5, 50 * time.Millisecond},
		{ms(hundred...), 0.99, 99 * time.Millisecond},
		{ms(hundred...), 0.999, 100 * time.Millisecond},
		{ms(thousand...), 0.999, 999 * time.Millisecond},
		{ms(thousand...), 0.001, 1 * time.Millisecond},
		{ms(1, 2), 0, 1 * time.Millisecond}, // clamped to the first
	} {
		if got := quantile(tc.sorted, tc.q); got != tc.want {
			t.Errorf("quantile(%d values, %g) = %v, want %v", len(tc.sorted), tc.q, got, tc.want)
		}
	}
}

func TestRLSTargetsLoopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:8081": true, "localhost:8081": true, "[::1]:8081": true, "127.8.9.10:1": true,
		"10.0.0.1:8081": false, "192.168.1.2:8081": false, "ratelimit.example:8081": false,
		"0.0.0.0:8081": false, ":8081": false, "127.0.0.1": false, "[::]:8081": false,
		"http://127.0.0.1:8081": false, "127.0.0.1:": false,
	} {
		if err := checkLoopbackAddr(addr); (err == nil) != ok {
			t.Errorf("checkLoopbackAddr(%q) = %v", addr, err)
		}
	}
	for v, want := range map[string]rlsTarget{
		"reference=127.0.0.1:18381": {"reference", "127.0.0.1:18381"},
		"127.0.0.1:8081":            {"127.0.0.1:8081", "127.0.0.1:8081"},
	} {
		if got, err := parseTarget(v); err != nil || got != want {
			t.Errorf("parseTarget(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, args := range [][]string{
		{"-target", "sluice=10.1.2.3:8081"},
		{"-target", "127.0.0.1:8081", "-batch-url", "http://192.168.0.1:8080"},
		{"-target", "=127.0.0.1:8081"},
		{},
	} {
		if _, err := parseRLSFlags(args, io.Discard); err == nil {
			t.Errorf("parseRLSFlags(%q) accepted", args)
		}
	}
}

// fakeRLS answers OVER_LIMIT to any descriptor on path=/limited and OK to
// the rest, and refuses calls without the service key.
type fakeRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
}

func (fakeRLS) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if a := md.Get("authorization"); len(a) != 1 || a[0] != "Bearer sk_bench" {
		return nil, status.Error(codes.Unauthenticated, "no service key")
	}
	code := rlspb.RateLimitResponse_OK
	for _, d := range req.GetDescriptors() {
		for _, e := range d.GetEntries() {
			if e.GetKey() == "path" && e.GetValue() == limitedPath {
				code = rlspb.RateLimitResponse_OVER_LIMIT
			}
		}
	}
	return &rlspb.RateLimitResponse{OverallCode: code}, nil
}

// TestRLSAgainstAFake loads an in-process stand-in briefly: every
// workload's row, its OK and OVER_LIMIT counts, and the count bound.
func TestRLSAgainstAFake(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(srv, fakeRLS{})
	go srv.Serve(lis)
	defer srv.Stop()
	addr := lis.Addr().String()

	rows := func(out string) map[string][]string {
		m := map[string][]string{}
		for line := range strings.Lines(out) {
			if f := strings.Split(line, "|"); len(f) == 13 && f[1] != " workload " && !strings.HasPrefix(f[1], "-") {
				for i := range f {
					f[i] = strings.TrimSpace(f[i])
				}
				m[f[1]+"/"+f[2]] = f[1:12]
			}
		}
		return m
	}

	var out bytes.Buffer
	err = runRLS(context.Background(), []string{"-target", "fake=" + addr, "-target", "again=" + addr, "-key", "sk_bench",
		"-duration", "200ms", "-conns", "2", "-concurrency", "4", "-distinct", "50"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	got := rows(out.String())
	for _, w := range allWorkloads {
		for _, target := range []string{"fake", "again"} {
			r := got[w+"/"+target]
			if r == nil {
				t.Fatalf("no row for %s on %s:\n%s", w, target, out.String())
			}
			ok, over, errs := r[7], r[8], r[9]
			if errs != "0" || (w == "over") != (ok == "0") || (w == "over") == (over == "0") {
				t.Errorf("%s on %s: OK %s, OVER_LIMIT %s, errors %s\n%s", w, target, ok, over, errs, out.String())
			}
		}
	}
	if r := got["multi/fake"]; r[3] == r[2] {
		t.Errorf("multi: decisions/s %s should be 3 × req/s %s", r[3], r[2])
	}

	// At most -max-requests per run; no key: every call refused and counted.
	out.Reset()
	err = runRLS(context.Background(), []string{"-target", addr, "-workloads", "hot", "-max-requests", "50", "-duration", "5s", "-concurrency", "8"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	r := rows(out.String())["hot/"+addr]
	if r == nil || r[7] != "0" || r[9] != "50" || !strings.Contains(out.String(), "Unauthenticated") {
		t.Errorf("want 50 refused calls and the first error named:\n%s", out.String())
	}
}
