package cluster

// Forwarding. A check whose bucket another server owns travels to that
// owner as a NATS request on ForwardPrefix+owner. Concurrent forwards to
// one owner are batched: the first goes out at once, and checks arriving
// while requests are in flight ride together in the next one, so batching
// adds no wait when idle and saves round trips under load. The owner
// decides every item in its own hot cache and answers them in order.
// A batch goes over a direct connection to the owner when one is ready
// (direct.go), and over NATS otherwise.
//
// Once means once. A forward whose answer does not come back may still
// have been decided by the owner, so every item that moves a bucket
// carries an id (Item.ID) and the owner remembers what it answered each id
// for a while (the engine's applied table): an item sent again, late or
// twice is answered as the first was and changes nothing. Errors tell the
// two cases apart: one that wraps ErrNotSent means the owner cannot have
// seen the item, so it may go anywhere, any other that it may have, so it
// may only go again to the same owner, with the same id.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/quota"
)

// Item is one forwarded decision. The owner resolves the limits from its
// own config view (Policy, Tier, and the consumer key's override if KeyID
// is set), so policy changes apply the same way on every server.
type Item struct {
	Key     string `json:"k"`
	Tenant  string `json:"t"`
	Policy  string `json:"p"`
	Tier    string `json:"ti,omitempty"`
	KeyID   string `json:"ki,omitempty"`
	Cost    int64  `json:"c"`
	Consume bool   `json:"n,omitempty"`
	Now     int64  `json:"w"`
	// Settle marks a reservation's settle: a positive Cost is taken even
	// past the limit, a negative one given back from the windows that
	// began by Since (unix ns), when the reservation was made.
	Settle bool  `json:"s,omitempty"`
	Since  int64 `json:"si,omitempty"`
	// ID names the decision for the owner, which answers a repeat of it
	// as it answered the first (0: no id, as from an older server).
	ID uint64 `json:"id,omitempty"`
	// Ref is a settle's reservation id, which the owner marks applied at
	// the worker before it applies the difference.
	Ref string `json:"rf,omitempty"`
	// Units asks the owner to count what the item consumes for usage, where
	// it consumes it, and to say so (Result.Counted): usage then counts
	// what the bucket took, even when the answer is lost.
	Units bool `json:"u,omitempty"`
	// Count takes the cost even when it is denied (the reference's
	// counting, for Envoy's hits). An older owner ignores it and counts
	// only what it allows.
	Count bool `json:"cn,omitempty"`
	// Lease, with Consume, takes a slot of the bucket's concurrency limits
	// under this lease token, expiring at LeaseExp (unix ns); with Release,
	// gives back the slot of that token. An older owner reads neither and
	// has no concurrency limit to decide (its config refuses the
	// algorithm): it answers StatusNoLimits, and a sender never sends it
	// the binary flags (peerInfo.Leases).
	Lease    int64 `json:"ls,omitempty"`
	LeaseExp int64 `json:"le,omitempty"`
	Release  bool  `json:"rl,omitempty"`
	// Wait is how long the item may wait at its owner for its bucket
	// (waiting.go); only items sent with ForwardWait carry it.
	Wait time.Duration `json:"wt,omitempty"`
}

// ErrNotSent is wrapped by forward errors after which the owner cannot
// have received the item: it was decided nowhere.
var ErrNotSent = errors.New("not sent to the owner")

// Result statuses.
const (
	StatusOK       = 0
	StatusNotOwner = 1 // the receiver does not (or does not yet) decide for this partition
	StatusNoLimits = 2 // the receiver's config has no limits for the item
	// StatusRetry: the owner could not decide the item now (it could not
	// reach the worker to mark a settle); nothing changed. Older senders
	// ask again on any status but StatusOK and StatusNoLimits.
	StatusRetry = 3
)

// Result answers one Item.
type Result struct {
	Status int `json:"st,omitempty"`
	// Counted: the owner counted the item's units (Item.Units); an older
	// owner does not, and the sender counts them.
	Counted  bool            `json:"cu,omitempty"`
	Allowed  bool            `json:"a,omitempty"`
	Report   int             `json:"rp,omitempty"`
	Outcomes []quota.Outcome `json:"o,omitempty"`
	// Waited is how long the item waited in its bucket's queue (ns), and
	// Refused why it was denied before its wait ended, for items sent
	// with ForwardWait.
	Waited  int64  `json:"wd,omitempty"`
	Refused string `json:"wr,omitempty"`
}

// jsonOutcome is a quota.Outcome in a JSON forward message, as peers that
// predate the binary frames read it: durations in nanoseconds.
type jsonOutcome struct {
	Allowed    bool  `json:"a,omitempty"`
	Limit      int64 `json:"l"`
	Remaining  int64 `json:"r"`
	Reset      int64 `json:"s"`
	RetryAfter int64 `json:"ra,omitempty"`
}

