package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunStopsAndPrints loads a stand-in Sluice (every other check denied)
// and the floor briefly, in both modes, and reads the table.
func TestRunStopsAndPrints(t *testing.T) {
	var n atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk_bench" {
			http.Error(w, "no key", http.StatusUnauthorized)
			return
		}
		odd := n.Add(1)%2 == 1
		if r.URL.Path == "/v1/check/batch" {
			w.Write([]byte(`{"results":[{"allowed":true},{"allowed":false}]}`))
			return
		}
		w.Write([]byte(`{"allowed":` + map[bool]string{true: "true", false: "false"}[odd] + `}`))
	}))
	defer ts.Close()

	for _, args := range [][]string{
		{"-duration", "200ms", "-workers", "2", "-floor"},
		{"-duration", "200ms", "-workers", "2", "-mode", "batch", "-batch-size", "2", "-identities", "70000", "-rate", "200"},
	} {
		var out bytes.Buffer
		start := time.Now()
		if err := run(context.Background(), append(args, "-url", ts.URL, "-key", "sk_bench"), &out); err != nil {
			t.Fatal(err)
		}
		if elapsed := time.Since(start); elapsed > 10*time.Second {
			t.Errorf("%v ran for %v", args, elapsed)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		last := strings.Fields(lines[len(lines)-1])
		if len(last) != 11 || last[0] != "sluice" || last[9] != "0" || last[7] == "0" || last[8] == "0" {
			t.Errorf("%v: unexpected table\n%s", args, out.String())
		}
		if slices.Contains(args, "-floor") && !strings.Contains(out.String(), "floor (echo)") {
			t.Errorf("no floor row:\n%s", out.String())
		}
	}
}

func TestLoopbackOnly(t *testing.T) {
	for url, ok := range map[string]bool{
		"http://127.0.0.1:8080": true, "http://localhost:1": true, "http://[::1]:80": true,
		"http://10.0.0.1:8080": false, "https://sluice.example": false, "127.0.0.1:8080": false,
	} {
		if err := checkLoopback(url); (err == nil) != ok {
			t.Errorf("checkLoopback(%q) = %v", url, err)
		}
	}
}

func TestAppendIP(t *testing.T) {
	if got := string(appendIP(nil, 0, nil)); got != "198.51.100.1" {
		t.Errorf("hot IP = %q", got)
	}
}

// The flood scenario against a real server it starts: every denial is
// counted, and the table shows the analytics rows through every step.
func TestFloodScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	var out bytes.Buffer
	err := run(context.Background(), []string{"-flood", "3000", "-workers", "2", "-flood-data", t.TempDir()}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{
		"sent 3000 checks", "0 allowed, 0 request errors", "analytics API counts 3000 denied of 3000 sent",
		"before the flood", "flood counted (server running)", "maintenance +4 d (minutes rolled into hours)", "days past retention",
	} {
		if !strings.Contains(text, want) {
			t.Fatalf("output lacks %q:\n%s", want, text)
		}
	}
	// After the flood is counted its minute holds the top 100 and "others"
	// (two minutes, 200, if it crossed a minute's end), every caller
	// denied once; after retention nothing is left.
	var counted, last []string
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), "flood counted"):
			counted = f
		case strings.Contains(line, "days past retention"):
			last = f
		}
	}
	n := len(counted)
	if n < 6 || counted[n-1] != "3000" || !(counted[n-3] == "100" && counted[n-2] == "2900" || counted[n-3] == "200" && counted[n-2] == "2800") {
		t.Fatalf("counted row %q: want 100 identities, 2900 denied in others, 3000 in all", counted)
	}
	if n := len(last); n < 6 || last[n-1] != "0" || last[n-3] != "0" {
		t.Fatalf("last row %q: want nothing left", last)
	}
}
