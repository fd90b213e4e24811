package bus

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedConfig configures the NATS server a Sluice process runs inside
// itself when no external NATS URL is given.
type EmbeddedConfig struct {
	// DataDir is where JetStream keeps its files (a "nats" folder is made in it).
	DataDir string
	// Listen is a host:port for other processes (an external worker, other
	// servers) to connect to; empty means in-process connections only.
	Listen string
	// Name identifies the server in NATS's own monitoring.
	Name string
	// MaxPayload is the largest message in bytes; 0 means 8 MiB. Sluice
	// sizes its messages to the connection's limit, so this only trades
	// fewer, larger messages against memory.
	MaxPayload int32
	// Keys, when not nil, are the only credentials the server accepts, each
	// with its role's permissions (see roles.go). cmd/server always sets
	// them with Listen; nil accepts any client, which only tests do.
	Keys *RoleKeys
	// TLSCert and TLSKey are the PEM certificate and key the listener
	// presents; required when Listen is not a loopback address.
	TLSCert, TLSKey string
}

// LoopbackListen reports whether a host:port listens on loopback only.
func LoopbackListen(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// StartEmbedded starts a NATS server with JetStream and waits until it
// accepts connections.
func StartEmbedded(cfg EmbeddedConfig) (*server.Server, error) {
	opts := &server.Options{
		ServerName: cfg.Name,
		JetStream:  true,
		StoreDir:   filepath.Join(cfg.DataDir, "nats"),
		NoSigs:     true,
		NoLog:      true,
		MaxPayload: 8 << 20,
	}
	if cfg.MaxPayload > 0 {
		opts.MaxPayload = cfg.MaxPayload
	}
	if cfg.Listen == "" {
		opts.DontListen = true
	} else {
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("nats listen address %q: %w", cfg.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("nats listen port %q: %w", port, err)
		}
		if p == 0 {
			// Port 0 is NATS's default port (4222), not a free one: two
			// processes asking for :0 would both try 4222, and the second
			// would never be ready.
			p = server.RANDOM_PORT
		}
		opts.Host, opts.Port = host, p
		if !LoopbackListen(cfg.Listen) && cfg.TLSCert == "" {
			return nil, fmt.Errorf("nats listen %s: not a loopback address, so a TLS certificate and key are required", cfg.Listen)
		}
	}
	if cfg.Keys != nil {
		opts.Nkeys = cfg.Keys.users()
	}
	if cfg.TLSCert != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey})
		if err != nil {
			return nil, fmt.Errorf("nats listen tls: %w", err)
		}
		opts.TLSConfig, opts.TLS, opts.TLSTimeout = tc, true, 5
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("start embedded nats: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(15 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("start embedded nats: not ready after 15s")
	}
	return ns, nil
}