// resultJSON is a Result as JSON: its fields, with the outcomes in their
// wire form (the outer field hides the embedded one).
type resultJSON struct {
	resultFields
	Outcomes []jsonOutcome `json:"o,omitempty"`
}

// resultFields is Result without its JSON methods.
type resultFields Result

// MarshalJSON writes r as JSON forward messages carry it.
func (r Result) MarshalJSON() ([]byte, error) {
	w := resultJSON{resultFields: resultFields(r)}
	w.resultFields.Outcomes = nil
	if len(r.Outcomes) > 0 {
		w.Outcomes = make([]jsonOutcome, len(r.Outcomes))
		for i, o := range r.Outcomes {
			w.Outcomes[i] = jsonOutcome{Allowed: o.Allowed, Limit: o.Limit, Remaining: o.Remaining, Reset: int64(o.Reset), RetryAfter: int64(o.RetryAfter)}
		}
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads a Result as JSON forward messages carry it.
func (r *Result) UnmarshalJSON(b []byte) error {
	var w resultJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = Result(w.resultFields)
	r.Outcomes = nil
	if len(w.Outcomes) > 0 {
		r.Outcomes = make([]quota.Outcome, len(w.Outcomes))
		for i, o := range w.Outcomes {
			r.Outcomes[i] = quota.Outcome{Allowed: o.Allowed, Limit: o.Limit, Remaining: o.Remaining, Reset: time.Duration(o.Reset), RetryAfter: time.Duration(o.RetryAfter)}
		}
	}
	return nil
}

type forwardMsg struct {
	V     int      `json:"v"`
	Items []Item   `json:"items,omitempty"`
	Res   []Result `json:"results,omitempty"`
}

const (
	maxBatch    = 512
	maxInflight = 4
	fwdTimeout  = 2 * time.Second
	inlineServe = 16 // forwarded checks answered without a goroutine of their own
)

type call struct {
	item Item
	res  Result
	err  error
	done chan struct{}
}

type ownerQueue struct {
	owner    string
	mu       sync.Mutex
	pending  []*call
	inflight int
	direct   peerSlot
}

type forwarder struct {
	c      *Cluster
	mu     sync.Mutex
	qs     map[string]*ownerQueue
	sub    *nats.Subscription
	wsubs  []*nats.Subscription // waiting items and their cancels (waiting.go)
	srv    *directServer
	closed atomic.Bool
}

func newForwarder(c *Cluster) *forwarder { return &forwarder{c: c, qs: map[string]*ownerQueue{}} }

// Forward sends one item to owner and waits for its result, or until ctx
// ends. An item whose ctx has ended before it left is not sent (the error
// wraps ErrNotSent and ctx's). A caller that carries its batch itself (the
// first forward to an idle owner) returns when that batch's round trip
// ends (bounded by the transport's timeouts): the batch may hold other
// callers' items.
func (c *Cluster) Forward(ctx context.Context, owner string, it Item) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	f := c.fwd
	f.mu.Lock()
	q := f.qs[owner]
	if q == nil {
		q = &ownerQueue{owner: owner}
		f.qs[owner] = q
	}
	f.mu.Unlock()
	cl := &call{item: it, done: make(chan struct{})}
	q.mu.Lock()
	q.pending = append(q.pending, cl)
	start := q.inflight < maxInflight
	if start {
		q.inflight++
	}
	q.mu.Unlock()
	if start {
		// The caller carries the first batch itself: when idle, a forward
		// costs no hand-over to another goroutine.
		f.send(q, cl)
	}
	select {
	case <-cl.done:
		return cl.res, cl.err
	case <-ctx.Done():
		if q.withdraw(cl) {
			return Result{}, fmt.Errorf("%w: %w", ErrNotSent, ctx.Err())
		}
		return Result{}, ctx.Err() // on its way: it may be decided
	}
}

// withdraw takes cl out of q's pending calls if no batch took it yet.
func (q *ownerQueue) withdraw(cl *call) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, p := range q.pending {
		if p == cl {
			q.pending = append(q.pending[:i], q.pending[i+1:]...)
			return true
		}
	}
	return false
}

