package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
)

var planT0 = time.Unix(1_700_000_000, 0)

const (
	planTTL    = 2 * time.Second
	planMargin = 500 * time.Millisecond
	planInc    = 1 // the owners bucket's incarnation: old
)

// baseView is s1's tick at planT0, alone, holding nothing, in an old
// bucket with no lease written yet.
func baseView() view {
	return view{now: planT0, node: "s1", instance: "i1", leaseTTL: planTTL, inc: planInc, live: 1, canLoad: true}
}

// hold gives node the leases of ps in v's table, running until exp, and
// marks them mine when node is v's.
func hold(v *view, node string, exp time.Time, ps ...int) {
	for _, p := range ps {
		v.table[p] = ownerEntry{node: node, expires: exp.UnixMilli(), revision: uint64(100 + p), instance: "i-" + node}
		if node == v.node && exp.After(v.now) {
			v.mine[p] = true
			v.owned++
		}
	}
}

func span(from, to int) []int {
	var ps []int
	for p := from; p < to; p++ {
		ps = append(ps, p)
	}
	return ps
}

func except(ps []int, out ...int) []int {
	return slices.DeleteFunc(slices.Clone(ps), func(p int) bool { return slices.Contains(out, p) })
}

// Each row is one tick of s1 after its renewals: what it reports and what
// it gives back and tries to take.
func TestPlanSteps(t *testing.T) {
	all := span(0, bus.Partitions)
	steps := []struct {
		name  string
		setup func(v *view)
		// what the tick reports
		reached, healthy, nodeOK bool
		release                  []int
		acquire                  []int // as a set; the order is checked apart
		want                     int
	}{
		{name: "alone in an empty bucket: every partition",
			setup:   func(v *view) {},
			healthy: true, nodeOK: true, acquire: all, want: 64},
		{name: "a young bucket: absent leases may still run elsewhere",
			setup:   func(v *view) { v.inc = planT0.Add(-time.Second).UnixNano() },
			healthy: true, nodeOK: true, want: 64},
		{name: "a bucket one lease old: absent leases are free",
			setup:   func(v *view) { v.inc = planT0.Add(-planTTL).UnixNano() },
			healthy: true, nodeOK: true, acquire: all, want: 64},
		{name: "two members, each at its share: nothing moves",
			setup: func(v *view) {
				v.live = 2
				hold(v, "s1", planT0.Add(time.Second), span(0, 32)...)
				hold(v, "s2", planT0.Add(time.Second), span(32, 64)...)
			},
			healthy: true, nodeOK: true},
		{name: "two members, one holding all: gives back its lowest 32",
			setup: func(v *view) {
				v.live = 2
				hold(v, "s1", planT0.Add(time.Second), all...)
			},
			healthy: true, nodeOK: true, release: span(0, 32)},
		{name: "a third member joined: gives back down to 22",
			setup: func(v *view) {
				v.live = 3
				hold(v, "s1", planT0.Add(time.Second), span(0, 32)...)
				hold(v, "s2", planT0.Add(time.Second), span(32, 64)...)
			},
			healthy: true, nodeOK: true, release: span(0, 10)},
		{name: "the joining member takes free leases up to 22",
			setup: func(v *view) {
				v.live = 3
				hold(v, "s2", planT0.Add(time.Second), span(10, 32)...)
				hold(v, "s3", planT0.Add(time.Second), span(42, 64)...)
			},
			healthy: true, nodeOK: true, acquire: append(span(0, 10), span(32, 42)...), want: 22},
		{name: "another's running leases are left to it",
			setup: func(v *view) {
				hold(v, "s2", planT0.Add(time.Millisecond), span(32, 64)...)
			},
			healthy: true, nodeOK: true, acquire: span(0, 32), want: 64},
		{name: "expired leases of a dead owner are taken",
			setup: func(v *view) {
				hold(v, "s1", planT0.Add(time.Second), span(0, 32)...)
				hold(v, "dead", planT0, span(32, 64)...)
			},
			healthy: true, nodeOK: true, acquire: span(32, 64), want: 32},
		{name: "grace after an outage: own leases resumed, free ones taken, others' lapsed left",
			setup: func(v *view) {
				v.live = 2
				v.graceUntil = planT0.Add(time.Second)
				hold(v, "s1", planT0.Add(-time.Second), 0, 1, 2, 3) // lapsed, not mine any more
				hold(v, "s2", planT0.Add(-time.Second), 4, 5, 6, 7)
				for p := range 4 {
					v.written[p] = writtenLease{inc: planInc, rev: v.table[p].revision}
				}
				hold(v, "s2", planT0.Add(time.Second), span(40, 64)...)
			},
			healthy: true, nodeOK: true, acquire: except(span(0, 40), 4, 5, 6, 7), want: 32},
		{name: "grace over: others' lapsed leases are taken too",
			setup: func(v *view) {
				v.live = 2
				v.graceUntil = planT0
				hold(v, "s2", planT0.Add(-time.Second), 4, 5, 6, 7)
				hold(v, "s2", planT0.Add(time.Second), span(8, 64)...)
			},
			healthy: true, nodeOK: true, acquire: span(0, 8), want: 32},
		{name: "the worker does not answer: only own leases, even running ones, are resumed",
			setup: func(v *view) {
				v.canLoad = false
				hold(v, "s1", planT0.Add(time.Second), 0, 1) // renewals failed: not deciding
				v.mine[0], v.mine[1], v.owned = false, false, 0
				hold(v, "s1", planT0.Add(-time.Second), 2)
				v.written[0] = writtenLease{inc: planInc, rev: v.table[0].revision}
				// 1: a renewal of its last write whose answer never came.
				v.written[1] = writtenLease{inc: planInc, rev: 7}
				v.table[1].instance, v.table[1].prev = "i1", 7
				// 2: written in a bucket since lost.
				v.written[2] = writtenLease{inc: planInc - 1, rev: v.table[2].revision}
			},
			healthy: true, nodeOK: true, acquire: []int{0, 1}, want: 64},
		{name: "an own lease another server wrote over is not resumed",
			setup: func(v *view) {
				hold(v, "s2", planT0.Add(time.Second), all...)
				v.written[3] = writtenLease{inc: planInc, rev: 5}
				v.table[3].prev = 5
			},
			healthy: true, nodeOK: true, want: 64},
		{name: "renewals unanswered: unhealthy and a failure for the node, the balance goes on",
			setup: func(v *view) {
				v.live = 2
				hold(v, "s1", planT0.Add(time.Second), all...)
				v.unanswered = 3
			},
			release: span(0, 32)},
		{name: "slow NATS, every renewal answered: nothing taken or given back",
			setup: func(v *view) {
				v.slow, v.live = true, 2
				hold(v, "s1", planT0.Add(time.Second), span(0, 40)...)
			},
			reached: true, nodeOK: true},
		{name: "slow NATS, short of its share: nothing taken",
			setup: func(v *view) {
				v.slow = true
				hold(v, "s1", planT0.Add(time.Second), 0)
			},
			reached: true, nodeOK: true},
		{name: "slow NATS, a renewal unanswered: a failure for the node",
			setup: func(v *view) {
				v.slow = true
				hold(v, "s1", planT0.Add(time.Second), span(0, 8)...)
				v.unanswered = 1
			}},
		{name: "slow NATS, nothing to renew: a failure for the node",
			setup:   func(v *view) { v.slow = true },
			reached: true},
		{name: "left the cluster (node name taken): reports, moves nothing",
			setup: func(v *view) {
				v.conflict, v.live = true, 2
				hold(v, "s1", planT0.Add(time.Second), all...)
			},
			healthy: true, nodeOK: true},
	}
	start := int(bus.Partition([]byte("s1")))
	for _, s := range steps {
		v := baseView()
		s.setup(&v)
		pl := planTick(v)
		if pl.reached != s.reached || pl.healthy != s.healthy || pl.nodeOK != s.nodeOK {
			t.Errorf("%s: reached, healthy, nodeOK = %v, %v, %v; want %v, %v, %v", s.name, pl.reached, pl.healthy, pl.nodeOK, s.reached, s.healthy, s.nodeOK)
		}
		if !slices.Equal(pl.release, s.release) {
			t.Errorf("%s: release %v; want %v", s.name, pl.release, s.release)
		}
		var got []int
		for _, c := range pl.acquire {
			got = append(got, c.p)
			if c.seen != v.table[c.p] {
				t.Errorf("%s: claim of %d saw %+v; the table has %+v", s.name, c.p, c.seen, v.table[c.p])
			}
		}
		// Tried from s1's own starting point round the ring.
		ring := func(p int) int { return (p - start + bus.Partitions) % bus.Partitions }
		if !slices.IsSortedFunc(got, func(a, b int) int { return ring(a) - ring(b) }) {
			t.Errorf("%s: acquire order %v does not start at %d", s.name, got, start)
		}
		slices.Sort(got)
		if !slices.Equal(got, s.acquire) {
			t.Errorf("%s: acquire %v; want %v", s.name, got, s.acquire)
		}
		if pl.want != s.want {
			t.Errorf("%s: want %d; want %d", s.name, pl.want, s.want)
		}
	}
}

