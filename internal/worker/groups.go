package worker

// Group commits. Reservations and settles are small writes that arrive by
// the thousand; each waits for its own row, and one transaction carries
// every one that arrived meanwhile, so a burst costs the worker's other
// writes (stream batches, config writes, the sweeps) a few turns of the
// store's writer, not one each. A group is at most maxGroup writes.
//
// Fairness. Each tenant has its own queue, and a group takes one write
// from each tenant in turn (round-robin), so a tenant with thousands
// queued fills the groups' spare room but never pushes another tenant's
// write past the next group. A tenant's queue holds at most maxPerTenant
// writes and all queues together maxQueued; past either, a write is
// refused as unavailable, without waiting. The tenants' write limits
// (writeLimiter) keep a tenant well inside both in the normal run.

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/errs"
)

// groupReq is one write waiting for its group's commit.
type groupReq[Req, Res any] struct {
	tenant string
	req    Req
	res    Res
	err    error
	done   chan struct{}
	// state is reqQueued until the loop takes the write into a group
	// (reqTaken) or its caller gives up first (reqAbandoned): an abandoned
	// write is never committed, and a taken one's caller waits for its
	// answer, so no write commits unanswered.
	state atomic.Int32
}

const (
	reqQueued = iota
	reqTaken
	reqAbandoned
)

// groupQueue queues writes per tenant and commits them in groups with
// apply (run for each write in the group's transaction). Its loop runs
// while the worker is the active one; a write arriving when no loop runs
// is refused. Safe for concurrent use.
type groupQueue[Req, Res any] struct {
	what         string // "reservation", "settle": for errors and logs
	maxGroup     int
	maxPerTenant int
	maxQueued    int
	apply        func(ctx context.Context, tx *sql.Tx, req Req) (Res, error)

	mu      sync.Mutex
	running bool
	queues  map[string][]*groupReq[Req, Res]
	ring    []string // tenants with queued writes, in turn order
	queued  int
	wake    chan struct{} // one slot: the loop has work
	// committing is the size of the group being committed, groups the
	// number of groups committed or failed.
	committing int
	groups     int64
}

func newGroupQueue[Req, Res any](what string, maxGroup, maxPerTenant, maxQueued int,
	apply func(ctx context.Context, tx *sql.Tx, req Req) (Res, error)) *groupQueue[Req, Res] {
	return &groupQueue[Req, Res]{what: what, maxGroup: maxGroup, maxPerTenant: maxPerTenant, maxQueued: maxQueued, apply: apply,
		queues: map[string][]*groupReq[Req, Res]{}, wake: make(chan struct{}, 1)}
}

// do queues req for tenant and waits for its group's commit.
func (q *groupQueue[Req, Res]) do(ctx context.Context, tenant string, req Req) (Res, error) {
	g := &groupReq[Req, Res]{tenant: tenant, req: req, done: make(chan struct{})}
	if err := q.push(g); err != nil {
		return g.res, err
	}
	select {
	case <-g.done:
		return g.res, g.err
	case <-ctx.Done():
		if g.state.CompareAndSwap(reqQueued, reqAbandoned) {
			var zero Res
			return zero, ctx.Err()
		}
		<-g.done // in a group already: its commit is under way
		return g.res, g.err
	}
}

func (q *groupQueue[Req, Res]) push(g *groupReq[Req, Res]) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case !q.running:
		return errs.Errorf(errs.Unavailable, "The worker cannot record a %s now; try again shortly.", q.what)
	case len(q.queues[g.tenant]) >= q.maxPerTenant || q.queued >= q.maxQueued:
		return errs.Errorf(errs.Unavailable, "The worker has too many %ss waiting to be recorded; try again shortly.", q.what)
	}
	if len(q.queues[g.tenant]) == 0 {
		q.ring = append(q.ring, g.tenant)
	}
	q.queues[g.tenant] = append(q.queues[g.tenant], g)
	q.queued++
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return nil
}

// next takes the next group into batch: one write of each tenant in turn,
// until the group is full or nothing is queued.
func (q *groupQueue[Req, Res]) next(batch []*groupReq[Req, Res]) []*groupReq[Req, Res] {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(batch) < q.maxGroup && len(q.ring) > 0 {
		t := q.ring[0]
		qs := q.queues[t]
		if qs[0].state.CompareAndSwap(reqQueued, reqTaken) {
			batch = append(batch, qs[0])
		} else {
			close(qs[0].done) // abandoned: nobody waits for it
		}
		qs[0] = nil
		q.queued--
		q.ring = q.ring[1:]
		if len(qs) == 1 {
			delete(q.queues, t)
		} else {
			q.queues[t] = qs[1:]
			q.ring = append(q.ring, t)
		}
	}
	if len(q.ring) == 0 {
		q.ring = nil // let the ring's array go once it empties
	}
	q.committing = len(batch)
	return batch
}

// run commits groups through write until ctx ends; then it refuses what
// is still queued and what arrives.
func (q *groupQueue[Req, Res]) run(ctx context.Context, write func(ctx context.Context, fn func(tx *sql.Tx) error) error, onFail func(n int, err error)) {
	q.mu.Lock()
	q.running = true
	q.mu.Unlock()
	defer q.stop()
	batch := make([]*groupReq[Req, Res], 0, q.maxGroup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		}
		for {
			batch = q.next(batch[:0])
			if len(batch) == 0 {
				break
			}
			q.commit(ctx, batch, write, onFail)
			if ctx.Err() != nil {
				return
			}
		}
	}
}

// commit writes one group in one transaction. A write's own refusal (an
// *errs.Error that is not internal) is its answer and the others commit,
// so apply must refuse before it writes anything; any other error fails
// the whole group.
func (q *groupQueue[Req, Res]) commit(ctx context.Context, batch []*groupReq[Req, Res], write func(ctx context.Context, fn func(tx *sql.Tx) error) error, onFail func(n int, err error)) {
	err := write(ctx, func(tx *sql.Tx) error {
		for _, g := range batch {
			g.res, g.err = q.apply(ctx, tx, g.req)
			if g.err != nil && errs.Code(g.err) == errs.Internal {
				return g.err
			}
		}
		return nil
	})
	if err != nil && onFail != nil {
		onFail(len(batch), err)
	}
	q.mu.Lock()
	q.committing = 0
	q.groups++
	q.mu.Unlock()
	for _, g := range batch {
		if err != nil {
			var zero Res
			g.res, g.err = zero, err
		}
		close(g.done)
	}
}

func (q *groupQueue[Req, Res]) stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.running = false
	for _, t := range q.ring {
		for _, g := range q.queues[t] {
			g.err = errs.Errorf(errs.Unavailable, "The worker is stopping; try again shortly.")
			close(g.done)
		}
	}
	clear(q.queues)
	q.ring, q.queued = nil, 0
}