// send drains q's pending calls in batches until none are left. With mine
// set (a caller sending on its own goroutine), it returns once mine is
// answered and leaves any calls still pending to a new goroutine.
func (f *forwarder) send(q *ownerQueue, mine *call) {
	for {
		q.mu.Lock()
		n := min(len(q.pending), maxBatch)
		if n == 0 {
			q.inflight--
			q.mu.Unlock()
			return
		}
		if mine != nil && isDone(mine) {
			q.mu.Unlock()
			go f.send(q, nil) // keeps the inflight slot
			return
		}
		batch := make([]*call, n)
		copy(batch, q.pending)
		q.pending = append(q.pending[:0], q.pending[n:]...)
		q.mu.Unlock()

		items := make([]Item, n)
		for i, cl := range batch {
			items[i] = cl.item
		}
		res, err := f.exchange(q, items)
		for i, cl := range batch {
			if err == nil && i < len(res) {
				cl.res = res[i]
			} else if err == nil {
				cl.err = fmt.Errorf("forward to %s: short answer", q.owner)
			} else {
				cl.err = err
			}
			close(cl.done)
		}
	}
}

func isDone(cl *call) bool {
	select {
	case <-cl.done:
		return true
	default:
		return false
	}
}

// exchange sends one batch to q's owner: directly when a connection is
// ready, else over NATS. A direct attempt that failed before the owner
// could have read the batch goes over NATS at once; one that may have
// reached the owner returns its error, as a NATS timeout does, and the
// engine asks again.
func (f *forwarder) exchange(q *ownerQueue, items []Item) ([]Result, error) {
	if pc := f.direct(q); pc != nil {
		start := time.Now()
		res, sent, err := pc.roundTrip(items)
		if err == nil {
			f.observe("direct", start, len(items))
			return res, nil
		}
		if sent {
			return nil, fmt.Errorf("forward to %s: %w", q.owner, err)
		}
	}
	return f.roundTrip(q.owner, forwardMsg{V: bus.WireVersion, Items: items})
}

func (f *forwarder) observe(transport string, start time.Time, n int) {
	f.c.metrics.fwdTime.Observe(time.Since(start).Seconds())
	f.c.metrics.fwdBatch.Observe(float64(n))
	f.c.metrics.forwards.Add(float64(n))
	f.c.metrics.batches.WithLabelValues(transport).Inc()
}

func (f *forwarder) roundTrip(owner string, msg forwardMsg) ([]Result, error) {
	data, err := json.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	start := time.Now()
	reply, err := f.c.nc.Request(bus.ForwardPrefix+owner, data, fwdTimeout)
	if errors.Is(err, nats.ErrNoResponders) {
		// Nobody subscribes to the owner's subject: nobody read it.
		return nil, fmt.Errorf("forward to %s: %w: %w", owner, ErrNotSent, err)
	}
	if err != nil {
		return nil, fmt.Errorf("forward to %s: %w", owner, err)
	}
	f.observe("nats", start, len(msg.Items))
	var out forwardMsg
	if err := json.Unmarshal(reply.Data, &out); err != nil || out.V != bus.WireVersion {
		return nil, fmt.Errorf("forward to %s: unreadable answer", owner)
	}
	return out.Res, nil
}

// Serve answers checks forwarded to this server with decide, over NATS
// and, with Config.Direct, on the direct listener, which it opens here
// (before Start publishes its address). Small requests are answered on
// the receiving goroutine, which saves a hand-over; large batches get
// their own goroutine so both cores work.
func (c *Cluster) Serve(decide func(items []Item, out []Result)) error {
	if c.cfg.Direct != nil {
		srv, info, err := c.listenDirect(c.cfg.Direct, decide)
		if err != nil {
			return err
		}
		c.fwd.srv = srv
		c.members.self.Store(&info)
	}
	sub, err := c.nc.Subscribe(bus.ForwardPrefix+c.cfg.Node, func(m *nats.Msg) {
		var in forwardMsg
		if err := json.Unmarshal(m.Data, &in); err != nil || in.V != bus.WireVersion {
			return // the sender times out and retries
		}
		answer := func() {
			out := forwardMsg{V: bus.WireVersion, Res: make([]Result, len(in.Items))}
			decide(in.Items, out.Res)
			c.metrics.served.Add(float64(len(in.Items)))
			data, _ := json.Marshal(out)
			_ = m.Respond(data)
		}
		if len(in.Items) <= inlineServe {
			answer()
		} else {
			go answer()
		}
	})
	if err != nil {
		if c.fwd.srv != nil {
			c.fwd.srv.close()
		}
		return err
	}
	c.fwd.sub = sub
	return nil
}

func (f *forwarder) close() {
	f.closed.Store(true)
	if f.sub != nil {
		_ = f.sub.Unsubscribe()
	}
	for _, s := range f.wsubs {
		_ = s.Unsubscribe()
	}
	if f.srv != nil {
		f.srv.close()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, q := range f.qs {
		q.direct.mu.Lock()
		if q.direct.conn != nil {
			q.direct.conn.close()
			q.direct.conn = nil
		}
		q.direct.mu.Unlock()
	}
}
