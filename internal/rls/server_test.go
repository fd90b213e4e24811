package rls

import (
	"context"
	"math"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/engine"
)

// fakeDecider answers every descriptor with 7 remaining of 10 per
// minute, and keeps the last request it was given.
type fakeDecider struct {
	// ready and suspended are read by the server's health watcher on a
	// goroutine of its own too.
	ready, suspended atomic.Bool
	last             *engine.RLSRequest
}

func readyDecider() *fakeDecider {
	d := &fakeDecider{}
	d.ready.Store(true)
	return d
}

func (f *fakeDecider) TenantForServiceKey(k string) (string, bool) { return "ten_a", k == "sk_good" }
func (f *fakeDecider) TenantSuspended(string) bool                 { return f.suspended.Load() }
func (f *fakeDecider) Ready() bool                                 { return f.ready.Load() }
func (f *fakeDecider) ShouldRateLimit(_ context.Context, _ string, r *engine.RLSRequest, _ time.Time) (engine.RLSAnswer, error) {
	f.last = r
	a := engine.RLSAnswer{Statuses: make([]engine.RLSStatus, len(r.Descriptors))}
	for i := range a.Statuses {
		a.Statuses[i] = engine.RLSStatus{Remaining: uint32(7 - i), ResetAfter: 30 * time.Second,
			Limit: &engine.RLSLimit{RequestsPerUnit: 10, Unit: "MINUTE", Window: time.Minute, PolicyName: "edge.k"}}
	}
	return a, nil
}

func serve(t *testing.T, d *fakeDecider, opts Options) pb.RateLimitServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gs := NewServer(ctx, New(d, opts), d.Ready)
	go Serve(gs, ln)
	t.Cleanup(func() { cancel(); gs.Stop() })
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRateLimitServiceClient(conn)
}

func withKey(header, value string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), header, value)
}

func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// The call's descriptors reach the engine as Envoy meant them: hits from
// the descriptor (0 allowed) or the request (0 meaning 1), refunds, and
// the descriptor's own limit.
func TestRequestReachesTheEngine(t *testing.T) {
	d := readyDecider()
	c := serve(t, d, Options{})
	d1 := desc("a", "1")
	d1.HitsAddend = wrapperspb.UInt64(0)
	d2 := desc("b", "2", "c", "3")
	d2.IsNegativeHits = true
	d3 := desc("d", "4")
	d3.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 9, Unit: 7} // WEEK
	r, err := c.ShouldRateLimit(withKey("authorization", "Bearer sk_good"), &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{d1, d2, d3}})
	if err != nil {
		t.Fatal(err)
	}
	got := d.last
	if got.Domain != "edge" || len(got.Descriptors) != 3 {
		t.Fatalf("request %+v", got)
	}
	if got.Descriptors[0].Hits != 0 || got.Descriptors[1].Hits != 1 || !got.Descriptors[1].Refund || got.Descriptors[2].Hits != 1 {
		t.Fatalf("hits %+v", got.Descriptors)
	}
	if e := got.Descriptors[1].Entries; len(e) != 2 || e[1].Key != "c" || e[1].Value != "3" {
		t.Fatalf("entries %+v", e)
	}
	if o := got.Descriptors[2].Override; o == nil || o.RequestsPerUnit != 9 || o.Unit != "WEEK" {
		t.Fatalf("override %+v", o)
	}
	if r.GetOverallCode() != pb.RateLimitResponse_OK || len(r.GetStatuses()) != 3 || r.GetStatuses()[0].GetLimitRemaining() != 7 ||
		r.GetStatuses()[0].GetCurrentLimit().GetUnit() != pb.RateLimitResponse_RateLimit_MINUTE || r.GetStatuses()[0].GetDurationUntilReset().AsDuration() != 30*time.Second {
		t.Fatalf("response %v", r)
	}
	if len(r.GetResponseHeadersToAdd()) != 0 {
		t.Fatalf("headers without Options.Headers: %v", r.GetResponseHeadersToAdd())
	}
	r, err = c.ShouldRateLimit(withKey("x-sluice-service-key", "sk_good"), &pb.RateLimitRequest{Domain: "edge", HitsAddend: 5, Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "1")}})
	if err != nil || d.last.Descriptors[0].Hits != 5 {
		t.Fatalf("request hits_addend 5: %v %+v", err, d.last)
	}
}

// With Options.Headers the descriptor closest to its limit is described
// in the draft's and the reference's headers.
func TestResponseHeaders(t *testing.T) {
	d := readyDecider()
	c := serve(t, d, Options{Headers: true})
	r, err := c.ShouldRateLimit(withKey("authorization", "Bearer sk_good"), &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "1"), desc("b", "2")}})
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{}
	for _, hv := range r.GetResponseHeadersToAdd() {
		h[hv.GetKey()] = hv.GetValue()
	}
	want := map[string]string{
		"RateLimit-Policy": `"edge.k";q=10;w=60`, "RateLimit": `"edge.k";r=6;t=30`,
		"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "6", "X-RateLimit-Reset": "30",
	}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("%s: %q, want %q", k, h[k], v)
		}
	}
}