// A cluster of members ticking in turn, each taking one wave a tick (a
// slow link), settles at the fair share: all partitions owned, none twice,
// none above ceil(64 / members). A member that joins later gets its share
// from the others' giving back.
func TestPlanSettlesAtTheFairShare(t *testing.T) {
	steps := []struct {
		name    string
		members []string
		ticks   int   // rounds in which every member ticks once
		owned   []int // per member afterwards
	}{
		{name: "one member takes eight a tick", members: []string{"s1"}, ticks: 4, owned: []int{32}},
		{name: "and owns every partition after eight ticks", members: []string{"s1"}, ticks: 4, owned: []int{64}},
		{name: "a second member joins: halves", members: []string{"s1", "s2"}, ticks: 8, owned: []int{32, 32}},
		{name: "a third member joins: 22, 22, 20", members: []string{"s1", "s2", "s3"}, ticks: 8, owned: []int{22, 22, 20}},
		{name: "the third leaves; its leases lapse and are taken", members: []string{"s1", "s2"}, ticks: 8, owned: []int{32, 32}},
		{name: "one member again", members: []string{"s1"}, ticks: 10, owned: []int{64}},
	}
	var table [bus.Partitions]ownerEntry
	now := planT0
	for _, s := range steps {
		for range s.ticks {
			now = now.Add(400 * time.Millisecond)
			for _, node := range s.members {
				v := view{now: now, node: node, instance: node, leaseTTL: planTTL, inc: planInc, live: len(s.members), canLoad: true}
				exp := now.Add(planTTL).UnixMilli()
				// Renewals: every lease of node runs on.
				for p := range bus.Partitions {
					if table[p].node == node && table[p].expires > now.UnixMilli() {
						table[p].expires = exp
						v.mine[p] = true
						v.owned++
					}
				}
				v.table = table
				pl := planTick(v)
				for _, p := range pl.release {
					table[p] = ownerEntry{revision: table[p].revision + 1}
				}
				if len(pl.acquire) > 0 {
					wave, _ := nextWave(pl.acquire, pl.want, 0)
					for _, c := range wave {
						table[c.p] = ownerEntry{node: node, expires: exp, revision: c.seen.revision + 1}
					}
				}
			}
		}
		for i, node := range s.members {
			n := 0
			for _, e := range table {
				if e.node == node && e.expires > now.UnixMilli() {
					n++
				}
			}
			if n != s.owned[i] {
				t.Errorf("%s: %s owns %d; want %d", s.name, node, n, s.owned[i])
			}
		}
	}
}

