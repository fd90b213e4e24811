package sdk

// Request sharing for concurrent checks (WithBatching). A check that finds
// no request of its client in flight goes out at once, on the caller's own
// goroutine, as a plain /v1/check: an idle client waits for nothing and
// keeps Sluice's header fields. Checks that arrive while requests are in
// flight queue, and the next free sender takes them all, up to MaxBatch, in
// one /v1/check/batch. Under load many checks then share one HTTP round
// trip, which is where Sluice spends most of its time per check.

import (
	"context"
	"fmt"
	"sync"
)

// batchInflight is how many requests one client keeps in flight at most
// while sharing; more concurrent checks queue for the next one.
const batchInflight = 8

type batchCall struct {
	req  CheckRequest
	d    Decision
	err  error
	done chan struct{}
}

type batcher struct {
	c        *Client
	mu       sync.Mutex
	pending  []*batchCall
	inflight int
}

// WithBatching makes concurrent checks share requests: while a check is in
// flight, the checks that arrive queue and go together in the next
// /v1/check/batch. It raises throughput under heavy concurrency (see
// BENCHMARKS.md for the measured effect) at a cost: a batched decision has
// no copy of Sluice's header fields, so WriteHeaders derives them from the
// decision (the reported limit only, not every limit of a multi-limit
// tier). A check whose request another caller carries cannot be cut short
// by its own context beyond returning early; the shared request is bounded
// by the client's timeout.
func WithBatching() Option { return func(o *options) { o.batching = true } }

// check decides req through a shared request.
func (b *batcher) check(ctx context.Context, req *CheckRequest) (Decision, error) {
	cl := &batchCall{req: *req, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, cl)
	carry := b.inflight < batchInflight
	if carry {
		b.inflight++
	}
	b.mu.Unlock()
	if carry {
		b.send(cl)
	}
	select {
	case <-cl.done:
		return cl.d, cl.err
	case <-ctx.Done():
		return Decision{}, ctx.Err()
	}
}

// send takes pending checks in requests until none are left, or, with
// mine set, until mine is answered; what is left then goes on in a new
// goroutine that keeps the in-flight slot.
func (b *batcher) send(mine *batchCall) {
	for {
		b.mu.Lock()
		n := min(len(b.pending), MaxBatch)
		if n == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		if mine != nil && isClosed(mine.done) {
			b.mu.Unlock()
			go b.send(nil)
			return
		}
		calls := make([]*batchCall, n)
		copy(calls, b.pending)
		b.pending = append(b.pending[:0], b.pending[n:]...)
		b.mu.Unlock()
		b.roundTrip(calls)
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// roundTrip decides calls in one request: a plain check for one, a batch
// for several. The request is the client's, not any caller's: one caller
// going away must not fail the others, so only the timeout bounds it.
func (b *batcher) roundTrip(calls []*batchCall) {
	k := getCall()
	defer putCall(k)
	ctx := context.Background()
	if len(calls) == 1 {
		cl := calls[0]
		cl.d, cl.err = b.c.checkOne(ctx, k, &cl.req)
		close(cl.done)
		return
	}
	reqs := make([]CheckRequest, len(calls))
	for i, cl := range calls {
		reqs[i] = cl.req
	}
	ds, err := b.c.checkMany(ctx, k, reqs)
	if err == nil && len(ds) != len(calls) {
		err = fmt.Errorf("batch answer holds %d results for %d checks", len(ds), len(calls))
	}
	for i, cl := range calls {
		if err != nil {
			cl.err = err
		} else {
			cl.d = ds[i]
		}
		close(cl.done)
	}
}