// Calls are refused with the code Envoy expects and a message that says
// why, before the engine sees them.
func TestRefusals(t *testing.T) {
	d := readyDecider()
	c := serve(t, d, Options{})
	good := withKey("authorization", "Bearer sk_good")
	one := []*rlcommon.RateLimitDescriptor{desc("a", "1")}
	bad := desc("a", "1")
	bad.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 0}
	many := make([]*rlcommon.RateLimitDescriptor, MaxDescriptors+1)
	for i := range many {
		many[i] = desc("a", "1")
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		req  *pb.RateLimitRequest
		code codes.Code
		msg  string
	}{
		{"no key", context.Background(), &pb.RateLimitRequest{Domain: "edge", Descriptors: one}, codes.Unauthenticated, "service key is required"},
		{"unknown key", withKey("authorization", "Bearer sk_bad"), &pb.RateLimitRequest{Domain: "edge", Descriptors: one}, codes.Unauthenticated, "not valid"},
		{"not bearer", withKey("authorization", "Basic sk_good"), &pb.RateLimitRequest{Domain: "edge", Descriptors: one}, codes.Unauthenticated, "required"},
		{"empty domain", good, &pb.RateLimitRequest{Descriptors: one}, codes.Unknown, "rate limit domain must not be empty"},
		{"no descriptors", good, &pb.RateLimitRequest{Domain: "edge"}, codes.Unknown, "rate limit descriptor list must not be empty"},
		{"too many descriptors", good, &pb.RateLimitRequest{Domain: "edge", Descriptors: many}, codes.InvalidArgument, "descriptors: more than"},
		{"unknown override unit", good, &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{bad}}, codes.InvalidArgument, "unit"},
	} {
		d.last = nil
		_, err := c.ShouldRateLimit(tc.ctx, tc.req)
		st, _ := status.FromError(err)
		if st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
			t.Errorf("%s: %v, want %s with %q", tc.name, err, tc.code, tc.msg)
		}
		if d.last != nil {
			t.Errorf("%s: the engine was asked", tc.name)
		}
	}
	d.suspended.Store(true)
	if _, err := c.ShouldRateLimit(good, &pb.RateLimitRequest{Domain: "edge", Descriptors: one}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("suspended tenant: %v", err)
	}
	d.suspended.Store(false)
	d.ready.Store(false)
	if _, err := c.ShouldRateLimit(good, &pb.RateLimitRequest{Domain: "edge", Descriptors: one}); status.Code(err) != codes.Unavailable {
		t.Errorf("not ready: %v", err)
	}
}

// Input the reference decides is decided, not refused: a domain, key or
// value far past 1 KiB, a descriptor deeper than any rule, and hits_addend
// up to 4294967295 reach the engine as sent.
func TestOversizedInputDecided(t *testing.T) {
	d := readyDecider()
	c := serve(t, d, Options{})
	good := withKey("authorization", "Bearer sk_good")
	long := strings.Repeat("x", 256<<10)
	deep := &rlcommon.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(4294967295)}
	for range 200 {
		deep.Entries = append(deep.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	r, err := c.ShouldRateLimit(good, &pb.RateLimitRequest{Domain: long, HitsAddend: 4294967295,
		Descriptors: []*rlcommon.RateLimitDescriptor{desc(long, long), deep}})
	if err != nil || len(r.GetStatuses()) != 2 {
		t.Fatalf("oversized call: %v %v", r, err)
	}
	got, domain := d.last.Descriptors, d.last.Domain
	huge := desc("a", "1")
	huge.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	if _, err := c.ShouldRateLimit(good, &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{huge}}); err != nil || d.last.Descriptors[0].Hits != maxHits {
		t.Fatalf("hits_addend 2^64-1: %v, hits %d, want %d", err, d.last.Descriptors[0].Hits, int64(maxHits))
	}
	if domain != long || got[0].Entries[0].Value != long || got[0].Hits != 4294967295 || len(got[1].Entries) != 200 || got[1].Hits != 4294967295 {
		t.Fatalf("the engine got a domain of %d bytes, hits %d and %d, %d entries", len(domain), got[0].Hits, got[1].Hits, len(got[1].Entries))
	}
}

// The health service follows readiness within a poll.
func TestHealthFollowsReadiness(t *testing.T) {
	d := &fakeDecider{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var ready atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	gs := NewServer(ctx, New(d, Options{}), ready.Load)
	go Serve(gs, ln)
	defer func() { cancel(); gs.Stop() }()
	conn, _ := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	statusOf := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: pb.RateLimitService_ServiceDesc.ServiceName})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	if s := statusOf(); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("not ready: %v", s)
	}
	ready.Store(true)
	deadline := time.Now().Add(2 * time.Second)
	for statusOf() != healthpb.HealthCheckResponse_SERVING {
		if time.Now().After(deadline) {
			t.Fatal("health did not follow readiness within 2 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
