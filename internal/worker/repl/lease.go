package repl

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/sqlitedb"
)

// leaseValue is the lease entry's content, for operators reading it.
// Instance tells this process from another under the same name (or this
// one before a restart).
//
// Expires (unix ms) is when the lease ends unless renewed, by its writer's
// clock. A standby takes a lease whose Expires has passed (by more than
// leaseSkew) with compare-and-set at its revision: it does not wait for
// NATS to expire the entry, which each replica of a replicated bucket does
// on its own timer, so that after a leader change a replica may keep an
// entry the others dropped (or the other way round). The bucket's TTL
// only cleans up; an entry without Expires (an older worker's) counts as
// held until NATS removes it.
type leaseValue struct {
	Worker   string `json:"worker"`
	Epoch    uint64 `json:"epoch"`
	Since    string `json:"since"`
	Instance string `json:"instance,omitempty"`
	Expires  int64  `json:"expires,omitempty"`
}

// leaseSkew is how long past a lease's Expires a standby still counts it as
// held: room for the clocks of two workers to differ.
func (r *Replicator) leaseSkew() time.Duration { return r.cfg.LeaseTTL / 6 }

// leaseExpired reports whether a lease entry's content says it has ended.
func (r *Replicator) leaseExpired(data []byte) bool {
	var v leaseValue
	if json.Unmarshal(data, &v) != nil || v.Expires == 0 {
		return false
	}
	return time.Now().After(time.UnixMilli(v.Expires).Add(r.leaseSkew()))
}

// leaseBytes is the lease entry for a term, renewed (or taken) at sent.
func (r *Replicator) leaseBytes(epoch uint64, since, sent time.Time) []byte {
	b, _ := json.Marshal(leaseValue{Worker: r.cfg.Name, Epoch: epoch, Since: since.UTC().Format(time.RFC3339Nano),
		Instance: r.instance, Expires: sent.Add(r.cfg.LeaseTTL).UnixMilli()})
	return b
}

