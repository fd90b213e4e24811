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
