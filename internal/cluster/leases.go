package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
)

// The lease protocol: one process's reads and writes of the partition
// leases in the owners bucket, and the owner table it keeps from them.
//   - Every write is compare-and-set: Create where no lease is, Update at
//     the revision read. A write that lands enters the table at once,
//     before the watch delivers it.
//   - The table takes an entry only when it is newer (a higher revision)
//     than the one it holds; the watch is the exception, since it also
//     delivers deletions.
//   - written[p] is this process's last write for p while it held p's
//     state, in the bucket of incarnation synced: it tells a lease this
//     process may resume without a load (writtenLease.resumes).
//   - An entry the watch did not find in the initial values of its latest
//     open is gone from the bucket (forgetStale).

type lease struct {
	Node    string `json:"node"`
	Expires int64  `json:"expires"` // unix ms
	// Instance and Holder are set on member entries: which process holds
	// the node name, and where it runs.
	Instance string `json:"instance,omitempty"`
	Holder   string `json:"holder,omitempty"`
	// Prev is the revision a partition lease replaced, when its writer
	// held the partition's state (see writtenLease.resumes).
	Prev uint64 `json:"prev,omitempty"`
	// The direct listener's address, key, host and certificate
	// fingerprint (member entries of servers that have one).
	Fwd     string `json:"fwd,omitempty"`
	FwdKey  string `json:"fwd_key,omitempty"`
	FwdHost string `json:"fwd_host,omitempty"`
	FwdCert string `json:"fwd_cert,omitempty"`
	// FwdIDs says the listener reads forwarded items' ids (wire.go), so
	// an owner remembers a repeated item; peers that do not say so get
	// frames without them, which their decoders read.
	FwdIDs bool `json:"fwd_ids,omitempty"`
	// FwdLeases says the listener reads forwarded items' leases and
	// releases (wire.go); peers that do not say so get neither.
	FwdLeases bool `json:"fwd_leases,omitempty"`
	// Concurrency says the server compiles concurrency limits, with or
	// without a direct listener: the worker refuses a config write that
	// holds one while a live member does not say so (bus.MemberEntry).
	Concurrency bool `json:"concurrency,omitempty"`
	// Customers says the member places a customer's buckets in the
	// customer's partition (Config.CustomerPlacement); an older member,
	// which hashes every key whole, does not say so.
	Customers bool `json:"customers,omitempty"`
}

// writtenLease is a lease write of this process: the owners bucket's
// incarnation and the revision the write got.
type writtenLease struct {
	inc int64
	rev uint64
}

type ownerEntry struct {
	node     string
	expires  int64 // unix ms
	revision uint64
	// instance wrote the entry; prev is the revision it replaced (lease).
	instance string
	prev     uint64
	// gen is the watch generation that last confirmed the entry: an entry
	// older than the current watch's initial values is gone from the bucket.
	gen uint64
}

func partKey(p int) string { return "p." + strconv.Itoa(p) }

func partOf(key string) (int, bool) {
	if len(key) < 3 || key[:2] != "p." {
		return 0, false
	}
	n, err := strconv.Atoi(key[2:])
	return n, err == nil && n >= 0 && n < bus.Partitions
}

// leases is this process's side of the lease protocol. It is safe for
// concurrent use.
type leases struct {
	node, instance string
	kv             jetstream.KeyValue // the owners bucket; set once, before the loops start
	// changed is called after p's entry changed; gone after the watch
	// found p's entry gone from the bucket and dropped it.
	changed, gone func(p int)

	mu    sync.Mutex
	table [bus.Partitions]ownerEntry // from the watch and our own writes
	// written[p] is the lease revision this process last wrote for p, and
	// the incarnation of the bucket it wrote it in (see Cluster.acquire).
	written [bus.Partitions]writtenLease
	gen     uint64 // watch generation, one per (re)open

	// synced is the incarnation (creation time, unix ns) of the owners
	// bucket the owner table was read from; watching is the one the watch
	// is reading now. Absent leases are not taken until the bucket is
	// LeaseTTL old.
	synced, watching atomic.Int64
	// rewatch asks the watch to reopen on a new incarnation.
	rewatch chan struct{}
	// freed is signalled when the watch sees a lease deleted (a server
	// giving partitions back): the loop ticks at once instead of at its
	// next RenewInterval, so a clean hand-over takes no extra interval.
	freed chan struct{}
}

