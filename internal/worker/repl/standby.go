package repl

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
)

// standby keeps the database current from the log until this worker takes
// the lease; it returns the new term's epoch and the lease revision.
func (r *Replicator) standby(ctx context.Context) (uint64, uint64, bool) {
	r.role.Set(0)
	s := &standbyLoop{r: r, a: &applier{r: r}}
	for ctx.Err() == nil {
		t, took, wait := s.round(ctx)
		if took {
			return t.epoch, t.rev, true
		}
		if wait > 0 {
			sleepCtx(ctx, wait)
		}
	}
	return 0, 0, false
}

// standbyLoop is the standby's state from one round to the next: the
// applier reading the log, when it last warned, and whether it said it is
// a standby. Each round takes the steps below in order, and ends at the
// first that asks for a wait or took the lease.
type standbyLoop struct {
	r         *Replicator
	a         *applier
	lastWarn  time.Time
	announced bool
}

// term is a term this worker opened: its epoch and the lease revision.
type term struct{ epoch, rev uint64 }

// logBounds is the log as one read of it found: its creation time (unix
// ns) and its first and last sequences.
type logBounds struct {
	created     int64
	first, last uint64
}

// warn logs at most one warning every five seconds.
func (s *standbyLoop) warn(msg string, args ...any) {
	if time.Since(s.lastWarn) >= 5*time.Second {
		s.lastWarn = time.Now()
		s.r.log.Warn(msg, args...)
	}
}

// round is one pass of the standby loop: it returns the term when this
// worker took the lease, else how long to wait before the next round.
func (s *standbyLoop) round(ctx context.Context) (term, bool, time.Duration) {
	r := s.r
	pos, err := r.readPosition(ctx)
	if err != nil {
		s.warn("standby: reading the replication position failed; retrying", "err", err)
		return term{}, false, time.Second
	}
	lb, wait, ok := s.readLog(ctx)
	if !ok {
		return term{}, false, wait
	}
	lease := r.readLease(ctx)
	belongs := pos.logCreated == lb.created && pos.seq <= lb.last && (pos.seq+1 >= lb.first || lb.last == 0 || pos.seq == lb.last)
	if pos.logCreated == lb.created && pos.seq > lb.last {
		// This database holds records the log does not: the NATS node
		// that answered has an old view of the log (it lost its
		// cluster). Another node has the rest; a snapshot is not the
		// way to it.
		r.unstick.Failed()
		s.warn("standby: the replication log as this NATS node has it ends before this database does; waiting for a node with the whole log",
			"log_seq", pos.seq, "log_last", lb.last)
		return term{}, false, 250 * time.Millisecond
	}
	if !belongs {
		return s.notACopy(ctx, pos, lb, lease)
	}
	if wait, ok := s.catchUp(ctx, pos, lb); !ok {
		return term{}, false, wait
	}
	return s.leaseStep(ctx, lease)
}

// readLog reads the log's bounds, making the log again when NATS lost it.
// When it cannot, it returns how long to wait before the next round.
func (s *standbyLoop) readLog(ctx context.Context) (logBounds, time.Duration, bool) {
	r := s.r
	// A short timeout: a request sent while the log had no leader
	// (a NATS node died) gets no answer at all, and the next one
	// should go soon after a leader is elected.
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	info, err := r.stream.Info(ictx)
	cancel()
	if gone(err) {
		r.log.Warn("the replication log was gone (NATS lost it); making it again")
		s.a.reset()
		if err = r.ensureRepl(ctx, r.js); err == nil {
			return logBounds{}, 0, false
		}
	}
	if err != nil {
		r.unstick.FailedWith(err)
		s.warn("standby: the replication log does not answer; retrying", "err", err)
		return logBounds{}, 250 * time.Millisecond, false
	}
	return logBounds{created: info.Created.UnixNano(), first: info.State.FirstSeq, last: info.State.LastSeq}, 0, true
}

