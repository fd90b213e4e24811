package bus

import (
	"bytes"
	"flag"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"", ""},
		{"nats://sluice:hunter2@nats.internal:4222", "nats://redacted@nats.internal:4222"},
		{"nats://s3cr3t-token@nats.internal:4222", "nats://redacted@nats.internal:4222"},
		{"tls://u:p@a:4222,tls://b:4222, tls://u:p@c:4222", "tls://redacted@a:4222,tls://b:4222, tls://redacted@c:4222"},
		{"nats://u:p@ss@host:4222", "nats://redacted@host:4222"}, // an unescaped @ in the password
		{"u:p@host:4222", "redacted@host:4222"},                  // no scheme
		{"nats://u:p@host:bad port", "nats://redacted@host:bad port"},
	} {
		if got := RedactURL(c.in); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// syncBuffer is a log sink written from NATS's callbacks.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Credentials in a NATS URL show in no log line and no error: not in the
// connection's logs (failed attempts, then connected), not in the error of
// a URL that does not parse, not in the flag's usage.
func TestNATSURLCredentialsNeverShown(t *testing.T) {
	const token, password = "s3cr3t-token-value", "hunter2-password"

	// A token URL to a NATS that is not up yet: the attempts fail and are
	// logged, then it starts and the connection is logged.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	url := "nats://" + token + "@127.0.0.1:" + strconv.Itoa(port)
	nc, err := Connect(url, nil, "test", Auth{}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "nats connection attempt failed") {
		if time.Now().After(deadline) {
			t.Fatalf("no failed attempt logged:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, Authorization: token, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	for !strings.Contains(logs.String(), "nats connected") {
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatalf("no connection logged:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !nc.IsConnected() {
		t.Fatal("not connected")
	}
	if got := logs.String(); strings.Contains(got, token) || !strings.Contains(got, "redacted@127.0.0.1") {
		t.Errorf("logs show the token, or not the redacted URL:\n%s", got)
	}

	// A URL that does not parse: the parser's error quotes it whole.
	_, err = Connect("nats://sluice:"+password+"@127.0.0.1:bad port", nil, "test", Auth{}, log)
	if err == nil {
		t.Fatal("a malformed URL was accepted")
	}
	if strings.Contains(err.Error(), password) {
		t.Errorf("the error shows the password: %v", err)
	}

	// --help prints a flag's default, here from the environment.
	secret := "nats://sluice:" + password + "@nats.internal:4222"
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	fs.Var(URLFlag{URL: &secret}, "nats-url", "NATS URL")
	fs.PrintDefaults()
	if strings.Contains(out.String(), password) || !strings.Contains(out.String(), "redacted@nats.internal") {
		t.Errorf("usage:\n%s", out.String())
	}
}
