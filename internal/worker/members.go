package worker

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bus"
)

// memberReadFresh is how long one read of the members bucket answers for:
// a burst of config writes with a concurrency limit reads it once.
const memberReadFresh = time.Second

// memberReadTimeout bounds one read of the members bucket.
const memberReadTimeout = 2 * time.Second

// serverSupport tells which live servers cannot compile a concurrency
// limit, from what each announces in the members bucket (bus.ReadMembers).
// It reads the bucket only when a config write holding a concurrency
// limit asks (configsvc.Hooks.ServersWithoutConcurrency), never for other
// writes and never in the background, and keeps the answer for
// memberReadFresh. A bucket that does not exist holds no server: a worker
// that starts before its servers takes every write. It is safe for
// concurrent use.
type serverSupport struct {
	js  jetstream.JetStream
	now func() time.Time
	// failures counts reads that failed (each fails the write that asked).
	failures prometheus.Counter

	// mu is held across a read: writes that ask meanwhile wait for it and
	// take its answer.
	mu    sync.Mutex
	at    time.Time // of the last good read; zero before it
	older []string  // live servers without concurrency, as of at
}

func newServerSupport(js jetstream.JetStream, now func() time.Time) *serverSupport {
	return &serverSupport{js: js, now: now,
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_worker_member_read_failures_total",
			Help: "Failed reads of the servers' members bucket, made for config writes that hold a concurrency limit; each such write is refused with 503 and may be sent again."})}
}

// withoutConcurrency names the live servers that cannot compile a
// concurrency limit.
func (s *serverSupport) withoutConcurrency(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if !s.at.IsZero() && now.Sub(s.at) < memberReadFresh && !now.Before(s.at) {
		return s.older, nil
	}
	rctx, cancel := context.WithTimeout(ctx, memberReadTimeout)
	defer cancel()
	members, err := bus.ReadMembers(rctx, s.js, now)
	if err != nil {
		s.failures.Inc()
		return nil, err
	}
	var older []string
	for _, m := range members {
		if m.Live(now) && !m.CompilesConcurrency() {
			older = append(older, m.Node)
		}
	}
	slices.Sort(older)
	s.at, s.older = now, older
	return older, nil
}
