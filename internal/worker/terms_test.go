package worker

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
)

// fencingServer is a simulated cluster member: the consumption it believes
// each key has (its hot cache) and the term it was given for each
// partition it loaded.
type fencingServer struct {
	used map[string]int
	term map[int]uint64
}

type fencingMsg struct {
	seq  uint64
	data []byte
}

// No stale state ever wins, whatever the interleaving: three simulated
// servers take partitions over from each other (loading them through the
// worker with Acquire, as a new owner does), owners decide and publish,
// servers that lost a partition keep deciding on their old view and
// publishing it late (a cut-off or paused owner coming back), messages are
// applied in stream order in transactions of random size, redelivered late,
// staged runs are merged now and then, and the worker restarts (reloading
// its terms from SQLite). Consumption only grows, so every stored count
// must never go down, and once every message is applied each key reads, by
// every path (hydration pages in both orders, a partition's pages, buckets
// by key), exactly what its partition's current owner holds.
func TestNoStaleStateWins(t *testing.T) {
	e := newEnv(t, Config{})
	w := e.w
	ctx := context.Background()
	r := rand.New(rand.NewPCG(22, 3))
	future := time.Now().Add(time.Hour).UnixNano()

	parts := []int{3, 17, 40}
	var keys []string
	keysOf := map[int][]string{}
	for i := 0; len(keys) < 36; i++ {
		k := fmt.Sprintf("ten_a/pol_1/ip:203.0.113.%d", i)
		p := bus.Partition([]byte(k))
		if p == parts[0] || p == parts[1] || p == parts[2] {
			if len(keysOf[p]) < 12 {
				keys = append(keys, k)
				keysOf[p] = append(keysOf[p], k)
			}
		}
	}
	servers := make([]*fencingServer, 3)
	for i := range servers {
		servers[i] = &fencingServer{used: map[string]int{}, term: map[int]uint64{}}
	}
	owner := map[int]int{} // partition -> server index; absent: none yet
	lastTerm := map[int]uint64{}
	var leaseRev uint64                // the owners bucket's revisions
	lastLease := map[int]bus.LeaseID{} // the lease of each partition's last acquisition
	var seq uint64
	var pending, delivered []fencingMsg
	stored := map[string]int{} // the highest count read so far per key

	publish := func(s *fencingServer, k string) {
		p := bus.Partition([]byte(k))
		s.used[k]++
		seq++
		rec := stateBatch(k, float64(s.used[k]), future).Buckets[0]
		rec.Term = s.term[p]
		pending = append(pending, fencingMsg{seq: seq, data: bus.AppendPackedStateBatch(nil, "n", []bus.BucketRecord{rec}, true)})
	}
	apply := func(msgs []fencingMsg) {
		t.Helper()
		payloads := make([]payload, len(msgs))
		for i, m := range msgs {
			payloads[i] = payload{seq: m.seq, data: m.data}
		}
		err := w.store.WriteTx(ctx, func(tx *sql.Tx) error {
			_, err := w.applyState(tx, payloads)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	byKey := func() map[string]int {
		t.Helper()
		page, err := w.buckets.byKey(ctx, keys, false)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, rec := range page.Buckets {
			out[rec.Key] = int(rec.States[0].Tokens)
		}
		return out
	}
	// deliver applies the first n pending messages in one transaction and
	// checks that no stored count went down.
	deliver := func(n int, step string) {
		t.Helper()
		n = min(n, len(pending))
		if n == 0 {
			return
		}
		apply(pending[:n])
		delivered = append(delivered, pending[:n]...)
		pending = pending[n:]
		for k, v := range byKey() {
			if v < stored[k] {
				t.Fatalf("%s: %s went back from %d to %d: an older state won", step, k, stored[k], v)
			}
			stored[k] = v
		}
	}
	acquire := func(s int, p int, step string) {
		t.Helper()
		deliver(len(pending), step) // the worker commits the backlog first
		sv := servers[s]
		leaseRev++
		lease := bus.LeaseID{Incarnation: 1, Revision: leaseRev}
		lastLease[p] = lease
		req := bus.BucketsRequest{Partition: &p, Acquire: true, Lease: lease, Limit: 1 + r.IntN(5), Packed: r.IntN(2) == 0}
		for k := range sv.used {
			if bus.Partition([]byte(k)) == p {
				delete(sv.used, k)
			}
		}
		for {
			page, err := w.buckets.page(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if req.Acquire {
				if page.Term <= lastTerm[p] {
					t.Fatalf("%s: partition %d acquired term %d after %d", step, p, page.Term, lastTerm[p])
				}
				lastTerm[p], sv.term[p] = page.Term, page.Term
				req.Acquire = false
			} else if page.Term != 0 {
				t.Fatalf("%s: a later page raised the term", step)
			}
			for _, rec := range page.Buckets {
				sv.used[rec.Key] = int(rec.States[0].Tokens)
			}
			if len(page.Packed) > 0 {
				_ = bus.WalkPacked(page.Packed, func(pr bus.PackedRecord) error {
					_, states, err := bus.DecodeState(pr.State)
					if err != nil {
						t.Fatal(err)
					}
					sv.used[string(pr.Key)] = int(states[0].Tokens)
					return nil
				})
			}
			if page.Next == "" {
				break
			}
			req.After = page.Next
		}
		owner[p] = s
	}
	check := func(step string) {
		t.Helper()
		deliver(len(pending), step)
		want := map[string]float64{}
		for _, p := range parts {
			s, ok := owner[p]
			if !ok {
				continue
			}
			for _, k := range keysOf[p] {
				if v, ok := servers[s].used[k]; ok {
					want[k] = float64(v)
				}
			}
		}
		for _, order := range []string{bus.OrderPartitionKey, ""} {
			if got := readAll(t, w, 1+r.IntN(7), order, nil); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s: pages in order %q read\n%v\nwant what the owners hold\n%v", step, order, got, want)
			}
		}
		for _, p := range parts {
			for k, v := range readAll(t, w, 1+r.IntN(7), "", &p) {
				if want[k] != v {
					t.Fatalf("%s: partition %d's pages read %s = %v, its owner holds %v", step, p, k, v, want[k])
				}
			}
		}
		got := byKey()
		for k, v := range want {
			if float64(got[k]) != v {
				t.Fatalf("%s: buckets by key read %s = %d, its owner holds %v", step, k, got[k], v)
			}
		}
	}

	for _, p := range parts {
		acquire(r.IntN(len(servers)), p, "start")
	}
	stale := 0
	for step := range 1000 {
		name := fmt.Sprintf("step %d", step)
		switch x := r.IntN(100); {
		case x < 55: // a decision, mostly by the owner, else by a deposed owner
			k := keys[r.IntN(len(keys))]
			p := bus.Partition([]byte(k))
			s := owner[p]
			if r.IntN(3) == 0 {
				o := r.IntN(len(servers))
				if servers[o].term[p] != 0 && o != s {
					s = o
					stale++
				}
			}
			publish(servers[s], k)
		case x < 75:
			deliver(1+r.IntN(6), name)
		case x < 83: // another server takes a partition over
			p := parts[r.IntN(len(parts))]
			s := (owner[p] + 1 + r.IntN(len(servers)-1)) % len(servers)
			acquire(s, p, name)
		case x < 85: // a late request of an older acquisition raises nothing
			p := parts[r.IntN(len(parts))]
			old := lastLease[p]
			old.Revision -= uint64(r.IntN(int(old.Revision)))
			_, err := w.buckets.page(ctx, bus.BucketsRequest{Partition: &p, Acquire: true, Lease: old, Limit: 10})
			if errs.Code(err) != errs.Conflict {
				t.Fatalf("%s: a late acquisition of partition %d answered %v, want a conflict", name, p, err)
			}
			if got := w.terms.get(p); got != lastTerm[p] {
				t.Fatalf("%s: a late acquisition raised partition %d's term to %d", name, p, got)
			}
		case x < 88: // a late redelivery of a message already applied
			if len(delivered) > 0 {
				apply([]fencingMsg{delivered[r.IntN(len(delivered))]})
			}
		case x < 93:
			if _, err := w.staging.mergePartition(ctx, parts[r.IntN(len(parts))]); err != nil {
				t.Fatal(err)
			}
		case x < 95: // the worker restarts: its terms come from SQLite
			w.terms = newPartitionTerms()
			if err := w.terms.load(ctx, e.db); err != nil {
				t.Fatal(err)
			}
		default:
			check(name)
		}
	}
	check("end")
	if stale < 50 {
		t.Fatalf("only %d decisions by deposed owners: the run proves little", stale)
	}
	if n := countRows(t, e.db, `SELECT count(*) FROM partition_terms`); n != len(parts) {
		t.Fatalf("%d partition terms stored, want %d", n, len(parts))
	}
}
