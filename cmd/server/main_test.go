//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// serverEnv makes this test binary run the server's main (see TestMain),
// so the tests below start the real server as a process of its own.
const serverEnv = "SLUICE_TEST_RUN_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// openPTY opens a pseudo-terminal: the test reads the master, the server
// writes to the terminal end.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return master, tty
}

// syncBuffer collects a process's output while the test reads it.
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

// runServer starts the server with stderr (and stdout) on a terminal or on
// a pipe, waits for its banner, stops it and returns what it wrote.
func runServer(t *testing.T, onTerminal bool, env []string, args ...string) string {
	return runServerUntil(t, "  Data ", onTerminal, env, args...)
}

// runServerUntil is runServer waiting for until instead of the banner.
func runServerUntil(t *testing.T, until string, onTerminal bool, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"--addr", "127.0.0.1:0", "--data", t.TempDir(), "--cluster-listen", "off"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") && !strings.HasPrefix(kv, "NO_COLOR=") && !strings.HasPrefix(kv, "TERM=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, append(env, serverEnv+"=1")...)
	out := &syncBuffer{}
	copied := make(chan struct{})
	if onTerminal {
		master, tty := openPTY(t)
		defer master.Close()
		cmd.Stdout, cmd.Stderr = tty, tty
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		tty.Close() // the server holds the terminal now
		// Reading the master ends with EIO once the server has exited.
		go func() { _, _ = io.Copy(out, master); close(copied) }()
	} else {
		cmd.Stdout, cmd.Stderr = out, out
		close(copied)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(20 * time.Second)
	for !strings.Contains(out.String(), until) {
		select {
		case err := <-exited:
			t.Fatalf("server exited before its banner: %v\n%s", err, out)
		case <-deadline:
			_ = cmd.Process.Kill()
			t.Fatalf("no %q within 20 s:\n%s", until, out)
		case <-time.After(20 * time.Millisecond):
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("server stopped with %v\n%s", err, out)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("server did not stop within 20 s of SIGTERM:\n%s", out)
	}
	<-copied
	return strings.ReplaceAll(out.String(), "\r\n", "\n") // the terminal's line discipline adds \r
}

// logLines are the lines of out that are log records: not the banner, not
// the operator token and not blank.
func logLines(out string) []string {
	var lines []string
	for _, ln := range strings.Split(out, "\n") {
		if ln == "" || strings.HasPrefix(ln, "  ") || strings.HasPrefix(ln, "Sluice operator token") {
			continue
		}
		lines = append(lines, ln)
	}
	return lines
}

func TestLogFormatFollowsTheTerminal(t *testing.T) {
	cases := []struct {
		name       string
		onTerminal bool
		env, args  []string
		json       bool
		colour     bool
	}{
		{"terminal", true, []string{"TERM=xterm-256color"}, nil, false, true},
		{"terminal with NO_COLOR", true, []string{"TERM=xterm-256color", "NO_COLOR=1"}, nil, false, false},
		{"dumb terminal", true, []string{"TERM=dumb"}, nil, false, false},
		{"terminal asked for JSON", true, []string{"TERM=xterm-256color"}, []string{"--log-format", "json"}, true, false},
		{"terminal asked for JSON by env", true, []string{"TERM=xterm-256color", "SLUICE_LOG_FORMAT=json"}, nil, true, false},
		{"pipe", false, []string{"TERM=xterm-256color"}, nil, true, false},
		{"pipe asked for text", false, []string{"TERM=xterm-256color"}, []string{"--log-format", "text"}, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := runServer(t, c.onTerminal, c.env, c.args...)
			lines := logLines(out)
			if len(lines) < 3 {
				t.Fatalf("only %d log lines:\n%s", len(lines), out)
			}
			for _, ln := range lines {
				var rec map[string]any
				isJSON := json.Unmarshal([]byte(ln), &rec) == nil
				if isJSON != c.json {
					t.Fatalf("line %q: JSON %v, want %v\n%s", ln, isJSON, c.json, out)
				}
				if colour := strings.Contains(ln, "\x1b["); colour != c.colour {
					t.Fatalf("line %q: colour %v, want %v", ln, colour, c.colour)
				}
			}
			// The listening record, readable: level, message, key=value.
			plain := strings.NewReplacer("\x1b[0m", "", "\x1b[2m", "", "\x1b[32m", "").Replace(out)
			if !c.json && !strings.Contains(plain, " INFO  sluice server listening addr=127.0.0.1:") {
				t.Errorf("no readable listening line:\n%q", plain)
			}
			for _, want := range []string{"\n  API        http://127.0.0.1:", "/v1\n  Dashboard  http://127.0.0.1:", "/ui\n  Data       ", " (SQLite and NATS, both embedded in this process)\n"} {
				if !strings.Contains(out, want) {
					t.Errorf("banner lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// A first start with no operator login prints a one-time setup link under
// the banner, on standard output only: no log line carries its token. With
// SLUICE_OPERATOR_EMAIL and _PASSWORD set there is no link.
func TestFirstStartPrintsSetupLink(t *testing.T) {
	out := runServerUntil(t, "/ui/setup?token=", false, nil)
	m := regexp.MustCompile(`\n  (http://127\.0\.0\.1:\d+/ui/setup\?token=(st_\w+))\n`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no setup link under the banner:\n%s", out)
	}
	if n := strings.Count(out, m[2]); n != 1 {
		t.Fatalf("the setup token appears %d times, want once (the banner):\n%s", n, out)
	}
	if !strings.Contains(out, "\n  Dashboard  http://127.0.0.1:") || strings.Index(out, "  Dashboard ") > strings.Index(out, m[1]) {
		t.Fatalf("the link is not under the banner:\n%s", out)
	}

	out = runServer(t, false, []string{"SLUICE_OPERATOR_EMAIL=env@operator.test", "SLUICE_OPERATOR_PASSWORD=env operator passphrase"})
	if strings.Contains(out, "/ui/setup") {
		t.Fatalf("a setup link although SLUICE_OPERATOR_EMAIL is set:\n%s", out)
	}
}
