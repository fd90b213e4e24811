package bus

// Moving off a NATS node that lost its cluster.
//
// A NATS node cut off from the others (a silent partition, no reset) keeps
// its clients' TCP connections up, and it may even believe it still leads
// the streams it led, for up to its lost-quorum interval: nothing it is
// asked to store commits. Its clients see only requests that time out. The
// client library reconnects when a connection breaks, not when the server
// behind it is useless, so a process that notices its JetStream requests
// keep failing (Failed) while the connection is up moves itself to another
// server of the pool (nats.Conn.ForceReconnect, which tries the next one):
// on a majority node its requests commit again as soon as the majority has
// a leader. That can take the majority a few seconds (JetStream's election
// timeout is 4-9 s, and until the majority marks the lost node offline a
// consumer may still be placed on it and time out), so a further move
// without a success in between waits at least SettleWait, and twice as long
// as the one before (up to 8 × After): a process that reached the majority
// while it elects stays there, instead of moving on and perhaps back to the
// node that lost its cluster (in a three-node cluster the third move of a
// round robin is that node).
//
// A move is only for a node that is there but useless: before it moves, a
// process asks the node for a PONG. A node cut off from its cluster
// answers one at once; when nothing answers, not even that, the link
// itself is down (this process is the one cut off), another node is no
// nearer, and a forced reconnect would only turn a silent connection into
// a closed one (and a server's readiness with it, which local-consistency
// checks need not lose). The client library's own pings handle that case.

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// SettleWait is the least time requests must fail on a server a process
// was moved to before it moves again: longer than JetStream's longest
// election timeout (9 s), so the majority has elected its leaders.
const SettleWait = 10 * time.Second

// Unstick reconnects a connection to another NATS server once its
// JetStream requests have failed for After while connected. It is safe for
// concurrent use.
type Unstick struct {
	nc    *nats.Conn
	after time.Duration
	log   *slog.Logger
	now   func() time.Time
	// reconnect is nc.ForceReconnect; answers asks the node for a PONG
	// (tests replace both).
	reconnect func() error
	answers   func(time.Duration) error

	mu      sync.Mutex
	okAt    time.Time // the last success, or when failures began to count
	failing bool
	// unanswered: every failure since okAt was a round nobody answered
	// (Unanswered), none a request that failed otherwise.
	unanswered bool
	forced     time.Time // the last forced reconnect
	moves      int       // forced reconnects since the last success

	forcedTotal prometheus.Counter
}

// NewUnstick watches nc; after is how long requests must fail before it
// moves, and how long it waits after a move before moving again.
func NewUnstick(nc *nats.Conn, after time.Duration, log *slog.Logger) *Unstick {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	u := &Unstick{nc: nc, after: after, log: log, now: time.Now,
		forcedTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_nats_forced_reconnects_total",
			Help: "Reconnections to another NATS server forced because JetStream requests kept failing on a connection that was up (its node lost its cluster).",
		})}
	if nc != nil {
		u.reconnect, u.answers = nc.ForceReconnect, nc.FlushTimeout
	}
	return u
}

// Register adds the reconnect counter to r.
func (u *Unstick) Register(r prometheus.Registerer) error { return r.Register(u.forcedTotal) }

// OK records a JetStream request that succeeded.
func (u *Unstick) OK() {
	u.mu.Lock()
	u.failing, u.moves = false, 0
	u.mu.Unlock()
}

// Failed records a JetStream request that failed, and moves the
// connection to another server when requests have failed for After while
// it was connected; after a move, requests must fail on the new server for
// twice as long as before the last move (at most 8 × After), and at least
// SettleWait, before the next.
func (u *Unstick) Failed() { u.failed(false) }

// Unanswered records a round of JetStream requests none of which got an
// answer at all. It counts as Failed, but a move on such rounds alone
// waits at least SettleWait: a node of the majority whose streams are
// electing new leaders answers nothing for up to the election timeout
// too, and must not be left for it; a node that lost its cluster answers
// nothing for good.
func (u *Unstick) Unanswered() { u.failed(true) }

// FailedWith records a JetStream request that failed with err: as
// Unanswered when err says nothing answered for the stream (a timeout, no
// responders, JetStream unavailable), which is what a majority node
// electing a stream's leader answers, so that a process there waits out
// the election instead of moving, perhaps to the node that lost its
// cluster; as Failed otherwise.
func (u *Unstick) FailedWith(err error) { u.failed(Electing(err)) }

// Electing reports whether err is what a JetStream request gets while its
// stream has no leader: no answer in time, no responders, or JetStream
// saying it is unavailable. A node cut off from its cluster answers the
// same, for good; Unstick tells the two apart by how long it lasts.
func Electing(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return true
	case errors.As(err, &apiErr):
		return apiErr.Code == 503 // JetStream system temporarily unavailable
	}
	return false
}

func (u *Unstick) failed(unanswered bool) {
	now := u.now()
	u.mu.Lock()
	if !u.failing {
		u.failing, u.okAt, u.unanswered = true, now, true
	}
	u.unanswered = u.unanswered && unanswered
	since := now.Sub(u.okAt)
	wait := u.after << min(u.moves, 3)
	if u.moves > 0 || u.unanswered {
		wait = max(wait, SettleWait)
	}
	due := since >= wait && now.Sub(u.forced) >= wait && u.connected() && u.servers() > 1
	if due {
		// The next server is judged on its own failures.
		u.forced, u.okAt, u.unanswered = now, now, true
		u.moves++
	}
	u.mu.Unlock()
	if !due {
		return
	}
	from := ""
	if u.nc != nil {
		from = serverHost(u.nc.ConnectedUrl())
	}
	if u.answers != nil {
		if err := u.answers(min(u.after/2, time.Second)); err != nil {
			// The node does not answer at all: the link is down, not the
			// node's cluster. Stay; the next due time asks again.
			u.mu.Lock()
			u.moves--
			u.mu.Unlock()
			u.log.Info("JetStream requests keep failing and the NATS server does not answer a ping either: the link is down, not the server's cluster; not moving", "failing_for", since.Round(time.Millisecond), "server", from)
			return
		}
	}
	u.log.Warn("JetStream requests keep failing on a live connection: its NATS node may have lost its cluster; reconnecting to another", "failing_for", since.Round(time.Millisecond), "server", from)
	u.forcedTotal.Inc()
	if err := u.reconnect(); err != nil {
		u.log.Warn("forced reconnect failed", "err", err)
	}
}

func (u *Unstick) connected() bool { return u.nc == nil || u.nc.IsConnected() }

func (u *Unstick) servers() int {
	if u.nc == nil {
		return 2
	}
	return len(u.nc.Servers())
}

// serverHost is a server URL's host, without any credentials it carries.
func serverHost(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Host
	}
	return ""
}
