package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/sqlitedb"
)

// fillDisk writes zeros into dir until its file system is full, then gives
// back keep bytes.
func fillDisk(t *testing.T, dir string, keep int64) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var n int64
	for {
		k, err := f.Write(buf)
		n += int64(k)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(max(n-keep, 0)); err != nil {
		t.Fatal(err)
	}
	return path
}

var stateRowsRe = regexp.MustCompile(`(?m)^sluice_worker_rows_written_total\{stream="SLUICE_STATE"\} ([0-9.e+]+)`)

var failuresRe = regexp.MustCompile(`(?m)^sluice_worker_apply_failures_total\{[^}]*reason="disk_full"[^}]*\} ([0-9.e+]+)`)

// TestWorkerDiskFullLosesNothing runs the worker on a small file system and
// fills it: SQLite answers "disk full", the worker says so in its log and
// on /metrics and commits nothing, the server keeps deciding, and once
// there is room again every decision made meanwhile reaches SQLite.
func TestWorkerDiskFullLosesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small file system to fill (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })

	natsAddr := freeAddr(t)
	s := startServer(t, serverOpts{noWait: true, extra: []string{"--worker=external", "--nats-listen", natsAddr}})
	metricsAddr := freeAddr(t)
	w := startWorker(t, "nats://"+natsAddr, dir, "--nats-nkey", waitWorkerKey(t, s), "--metrics-addr", metricsAddr)
	s.waitReady(t, 60*time.Second)
	tn := createTenant(t, s, "diskfull")
	createPolicy(t, s, tn, map[string]any{"name": "roomy", "method": "*", "path": "/api/*",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 100, "period": "720h"}}})

	filler := fillDisk(t, dir, 64<<10)
	const n = 30_000 // ~30 bytes of key and state each, far more than 64 KiB
	sent := time.Now()
	for b := 0; b < n; b += 1000 {
		checks := make([]map[string]any, 1000)
		for i := range checks {
			checks[i] = map[string]any{"ip": fmt.Sprintf("10.9.%d.%d", (b+i)>>8&255, (b+i)&255), "path": "/api/x"}
		}
		r := mustStatus(t, call(t, "POST", s.base+"/v1/check/batch", tn.Key, map[string]any{"checks": checks}), 200)
		if strings.Contains(string(r.Raw), `"allowed":false`) {
			t.Fatalf("a check was denied while the worker's disk is full: %.200s", r.Raw)
		}
	}
	metricOf := func(re *regexp.Regexp) float64 {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if m := re.FindSubmatch(body); m != nil {
			v, _ := strconv.ParseFloat(string(m[1]), 64)
			return v
		}
		return 0
	}
	metric := func() float64 { return metricOf(failuresRe) }
	waitFor(t, 60*time.Second, "the worker reports the full disk", func() bool {
		return metric() > 0 && strings.Contains(w.logs.String(), "disk is full")
	})
	if c, _ := check(t, s, tn, ipCheck("192.0.2.200", "/api/x")); !c.Allowed {
		t.Fatalf("the server stopped deciding while the worker's disk is full: %+v", c)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, "every decision counted once there is room", func() bool {
		allowed, _ := analyticsTotals(t, s, tn, sent.Add(-time.Minute))
		return allowed == n+1
	})
	waitFor(t, 90*time.Second, "every bucket state written once there is room", func() bool {
		return metricOf(stateRowsRe) >= n+1
	})
	w.stop()
	db, err := sqlitedb.Open(context.Background(), filepath.Join(dir, "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows int
	if err := db.QueryRow(`SELECT COUNT(*) FROM buckets_live WHERE tenant_id = ?`, tn.ID).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != n+1 {
		t.Fatalf("%d bucket rows, want %d: states published while the disk was full were lost", rows, n+1)
	}
}
