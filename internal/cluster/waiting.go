package cluster

// Waiting forwards. A check that may wait for its bucket waits at the
// bucket's owner, so that the waiters of a bucket form one queue across
// servers. Such an item does not ride in the batches of ownerQueue: a
// batch is answered whole, and one waiting item would hold every other
// item of its batch. It goes alone, as a NATS request on WaitPrefix+owner
// whose timeout is its wait plus fwdTimeout, and the owner answers it when
// its queue admits or denies it.
//
// Mixed versions. An owner of a version without waiting does not
// subscribe to WaitPrefix, so the request finds no responder and fails at
// once with ErrNoWait (and ErrNotSent): the sender then forwards the item
// as an ordinary one, without its wait, and the check answers at once,
// saying the owner could not wait. No owner receives a wait it would
// ignore.
//
// Leaving. When the caller's context ends first, the sender publishes the
// item's id on WaitCancelPrefix+owner and the owner takes the waiter out
// of its queue. A cancel that crosses the owner's admission on the wire
// is too late: that admission stands (the units are taken, the answer
// reaches nobody).

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
)

// ErrNoWait is wrapped by ForwardWait's error when the owner does not
// serve waiting items (an older version); the item was not sent.
var ErrNoWait = errors.New("the owner does not serve waiting checks")

// ForwardWait sends it, which may wait up to it.Wait at owner, and waits
// for its answer, up to it.Wait plus the forward timeout, or until ctx
// ends. Errors tell as Forward's do whether the owner may have seen it.
func (c *Cluster) ForwardWait(ctx context.Context, owner string, it Item) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	data, err := json.Marshal(forwardMsg{V: bus.WireVersion, Items: []Item{it}})
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	rctx, cancel := context.WithTimeout(ctx, it.Wait+fwdTimeout)
	defer cancel()
	start := time.Now()
	reply, err := c.nc.RequestWithContext(rctx, bus.WaitPrefix+owner, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return Result{}, fmt.Errorf("forward to %s: %w: %w", owner, ErrNoWait, ErrNotSent)
	}
	if err != nil {
		if ctx.Err() != nil && it.ID != 0 {
			// The caller went away: the owner takes the waiter out.
			_ = c.nc.Publish(bus.WaitCancelPrefix+owner, binary.AppendUvarint(nil, it.ID))
		}
		return Result{}, fmt.Errorf("forward to %s: %w", owner, err)
	}
	c.fwd.observe("nats_wait", start, 1)
	var out forwardMsg
	if err := json.Unmarshal(reply.Data, &out); err != nil || out.V != bus.WireVersion || len(out.Res) != 1 {
		return Result{}, fmt.Errorf("forward to %s: unreadable answer", owner)
	}
	return out.Res[0], nil
}

// ServeWaits answers items forwarded with ForwardWait: serve must not
// block; it calls reply once, at once or later from another goroutine.
// cancel withdraws the waiting item of an id whose sender's caller left.
// Call it with Serve, before Start.
func (c *Cluster) ServeWaits(serve func(it Item, reply func(Result)), cancel func(id uint64)) error {
	sub, err := c.nc.Subscribe(bus.WaitPrefix+c.cfg.Node, func(m *nats.Msg) {
		var in forwardMsg
		if err := json.Unmarshal(m.Data, &in); err != nil || in.V != bus.WireVersion || len(in.Items) != 1 {
			return // the sender times out
		}
		serve(in.Items[0], func(r Result) {
			data, _ := json.Marshal(forwardMsg{V: bus.WireVersion, Res: []Result{r}})
			c.metrics.served.Inc()
			_ = m.Respond(data)
		})
	})
	if err != nil {
		return err
	}
	csub, err := c.nc.Subscribe(bus.WaitCancelPrefix+c.cfg.Node, func(m *nats.Msg) {
		if id, n := binary.Uvarint(m.Data); n > 0 && n == len(m.Data) && id != 0 {
			cancel(id)
		}
	})
	if err != nil {
		_ = sub.Unsubscribe()
		return err
	}
	c.fwd.wsubs = append(c.fwd.wsubs, sub, csub)
	return nil
}
