package engine

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type engineMetrics struct {
	publishMetrics
	checks         *prometheus.CounterVec
	latency        prometheus.Histogram
	pending        prometheus.GaugeFunc
	buckets        prometheus.GaugeFunc
	configVersion  prometheus.GaugeFunc
	resyncs        prometheus.Counter
	hydrated       prometheus.GaugeFunc
	hydrateLoaded  prometheus.GaugeFunc
	hydrateRetries prometheus.Counter
	firstTouch     prometheus.Counter
	byReason       checkCounters
	rls            *rlsMetrics
	// crossingsPending counts quota crossings not yet published (quotaevents.go).
	crossingsPending prometheus.GaugeFunc
	// repeats counts forwarded items answered from the applied table
	// (applied.go); appliedSize is that table's size.
	repeats     prometheus.Counter
	appliedSize prometheus.GaugeFunc
	// settlesApplied counts settles this server applied to a bucket.
	settlesApplied prometheus.Counter
	// jwksFailures counts failed fetches of issuers' key sets (jwks.go).
	jwksFailures prometheus.Counter
	// overflows counts decisions on overflow buckets, atBound the tenants
	// at their bound of buckets (overflow.go).
	overflows prometheus.Counter
	atBound   prometheus.GaugeFunc
	// inFlight is the slots of concurrency limits held here now;
	// leasesAcquired and leasesReleased are leaseBook's counters (lease.go).
	inFlight                       prometheus.GaugeFunc
	leasesAcquired, leasesReleased prometheus.Counter
}

func newEngineMetrics(e *Engine) engineMetrics {
	m := engineMetrics{
		publishMetrics: newPublishMetrics(),
		jwksFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_jwks_fetch_failures_total", Help: "Failed fetches of JWT issuers' key sets (the last good set is kept).",
		}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_checks_total", Help: "Decided checks by outcome (allowed/denied) and reason.",
		}, []string{"outcome", "reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_decision_seconds", Help: "Time to decide one check in memory (identity, match, bucket).",
			Buckets: []float64{250e-9, 500e-9, 1e-6, 2e-6, 5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 1e-3},
		}),
		pending: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_flush_pending", Help: "Bucket states and counter batches waiting to be published.",
		}, func() float64 { return float64(e.pub.pendingCount()) }),
		buckets: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_hot_cache_buckets", Help: "Buckets in the hot cache.",
		}, func() float64 { return float64(e.cache.Len()) }),
		configVersion: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_config_version", Help: "Config version this server has applied.",
		}, func() float64 { return float64(e.view.Load().version) }),
		resyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_config_resyncs_total", Help: "Full config resynchronisations after a missed change.",
		}),
		hydrated: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_hydration_complete", Help: "1 once every persisted bucket is in the hot cache (before that, buckets load on first touch).",
		}, func() float64 {
			if e.hyd.done.Load() {
				return 1
			}
			return 0
		}),
		hydrateLoaded: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_hydration_buckets_loaded", Help: "Persisted buckets the hydration at start has loaded so far.",
		}, func() float64 { return float64(e.hyd.loaded.Load()) }),
		hydrateRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_hydration_retries_total", Help: "Pages of persisted buckets that failed to load and were asked for again.",
		}),
		firstTouch: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_hydration_first_touch_total", Help: "Buckets loaded one by one because a check touched them before the hydration reached them.",
		}),
	}
	m.byReason = newCheckCounters(m.checks)
	m.rls = newRLSMetrics()
	m.crossingsPending = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_quota_crossings_pending", Help: "Quota crossings waiting to be published to the worker.",
	}, func() float64 { return float64(e.pub.pendingCrossings()) })
	m.repeats = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_forward_repeats_total", Help: "Forwarded decisions that arrived again (a late or lost answer) and were answered as the first time, without moving a bucket twice.",
	})
	m.settlesApplied = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_settles_applied_total", Help: "Settles whose difference this server applied to a bucket, as the bucket's owner (each settle is applied once in the cluster).",
	})
	m.appliedSize = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_forward_applied_remembered", Help: "Answers to forwarded decisions this owner remembers for repeats (the last 10-20 s).",
	}, func() float64 { return float64(e.fwd.applied.size()) })
	m.overflows, m.atBound = e.bound.overflows, e.bound.atBound
	m.leasesAcquired, m.leasesReleased = e.leases.acquired, e.leases.released
	m.inFlight = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_concurrency_in_flight", Help: "Slots of concurrency limits held on this server now: leases neither released nor expired, in the buckets it decides.",
	}, func() float64 { return float64(e.leases.inFlight(e.cfg.Now().UnixNano())) })
	return m
}

// newPublishMetrics makes the publisher's metrics (publish.go).
func newPublishMetrics() publishMetrics {
	return publishMetrics{
		flushBuckets: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_flush_buckets", Help: "Bucket states published per state flush.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9),
		}),
		flushCounters: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_flush_counter_rows", Help: "Counter rows published per counter flush.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9),
		}),
		flushFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_flush_failures_total", Help: "Flushes that failed to publish and will be retried.",
		}, []string{"stream"}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_bucket_states_published_total", Help: "Bucket states published to the state stream (state writes caused by allowed checks).",
		}),
		natsLag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_nats_publish_lag_seconds", Help: "Age of the oldest unpublished state or counter data at the last flush.",
		}),
		crossingsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_quota_crossings_dropped_total", Help: "Quota crossings (webhook threshold events) dropped because NATS was away longer than the pending bound.",
		}),
	}
}

func (m engineMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.checks, m.latency, m.flushBuckets, m.flushCounters, m.flushFailures, m.published, m.pending, m.buckets, m.configVersion, m.resyncs, m.natsLag, m.hydrated, m.hydrateLoaded, m.hydrateRetries, m.firstTouch, m.rls, m.crossingsDropped, m.crossingsPending, m.repeats, m.appliedSize, m.settlesApplied, m.jwksFailures, m.overflows, m.atBound, m.leasesAcquired, m.leasesReleased, m.inFlight}
}

// checkCounters resolves the label values once, so counting a decision on
// the hot path is one atomic add.
type checkCounters struct {
	ok, rateLimited, invalidKey, invalidToken, blocked, concurrencyLimited prometheus.Counter
}

func newCheckCounters(v *prometheus.CounterVec) checkCounters {
	return checkCounters{
		ok:           v.WithLabelValues("allowed", ReasonOK),
		rateLimited:  v.WithLabelValues("denied", ReasonRateLimited),
		invalidKey:   v.WithLabelValues("denied", ReasonInvalidKey),
		invalidToken: v.WithLabelValues("denied", ReasonInvalidToken),
		blocked:      v.WithLabelValues("denied", ReasonBlocked),

		concurrencyLimited: v.WithLabelValues("denied", ReasonConcurrencyLimited),
	}
}

func (m *engineMetrics) observe(reason string, allowed bool, d time.Duration) {
	switch {
	case allowed:
		m.byReason.ok.Inc()
	case reason == ReasonRateLimited:
		m.byReason.rateLimited.Inc()
	case reason == ReasonInvalidKey:
		m.byReason.invalidKey.Inc()
	case reason == ReasonInvalidToken:
		m.byReason.invalidToken.Inc()
	case reason == ReasonConcurrencyLimited:
		m.byReason.concurrencyLimited.Inc()
	default:
		m.byReason.blocked.Inc()
	}
	m.latency.Observe(d.Seconds())
}
