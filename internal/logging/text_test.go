package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

// at is the fixed instant the handler tests log at, in local time as the
// handler writes it.
var at = time.Date(2026, 11, 25, 2, 31, 7, 412_000_000, time.Local)

func logLine(t *testing.T, opts TextOptions, with func(*slog.Logger) *slog.Logger, level slog.Level, msg string, args ...any) string {
	t.Helper()
	var buf bytes.Buffer
	l := slog.New(NewTextHandler(&buf, opts))
	if with != nil {
		l = with(l)
	}
	r := slog.NewRecord(at, level, msg, 0)
	r.Add(args...)
	if l.Handler().Enabled(context.Background(), level) {
		if err := l.Handler().Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	return buf.String()
}

func TestTextHandlerLines(t *testing.T) {
	type kv = []any
	cases := []struct {
		name  string
		with  func(*slog.Logger) *slog.Logger
		level slog.Level
		msg   string
		args  kv
		want  string
	}{
		{"plain", nil, slog.LevelInfo, "sluice server listening", kv{"addr", "127.0.0.1:8080", "cluster", false, "n", 3},
			"Nov 25 02:31:07.412 INFO  sluice server listening addr=127.0.0.1:8080 cluster=false n=3\n"},
		{"levels are padded", nil, slog.LevelWarn, "w", nil, "Nov 25 02:31:07.412 WARN  w\n"},
		{"error level", nil, slog.LevelError, "e", nil, "Nov 25 02:31:07.412 ERROR e\n"},
		{"quoted values", nil, slog.LevelInfo, "m", kv{"empty", "", "space", "a b", "eq", "a=b", "quote", `say "hi"`},
			`Nov 25 02:31:07.412 INFO  m empty="" space="a b" eq="a=b" quote="say \"hi\""` + "\n"},
		{"control characters cannot forge a line or colour", nil, slog.LevelInfo, "m", kv{"tenant", "acme\nNov 25 00:00:00.000 ERROR forged", "esc", "\x1b[31mred"},
			`Nov 25 02:31:07.412 INFO  m tenant="acme\nNov 25 00:00:00.000 ERROR forged" esc="\x1b[31mred"` + "\n"},
		{"a message with a newline is quoted", nil, slog.LevelInfo, "two\nlines", nil, `Nov 25 02:31:07.412 INFO  "two\nlines"` + "\n"},
		{"a message with spaces and quotes is not", nil, slog.LevelInfo, `the "operator" said`, nil, `Nov 25 02:31:07.412 INFO  the "operator" said` + "\n"},
		{"invalid UTF-8 is quoted", nil, slog.LevelInfo, "m", kv{"v", "a\xffb"}, `Nov 25 02:31:07.412 INFO  m v="a\xffb"` + "\n"},
		{"errors, durations and times", nil, slog.LevelInfo, "m", kv{"err", errors.New("disk full"), "took", 1500 * time.Millisecond, "at", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
			`Nov 25 02:31:07.412 INFO  m err="disk full" took=1.5s at=2026-01-02T03:04:05Z` + "\n"},
		{"with attrs and groups", func(l *slog.Logger) *slog.Logger { return l.With("component", "worker").WithGroup("req").With("id", 7) },
			slog.LevelInfo, "m", kv{"path", "/v1/check", slog.Group("peer", "ip", "192.0.2.1")},
			"Nov 25 02:31:07.412 INFO  m component=worker req.id=7 req.path=/v1/check req.peer.ip=192.0.2.1\n"},
		{"empty attributes and groups are left out", nil, slog.LevelInfo, "m", kv{slog.Attr{}, slog.Group("g"), "k", "v"},
			"Nov 25 02:31:07.412 INFO  m k=v\n"},
		{"below the level is dropped", nil, slog.LevelDebug, "m", nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := logLine(t, TextOptions{}, c.with, c.level, c.msg, c.args...); got != c.want {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestTextHandlerColour(t *testing.T) {
	got := logLine(t, TextOptions{Colour: true}, nil, slog.LevelError, "write failed", "err", errors.New("disk full"), "n", 1)
	want := "\x1b[2mNov 25 02:31:07.412\x1b[0m \x1b[1;31mERROR\x1b[0m write failed \x1b[2merr=\x1b[0m\x1b[31m\"disk full\"\x1b[0m \x1b[2mn=\x1b[0m1\n"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	for level, code := range map[slog.Level]string{slog.LevelDebug: ansiBlue, slog.LevelInfo: ansiGreen, slog.LevelWarn: ansiYellow} {
		got := logLine(t, TextOptions{Colour: true, Level: slog.LevelDebug}, nil, level, "m")
		if !strings.Contains(got, code+level.String()) {
			t.Errorf("%s: %q lacks its colour %q", level, got, code)
		}
	}
	if got := logLine(t, TextOptions{}, nil, slog.LevelError, "m"); strings.Contains(got, "\x1b") {
		t.Errorf("without colour: %q", got)
	}
}

// TestTextHandlerOneWritePerRecord: records logged at once from many
// goroutines through derived handlers come out as whole lines.
func TestTextHandlerOneWritePerRecord(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(NewTextHandler(&buf, TextOptions{}))
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			lg := l.With("g", g)
			for i := range 100 {
				lg.Info("record", "i", i)
			}
		}()
	}
	for range 8 {
		<-done
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 800 {
		t.Fatalf("%d lines, want 800", len(lines))
	}
	for _, ln := range lines {
		if !strings.Contains(ln, " INFO  record g=") || strings.Count(ln, " i=") != 1 {
			t.Fatalf("torn line %q", ln)
		}
	}
}

// TestNewFormat: a writer that is not a terminal gets JSON unless
// text is asked for, and text there is never coloured.
func TestNewFormat(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := func(k string) string { return map[string]string{"TERM": "xterm-256color"}[k] }
	for _, c := range []struct{ format, want string }{
		{FormatAuto, "json"}, {FormatJSON, "json"}, {FormatText, "text"},
	} {
		var buf bytes.Buffer
		l, err := New(&buf, "info", c.format, env)
		if err != nil {
			t.Fatal(err)
		}
		l.Info("hello", "k", "v")
		// A file is not a terminal either.
		lf, err := New(f, "info", c.format, env)
		if err != nil {
			t.Fatal(err)
		}
		if isJSON(l) != (c.want == "json") || isJSON(lf) != (c.want == "json") {
			t.Errorf("%s: got JSON %v (buffer), %v (file); want %s", c.format, isJSON(l), isJSON(lf), c.want)
		}
		line := buf.String()
		switch c.want {
		case "json":
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil || m["msg"] != "hello" || m["k"] != "v" {
				t.Errorf("%s: %q is not the JSON record", c.format, line)
			}
		case "text":
			if !strings.HasSuffix(line, " INFO  hello k=v\n") || strings.Contains(line, "\x1b") {
				t.Errorf("%s: %q is not an uncoloured text line", c.format, line)
			}
		}
	}
	if _, err := New(io.Discard, "info", "pretty", env); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("format pretty: %v", err)
	}
	if _, err := New(io.Discard, "loud", "json", env); err == nil {
		t.Error("level loud accepted")
	}
}

func isJSON(l *slog.Logger) bool {
	_, ok := l.Handler().(*slog.JSONHandler)
	return ok
}