// notACopy handles a database that does not belong to the log: it copies
// the active worker's snapshot, waits for an active worker, or starts an
// empty log from this database.
func (s *standbyLoop) notACopy(ctx context.Context, pos position, lb logBounds, lease leaseRead) (term, bool, time.Duration) {
	r := s.r
	s.a.reset()
	if lease.held {
		r.log.Info("standby: this database is not a copy of the active one's log; copying a snapshot",
			"log_seq", pos.seq, "log_first", lb.first, "log_last", lb.last)
		if err := r.loadSnapshot(ctx); err != nil {
			s.warn("standby: copying the active worker's snapshot failed; retrying", "err", err)
			return term{}, false, time.Second
		}
		return term{}, false, 0
	}
	if lb.last > 0 {
		s.warn("standby: this database is not a copy of the replication log and no active worker can send a snapshot; waiting for one (or delete the stream "+bus.ReplStream+" to start a new log from this database)",
			"log_seq", pos.seq, "log_first", lb.first, "log_last", lb.last)
		return term{}, false, time.Second
	}
	// An empty log: this database may start it.
	if epoch, rev, ok := r.takeLease(ctx, s.a, position{seq: 0, epoch: pos.epoch, logCreated: lb.created}, lease.expiredRev); ok {
		return term{epoch, rev}, true, 0
	}
	return term{}, false, 200 * time.Millisecond
}

// catchUp applies the log up to its last record. When that fails, it
// returns how long to wait before the next round.
func (s *standbyLoop) catchUp(ctx context.Context, pos position, lb logBounds) (time.Duration, bool) {
	r := s.r
	if !s.announced {
		s.announced = true
		r.log.Info("worker is standby", "log_seq", pos.seq, "epoch", pos.epoch, "log_last", lb.last)
	}
	r.lagRecords.Set(float64(lb.last - min(pos.seq, lb.last)))
	if err := s.a.catchUp(ctx, pos, lb.last); err != nil {
		if ctx.Err() == nil {
			r.unstick.FailedWith(err)
			s.warn("standby: applying the replication log failed; retrying", "err", err)
			s.a.reset()
			return time.Second, false
		}
		return 0, false
	}
	r.lagRecords.Set(float64(lb.last - min(s.a.consumed, lb.last)))
	return 0, true
}

// leaseStep, on a database that has caught up, tells the NATS node's
// health from the lease read, gives back this process's lease of an ended
// term, and takes the lease when it is free.
func (s *standbyLoop) leaseStep(ctx context.Context, lease leaseRead) (term, bool, time.Duration) {
	r := s.r
	held := lease.held
	if lease.err == nil && lease.held && (lease.entry == nil || !r.ownEndedLease(lease.entry)) {
		// Another worker is active and this one keeps up with it: its
		// NATS node answers. (A node cut off from its cluster may still
		// answer reads from its own old view, so a read alone is not a
		// success; a lease this worker cannot take or give back counts
		// as a failure below.)
		r.unstick.OK()
	}
	switch {
	case lease.err != nil:
		r.unstick.FailedWith(lease.err)
		s.warn("standby: the worker lease cannot be read, so it counts as held; retrying", "err", lease.err)
	case held && lease.entry != nil && r.ownEndedLease(lease.entry):
		// This process's own lease from a term that ended while NATS
		// did not answer (it could not give it back then): no need to
		// wait for it to expire.
		if err := r.kv.Delete(ctx, bus.WorkerLeaseKey, jetstream.LastRevision(lease.entry.Revision())); err != nil {
			r.unstick.FailedWith(err)
			s.warn("standby: giving back the lease of this worker's ended term failed; retrying", "err", err)
		} else {
			r.log.Info("standby: gave back the lease of this worker's ended term")
			held = false
		}
	}
	if !held {
		cur, err := r.readPosition(ctx)
		if err == nil {
			// Parts of a record its writer never finished (it died
			// between them) move no position; the new term's marker
			// goes after them, and every reader drops them.
			if s.a.cons != nil && s.a.consumed > cur.seq {
				cur.seq = s.a.consumed
			}
			if epoch, rev, ok := r.takeLease(ctx, s.a, cur, lease.expiredRev); ok {
				return term{epoch, rev}, true, 0
			}
		}
	}
	return term{}, false, 100 * time.Millisecond
}
