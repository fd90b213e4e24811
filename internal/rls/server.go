// Package rls is Sluice's third front door: Envoy's external rate limit
// service, envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit,
// over gRPC, so that Envoy (and Istio, Envoy Gateway, Contour, …) can use
// Sluice where they use the reference server, envoyproxy/ratelimit.
//
// The package is transport only: it authenticates the tenant by the
// service key in the call's metadata, turns the protobuf request into the
// engine's terms and the engine's answer back, and serves gRPC health and
// reflection. The engine decides (exact across servers, durable, shadow
// mode, blocks, analytics), matching descriptors with the reference's
// rules (internal/rlsconf). docs/ENVOY.md says what Envoy users see.
package rls

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errs"
)

// Bounds on one call: what an outsider can make a server parse and decide.
// Within them every call is decided as the reference decides it: a long
// domain, key or value, a deep descriptor or a hits_addend up to
// 4294967295 is an answer, never an error (Envoy would let an erroring
// call through). The engine keeps what a long value costs bounded: its
// bucket key and statistics labels stand for it by a hash.
const (
	// MaxMessageBytes bounds a request message, as the HTTP API bounds a
	// body (1 MiB).
	MaxMessageBytes = 1 << 20
	// MaxDescriptors bounds the descriptors of one call (the HTTP batch's
	// bound); Envoy sends one per matching rate_limits action set.
	MaxDescriptors = 1000
	// maxHits bounds a descriptor's own hits_addend (a UInt64), so that
	// counts stay exact: a call of more is a call of this many.
	maxHits = 1 << 53
)

// Decider is what the service needs of the engine.
type Decider interface {
	TenantForServiceKey(key string) (string, bool)
	TenantSuspended(tenantID string) bool
	Ready() bool
	ShouldRateLimit(ctx context.Context, tenantID string, req *engine.RLSRequest, now time.Time) (engine.RLSAnswer, error)
}

// Options configure the service.
type Options struct {
	// Headers adds the rate-limit response headers Envoy copies onto the
	// response: the IETF draft's RateLimit-Policy and RateLimit, and the
	// reference server's X-RateLimit-Limit, -Remaining and -Reset for the
	// descriptor closest to its limit.
	Headers bool
	Now     func() time.Time
	Log     *slog.Logger
	// TLS, when set, serves TLS (mutual TLS when it asks for client
	// certificates).
	TLS credentials.TransportCredentials
}

// Service implements RateLimitServiceServer.
type Service struct {
	pb.UnimplementedRateLimitServiceServer
	d    Decider
	opts Options
}

var _ pb.RateLimitServiceServer = (*Service)(nil)

// New returns the service over d.
func New(d Decider, opts Options) *Service {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Service{d: d, opts: opts}
}

// NewServer is a gRPC server with the service, the gRPC health service
// (serving while ready reports true, as /readyz, until ctx ends) and
// server reflection.
func NewServer(ctx context.Context, s *Service, ready func() bool) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxConcurrentStreams(1024),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if s.opts.TLS != nil {
		opts = append(opts, grpc.Creds(s.opts.TLS))
	}
	opts = append(opts, grpc.ChainUnaryInterceptor(s.recoverPanics))
	gs := grpc.NewServer(opts...)
	pb.RegisterRateLimitServiceServer(gs, s)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	go watchHealth(ctx, hs, ready)
	return gs
}

// watchHealth keeps the health service's answer, for the whole server and
// for the rate limit service by name, equal to ready() within 100 ms.
func watchHealth(ctx context.Context, hs *health.Server, ready func() bool) {
	last, first := false, true
	set := func() {
		now := ready()
		if now == last && !first {
			return
		}
		last, first = now, false
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if now {
			st = healthpb.HealthCheckResponse_SERVING
		}
		hs.SetServingStatus("", st)
		hs.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, st)
	}
	set()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			hs.Shutdown()
			return
		case <-t.C:
			set()
		}
	}
}