func newLeases(node, instance string, changed, gone func(p int)) leases {
	return leases{node: node, instance: instance, changed: changed, gone: gone,
		rewatch: make(chan struct{}, 1), freed: make(chan struct{}, 1)}
}

// entry is p's entry in the owner table.
func (ls *leases) entry(p int) ownerEntry {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.table[p]
}

// snapshot returns the owner table, this process's writes and the
// incarnation they belong to, as of one instant.
func (ls *leases) snapshot() (table [bus.Partitions]ownerEntry, written [bus.Partitions]writtenLease, inc int64) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.table, ls.written, ls.synced.Load()
}

// reopen has the watch reopen when inc is not the incarnation it reads.
func (ls *leases) reopen(inc int64) {
	if inc != ls.watching.Load() {
		select {
		case ls.rewatch <- struct{}{}:
		default:
		}
	}
}

// renew writes our lease for p at the revision we hold.
func (ls *leases) renew(ctx context.Context, p int, rev uint64, exp int64) error {
	b, _ := json.Marshal(lease{Node: ls.node, Expires: exp, Instance: ls.instance, Prev: rev})
	nrev, err := ls.kv.Update(ctx, partKey(p), b, rev)
	if err != nil {
		return err
	}
	ls.mu.Lock()
	ls.table[p] = ownerEntry{node: ls.node, expires: exp, revision: nrev, instance: ls.instance, prev: rev, gen: ls.gen}
	ls.written[p] = writtenLease{inc: ls.synced.Load(), rev: nrev}
	ls.mu.Unlock()
	return nil
}

// renewOwnLanded renews p at the bucket's current revision when the entry
// there is this process's renewal of rev (one whose answer never came);
// otherwise it returns refused, the error of the renewal at rev.
func (ls *leases) renewOwnLanded(ctx context.Context, p int, rev uint64, exp int64, refused error) error {
	cur, err := ls.kv.Get(ctx, partKey(p))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return refused
		}
		return err // no answer: the lease runs out on its own
	}
	var l lease
	if json.Unmarshal(cur.Value(), &l) != nil {
		return refused
	}
	if l.Node != ls.node || l.Instance != ls.instance || l.Prev != rev {
		// Another server's lease: the table learns it now, not when the
		// watch delivers it, so that checks forward to the new owner.
		ls.learn(p, l, cur.Revision())
		return refused
	}
	return ls.renew(ctx, p, cur.Revision(), exp)
}

// take writes this process's lease for p over seen, p's entry as a tick
// saw it (free or expired), and returns the revision it got and whether
// the write resumed this process's own last lease (see Cluster.acquire).
// Until loaded is called, p's state counts as not held.
func (ls *leases) take(ctx context.Context, p int, seen ownerEntry, exp int64) (rev uint64, resumed bool, err error) {
	ls.mu.Lock()
	resume := ls.written[p].resumes(seen, ls.synced.Load(), ls.node, ls.instance)
	ls.mu.Unlock()
	// Only a resumed lease names the revision it replaced: a takeover that
	// is written but not answered must not look like a renewal of state
	// this server holds.
	l := lease{Node: ls.node, Expires: exp, Instance: ls.instance}
	if resume {
		l.Prev = seen.revision
	}
	b, _ := json.Marshal(l)
	if seen.revision != 0 {
		rev, err = ls.kv.Update(ctx, partKey(p), b, seen.revision)
	}
	if err != nil && resume {
		resume = false
		l.Prev = 0
		b, _ = json.Marshal(l)
	}
	if seen.revision == 0 || err != nil {
		// Never written, deleted (a delete marker's revision is not always
		// accepted by Update), or gone with a lost bucket: Create succeeds
		// only where no lease is, so it never takes a live one.
		rev, err = ls.kv.Create(ctx, partKey(p), b)
	}
	if err != nil {
		return 0, false, err
	}
	ls.mu.Lock()
	ls.table[p] = ownerEntry{node: ls.node, expires: exp, revision: rev, instance: ls.instance, prev: l.Prev, gen: ls.gen}
	ls.written[p] = writtenLease{} // until the state is loaded
	ls.mu.Unlock()
	return rev, resume, nil
}

