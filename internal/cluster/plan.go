package cluster

import (
	"time"

	"github.com/sluicehq/sluice/internal/bus"
)

// The balance, decided from plain values. A tick reads (the bucket's
// incarnation, its renewals, the owner table), plans, then applies: it
// gives back what planTick says to release, one partition after another,
// and takes what it offers to acquire, acquireWave at a time, all within
// one renew interval (Cluster.balance). planTick reads no clock and sends
// nothing.
//
// Its rules:
//   - Each server aims at its fair share, ceil(partitions / live members):
//     it gives back its lowest held partitions above that share and takes
//     free or lapsed leases up to it, starting at a point of its own
//     (bus.Partition of its node name) so that servers do not all race for
//     the same ones.
//   - A lease absent from a bucket younger than a lease is not taken: it
//     may still run on a server that held it before the bucket was lost.
//   - A lease that still runs is not taken, unless it is this process's
//     own last write (writtenLease.resumes, acquire).
//   - During the grace after an outage (graceAfter) other servers' lapsed
//     leases are left to them: only own leases are resumed and free ones
//     taken.
//   - While the worker does not answer, only own leases are resumed: a
//     takeover's load would fail and cost the owner its resume.
//   - A slow tick (its read of the bucket got no answer in time) and a
//     member that left the cluster take and give back nothing.

// view is what a tick knows once its renewals are answered.
type view struct {
	now      time.Time
	node     string // this server's
	instance string // this process's (Config.Instance)
	leaseTTL time.Duration
	// inc is the incarnation (creation time, unix ns) of the owners bucket
	// the table was read from.
	inc int64
	// table is the owner table as seen; mine[p] says this server decides
	// for p; written[p] is this process's last lease write for p.
	table   [bus.Partitions]ownerEntry
	mine    [bus.Partitions]bool
	written [bus.Partitions]writtenLease
	// owned is how many leases this server holds after its renewals,
	// those whose renewals got no answer included; unanswered is how many
	// of those.
	owned, unanswered int
	live              int // live members, this server included
	graceUntil        time.Time
	slow              bool // the tick's read of the bucket got no answer in time
	conflict          bool // this server left the cluster (its node name taken)
	canLoad           bool // a takeover's load can be expected to succeed (Hooks.CanLoad)
}

// plan is what a tick does after its renewals.
type plan struct {
	// reached: a slow tick whose renewals all came back reached NATS after
	// all (it moves the start of the next grace).
	reached bool
	// healthy: a tick that was not slow had every renewal answered; the
	// server may decide for a lease time (less the margin) from when they
	// were sent (Healthy).
	healthy bool
	// nodeOK is what the tick tells the reconnect rule (bus.Unstick): OK
	// when true, Failed when false.
	nodeOK bool
	share  int
	// release lists held partitions to give back, in order.
	release []int
	// acquire lists leases to try, in order; want is how many of them to
	// take (more are listed since some writes lose a race).
	acquire []claim
	want    int
}

// claim is a lease a tick tries to take, as it was seen.
type claim struct {
	p    int
	seen ownerEntry
}

// planTick decides what a tick does once its renewals are answered.
func planTick(v view) plan {
	var pl plan
	if v.slow {
		// NATS answers slowly or not at all: only renewals, no taking or
		// giving back, which would queue writes that go out late and skip
		// the grace a server back from an outage owes the others. Renewals
		// that all came back say the node works, only slowly; none sent,
		// or some unanswered, count against it, so that a server on a
		// node that lost its cluster (whose reads time out once it no
		// longer believes it leads) moves off it like one whose writes
		// time out.
		pl.reached = v.unanswered == 0
		pl.nodeOK = v.owned > 0 && v.unanswered == 0
		return pl
	}
	pl.healthy = v.unanswered == 0
	pl.nodeOK = v.unanswered == 0
	if v.conflict {
		return pl
	}
	pl.share = fairShare(v.live)
	if n := v.owned - pl.share; n > 0 {
		for p := range bus.Partitions {
			if len(pl.release) == n {
				break
			}
			if v.mine[p] {
				pl.release = append(pl.release, p)
			}
		}
		return pl
	}
	pl.want = pl.share - v.owned
	if pl.want == 0 {
		return pl
	}
	young := v.now.UnixNano() < v.inc+v.leaseTTL.Nanoseconds()
	start := int(bus.Partition([]byte(v.node)))
	for i := range bus.Partitions {
		p := (start + i) % bus.Partitions
		if v.mine[p] {
			continue
		}
		e := v.table[p]
		// A lease of ours that this server stopped deciding for (its
		// renewals failed while NATS did not answer) is taken back at once
		// if nobody wrote it since: see acquire.
		resume := v.written[p].resumes(e, v.inc, v.node, v.instance)
		if (e.node != "" && e.expires > v.now.UnixMilli() && !resume) || (young && e.node == "") {
			continue
		}
		if e.node != "" && e.node != v.node && v.now.Before(v.graceUntil) {
			continue
		}
		if !resume && !v.canLoad {
			continue // a takeover would fail to load, and cost the owner its resume
		}
		pl.acquire = append(pl.acquire, claim{p, e})
	}
	return pl
}

// fairShare is how many partitions each of live members aims to own.
func fairShare(live int) int {
	live = max(live, 1)
	return (bus.Partitions + live - 1) / live
}

// nextWave splits off the leases to try at once, having taken took of the
// want a plan asked for: at most acquireWave, so that a slow link costs a
// round trip per wave and not per partition.
func nextWave(cands []claim, want, took int) (wave, rest []claim) {
	n := min(acquireWave, want-took, len(cands))
	return cands[:n], cands[n:]
}

// acquireWave is how many partitions one tick takes at once.
const acquireWave = 8

// graceAfter reports whether a tick that reached NATS at now, having last
// reached it at last, comes back from an outage: NATS did not answer for
// longer than a lease can ride out. The other servers' leases lapsed in
// the same outage, most likely, and their owners are about to take them
// back unchanged (acquire, "resuming"). Taking one over instead would make
// its checks wait for the worker to load it, so for one lease time, until
// the time returned, this server only resumes its own and takes free
// partitions. An owner that really died loses its partitions that much
// later.
func graceAfter(now, last time.Time, leaseTTL, margin time.Duration) (until time.Time, back bool) {
	if last.IsZero() || now.Sub(last) <= leaseTTL-margin {
		return time.Time{}, false
	}
	return now.Add(leaseTTL), true
}

// resumes reports whether entry e is w, the last lease this process wrote
// for its partition while it held the partition's state, in the bucket of
// incarnation inc: the revision it last knew it wrote, or a renewal of that
// revision whose answer it never got (the entry names this process and
// replaced that revision). Taking the partition back at e's revision then
// proves that no other server has owned it since this one stopped deciding
// for it: this server's buckets for it are still the latest.
func (w writtenLease) resumes(e ownerEntry, inc int64, node, instance string) bool {
	if e.node != node || e.revision == 0 || w.rev == 0 || w.inc != inc {
		return false
	}
	return e.revision == w.rev || (e.instance == instance && e.prev == w.rev)
}