// Serve serves gs on ln until it is stopped.
func Serve(gs *grpc.Server, ln net.Listener) error {
	err := gs.Serve(ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// ShouldRateLimit implements the reference's call: every descriptor is
// decided, in order, and the overall code is OVER_LIMIT when any is (see
// engine.ShouldRateLimit for quota mode, replaces and unlimited).
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	tenantID, err := s.tenant(ctx)
	if err != nil {
		return nil, err
	}
	r, err := request(req)
	if err != nil {
		return nil, err
	}
	a, err := s.d.ShouldRateLimit(ctx, tenantID, r, s.opts.Now())
	if err != nil {
		return nil, s.status(err)
	}
	return s.response(&a), nil
}

// tenant authenticates the call: a service key in the metadata, as
// "authorization: Bearer sk_…" (what Envoy's grpc_service
// initial_metadata sends) or "x-sluice-service-key: sk_…".
func (s *Service) tenant(ctx context.Context) (string, error) {
	if !s.d.Ready() {
		return "", status.Error(codes.Unavailable, "Sluice is starting and not ready to answer yet")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	key := ""
	for _, v := range md.Get("authorization") {
		if scheme, tok, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "bearer") {
			key = strings.TrimSpace(tok)
			break
		}
	}
	if key == "" {
		if vs := md.Get("x-sluice-service-key"); len(vs) > 0 {
			key = strings.TrimSpace(vs[0])
		}
	}
	if key == "" {
		return "", status.Error(codes.Unauthenticated, "a service key is required: send \"authorization: Bearer sk_…\" in the call's metadata (Envoy: grpc_service.initial_metadata)")
	}
	// The engine looks the key up by its hash: its bytes are never
	// compared with a stored secret.
	if len(key) > 256 {
		return "", status.Error(codes.Unauthenticated, "the service key is not valid")
	}
	id, ok := s.d.TenantForServiceKey(key)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "the service key is not valid")
	}
	if s.d.TenantSuspended(id) {
		return "", status.Error(codes.PermissionDenied, "the tenant is suspended")
	}
	return id, nil
}

// request checks the protobuf request within the package's bounds and
// turns it into the engine's terms. The reference's own refusals (an
// empty domain, no descriptors) carry its messages.
func request(req *pb.RateLimitRequest) (*engine.RLSRequest, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.Unknown, "rate limit domain must not be empty")
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, status.Error(codes.Unknown, "rate limit descriptor list must not be empty")
	}
	if len(ds) > MaxDescriptors {
		return nil, status.Errorf(codes.InvalidArgument, "descriptors: more than %d", MaxDescriptors)
	}
	r := &engine.RLSRequest{Domain: req.GetDomain(), Descriptors: make([]engine.RLSDescriptor, len(ds))}
	entries := 0
	for _, d := range ds {
		entries += len(d.GetEntries())
	}
	all := make([]engine.RLSEntry, 0, entries)
	for i, d := range ds {
		start := len(all)
		for _, e := range d.GetEntries() {
			all = append(all, engine.RLSEntry{Key: e.GetKey(), Value: e.GetValue()})
		}
		out := &r.Descriptors[i]
		out.Entries = all[start:len(all):len(all)]
		// hits_addend: the descriptor's own when set (0 allowed: a check
		// that counts nothing), else the request's, where 0 means 1.
		if h := d.GetHitsAddend(); h != nil {
			// A UInt64; counts stay exact up to 2^53.
			out.Hits = int64(min(h.GetValue(), maxHits))
		} else {
			out.Hits = int64(max(1, req.GetHitsAddend()))
		}
		out.Refund = d.GetIsNegativeHits()
		if l := d.GetLimit(); l != nil {
			unit := pb.RateLimitResponse_RateLimit_Unit(l.GetUnit())
			name, ok := pb.RateLimitResponse_RateLimit_Unit_name[int32(unit)]
			if !ok || unit == pb.RateLimitResponse_RateLimit_UNKNOWN {
				return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d].limit.unit: unknown unit %d", i, unit)
			}
			out.Override = &engine.RLSOverride{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: name}
		}
	}
	return r, nil
}

