package e2e

// Envoy's rate limit service, driven as Envoy drives it: the
// go-control-plane client over gRPC against real server processes, with
// the reference server's YAML applied by the real sluice command.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The reference server's configuration format, every feature in one
// domain; a second file holds a month quota.
const rlsEdgeYAML = `domain: edge
descriptors:
  # per client address, 5 a minute
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 5
  # a value of its own wins over the bare key
  - key: path
    value: /login
    rate_limit:
      name: login
      unit: hour
      requests_per_unit: 2
  - key: path
    rate_limit:
      unit: hour
      requests_per_unit: 1000
    descriptors:
      - key: user
        rate_limit:
          unit: minute
          requests_per_unit: 3
  - key: path
    value: /health
    rate_limit:
      unlimited: true
  - key: plan
    value: premium
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces:
        - name: login
  - key: canary
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: files
    value: "img-*"
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: tokens
    detailed_metric: true
    rate_limit:
      unit: hour
      requests_per_unit: 100
  # a wildcard in the middle of a value
  - key: route
    value: "/v1/*/items"
    value_to_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: quota
    quota_mode: true
    rate_limit:
      unit: day
      requests_per_unit: 1
  # Sluice's own fields: a token bucket with a burst, and a month quota
  # beside it in the tenant's time zone
  - key: api_key
    rate_limit:
      unit: second
      requests_per_unit: 1
    sluice:
      algorithm: token_bucket
      burst: 2
      limits:
        - {name: monthly, calendar: month, requests_per_unit: 1000}
`

const rlsMonthYAML = `domain: billing
descriptors:
  - key: customer
    rate_limit:
      unit: month
      requests_per_unit: 3
  # LLM tokens: looked at before a request, charged when its response ends
  - key: model
    rate_limit:
      unit: hour
      requests_per_unit: 1000
`

type rlsClient struct {
	t    testing.TB
	conn *grpc.ClientConn
	key  string
}

func dialRLS(t testing.TB, addr, key string) *rlsClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rlsClient{t: t, conn: conn, key: key}
}

func (c *rlsClient) call(domain string, ds ...*rlcommon.RateLimitDescriptor) (*pb.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c.key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.key)
	}
	return pb.NewRateLimitServiceClient(c.conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: ds})
}

func (c *rlsClient) must(domain string, ds ...*rlcommon.RateLimitDescriptor) *pb.RateLimitResponse {
	c.t.Helper()
	r, err := c.call(domain, ds...)
	if err != nil {
		c.t.Fatalf("ShouldRateLimit %s: %v", domain, err)
	}
	return r
}

func rd(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// sluiceApply runs the real sluice command's apply on a file.
func sluiceApply(t testing.TB, bin, base, key, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "apply", "-f", path)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "SLUICE_URL=" + base, "SLUICE_SERVICE_KEY=" + key}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("sluice apply -f %s: %v\n%s", name, err, out.String())
	}
	return out.String()
}

func codes1(r *pb.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(r.GetOverallCode().String())
	for _, s := range r.GetStatuses() {
		fmt.Fprintf(&b, " %s/%d", s.GetCode(), s.GetLimitRemaining())
	}
	return b.String()
}

