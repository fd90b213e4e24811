package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/worker"
)

func hydrationIP(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255) }

// seedBuckets writes n persisted buckets into a stopped server's SQLite
// file, as the worker stores them: caller i consumed 10 of 100.
func seedBuckets(t *testing.T, data, tenantID, policyID string, n int) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, filepath.Join(data, "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now()
	lim := []bus.LimitWire{{Algorithm: "token_bucket", Limit: 100, PeriodNS: int64(720 * time.Hour)}}
	recs := make([]bus.BucketRecord, n)
	for i := range recs {
		recs[i] = bus.BucketRecord{Key: engine.BucketKey(tenantID, policyID, engine.KindIP, hydrationIP(i)), TenantID: tenantID,
			Limits: lim, States: []bus.StateWire{{Tokens: 90, At: now.UnixNano()}}, FullAt: now.Add(72 * time.Hour).UnixNano()}
	}
	if err := worker.WriteBuckets(ctx, db, recs, now); err != nil {
		t.Fatal(err)
	}
}

var hydrationMetric = regexp.MustCompile(`(?m)^sluice_hydration_(complete|buckets_loaded|first_touch_total) ([0-9.e+]+)`)

func hydrationMetrics(t *testing.T, s *server) map[string]float64 {
	t.Helper()
	r := mustStatus(t, call(t, "GET", s.base+"/metrics", operatorToken, nil), 200)
	out := map[string]float64{}
	for _, m := range hydrationMetric.FindAllSubmatch(r.Raw, -1) {
		out[string(m[1])], _ = strconv.ParseFloat(string(m[2]), 64)
	}
	return out
}

// remainingOf checks callers idx once each (one batch) and returns what
// each has left.
func remainingOf(t *testing.T, s *server, tn tenant, idx []int) []int64 {
	t.Helper()
	checks := make([]map[string]any, len(idx))
	for i, k := range idx {
		checks[i] = map[string]any{"ip": hydrationIP(k), "path": "/api/x"}
	}
	r := mustStatus(t, call(t, "POST", s.base+"/v1/check/batch", tn.Key, map[string]any{"checks": checks}), 200)
	results, _ := r.Body["results"].([]any)
	if len(results) != len(idx) {
		t.Fatalf("batch answered %d results for %d checks: %s", len(results), len(idx), r.Raw)
	}
	out := make([]int64, len(idx))
	for i, res := range results {
		m, _ := res.(map[string]any)
		rem, _ := m["remaining"].(float64)
		out[i] = int64(rem)
	}
	return out
}

func span(from, n, step int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i*step
	}
	return out
}

// TestKill9MidHydrationKeepsQuota restarts a server over 600k persisted
// buckets, checks callers the hydration has not reached yet, kills the
// server with SIGKILL while it is still hydrating, and starts it again:
// every caller's quota is what it was, including the consumption of the
// checks made while hydrating, and nobody sees a full bucket.
func TestKill9MidHydrationKeepsQuota(t *testing.T) {
	const n = 600_000
	s := startServer(t, serverOpts{})
	tn := createTenant(t, s, "hydrate")
	pol := createPolicy(t, s, tn, map[string]any{"name": "monthly", "method": "*", "path": "/api/*",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 100, "period": "720h"}}})
	s.stop()
	seedBuckets(t, s.data, tn.ID, pol, n)

	// The last 300 callers in the order the load goes (partition, then
	// key): every other one is checked while hydrating, before the load
	// reaches it; the ones between are checked only after the restart.
	order := make([]int, n)
	keys := make([]string, n)
	for i := range order {
		order[i], keys[i] = i, engine.BucketKey(tn.ID, pol, engine.KindIP, hydrationIP(i))
	}
	slices.SortFunc(order, func(a, b int) int { return bus.CompareBucketKeys(keys[a], keys[b]) })
	var touched, lateOthers []int
	for j, i := range order[n-300:] {
		if j%2 == 0 {
			touched = append(touched, i)
		} else if len(lateOthers) < 100 {
			lateOthers = append(lateOthers, i)
		}
	}

	s.restart(t)
	for i, r := range remainingOf(t, s, tn, touched) {
		if r != 89 {
			t.Fatalf("caller %d checked while hydrating: remaining %d, want 89", touched[i], r)
		}
	}
	time.Sleep(500 * time.Millisecond) // past the 200 ms flush interval: the checks are published
	m := hydrationMetrics(t, s)
	s.kill()
	t.Logf("killed with %.0f of %d buckets loaded, %.0f loaded on first touch", m["buckets_loaded"], n, m["first_touch_total"])
	if m["complete"] != 0 {
		t.Fatalf("hydration of %d buckets ended before the kill; the test needs more buckets to kill it mid-load", n)
	}
	if m["first_touch_total"] < float64(len(touched)) {
		t.Fatalf("first-touch loads %.0f, want at least %d", m["first_touch_total"], len(touched))
	}

	s.restart(t)
	for i, r := range remainingOf(t, s, tn, touched) {
		if r != 88 {
			t.Fatalf("caller %d after kill -9 mid-hydration: remaining %d, want 88 (10 + 1 + 1 used)", touched[i], r)
		}
	}
	others := append(span(0, 100, 997), span(n/2, 100, 13)...)
	others = append(others, lateOthers...)
	for i, r := range remainingOf(t, s, tn, others) {
		if r != 89 {
			t.Fatalf("caller %d after restart: remaining %d, want 89", others[i], r)
		}
	}
	waitFor(t, 60*time.Second, "hydration complete", func() bool { return hydrationMetrics(t, s)["complete"] == 1 })
	if got := hydrationMetrics(t, s); got["buckets_loaded"]+got["first_touch_total"] != n {
		t.Fatalf("loaded %.0f + first touch %.0f, want %d persisted buckets", got["buckets_loaded"], got["first_touch_total"], n)
	}
}
