package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/quota"
)

// maxRLSSeries bounds the label sets of the descriptor statistics, in all
// and per tenant: a rule with detailed_metric or value_to_metric names a
// series per value, which callers choose. Past a bound, hits count under
// one series of the tenant's, domain and key "_overflow", so one tenant's
// callers cannot crowd out another's series; each label is bounded in
// bytes (boundLabel).
const (
	maxRLSSeries          = 10_000
	maxRLSSeriesPerTenant = 1_000
)

// nearLimitRatio is the reference server's default NEAR_LIMIT_RATIO.
const nearLimitRatio = 0.8

// rlsMetrics are the reference server's per-rule statistics, under its
// names (as its default Prometheus mapping exports them, but counters):
// ratelimit_service_rate_limit_{total_hits,over_limit,near_limit,
// within_limit,shadow_mode}, labelled by tenant, domain and the rule's key
// (the reference's statistics key without the domain).
type rlsMetrics struct {
	totalHits, overLimit, nearLimit, withinLimit, shadowMode *prometheus.CounterVec

	// series is read on every decided descriptor: a read lock, shared by
	// every check; a new label set takes the write lock once.
	mu       sync.RWMutex
	series   map[[3]string]*rlsSeries
	byTenant map[string]int
}

type rlsSeries struct {
	totalHits, overLimit, nearLimit, withinLimit, shadowMode prometheus.Counter
}

func newRLSMetrics() *rlsMetrics {
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + name, Help: help}, []string{"tenant", "domain", "key"})
	}
	return &rlsMetrics{
		totalHits:   vec("total_hits", "Hits of Envoy rate limit descriptors per rule (hits_addend summed)."),
		overLimit:   vec("over_limit", "Hits over the rule's limit."),
		nearLimit:   vec("near_limit", "Hits within the limit but past 0.8 of it."),
		withinLimit: vec("within_limit", "Hits within the rule's limit."),
		shadowMode:  vec("shadow_mode", "Hits over the limit of a rule in shadow mode (answered OK)."),
		series:      map[[3]string]*rlsSeries{},
		byTenant:    map[string]int{},
	}
}

// Describe implements prometheus.Collector.
func (m *rlsMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range m.vecs() {
		v.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *rlsMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, v := range m.vecs() {
		v.Collect(ch)
	}
}

func (m *rlsMetrics) vecs() []*prometheus.CounterVec {
	return []*prometheus.CounterVec{m.totalHits, m.overLimit, m.nearLimit, m.withinLimit, m.shadowMode}
}

// of returns the series of a tenant's domain and statistics key, bounded:
// past a bound, a new key counts under "_overflow", found with the read
// lock as every known key is.
func (m *rlsMetrics) of(tenant, domain, statsKey string) *rlsSeries {
	key := boundLabel(strings.TrimPrefix(strings.TrimPrefix(statsKey, domain), "."))
	domain = boundLabel(domain)
	m.mu.RLock()
	s := m.series[[3]string{tenant, domain, key}]
	if s == nil && m.full(tenant) {
		s = m.series[[3]string{tenant, overflowKey, overflowKey}]
	}
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.full(tenant) {
		// One overflow series a tenant, whatever its domains.
		domain, key = overflowKey, overflowKey
	}
	if s := m.series[[3]string{tenant, domain, key}]; s != nil {
		return s
	}
	s = &rlsSeries{
		totalHits: m.totalHits.WithLabelValues(tenant, domain, key), overLimit: m.overLimit.WithLabelValues(tenant, domain, key),
		nearLimit: m.nearLimit.WithLabelValues(tenant, domain, key), withinLimit: m.withinLimit.WithLabelValues(tenant, domain, key),
		shadowMode: m.shadowMode.WithLabelValues(tenant, domain, key),
	}
	m.series[[3]string{tenant, domain, key}] = s
	m.byTenant[tenant]++
	return s
}

// full reports whether a new series of tenant would pass a bound; m.mu
// must be held.
func (m *rlsMetrics) full(tenant string) bool {
	return len(m.series) >= maxRLSSeries || m.byTenant[tenant] >= maxRLSSeriesPerTenant
}

// overflowKey is the domain and key hits past the series bound count
// under.
const overflowKey = "_overflow"

// maxLabelBytes bounds a statistics label: a longer domain or key (a long
// value under detailed_metric or value_to_metric) keeps its first bytes
// and ends with "~" and 16 hex digits of its SHA-256, so a series costs
// bounded memory and distinct keys stay apart.
const maxLabelBytes = 256

func boundLabel(s string) string {
	if len(s) <= maxLabelBytes {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	cut := maxLabelBytes - 17
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut-- // keep the label valid UTF-8
	}
	return s[:cut] + "~" + hex.EncodeToString(sum[:8])
}

// observe counts one decided descriptor as the reference counts it: hits
// over the limit, and hits past the near-limit threshold, split where a
// request's hits straddle a threshold.
func (m *rlsMetrics) observe(tenant, domain, statsKey string, hits int64, o quota.Outcome, allowed, shadow bool) {
	if hits <= 0 {
		return
	}
	s := m.of(tenant, domain, statsKey)
	limit := o.Limit
	near := int64(float64(float32(limit) * nearLimitRatio))
	var before, after int64
	if allowed {
		after = limit - o.Remaining
		before = after - hits
	} else {
		before = limit - o.Remaining
		after = before + hits
	}
	s.totalHits.Add(float64(hits))
	if !allowed {
		over := hits
		if before < limit {
			over = after - limit
			s.nearLimit.Add(float64(limit - max(near, before)))
		}
		s.overLimit.Add(float64(over))
		if shadow {
			s.shadowMode.Add(float64(over))
		}
		return
	}
	s.withinLimit.Add(float64(hits))
	if after > near {
		if before >= near {
			s.nearLimit.Add(float64(hits))
		} else {
			s.nearLimit.Add(float64(after - near))
		}
	}
}
