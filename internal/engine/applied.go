package engine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/reserve"
)

// appliedKeep is how long an owner remembers what it answered a forwarded
// item: at least this long, at most twice. A sender sends an item again
// only to the same owner and only while its own wait lasts (HandoverWait,
// plus the last round trip's timeout), which this outlasts, so a repeat
// always finds the first answer.
const appliedKeep = 10 * time.Second

// appliedPerStripe bounds a stripe's current generation: past it the
// generations turn early, so the table holds at most 2 × 64 × this many
// answers (about 4 M, a few hundred MiB at worst) and keeps less than
// appliedKeep only above about 200 000 moving forwards a second.
const appliedPerStripe = 32 << 10

// forwardMemory is what keeps a decision that crosses servers exact: the
// ids this server gives its moving decisions, what it answered the moving
// items others forwarded to it (the applied table), and the locks that
// apply the settles of one id one at a time (applySettle).
type forwardMemory struct {
	ids         *itemIDs
	applied     appliedTable
	settleLocks [64]sync.Mutex
}

func newForwardMemory() *forwardMemory { return &forwardMemory{ids: newItemIDs()} }

// nextID names one of this server's moving decisions.
func (f *forwardMemory) nextID() uint64 { return f.ids.next() }

// settleLock is the lock the settles of id are applied under.
func (f *forwardMemory) settleLock(id uint64) *sync.Mutex {
	return &f.settleLocks[id%uint64(len(f.settleLocks))]
}

// appliedTable remembers, per item id, what this server answered a
// decision that moved a bucket (cluster/forward.go, "once means once"). A
// stripe's lock is held from the look-up to the record, so two copies of
// one item arriving at once are decided once. Entries live in two
// generations per stripe that turn every appliedKeep (or when full,
// appliedPerStripe), so the table holds what the last 10–20 s of moving
// decisions answered, and nothing for peeks and denials that took
// nothing.
type appliedTable struct {
	stripes [64]appliedStripe
}

type appliedStripe struct {
	mu        sync.Mutex
	cur, prev map[uint64]cluster.Result
	turned    time.Time
}

// lock returns id's stripe, locked, its generations turned if due.
func (t *appliedTable) lock(id uint64, now time.Time) *appliedStripe {
	s := &t.stripes[id%uint64(len(t.stripes))]
	s.mu.Lock()
	if s.cur == nil || now.Sub(s.turned) >= appliedKeep || len(s.cur) >= appliedPerStripe {
		s.prev, s.cur, s.turned = s.cur, map[uint64]cluster.Result{}, now
	}
	return s
}

func (s *appliedStripe) get(id uint64) (cluster.Result, bool) {
	if r, ok := s.cur[id]; ok {
		return r, true
	}
	r, ok := s.prev[id]
	return r, ok
}

func (s *appliedStripe) put(id uint64, r cluster.Result) { s.cur[id] = r }

// lookup is get under the stripe's lock.
func (t *appliedTable) lookup(id uint64) (cluster.Result, bool) {
	s := t.lock(id, time.Now())
	defer s.mu.Unlock()
	return s.get(id)
}

// record is put under the stripe's lock.
func (t *appliedTable) record(id uint64, r cluster.Result) {
	s := t.lock(id, time.Now())
	s.put(id, r)
	s.mu.Unlock()
}

// size is how many answers the table holds (metrics, tests).
func (t *appliedTable) size() int {
	n := 0
	for i := range t.stripes {
		s := &t.stripes[i]
		s.mu.Lock()
		n += len(s.cur) + len(s.prev)
		s.mu.Unlock()
	}
	return n
}

// itemIDs makes the ids of this server's decisions: a random base per
// process plus a counter, so that ids from different servers do not meet
// (two bases a few billion apart would need that many decisions).
type itemIDs struct {
	base uint64
	seq  atomic.Uint64
}

func newItemIDs() *itemIDs {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &itemIDs{base: binary.LittleEndian.Uint64(b[:])}
}

func (g *itemIDs) next() uint64 {
	for {
		if id := g.base + g.seq.Add(1); id != 0 {
			return id
		}
	}
}

// settleID is the id of a reservation's settle: the same on every server
// and for every retry, so that an owner applies a settle once however
// many servers the client's retries reach within appliedKeep.
func settleID(tenantID, reservation string) uint64 {
	h := sha256.Sum256([]byte("settle\x00" + tenantID + "\x00" + reservation))
	return binary.LittleEndian.Uint64(h[:8]) | 1
}

// errFenced answers a settle this server may no longer apply: another
// server has loaded its partition since this one did.
var errFenced = errs.Errorf(errs.Unavailable, "The owner of this caller's bucket is changing hands; try again shortly.")

// markTimeout bounds an owner's wait for the worker's answer to a settle's
// mark; the sender's forward waits longer (its timeout is 2 s).
const markTimeout = time.Second

// applySettle applies a settle in this server's hot cache, once (the
// caller decided that this server decides d's bucket). A settle whose
// reservation is named (d.ref) is first marked applied at the worker,
// fenced by the partition's term, and applied only when the worker says
// this owner is the one to apply it: the record survives hand-overs and
// restarts, so a retry that reaches the next owner, or this one restarted,
// finds it applied and changes nothing. Settles of one id are applied one
// at a time (forwardMemory.settleLock), the worker's answer included; a repeat within
// appliedKeep is answered from the applied table without asking again.
// An owner killed between the mark and its next flush loses the
// difference, as it loses its other unflushed decisions.
func (e *Engine) applySettle(d *decision, out []quota.Outcome) error {
	if d.id == 0 {
		e.settleCache(d.key, d.tenantID, d.pv, d.tier, d.keyID, d.limits, d.now, d.cost, d.since, out)
		return nil
	}
	l := e.fwd.settleLock(d.id)
	l.Lock()
	defer l.Unlock()
	if r, ok := e.fwd.applied.lookup(d.id); ok {
		e.metrics.repeats.Inc()
		copy(out, r.Outcomes)
		return nil
	}
	apply := true
	if d.ref != "" {
		_, policy, _, _ := bus.SplitBucketKey(string(d.key))
		term, _ := e.pub.termOf(e.view.Load(), string(d.key), d.tenantID, policy)
		ctx, cancel := context.WithTimeout(context.Background(), markTimeout)
		var a reserve.Applying
		err := bus.Request(ctx, e.nc, bus.OpReservationApply.Subject(),
			reserve.Apply{TenantID: d.tenantID, ID: d.ref, Partition: bus.Partition(d.key), Term: term, Node: e.cfg.Node}, &a)
		cancel()
		if err != nil {
			return err
		}
		if a.Fenced {
			return errFenced
		}
		apply = a.Yes
	}
	if apply {
		e.settleCache(d.key, d.tenantID, d.pv, d.tier, d.keyID, d.limits, d.now, d.cost, d.since, out)
		if d.ref != "" {
			e.metrics.settlesApplied.Inc()
		}
	} else {
		e.metrics.repeats.Inc()
		e.lookAt(d.key, d.limits, d.now, out)
	}
	e.fwd.applied.record(d.id, cluster.Result{Allowed: true, Outcomes: slices.Clone(out)})
	return nil
}
