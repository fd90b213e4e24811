package engine

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/quota"
)

// Callers that choose values (detailed_metric) fill at most their own
// tenant's share of series; the rest count under _overflow, and another
// tenant's new rule still gets a series of its own.
func TestRLSMetricsBounds(t *testing.T) {
	m := newRLSMetrics()
	ok := quota.Outcome{Allowed: true, Limit: 10, Remaining: 9}
	for i := 0; i < maxRLSSeriesPerTenant+50; i++ {
		m.observe("ten_a", "edge", "edge.user_"+strconv.Itoa(i), 1, ok, true, false)
	}
	if n := testutil.CollectAndCount(m.totalHits); n != maxRLSSeriesPerTenant+1 {
		t.Fatalf("%d series, want %d and the overflow", n, maxRLSSeriesPerTenant)
	}
	if got := testutil.ToFloat64(m.totalHits.WithLabelValues("ten_a", overflowKey, overflowKey)); got != 50 {
		t.Fatalf("overflow hits %v, want 50", got)
	}
	// Past its bound, a tenant's other domains share its one overflow.
	for i := range 20 {
		m.observe("ten_a", "domain"+strconv.Itoa(i), "domain"+strconv.Itoa(i)+".user_x", 1, ok, true, false)
	}
	if n := testutil.CollectAndCount(m.totalHits); n != maxRLSSeriesPerTenant+1 {
		t.Fatalf("%d series after 20 more domains, want %d and one overflow", n, maxRLSSeriesPerTenant)
	}
	m.observe("ten_b", "edge", "edge.remote_address", 3, ok, true, false)
	if got := testutil.ToFloat64(m.totalHits.WithLabelValues("ten_b", "edge", "remote_address")); got != 3 {
		t.Fatalf("another tenant's rule: %v hits, want 3 in a series of its own", got)
	}
}

// Hits are split between within, near and over the limit as the
// reference splits them.
func TestRLSMetricsThresholds(t *testing.T) {
	m := newRLSMetrics()
	// 10 per window, near past 8. 7 used, a call of 2 allowed (7 -> 9):
	// 1 of it near. Then a call of 3 denied at 9 (9 + 3 = 12 > 10): as the
	// reference counts a call partly over, 2 over and 1 near.
	m.observe("t", "d", "d.k", 2, quota.Outcome{Allowed: true, Limit: 10, Remaining: 1}, true, false)
	m.observe("t", "d", "d.k", 3, quota.Outcome{Allowed: false, Limit: 10, Remaining: 1}, false, true)
	within := testutil.ToFloat64(m.withinLimit.WithLabelValues("t", "d", "k"))
	near := testutil.ToFloat64(m.nearLimit.WithLabelValues("t", "d", "k"))
	over := testutil.ToFloat64(m.overLimit.WithLabelValues("t", "d", "k"))
	shadow := testutil.ToFloat64(m.shadowMode.WithLabelValues("t", "d", "k"))
	total := testutil.ToFloat64(m.totalHits.WithLabelValues("t", "d", "k"))
	if within != 2 || near != 2 || over != 2 || shadow != 2 || total != 5 {
		t.Fatalf("within %v near %v over %v shadow %v total %v; want 2, 2 (1 + 1), 2, 2, 5", within, near, over, shadow, total)
	}
}

// A label is bounded in bytes: a long key keeps its start and a hash, and
// two long keys that differ only at the end stay two series.
func TestRLSMetricsLabelBytes(t *testing.T) {
	m := newRLSMetrics()
	ok := quota.Outcome{Allowed: true, Limit: 10, Remaining: 9}
	long := strings.Repeat("v", 100_000)
	m.observe("t", "d", "d.user_"+long+"a", 1, ok, true, false)
	m.observe("t", "d", "d.user_"+long+"b", 1, ok, true, false)
	if n := testutil.CollectAndCount(m.totalHits); n != 2 {
		t.Fatalf("%d series, want 2", n)
	}
	for k := range m.series {
		if len(k[2]) > maxLabelBytes || !strings.HasPrefix(k[2], "user_vvv") {
			t.Fatalf("label of %d bytes (%.20q…), want at most %d", len(k[2]), k[2], maxLabelBytes)
		}
	}
}
