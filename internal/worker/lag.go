package worker

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/tick"
)

// Lag: how far the worker is behind the servers. Both streams are work
// queues, so whatever a stream holds is exactly what the worker has not yet
// committed and acked: its message and byte counts are the backlog, and its
// first message's time is the oldest unapplied message's age.

type lagMetrics struct {
	messages *prometheus.GaugeVec
	bytes    *prometheus.GaugeVec
	oldest   *prometheus.GaugeVec
	full     *prometheus.GaugeVec
	fullHits *prometheus.CounterVec
}

func newLagMetrics() lagMetrics {
	return lagMetrics{
		messages: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_worker_stream_backlog_messages", Help: "Messages in the stream the worker has not committed yet."}, []string{"stream"}),
		bytes:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_worker_stream_backlog_bytes", Help: "Bytes in the stream the worker has not committed yet."}, []string{"stream"}),
		oldest:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_worker_stream_oldest_unapplied_seconds", Help: "Age of the oldest message the worker has not committed yet (0 when none)."}, []string{"stream"}),
		full:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_worker_stream_full", Help: "1 while the stream is within a tenth of its max bytes bound and refuses servers' flushes (they keep their states and retry)."}, []string{"stream"}),
		fullHits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_stream_full_total", Help: "Times the stream was found at its max bytes bound."}, []string{"stream"}),
	}
}

func (m lagMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.messages, m.bytes, m.oldest, m.full, m.fullHits}
}

// Lag is one stream's backlog.
type Lag struct {
	Messages uint64
	Bytes    uint64
	Oldest   time.Duration // age of the oldest unapplied message; 0 when none
	Full     bool          // the stream is at its max bytes bound
}

// StreamLag reads a stream's backlog from JetStream.
func (w *Worker) StreamLag(ctx context.Context, stream string) (Lag, error) {
	s, err := w.js.Stream(ctx, stream)
	if err != nil {
		return Lag{}, err
	}
	info := s.CachedInfo()
	st := info.State
	lag := Lag{Messages: st.Msgs, Bytes: st.Bytes}
	if st.Msgs > 0 && !st.FirstTime.IsZero() {
		lag.Oldest = max(w.cfg.Now().Sub(st.FirstTime), 0)
	}
	// Within a tenth of the bound, servers' larger flushes are already
	// being refused.
	if mb := info.Config.MaxBytes; mb > 0 && int64(st.Bytes) > mb*9/10 {
		lag.Full = true
	}
	return lag, nil
}

// watchLag updates the lag metrics every LagInterval and logs while the
// worker is behind: INFO progress every 10 s with the backlog and the rate
// of bucket rows committed, INFO once caught up, WARN when a stream is at
// its bound.
func (w *Worker) watchLag(ctx context.Context) {
	type streamState struct {
		behind   bool
		full     bool
		lastLog  time.Time
		rowsAt   uint64
		rowsTime time.Time
	}
	states := map[string]*streamState{}
	for _, s := range workerStreams {
		states[s] = &streamState{}
	}
	rows := func(stream string) uint64 { return w.streamRows(stream).Load() }
	tick.Every(ctx, w.cfg.LagInterval, func() {
		for _, stream := range workerStreams {
			st := states[stream]
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			lag, err := w.StreamLag(cctx, stream)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					w.log.Warn("reading the stream's backlog failed", "stream", stream, "err", err)
				}
				continue
			}
			m := w.metrics.lag
			m.messages.WithLabelValues(stream).Set(float64(lag.Messages))
			m.bytes.WithLabelValues(stream).Set(float64(lag.Bytes))
			m.oldest.WithLabelValues(stream).Set(lag.Oldest.Seconds())
			full := 0.0
			if lag.Full {
				full = 1
				if !st.full {
					m.fullHits.WithLabelValues(stream).Inc()
					w.log.Warn("stream is at its max bytes bound: servers' flushes are refused; they keep their pending states and retry until the worker drains it",
						"stream", stream, "backlog_messages", lag.Messages, "backlog_bytes", lag.Bytes, "oldest_unapplied", lag.Oldest.Round(time.Millisecond).String())
				}
			} else if st.full {
				w.log.Info("stream is below its bound again; servers' flushes are accepted", "stream", stream, "backlog_bytes", lag.Bytes)
			}
			st.full = lag.Full
			m.full.WithLabelValues(stream).Set(full)

			now := time.Now()
			// Behind: more than a few apply intervals' worth is waiting.
			behind := lag.Oldest > 5*w.cfg.ApplyInterval+w.cfg.LagInterval
			switch {
			case behind && !st.behind:
				st.behind, st.lastLog, st.rowsAt, st.rowsTime = true, now, rows(stream), now
				w.log.Info("worker is behind", "stream", stream, "backlog_messages", lag.Messages, "backlog_bytes", lag.Bytes,
					"oldest_unapplied", lag.Oldest.Round(time.Millisecond).String())
			case behind && now.Sub(st.lastLog) >= 10*time.Second:
				r := rows(stream)
				rate := float64(r-st.rowsAt) / now.Sub(st.rowsTime).Seconds()
				st.lastLog, st.rowsAt, st.rowsTime = now, r, now
				w.log.Info("worker is catching up", "stream", stream, "backlog_messages", lag.Messages, "backlog_bytes", lag.Bytes,
					"oldest_unapplied", lag.Oldest.Round(time.Millisecond).String(), "rows_per_second", int64(rate), "rows_total", r)
			case !behind && st.behind && lag.Messages == 0:
				st.behind = false
				w.log.Info("worker caught up", "stream", stream, "rows_total", rows(stream))
			}
		}
	})
}
