package engine

import "github.com/prometheus/client_golang/prometheus"

// waitMetrics count the waiters of this server (wait.go). Labels are
// fixed sets: outcomes and the WaitRefused* reasons.
type waitMetrics struct {
	waiters                               prometheus.Gauge
	outcomes                              *prometheus.CounterVec
	admitted, timedOut, cancelled, behind prometheus.Counter
	refusals                              *prometheus.CounterVec
}

func newWaitMetrics() *waitMetrics {
	m := &waitMetrics{
		waiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_waiters", Help: "Checks waiting in this server's bucket queues now.",
		}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_waits_total", Help: "Ends of checks that asked to wait, by outcome: admitted, timed_out (denied at the deadline), cancelled (the client left), refused (denied at once or on hand-over or shutdown; see sluice_waits_refused_total), and behind (checks without a wait denied because waiters were queued).",
		}, []string{"outcome"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_waits_refused_total", Help: "Checks that asked to wait and were denied without waiting their whole wait, by reason.",
		}, []string{"reason"}),
	}
	m.admitted = m.outcomes.WithLabelValues("admitted")
	m.timedOut = m.outcomes.WithLabelValues("timed_out")
	m.cancelled = m.outcomes.WithLabelValues("cancelled")
	m.behind = m.outcomes.WithLabelValues("behind")
	return m
}

func (m *waitMetrics) refused(reason string) { m.refusedN(reason, 1) }

func (m *waitMetrics) refusedN(reason string, n int) {
	m.outcomes.WithLabelValues("refused").Add(float64(n))
	m.refusals.WithLabelValues(reason).Add(float64(n))
}

func (m *waitMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.waiters, m.outcomes, m.refusals}
}
