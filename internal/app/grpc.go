package app

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/rls"
)

// startGRPC serves Envoy's rate limit service on cfg.GRPCAddr.
func (m *Main) startGRPC(cfg Config, eng *engine.Engine) error {
	t, err := cfg.grpcTLS()
	if err != nil {
		return err
	}
	opts := rls.Options{Headers: cfg.GRPCHeaders, Log: m.Log}
	if t != nil {
		opts.TLS = credentials.NewTLS(t)
	}
	ln, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listen on --grpc-addr %s: %w", cfg.GRPCAddr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gs := rls.NewServer(ctx, rls.New(eng, opts), eng.Healthy)
	m.grpc, m.grpcLn, m.grpcCancel = gs, ln, cancel
	go func() {
		if err := rls.Serve(gs, ln); err != nil {
			m.Log.Error("grpc server stopped", "err", err)
		}
	}()
	m.Log.Info("envoy rate limit service listening", "grpc_addr", ln.Addr().String(), "tls", t != nil, "mtls", cfg.GRPCClientCA != "")
	return nil
}

// GRPCAddr is the gRPC listener's address, "" when it is off.
func (m *Main) GRPCAddr() string {
	if m.grpcLn == nil {
		return ""
	}
	return m.grpcLn.Addr().String()
}

// stopGRPC lets calls in flight finish, until ctx ends.
func stopGRPC(ctx context.Context, gs *grpc.Server) {
	done := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		gs.Stop()
	}
}