// loaded records that this process holds p's state under its lease write
// at rev.
func (ls *leases) loaded(p int, rev uint64) {
	ls.mu.Lock()
	ls.written[p] = writtenLease{inc: ls.synced.Load(), rev: rev}
	ls.mu.Unlock()
}

// drop deletes p's lease if it is still at rev.
func (ls *leases) drop(ctx context.Context, p int, rev uint64) {
	_ = ls.kv.Delete(ctx, partKey(p), jetstream.LastRevision(rev))
}

// learn takes lease l, read at revision rev, into the owner table when it
// is newer than the entry there, and reports whether it was; the caller
// publishes the change.
func (ls *leases) learn(p int, l lease, rev uint64) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if rev <= ls.table[p].revision {
		return false
	}
	ls.table[p] = ownerEntry{node: l.Node, expires: l.Expires, revision: rev, instance: l.Instance, prev: l.Prev, gen: ls.table[p].gen}
	return true
}

// refresh reads every partition's lease, waiting at most timeout, and
// takes into the owner table those newer than what it holds. Deletions
// are left to the watch.
func (ls *leases) refresh(ctx context.Context, timeout time.Duration) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var wg sync.WaitGroup
	for p := range bus.Partitions {
		wg.Go(func() {
			cur, err := ls.kv.Get(rctx, partKey(p))
			if err != nil {
				return
			}
			var l lease
			if json.Unmarshal(cur.Value(), &l) == nil && ls.learn(p, l, cur.Revision()) {
				ls.changed(p)
			}
		})
	}
	wg.Wait()
}

// watch keeps the owner table current from the KV bucket, reopening the
// watch when NATS comes back after an outage or the buckets were recreated.
// incarnation reads the bucket's (waiting at most readTimeout); connected
// reports whether the NATS connection is up.
func (ls *leases) watch(ctx context.Context, incarnation func(context.Context) (int64, bool), connected func() bool, readTimeout time.Duration) {
	for ctx.Err() == nil {
		select {
		case <-ls.rewatch: // this open reads the new bucket anyway
		default:
		}
		ls.mu.Lock()
		ls.gen++
		gen := ls.gen
		ls.mu.Unlock()
		// The incarnation is read before the watch opens: if the bucket
		// is replaced in between, the next tick sees a newer one and asks
		// for another reopen.
		ictx, cancel := context.WithTimeout(ctx, readTimeout)
		inc, ok := incarnation(ictx)
		cancel()
		if !ok {
			sleep(ctx, 250*time.Millisecond)
			continue
		}
		ls.watching.Store(inc)
		w, err := ls.kv.WatchAll(ctx)
		if err != nil {
			sleep(ctx, 250*time.Millisecond)
			continue
		}
		for ctx.Err() == nil {
			var e jetstream.KeyValueEntry
			var ok bool
			select {
			case <-ctx.Done():
			case <-ls.rewatch:
				goto reopen
			case e, ok = <-w.Updates():
				if !ok {
					goto reopen
				}
			case <-time.After(5 * time.Second):
				if !connected() {
					goto reopen
				}
				continue
			}
			if e == nil { // end of the initial values
				ls.forgetStale(gen)
				ls.synced.Store(inc)
				continue
			}
			p, ok := partOf(e.Key())
			if !ok {
				continue
			}
			ls.mu.Lock()
			if e.Operation() == jetstream.KeyValuePut {
				var l lease
				if json.Unmarshal(e.Value(), &l) == nil {
					ls.table[p] = ownerEntry{node: l.Node, expires: l.Expires, revision: e.Revision(), instance: l.Instance, prev: l.Prev, gen: gen}
				}
			} else {
				ls.table[p] = ownerEntry{revision: e.Revision(), gen: gen}
			}
			ls.mu.Unlock()
			ls.changed(p)
			if e.Operation() != jetstream.KeyValuePut {
				select {
				case ls.freed <- struct{}{}:
				default:
				}
			}
		}
	reopen:
		_ = w.Stop()
	}
}

// forgetStale drops the entries the watch of generation gen did not find
// in the bucket's initial values: those leases are gone.
func (ls *leases) forgetStale(gen uint64) {
	for p := range bus.Partitions {
		ls.mu.Lock()
		stale := ls.table[p].gen < gen
		if stale {
			ls.table[p] = ownerEntry{gen: gen}
		}
		ls.mu.Unlock()
		if stale {
			ls.gone(p)
		}
	}
}