// ownEndedLease reports whether lease entry e is this process's own while
// it is not active: a term that ended without giving the lease back.
func (r *Replicator) ownEndedLease(e jetstream.KeyValueEntry) bool {
	var v leaseValue
	if json.Unmarshal(e.Value(), &v) != nil || v.Instance == "" || v.Instance != r.instance {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.active
}

// leaseRead is what a standby read of the lease found.
type leaseRead struct {
	held       bool                    // some worker holds the lease now
	expiredRev uint64                  // the revision of an entry whose term has ended, to take it at
	entry      jetstream.KeyValueEntry // the entry read, when there is one
	err        error                   // the lease could not be read (it counts as held)
}

// readLease reads the lease once. A lease that has expired is not held;
// one that cannot be read is; a bucket NATS lost is made again.
func (r *Replicator) readLease(ctx context.Context) leaseRead {
	e, err := r.kv.Get(ctx, bus.WorkerLeaseKey)
	switch {
	case gone(err):
		r.log.Warn("the worker lease bucket was gone (NATS lost it); making it again")
		_ = r.ensureRepl(ctx, r.js)
		return leaseRead{held: true}
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return leaseRead{}
	case err != nil:
		return leaseRead{held: true, err: err}
	case r.leaseExpired(e.Value()):
		return leaseRead{expiredRev: e.Revision(), entry: e}
	}
	return leaseRead{held: true, entry: e}
}

// takeLease takes the free lease and opens a term with a marker record
// after everything the database has applied (pos). It gives the lease back
// if the log moved on meanwhile (a deposed active's last append): the
// caller applies it and tries again.
func (r *Replicator) takeLease(ctx context.Context, a *applier, pos position, expiredRev uint64) (uint64, uint64, bool) {
	epoch := pos.epoch + 1
	sent := time.Now()
	val := r.leaseBytes(epoch, sent, sent)
	rev, err := r.claimLease(ctx, val, expiredRev)
	if err != nil {
		if _, kerr := r.js.KeyValue(ctx, bus.WorkerLeaseBucket); gone(kerr) {
			r.log.Warn("the worker lease bucket was gone (NATS lost it); making it again")
			_ = r.ensureRepl(ctx, r.js)
		} else if !errors.Is(err, errLeaseHeld) {
			r.unstick.FailedWith(err)
			if time.Since(r.claimWarned) >= 5*time.Second {
				r.claimWarned = time.Now()
				r.log.Warn("standby: the lease looks free but taking it failed; retrying", "err", err)
			}
		}
		return 0, 0, false
	}
	msg := &nats.Msg{Subject: bus.ReplSubject, Header: nats.Header{}}
	msg.Header.Set(bus.ReplEpochHeader, strconv.FormatUint(epoch, 10))
	msg.Header.Set(bus.ReplPartHeader, "1/1")
	msg.Header.Set(bus.ReplMarkerHeader, "1")
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	ack, err := r.js.PublishMsg(pctx, msg, jetstream.WithExpectLastSequence(pos.seq))
	cancel()
	if err != nil {
		r.log.Info("standby: took the lease but the log moved on; applying it first", "log_seq", pos.seq, "err", err)
		_ = r.kv.Delete(context.WithoutCancel(ctx), bus.WorkerLeaseKey, jetstream.LastRevision(rev))
		a.reset()
		return 0, 0, false
	}
	err = r.store.WriteTx(sqlitedb.Replaying(ctx), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE repl_state SET seq = ?, epoch = ?, log_created = ? WHERE id = 1`, ack.Sequence, epoch, pos.logCreated)
		return err
	})
	if err != nil {
		r.log.Error("standby: recording the new term failed; giving the lease back", "err", err)
		_ = r.kv.Delete(context.WithoutCancel(ctx), bus.WorkerLeaseKey, jetstream.LastRevision(rev))
		a.reset()
		return 0, 0, false
	}
	r.mu.Lock()
	r.active, r.epoch, r.pos = true, epoch, ack.Sequence
	r.leaseUntil = sent.Add(r.leaseMargin())
	r.mu.Unlock()
	a.reset()
	return epoch, rev, true
}

// errLeaseHeld: the lease's leader holds a live lease.
var errLeaseHeld = errors.New("the lease is held")

// claimLease writes val as the lease where it is free: at expiredRev, the
// revision of an expired entry, or where there is none. When that fails
// the replica that answered the read may not agree with the bucket's
// leader, which checks the write: the leader's own entry decides.
func (r *Replicator) claimLease(ctx context.Context, val []byte, expiredRev uint64) (uint64, error) {
	kv := r.kv
	if expiredRev != 0 {
		if rev, err := kv.Update(ctx, bus.WorkerLeaseKey, val, expiredRev); err == nil {
			return rev, nil
		}
	}
	rev, err := kv.Create(ctx, bus.WorkerLeaseKey, val)
	if err == nil {
		return rev, nil
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	data, lrev, lerr := bus.LeaderEntry(lctx, r.nc, bus.WorkerLeaseBucket, bus.WorkerLeaseKey)
	switch {
	case errors.Is(lerr, bus.ErrNoEntry):
		return kv.Create(ctx, bus.WorkerLeaseKey, val)
	case lerr != nil:
		return 0, fmt.Errorf("%w (and reading it from the bucket's leader: %v)", err, lerr)
	case r.leaseExpired(data):
		return kv.Update(ctx, bus.WorkerLeaseKey, val, lrev)
	}
	return 0, errLeaseHeld
}

// leaseMargin is how long after sending a renewal the active still trusts
// its lease: the TTL less a margin for the renewal's own trip.
func (r *Replicator) leaseMargin() time.Duration { return r.cfg.LeaseTTL - r.cfg.LeaseTTL/6 }

// renewLease renews the lease every LeaseTTL/6 until ctx ends; a renewal
// refused (another worker has the lease) or none accepted for the lease's
// time ends the term.
func (r *Replicator) renewLease(ctx context.Context, rev, epoch uint64) {
	since := time.Now()
	t := time.NewTicker(r.cfg.LeaseTTL / 6)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, r.cfg.LeaseTTL/2)
		next, err := r.kv.Update(rctx, bus.WorkerLeaseKey, r.leaseBytes(epoch, since, sent), rev)
		cancel()
		if err == nil {
			r.unstick.OK()
			rev = next
			r.mu.Lock()
			r.leaseUntil = sent.Add(r.leaseMargin())
			r.mu.Unlock()
			continue
		}
		if ctx.Err() != nil {
			return
		}
		// On a NATS node that lost its cluster the renewals only time
		// out: move to another node (after SettleWait: a majority node
		// electing the bucket's leader answers the same for a while).
		r.unstick.FailedWith(err)
		if errors.Is(err, jetstream.ErrKeyExists) {
			r.stepDown("another worker holds the lease")
			return
		}
		r.mu.Lock()
		lapsed := time.Now().After(r.leaseUntil)
		r.mu.Unlock()
		if lapsed {
			r.stepDown("the lease could not be renewed in time: " + err.Error())
			return
		}
		r.log.Warn("renewing the worker lease failed; retrying", "err", err)
	}
}
