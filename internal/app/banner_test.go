package app

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

func TestBanner(t *testing.T) {
	data := t.TempDir()
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	cases := []struct {
		name string
		edit func(*Config)
		addr net.Addr
		want string
	}{
		{"all embedded", func(*Config) {}, addr,
			"\n  API        http://127.0.0.1:8080/v1\n  Dashboard  http://127.0.0.1:8080/ui\n  Data       " + data + " (SQLite and NATS, both embedded in this process)\n\n"},
		{"every address", func(*Config) {}, &net.TCPAddr{IP: net.IPv6unspecified, Port: 9000},
			"\n  API        http://localhost:9000/v1\n  Dashboard  http://localhost:9000/ui\n  Data       " + data + " (SQLite and NATS, both embedded in this process)\n\n"},
		{"public URL, NATS listening", func(c *Config) { c.PublicURL = "https://sluice.example.com/"; c.NatsListen = "127.0.0.1:4222" }, addr,
			"\n  API        https://sluice.example.com/v1\n  Dashboard  https://sluice.example.com/ui\n  Data       " + data + " (SQLite and NATS, both embedded in this process; NATS listens on 127.0.0.1:4222)\n\n"},
		{"external NATS", func(c *Config) { c.NatsURL = "nats://app:secret@nats.internal:4222" }, addr,
			"  Data       " + data + " (SQLite, embedded worker; NATS at nats://redacted@nats.internal:4222)\n"},
		{"external worker", func(c *Config) { c.Worker = "external"; c.NatsListen = "127.0.0.1:4222" }, addr,
			"  Data       " + data + " (NATS, embedded; NATS listens on 127.0.0.1:4222; the SQLite file is cmd/worker's)\n"},
		{"both external", func(c *Config) { c.Worker = "external"; c.NatsURL = "nats://nats.internal:4222" }, addr,
			"  Data       " + data + " (this server's node name and session key; the SQLite file is cmd/worker's, NATS at nats://nats.internal:4222)\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Data = data
			c.edit(&cfg)
			var b strings.Builder
			writeBanner(&b, cfg, baseURL(cfg, c.addr))
			if !strings.Contains(b.String(), c.want) {
				t.Errorf("banner\n%q\nlacks\n%q", b.String(), c.want)
			}
			if n := strings.Count(strings.TrimSpace(b.String()), "\n"); n != 2 {
				t.Errorf("banner has %d lines, want 3:\n%s", n+1, b.String())
			}
		})
	}
	// A relative --data is shown absolute.
	cfg := DefaultConfig()
	var b strings.Builder
	writeBanner(&b, cfg, baseURL(cfg, addr))
	abs, _ := filepath.Abs("data")
	if !strings.Contains(b.String(), "  Data       "+abs+" (") {
		t.Errorf("relative data: %q", b.String())
	}
}
