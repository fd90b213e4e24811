package worker

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
)

// modelBucket is what a key's newest persisted state must read as.
type modelBucket struct {
	seq    uint64
	tokens float64
	fullAt int64
}

// stageStates stages one transaction's states as the stream applies them,
// each key with its own sequence.
func stageStates(t *testing.T, w *Worker, states map[string]modelBucket) {
	t.Helper()
	var rows []bucketRow
	for key, m := range states {
		b := stateBatch(key, m.tokens, m.fullAt)
		for _, r := range bucketRows(&b) {
			r.seq = m.seq
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(a, b bucketRow) int { return bus.CompareBucketKeys(a.rec.Key, b.rec.Key) })
	err := w.store.WriteTx(context.Background(), func(tx *sql.Tx) error {
		_, err := w.staging.stage(tx, rows)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// readAll pages through every live bucket in the given order with small
// pages, as a hydrating server does, and returns key -> tokens.
func readAll(t *testing.T, w *Worker, limit int, order string, partition *int) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	after := ""
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatal("paging does not end")
		}
		page, err := w.buckets.page(context.Background(), bus.BucketsRequest{After: after, Limit: limit, Order: order, Partition: partition, Packed: pages%2 == 0})
		if err != nil {
			t.Fatal(err)
		}
		prev := ""
		take := func(rec bus.BucketRecord) {
			if _, dup := out[rec.Key]; dup {
				t.Fatalf("key %s read twice", rec.Key)
			}
			if prev != "" && cmpOrder(order, partition, prev, rec.Key) >= 0 {
				t.Fatalf("page out of order: %s then %s", prev, rec.Key)
			}
			prev = rec.Key
			out[rec.Key] = rec.States[0].Tokens
		}
		if len(page.Packed) > 0 {
			err := bus.WalkPacked(page.Packed, func(pr bus.PackedRecord) error {
				limits, states, err := bus.DecodeState(pr.State)
				if err != nil {
					return err
				}
				take(bus.BucketRecord{Key: string(pr.Key), TenantID: string(pr.TenantID), FullAt: pr.FullAt, Limits: limits, States: states})
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, rec := range page.Buckets {
			take(rec)
		}
		if page.Next == "" {
			return out
		}
		if after != "" && cmpOrder(order, partition, page.Next, after) <= 0 {
			t.Fatalf("page cursor went back: %s after %s", page.Next, after)
		}
		after = page.Next
	}
}

func cmpOrder(order string, partition *int, a, b string) int {
	if order == bus.OrderPartitionKey && partition == nil {
		return bus.CompareBucketKeys(a, b)
	}
	return strings.Compare(a, b)
}

// Staged states are read exactly as if they had been written in place:
// whatever runs and merges came before, every reader (hydration pages in
// each order, a partition's pages, buckets by key) sees each key's newest
// state, never a full bucket, never a key twice, and paging always ends.
// The model is a map of each key's newest state.
func TestStagedRunsReadAsOneTable(t *testing.T) {
	e := newEnv(t, Config{})
	w := e.w
	now := time.Now()
	r := rand.New(rand.NewPCG(7, 11))
	model := map[string]modelBucket{}
	var seq uint64
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprintf("ten_a/pol_%d/ip:198.51.100.%d", i%3, i)
	}
	check := func(step string) {
		t.Helper()
		want := map[string]float64{}
		for k, m := range model {
			if m.fullAt > now.UnixNano() {
				want[k] = m.tokens
			}
		}
		for _, limit := range []int{1, 7, 1000} {
			for _, order := range []string{bus.OrderPartitionKey, ""} {
				got := readAll(t, w, limit, order, nil)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%s: pages of %d in order %q read\n%v\nwant\n%v", step, limit, order, got, want)
				}
			}
		}
		byPart := map[string]float64{}
		for p := range bus.Partitions {
			for k, v := range readAll(t, w, 5, "", &p) {
				if bus.Partition([]byte(k)) != p {
					t.Fatalf("%s: partition %d's pages hold %s", step, p, k)
				}
				byPart[k] = v
			}
		}
		if fmt.Sprint(byPart) != fmt.Sprint(want) {
			t.Fatalf("%s: partition pages read\n%v\nwant\n%v", step, byPart, want)
		}
		page, err := w.buckets.byKey(context.Background(), keys, false)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, rec := range page.Buckets {
			got[rec.Key] = rec.States[0].Tokens
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: buckets by key read\n%v\nwant\n%v", step, got, want)
		}
	}
	for round := range 40 {
		// One stream transaction: new states for some keys, and now and
		// then a late redelivery of an older state, which must lose.
		batch := map[string]modelBucket{}
		for range 1 + r.IntN(40) {
			k := keys[r.IntN(len(keys))]
			seq++
			m := modelBucket{seq: seq, tokens: float64(seq), fullAt: now.Add(time.Hour).UnixNano()}
			if r.IntN(5) == 0 {
				m.fullAt = now.Add(-time.Minute).UnixNano() // full again: not live
			}
			if old, ok := model[k]; ok && r.IntN(6) == 0 {
				m = modelBucket{seq: old.seq - min(old.seq, 1), tokens: -1, fullAt: now.Add(time.Hour).UnixNano()}
				batch[k] = m
				continue
			}
			batch[k] = m
			model[k] = m
		}
		stageStates(t, w, batch)
		// Merge a few partitions now and then.
		for range r.IntN(4) {
			if _, err := w.staging.mergePartition(context.Background(), r.IntN(bus.Partitions)); err != nil {
				t.Fatal(err)
			}
		}
		if round%8 == 7 {
			check(fmt.Sprintf("round %d", round))
		}
	}
	if err := w.MergeAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	check("after merging everything")
	for q, want := range map[string]int{
		`SELECT count(*) FROM bucket_runs`:    0,
		`SELECT count(*) FROM bucket_run_ids`: 0,
		`SELECT count(*) FROM buckets`:        len(model),
	} {
		if n := countRows(t, e.db, q); n != want {
			t.Errorf("%s = %d, want %d", q, n, want)
		}
	}
	if n := w.runs.stagedRows(); n != 0 {
		t.Errorf("%d rows still accounted as staged", n)
	}
}

// A worker that starts over a database with staged runs (after a crash or
// on a standby taking over) rebuilds its account of them: its merges empty
// every run and list no run that holds nothing, and new runs never reuse a
// listed run's number.
func TestStagedRunsAccountIsRebuilt(t *testing.T) {
	e := newEnv(t, Config{})
	future := time.Now().Add(time.Hour).UnixNano()
	for i := range 5 {
		stageStates(t, e.w, map[string]modelBucket{
			fmt.Sprintf("ten_a/p/ip:a%d", i): {seq: uint64(i + 1), tokens: 1, fullAt: future},
			fmt.Sprintf("ten_a/p/ip:b%d", i): {seq: uint64(i + 1), tokens: 1, fullAt: future},
		})
	}
	// A new worker over the same file, as after kill -9.
	w2, err := New(Config{}, e.db, e.nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := w2.runs.load(context.Background(), e.db); err != nil {
		t.Fatal(err)
	}
	if got := w2.runs.stagedRows(); got != 10 {
		t.Fatalf("the rebuilt account holds %d staged rows, want 10", got)
	}
	if got := w2.runs.count(); got != 5 {
		t.Fatalf("the rebuilt account holds %d runs, want 5", got)
	}
	stageStates(t, w2, map[string]modelBucket{"ten_a/p/ip:c": {seq: 9, tokens: 1, fullAt: future}})
	if n := countRows(t, e.db, `SELECT count(*) FROM bucket_run_ids`); n != 6 {
		t.Fatalf("%d runs listed, want 6 (a new run must not reuse a number)", n)
	}
	if err := w2.MergeAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]int{
		`SELECT count(*) FROM bucket_runs`:    0,
		`SELECT count(*) FROM bucket_run_ids`: 0,
		`SELECT count(*) FROM buckets`:        11,
	} {
		if n := countRows(t, e.db, q); n != want {
			t.Errorf("%s = %d, want %d", q, n, want)
		}
	}
}

// The merge policy: a partition is merged by size once it has staged
// mergeRatio times the rows buckets holds for it (and mergeMinRows), when
// there are too many runs, or once the stream has been quiet for
// mergeQuiet.
func TestMergeDue(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newStagedRuns()
	r.loaded, r.counted = true, ^uint64(0)
	r.lastStage = now
	if p, _ := r.mergeDue(now); p >= 0 {
		t.Fatalf("nothing staged, yet partition %d is due", p)
	}
	var counts [bus.Partitions]int
	counts[3], counts[9] = mergeMinRows-1, 10
	r.add(1, counts, now)
	r.table[9] = 5
	if p, why := r.mergeDue(now); p >= 0 {
		t.Fatalf("partition %d due (%s) below mergeMinRows while the stream is busy", p, why)
	}
	counts = [bus.Partitions]int{}
	counts[3] = 1
	r.add(2, counts, now)
	if p, why := r.mergeDue(now); p != 3 || why != "size" {
		t.Fatalf("due: %d (%s), want 3 by size", p, why)
	}
	r.table[3] = mergeMinRows/mergeRatio + 1
	if p, why := r.mergeDue(now); p >= 0 {
		t.Fatalf("partition %d due (%s) with fewer than mergeRatio times the rows buckets holds", p, why)
	}
	if p, why := r.mergeDue(now.Add(mergeQuiet)); p < 0 || why != "quiet" {
		t.Fatalf("due once quiet: %d (%s), want a partition with rows", p, why)
	}
	counts = [bus.Partitions]int{}
	counts[40] = 1
	for run := int64(10); run < 10+maxRuns; run++ {
		r.add(run, counts, now)
	}
	if p, why := r.mergeDue(now); p != 3 && p != 9 || why != "runs" {
		t.Fatalf("due with %d runs: %d (%s), want a partition of the oldest run by runs", len(r.runs), p, why)
	}
}

// The state stream takes batches in both forms: JSON, and the packed form
// the worker announces in its version reply. An unreadable message is
// dropped with an ERROR, and the ones behind it still land.
func TestStateBatchesInBothForms(t *testing.T) {
	e := newEnv(t, Config{})
	e.run(t)
	var ver bus.Version
	eventually(t, 10*time.Second, "worker serving", func() bool {
		return bus.Request(context.Background(), e.nc, bus.OpVersion.Subject(), struct{}{}, &ver) == nil
	})
	if !slices.Contains(ver.StateFormats, bus.PackedStateFormat) {
		t.Fatalf("version reply %+v does not name %s", ver, bus.PackedStateFormat)
	}
	future := time.Now().Add(time.Hour).UnixNano()
	jsonBatch := stateBatch("ten_a/p/ip:json", 3, future)
	e.publish(t, bus.StateSubjectPrefix+"n1", "", jsonBatch)
	raw := func(data []byte) {
		if _, err := e.js.Publish(context.Background(), bus.StateSubjectPrefix+"n1", data); err != nil {
			t.Fatal(err)
		}
	}
	raw(append(bus.AppendPackedStateBatch(nil, "n1", stateBatch("ten_a/p/ip:lost", 1, future).Buckets, false), 0xff)) // damaged
	packed := stateBatch("ten_a/p/ip:packed", 5, future)
	packed.Buckets = append(packed.Buckets, stateBatch("ten_b/p/ip:packed", 6, future).Buckets...)
	packed.Buckets[1].TenantID = "ten_b"
	raw(bus.AppendPackedStateBatch(nil, "n1", packed.Buckets, false))
	eventually(t, 30*time.Second, "both forms committed", func() bool { return e.w.Stats().StateRows == 3 })
	page, err := e.w.buckets.byKey(context.Background(), []string{"ten_a/p/ip:json", "ten_a/p/ip:lost", "ten_a/p/ip:packed", "ten_b/p/ip:packed"}, false)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, rec := range page.Buckets {
		got[rec.Key] = fmt.Sprintf("%s %v", rec.TenantID, rec.States[0].Tokens)
	}
	want := map[string]string{"ten_a/p/ip:json": "ten_a 3", "ten_a/p/ip:packed": "ten_a 5", "ten_b/p/ip:packed": "ten_b 6"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stored %v, want %v", got, want)
	}
}

// The sweep deletes a full, quiet bucket even while its partition has
// states staged, and a stale staged state (a late redelivery, older than
// the swept row) does not bring it back; a newer staged state is kept.
func TestSweepMergesStagedPartitions(t *testing.T) {
	now := time.Now()
	e := newEnv(t, Config{Now: func() time.Time { return now }, AckWait: time.Second})
	ctx := context.Background()
	old, past, future := now.Add(-time.Hour).UnixNano(), now.Add(-time.Minute).UnixNano(), now.Add(time.Hour).UnixNano()
	// Two full, quiet buckets in the table.
	b := manyBuckets("swept", 2)
	for i := range b.Buckets {
		b.Buckets[i].FullAt = past
	}
	rows := bucketRows(&b)
	for i := range rows {
		rows[i].seq = 10
	}
	slices.SortFunc(rows, func(a, b bucketRow) int { return bus.CompareBucketKeys(a.rec.Key, b.rec.Key) })
	if err := e.w.store.WriteTx(ctx, func(tx *sql.Tx) error { return writeBucketRows(tx, rows, old) }); err != nil {
		t.Fatal(err)
	}
	stale, newer := b.Buckets[0].Key, b.Buckets[1].Key
	// Staged: a late redelivery of an older, live state of the first, and
	// a newer, live state of the second.
	stageStates(t, e.w, map[string]modelBucket{
		stale: {seq: 4, tokens: 1, fullAt: future},
		newer: {seq: 11, tokens: 2, fullAt: future},
	})
	if e.w.runs.dirty() == 0 {
		t.Fatal("nothing staged")
	}
	e.w.sweeper.sweep(ctx)
	if err := e.w.MergeAll(ctx); err != nil {
		t.Fatal(err)
	}
	page, err := e.w.buckets.byKey(ctx, []string{stale, newer}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Buckets) != 1 || page.Buckets[0].Key != newer || page.Buckets[0].States[0].Tokens != 2 {
		t.Fatalf("after the sweep: %+v; want only %s with its newer state", page.Buckets, newer)
	}
	if n := countRows(t, e.db, `SELECT count(*) FROM buckets_live`); n != 1 {
		t.Fatalf("%d buckets left, want 1", n)
	}
}
