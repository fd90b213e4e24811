// Package bustest runs real embedded NATS servers for tests that stop NATS
// and start it again, as a NATS restart in service does.
package bustest

import (
	"net"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
)

// Server is an embedded NATS server with JetStream that keeps its loopback
// address and data directory across Stop and Start, so clients reconnect to
// it and find what it stored on disk.
type Server struct {
	t   testing.TB
	cfg bus.EmbeddedConfig
	ns  *server.Server
}

// InProcess starts an embedded NATS with JetStream from cfg (DataDir set by
// the caller, no listener) and answers a connection to it in process; both
// end with the test.
func InProcess(t testing.TB, cfg bus.EmbeddedConfig) *nats.Conn {
	t.Helper()
	ns, err := bus.StartEmbedded(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL(), nats.InProcessServer(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Start starts a server named name on a free loopback port, with a data
// directory of its own. It is shut down when the test ends.
func Start(t testing.TB, name string) *Server { return StartConfig(t, bus.EmbeddedConfig{Name: name}) }

// StartConfig is Start with the server's other settings from cfg (its
// DataDir and Listen are chosen here).
func StartConfig(t testing.TB, cfg bus.EmbeddedConfig) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg.DataDir, cfg.Listen = t.TempDir(), addr
	s := &Server{t: t, cfg: cfg}
	s.Start()
	t.Cleanup(func() {
		if s.ns != nil {
			s.ns.Shutdown()
		}
	})
	return s
}

// URL is the server's client URL; it does not change across restarts.
func (s *Server) URL() string { return "nats://" + s.cfg.Listen }

// Stop shuts the server down and waits until it is down.
func (s *Server) Stop() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	s.ns = nil
}

// Start starts the server again after Stop, on the same address and data.
func (s *Server) Start() {
	s.t.Helper()
	ns, err := bus.StartEmbedded(s.cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	s.ns = ns
}