// TestRLSSingleServer: every configuration feature through the gRPC door
// of one real server, bad configurations and requests answered as the
// reference answers them, health and reflection, and a month quota that
// survives a restart.
func TestRLSSingleServer(t *testing.T) {
	bin := buildSluice(t)
	grpcAddr := freeAddr(t)
	s := startServer(t, serverOpts{extra: []string{"--grpc-addr", grpcAddr, "--grpc-ratelimit-headers"}})
	tn := createTenant(t, s, "envoy")
	out := sluiceApply(t, bin, s.base, tn.Key, "edge.yaml", rlsEdgeYAML)
	if !strings.Contains(out, "Applied: 12 created") {
		t.Fatalf("apply: %s", out)
	}
	sluiceApply(t, bin, s.base, tn.Key, "billing.yaml", rlsMonthYAML)
	c := dialRLS(t, grpcAddr, tn.Key)
	waitFor(t, 2*time.Second, "the rules on the server", func() bool {
		r, err := c.call("edge", rd("remote_address", "192.0.2.200"))
		return err == nil && r.GetStatuses()[0].GetCurrentLimit() != nil
	})

	// remote_address: 5 a minute per address (one taken above by the wait).
	var got []string
	for i := 0; i < 5; i++ {
		got = append(got, codes1(c.must("edge", rd("remote_address", "192.0.2.1"))))
	}
	want := []string{"OK OK/4", "OK OK/3", "OK OK/2", "OK OK/1", "OK OK/0"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("five calls: %v, want %v", got, want)
	}
	r := c.must("edge", rd("remote_address", "192.0.2.1"))
	if r.GetOverallCode() != pb.RateLimitResponse_OVER_LIMIT || r.GetStatuses()[0].GetCurrentLimit().GetUnit() != pb.RateLimitResponse_RateLimit_MINUTE ||
		r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 5 || r.GetStatuses()[0].GetDurationUntilReset().AsDuration() > time.Minute {
		t.Fatalf("sixth call: %v", r)
	}
	if len(r.GetResponseHeadersToAdd()) == 0 {
		t.Fatalf("no rate-limit headers with --grpc-ratelimit-headers: %v", r)
	}

	for _, tc := range []struct {
		name string
		ds   []*rlcommon.RateLimitDescriptor
		want string
	}{
		{"exact value over the bare key", []*rlcommon.RateLimitDescriptor{rd("path", "/login")}, "OK OK/1"},
		{"bare key", []*rlcommon.RateLimitDescriptor{rd("path", "/other")}, "OK OK/999"},
		{"nested, same depth", []*rlcommon.RateLimitDescriptor{rd("path", "/other", "user", "u")}, "OK OK/2"},
		{"deeper than the tree: no limit", []*rlcommon.RateLimitDescriptor{rd("remote_address", "192.0.2.9", "x", "y")}, "OK OK/0"},
		{"no rule: no limit", []*rlcommon.RateLimitDescriptor{rd("nothing", "x")}, "OK OK/0"},
		{"unlimited", []*rlcommon.RateLimitDescriptor{rd("path", "/health")}, "OK OK/4294967295"},
		{"replaces", []*rlcommon.RateLimitDescriptor{rd("path", "/login"), rd("plan", "premium")}, "OK OK/0 OK/99"},
		{"shadow, first", []*rlcommon.RateLimitDescriptor{rd("canary", "c")}, "OK OK/0"},
		{"shadow, over: answered OK", []*rlcommon.RateLimitDescriptor{rd("canary", "c")}, "OK OK/0"},
		{"share_threshold shares a counter", []*rlcommon.RateLimitDescriptor{rd("files", "img-1"), rd("files", "img-2"), rd("files", "img-3")}, "OVER_LIMIT OK/1 OK/0 OVER_LIMIT/0"},
		{"every descriptor evaluated: OR", []*rlcommon.RateLimitDescriptor{rd("remote_address", "192.0.2.1"), rd("remote_address", "192.0.2.2")}, "OVER_LIMIT OVER_LIMIT/0 OK/4"},
		{"a wildcard in the middle", []*rlcommon.RateLimitDescriptor{rd("route", "/v1/orders/items"), rd("route", "/v1/orders/items")}, "OVER_LIMIT OK/0 OVER_LIMIT/0"},
		{"the wildcard does not match past its literal end", []*rlcommon.RateLimitDescriptor{rd("route", "/v1/orders/items/7")}, "OK OK/0"},
		{"quota mode: one of two quota descriptors over is OK", []*rlcommon.RateLimitDescriptor{rd("quota", "q"), rd("quota", "q")}, "OK OK/0 OVER_LIMIT/0"},
		{"quota mode: every quota descriptor over", []*rlcommon.RateLimitDescriptor{rd("quota", "q")}, "OVER_LIMIT OVER_LIMIT/0"},
		{"token bucket with a burst of 2", []*rlcommon.RateLimitDescriptor{rd("api_key", "a"), rd("api_key", "a"), rd("api_key", "a")}, "OVER_LIMIT OK/1 OK/0 OVER_LIMIT/0"},
		{"an oversized value is decided, not refused", []*rlcommon.RateLimitDescriptor{rd("remote_address", strings.Repeat("v", 64<<10)), rd("remote_address", strings.Repeat("v", 64<<10))}, "OK OK/4 OK/3"},
		{"unknown domain", nil, ""},
	} {
		if tc.ds == nil {
			if r := c.must("no-such-domain", rd("remote_address", "192.0.2.1")); codes1(r) != "OK OK/0" || r.GetStatuses()[0].GetCurrentLimit() != nil {
				t.Errorf("%s: %s %v", tc.name, codes1(r), r)
			}
			continue
		}
		if got := codes1(c.must("edge", tc.ds...)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}

	// hits_addend on the request and on a descriptor, and a refund.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tn.Key)
	cl := pb.NewRateLimitServiceClient(c.conn)
	r, err := cl.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "edge", HitsAddend: 40, Descriptors: []*rlcommon.RateLimitDescriptor{rd("tokens", "t1")}})
	if err != nil || codes1(r) != "OK OK/60" {
		t.Fatalf("hits_addend 40: %v %v", codes1(r), err)
	}
	d := rd("tokens", "t1")
	d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(25), true
	if r, err = cl.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{d}}); err != nil || codes1(r) != "OK OK/85" {
		t.Fatalf("refund of 25: %v %v", codes1(r), err)
	}
	d = rd("tokens", "t1")
	d.HitsAddend = wrapperspb.UInt64(0)
	if r, err = cl.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{d}}); err != nil || codes1(r) != "OK OK/85" {
		t.Fatalf("hits 0 takes nothing: %v %v", codes1(r), err)
	}
	// The descriptor's own limit from Envoy's route config.
	d = rd("remote_address", "192.0.2.77")
	d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 3} // HOUR
	c.must("edge", d)
	if r := c.must("edge", d); r.GetOverallCode() != pb.RateLimitResponse_OVER_LIMIT || r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 1 {
		t.Fatalf("override 1/hour, second call: %v", r)
	}

	// The reference's statistics, per rule: values only where
	// detailed_metric asks for them.
	if n := metricInt(s, regexp.MustCompile(`(?m)^ratelimit_service_rate_limit_total_hits\{domain="edge",key="tokens_t1",tenant="[^"]+"\} (\d+)`), -1); n != 40 {
		t.Errorf("total_hits of edge.tokens_t1 (detailed_metric): %d, want 40 (the refund and the check of 0 count nothing)", n)
	}
	if n := metricInt(s, regexp.MustCompile(`(?m)^ratelimit_service_rate_limit_over_limit\{domain="edge",key="remote_address",tenant="[^"]+"\} (\d+)`), -1); n < 2 {
		t.Errorf("over_limit of edge.remote_address: %d, want at least 2", n)
	}
	if n := metricInt(s, regexp.MustCompile(`(?m)^ratelimit_service_rate_limit_shadow_mode\{domain="edge",key="canary",tenant="[^"]+"\} (\d+)`), -1); n != 1 {
		t.Errorf("shadow_mode of edge.canary: %d, want 1", n)
	}
	if n := metricInt(s, regexp.MustCompile(`(?m)^ratelimit_service_rate_limit_total_hits\{domain="edge",key="route_/v1/orders/items",tenant="[^"]+"\} (\d+)`), -1); n != 2 {
		t.Errorf("total_hits of edge.route_/v1/orders/items (value_to_metric): %d, want 2", n)
	}

	// Bad requests, answered as the reference answers them.
	for _, tc := range []struct {
		name string
		key  string
		req  *pb.RateLimitRequest
		code codes.Code
		msg  string
	}{
		{"no service key", "-", &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{rd("a", "b")}}, codes.Unauthenticated, "service key"},
		{"wrong service key", "sk_wrongwrongwrongwrongwrongwrongwrong", &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{rd("a", "b")}}, codes.Unauthenticated, "not valid"},
		{"empty domain", "", &pb.RateLimitRequest{Descriptors: []*rlcommon.RateLimitDescriptor{rd("a", "b")}}, codes.Unknown, "rate limit domain must not be empty"},
		{"no descriptors", "", &pb.RateLimitRequest{Domain: "edge"}, codes.Unknown, "rate limit descriptor list must not be empty"},
	} {
		ctx := context.Background()
		switch tc.key {
		case "":
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tn.Key)
		case "-":
		default:
			ctx = metadata.AppendToOutgoingContext(ctx, "x-sluice-service-key", tc.key)
		}
		_, err := cl.ShouldRateLimit(ctx, tc.req)
		if st, _ := status.FromError(err); st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
			t.Errorf("%s: %v, want %s containing %q", tc.name, err, tc.code, tc.msg)
		}
	}

	// Bad configurations: the sluice command refuses them, naming file,
	// line and field of every problem, and changes nothing.
	bad := "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - key: \"\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	path := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(path, []byte(bad), 0o600)
	cmd := exec.Command(bin, "apply", "-f", path)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "SLUICE_URL=" + s.base, "SLUICE_SERVICE_KEY=" + tn.Key}
	outb, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(outb), "bad.yaml:4") || !strings.Contains(string(outb), "bad.yaml:5") {
		t.Fatalf("bad file: %v\n%s", err, outb)
	}
	if r := c.must("edge", rd("remote_address", "192.0.2.1")); r.GetOverallCode() != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a refused file changed the rules: %v", r)
	}

	// Health and reflection.
	h, err := healthpb.NewHealthClient(c.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	rc, err := reflectionpb.NewServerReflectionClient(c.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	lr, err := rc.Recv()
	if err != nil || !strings.Contains(lr.String(), "envoy.service.ratelimit.v3.RateLimitService") {
		t.Fatalf("reflection: %v %v", lr, err)
	}
	rc.CloseSend()

	// The token-quota pattern (Envoy's apply_on_stream_done): look with
	// hits_addend 0, serve, charge the response's 1 500 tokens against
	// 1 000 an hour. The client is served once of ten, as by the
	// reference, not ten times.
	served := 0
	for range 10 {
		look := rd("model", "client-1")
		look.HitsAddend = wrapperspb.UInt64(0)
		if c.must("billing", look).GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT {
			continue
		}
		served++
		charge := rd("model", "client-1")
		charge.HitsAddend = wrapperspb.UInt64(1500)
		c.must("billing", charge)
	}
	if served != 1 {
		t.Fatalf("token quota: %d of 10 served with 1 500-token responses and 1 000 tokens an hour, want 1", served)
	}

	// A month quota survives a restart: two of three used before, one after.
	c.must("billing", rd("customer", "c1"))
	c.must("billing", rd("customer", "c1"))
	time.Sleep(500 * time.Millisecond) // past a flush
	s.stop()
	s.restart(t)
	c = dialRLS(t, grpcAddr, tn.Key)
	if got := codes1(c.must("billing", rd("customer", "c1"))); got != "OK OK/0" {
		t.Fatalf("month quota after a restart: %s, want OK OK/0 (third of 3)", got)
	}
	if got := codes1(c.must("billing", rd("customer", "c1"))); got != "OVER_LIMIT OVER_LIMIT/0" {
		t.Fatalf("month quota after a restart, fourth: %s", got)
	}
}

// TestRLSClusterExact: three servers, every one serving gRPC, one
// descriptor at 50 a minute: 300 concurrent calls spread over the three
// admit exactly 50.
func TestRLSClusterExact(t *testing.T) {
	bin := buildSluice(t)
	addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	tp := startTopologyEach(t, 3, func(i int) []string { return []string{"--grpc-addr", addrs[i]} })
	s1 := tp.servers[0]
	tn := createTenant(t, s1, "envoy-cluster")
	sluiceApply(t, bin, s1.base, tn.Key, "edge.yaml", "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 50}\n")
	clients := make([]*rlsClient, 3)
	for i := range clients {
		clients[i] = dialRLS(t, addrs[i], tn.Key)
	}
	waitFor(t, 3*time.Second, "the rule on every server", func() bool {
		for _, c := range clients {
			r, err := c.call("edge", rd("other", "x"))
			if err != nil || r == nil {
				return false
			}
			d := rd("remote_address", "192.0.2.250")
			d.HitsAddend = wrapperspb.UInt64(0)
			if r, err = c.call("edge", d); err != nil || r.GetStatuses()[0].GetCurrentLimit() == nil {
				return false
			}
		}
		return true
	})
	var ok, over, failed atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 60)
	for i := 0; i < 300; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			r, err := clients[i%3].call("edge", rd("remote_address", "198.51.100.1"))
			switch {
			case err != nil:
				failed.Add(1)
			case r.GetOverallCode() == pb.RateLimitResponse_OK:
				ok.Add(1)
			default:
				over.Add(1)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 50 || failed.Load() != 0 {
		t.Fatalf("300 calls over three servers: %d OK, %d over, %d failed; want exactly 50 OK", ok.Load(), over.Load(), failed.Load())
	}
	// A denied call counts too, as the reference counts it, also where
	// the counter's owner is another server: 51 calls of 50 through one
	// server each, for an address each (at least two of them forwarded),
	// leave every counter past its limit, which a look on any server sees.
	for i, c := range clients {
		for range 51 {
			c.must("edge", rd("remote_address", fmt.Sprintf("198.51.100.%d", 10+i)))
		}
	}
	for i := range clients {
		for j, c := range clients {
			d := rd("remote_address", fmt.Sprintf("198.51.100.%d", 10+i))
			d.HitsAddend = wrapperspb.UInt64(0)
			if r := c.must("edge", d); r.GetOverallCode() != pb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("server %d: a look at the address called 51 times through server %d: %s, want OVER_LIMIT (the denial counted)", j, i, codes1(r))
			}
		}
	}
}

// TestRLSMutualTLS: with --grpc-cert, --grpc-key and --grpc-client-ca the
// gRPC door speaks TLS only and takes only clients whose certificate the
// CA signed; the service key is still required.
func TestRLSMutualTLS(t *testing.T) {
	pki := newTestPKI(t)
	grpcAddr := freeAddr(t)
	s := startServer(t, serverOpts{extra: []string{"--grpc-addr", grpcAddr, "--grpc-cert", pki.serverCert, "--grpc-key", pki.serverKey, "--grpc-client-ca", pki.ca}})
	tn := createTenant(t, s, "mtls")
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(pki.ca)
	pool.AppendCertsFromPEM(caPEM)
	clientCert, err := tls.LoadX509KeyPair(pki.clientCert, pki.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	dial := func(creds credentials.TransportCredentials) (*pb.RateLimitResponse, error) {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tn.Key)
		return pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{rd("k", "v")}})
	}
	if r, err := dial(credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCert}})); err != nil || r.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("with a client certificate: %v %v", r, err)
	}
	if _, err := dial(credentials.NewTLS(&tls.Config{RootCAs: pool})); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if _, err := dial(insecure.NewCredentials()); err == nil {
		t.Fatal("a plaintext client was served")
	}
}