func TestNextWave(t *testing.T) {
	cands := make([]claim, 20)
	for i := range cands {
		cands[i].p = i
	}
	steps := []struct {
		name              string
		cands, want, took int
		wave              int
	}{
		{name: "at most eight at once", cands: 20, want: 64, wave: 8},
		{name: "no more than wanted", cands: 20, want: 3, wave: 3},
		{name: "what is left of the want", cands: 20, want: 20, took: 15, wave: 5},
		{name: "what is left to try", cands: 2, want: 10, wave: 2},
	}
	for _, s := range steps {
		wave, rest := nextWave(cands[:s.cands], s.want, s.took)
		if len(wave) != s.wave || len(rest) != s.cands-s.wave || (len(wave) > 0 && wave[0].p != 0) {
			t.Errorf("%s: wave %d, rest %d; want %d, %d", s.name, len(wave), len(rest), s.wave, s.cands-s.wave)
		}
	}
}

func TestGraceAfter(t *testing.T) {
	steps := []struct {
		name string
		last time.Time
		back bool
	}{
		{name: "first tick", last: time.Time{}},
		{name: "reached a tick ago", last: planT0.Add(-400 * time.Millisecond)},
		{name: "out exactly as long as a lease rides out", last: planT0.Add(-(planTTL - planMargin))},
		{name: "out longer: others' lapsed leases are left to them", last: planT0.Add(-(planTTL - planMargin) - time.Millisecond), back: true},
	}
	for _, s := range steps {
		until, back := graceAfter(planT0, s.last, planTTL, planMargin)
		if back != s.back || (back && !until.Equal(planT0.Add(planTTL))) || (!back && !until.IsZero()) {
			t.Errorf("%s: graceAfter = %v, %v", s.name, until, back)
		}
	}
}