// status maps an engine error to a gRPC status: Envoy fails open or
// closed on any error (its failure_mode_deny), so the code matters less
// than that no internal detail leaks.
func (s *Service) status(err error) error {
	switch errs.Code(err) {
	case errs.Invalid:
		return status.Error(codes.InvalidArgument, errs.Message(err))
	case errs.Unauthenticated:
		return status.Error(codes.Unauthenticated, errs.Message(err))
	case errs.Unavailable:
		return status.Error(codes.Unavailable, errs.Message(err))
	case errs.Forbidden:
		return status.Error(codes.PermissionDenied, errs.Message(err))
	case errs.RateLimited:
		return status.Error(codes.ResourceExhausted, errs.Message(err))
	}
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, "the call was cancelled")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, "the call's deadline passed before it was decided")
	}
	s.opts.Log.Error("rls: decide", "err", err)
	return status.Error(codes.Internal, "internal error")
}

// response is the engine's answer as Envoy reads it.
func (s *Service) response(a *engine.RLSAnswer) *pb.RateLimitResponse {
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(a.Statuses))}
	if a.OverLimit {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	}
	closest := -1
	for i := range a.Statuses {
		st := &a.Statuses[i]
		ds := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: st.Remaining}
		if st.OverLimit {
			ds.Code = pb.RateLimitResponse_OVER_LIMIT
		}
		if st.Limit != nil {
			ds.CurrentLimit = &pb.RateLimitResponse_RateLimit{
				Name:            st.Limit.Name,
				RequestsPerUnit: st.Limit.RequestsPerUnit,
				Unit:            pb.RateLimitResponse_RateLimit_Unit(pb.RateLimitResponse_RateLimit_Unit_value[st.Limit.Unit]),
			}
			ds.DurationUntilReset = durationpb.New(st.ResetAfter)
			if closest < 0 || st.Remaining < a.Statuses[closest].Remaining || (st.OverLimit && !a.Statuses[closest].OverLimit) {
				closest = i
			}
		}
		resp.Statuses[i] = ds
	}
	if s.opts.Headers && closest >= 0 {
		resp.ResponseHeadersToAdd = headers(a, closest)
	}
	return resp
}

// headers are the rate-limit response headers for the descriptor closest
// to its limit: the IETF draft's (RateLimit-Policy, RateLimit) and the
// reference server's defaults (X-RateLimit-Limit, -Remaining, -Reset).
func headers(a *engine.RLSAnswer, i int) []*core.HeaderValue {
	st := &a.Statuses[i]
	reset := int64(math.Ceil(st.ResetAfter.Seconds()))
	window := int64(st.Limit.Window / time.Second)
	name := strconv.Quote(st.Limit.PolicyName)
	limit := strconv.FormatUint(uint64(st.Limit.RequestsPerUnit), 10)
	remaining := strconv.FormatUint(uint64(st.Remaining), 10)
	return []*core.HeaderValue{
		{Key: "RateLimit-Policy", Value: name + ";q=" + limit + ";w=" + strconv.FormatInt(window, 10)},
		{Key: "RateLimit", Value: name + ";r=" + remaining + ";t=" + strconv.FormatInt(reset, 10)},
		{Key: "X-RateLimit-Limit", Value: limit},
		{Key: "X-RateLimit-Remaining", Value: remaining},
		{Key: "X-RateLimit-Reset", Value: strconv.FormatInt(reset, 10)},
	}
}

// recoverPanics answers a call whose handler panicked with Internal and
// logs it, instead of ending the process (grpc-go does not recover).
func (s *Service) recoverPanics(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.opts.Log.Error("rls: panic in a call", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
			resp, err = nil, status.Error(codes.Internal, "internal error")
		}
	}()
	return h(ctx, req)
}
