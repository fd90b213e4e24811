package worker

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/bus/bustest"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tenants"
)

// env is a real embedded NATS server with JetStream and a real SQLite file.
type env struct {
	db *sql.DB
	nc *nats.Conn
	js jetstream.JetStream
	w  *Worker
}

func newEnv(t testing.TB, cfg Config) *env { return newEnvPayload(t, cfg, 0) }

// newEnvPayload is newEnv with the NATS server's max_payload set.
func newEnvPayload(t testing.TB, cfg Config, maxPayload int32) *env {
	t.Helper()
	dir := t.TempDir()
	nc := bustest.InProcess(t, bus.EmbeddedConfig{DataDir: dir, Name: "worker-test", MaxPayload: maxPayload})
	db, err := sqlitedb.Open(context.Background(), filepath.Join(dir, "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureStreams(context.Background(), js, 1); err != nil {
		t.Fatal(err)
	}
	w, err := New(cfg, db, nc)
	if err != nil {
		t.Fatal(err)
	}
	return &env{db: db, nc: nc, js: js, w: w}
}

func (e *env) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (e *env) publish(t *testing.T, subject, id string, v any) {
	t.Helper()
	data, _ := json.Marshal(v)
	var opts []jetstream.PublishOpt
	if id != "" {
		opts = append(opts, jetstream.WithMsgID(id))
	}
	if _, err := e.js.Publish(context.Background(), subject, data, opts...); err != nil {
		t.Fatal(err)
	}
}

func (e *env) counterTotals(t *testing.T) (allowed, denied int64) {
	t.Helper()
	if err := e.db.QueryRow(`SELECT COALESCE(SUM(allowed),0), COALESCE(SUM(denied),0) FROM counters`).Scan(&allowed, &denied); err != nil {
		t.Fatal(err)
	}
	return
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func counterBatch(allowed, denied int64) bus.CounterBatch {
	return bus.CounterBatch{V: bus.WireVersion, Node: "n1", Rows: []bus.CounterRow{{
		CounterKey: bus.CounterKey{TenantID: "ten_a", Policy: "p", Tier: "anonymous", IdentityKind: "ip", IdentityID: "192.0.2.1", Minute: 29000000},
		Allowed:    allowed, Denied: denied,
	}}}
}

// A publisher retry with the same message id is dropped by JetStream, and
// rows for one cell add up.
func TestCountersAddUpExactlyOnce(t *testing.T) {
	e := newEnv(t, Config{})
	e.run(t)
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-c-1", counterBatch(3, 4))
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-c-1", counterBatch(3, 4)) // retried publish
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-c-2", counterBatch(1, 10))
	eventually(t, 5*time.Second, "counters committed", func() bool {
		a, d := e.counterTotals(t)
		return a == 4 && d == 14
	})
	time.Sleep(300 * time.Millisecond)
	if a, d := e.counterTotals(t); a != 4 || d != 14 {
		t.Fatalf("totals %d/%d, want 4/14", a, d)
	}
}

// A worker that commits a batch and dies before acking gets it redelivered;
// the redelivery must not be applied again.
func TestRedeliveryAfterCommitIsNotAppliedTwice(t *testing.T) {
	e := newEnv(t, Config{AckWait: time.Second})
	ctx := context.Background()
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-c-1", counterBatch(5, 5))
	cons, err := e.js.CreateOrUpdateConsumer(ctx, bus.CounterStream, jetstream.ConsumerConfig{
		Durable: bus.WorkerDurable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxAckPending: 10000,
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) != 1 {
		t.Fatalf("fetched %d messages", len(msgs))
	}
	// Commit without acking: the process "dies" here.
	if err := e.w.applyBatch(ctx, bus.CounterStream, msgs, e.w.applyCounters); err != nil {
		t.Fatal(err)
	}
	if a, d := e.counterTotals(t); a != 5 || d != 5 {
		t.Fatalf("after commit: %d/%d", a, d)
	}
	// A newer message, then the worker comes back: it receives the new one
	// and, after AckWait, the redelivered old one.
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-c-2", counterBatch(1, 0))
	e.run(t)
	eventually(t, 10*time.Second, "redelivered message acked", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Stream >= 2
	})
	if a, d := e.counterTotals(t); a != 6 || d != 5 {
		t.Fatalf("totals %d/%d, want 6/5: the redelivery was applied twice or lost", a, d)
	}
}

func stateBatch(key string, tokens float64, fullAt int64) bus.StateBatch {
	return bus.StateBatch{V: bus.WireVersion, Node: "n1", Buckets: []bus.BucketRecord{{
		Key: key, TenantID: "ten_a",
		Limits: []bus.LimitWire{{Algorithm: "token_bucket", Limit: 10, PeriodNS: int64(time.Minute)}},
		States: []bus.StateWire{{Tokens: tokens, At: 1}},
		FullAt: fullAt,
	}}}
}

// A late redelivery of an older state never overwrites a newer one.
func TestOlderStateNeverOverwritesNewer(t *testing.T) {
	e := newEnv(t, Config{})
	future := time.Now().Add(time.Hour).UnixNano()
	apply := func(seq uint64, tokens float64) {
		data, _ := json.Marshal(stateBatch("ten_a/pol_1/ip:192.0.2.1", tokens, future))
		tx, err := e.db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.w.applyState(tx, []payload{{seq: seq, data: data}}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	apply(5, 2)
	apply(3, 9) // older, redelivered late
	// Both are staged; readers take the newer, and so does the merge,
	// whichever order they are merged in.
	for _, table := range []string{"buckets_live", "buckets"} {
		if table == "buckets" {
			apply(4, 7) // older again, in a run of its own
			if err := e.w.MergeAll(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		var state []byte
		var seq int64
		if err := e.db.QueryRow(`SELECT state, seq FROM `+table+` WHERE key = ?`, "ten_a/pol_1/ip:192.0.2.1").Scan(&state, &seq); err != nil {
			t.Fatal(err)
		}
		_, states, err := bus.DecodeState(state)
		if err != nil || seq != 5 || states[0].Tokens != 2 {
			t.Fatalf("%s: row has seq %d states %v (%v), want the newer state (seq 5, 2 tokens)", table, seq, states, err)
		}
	}
	if n := countRows(t, e.db, `SELECT count(*) FROM bucket_runs`); n != 0 {
		t.Fatalf("%d staged rows left after merging", n)
	}
}

// Hydration answers only after the backlog already in the stream is
// committed, and never returns buckets that are full again.
func TestBucketsPageWaitsForBacklog(t *testing.T) {
	e := newEnv(t, Config{})
	future := time.Now().Add(time.Hour).UnixNano()
	for i, key := range []string{"ten_a/p/ip:192.0.2.1", "ten_a/p/ip:192.0.2.2"} {
		e.publish(t, bus.StateSubjectPrefix+"n1", "", stateBatch(key, float64(i), future))
	}
	e.publish(t, bus.StateSubjectPrefix+"n1", "", stateBatch("ten_a/p/ip:192.0.2.3", 10, 1)) // full again
	e.run(t)
	var page bus.BucketsPage
	eventually(t, 10*time.Second, "hydration page", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return bus.Request(ctx, e.nc, bus.BucketsSubject, bus.BucketsRequest{}, &page) == nil
	})
	if len(page.Buckets) != 2 || page.Buckets[0].Key != "ten_a/p/ip:192.0.2.1" || page.Buckets[1].States[0].Tokens != 1 {
		t.Fatalf("page: %+v", page)
	}
}

// Bucket rows written in JSON, before the binary state form, are served in
// both page forms and by key; lookups by key skip buckets full again.
func TestBucketsPageReadsEveryForm(t *testing.T) {
	e := newEnv(t, Config{})
	future := time.Now().Add(time.Hour).UnixNano()
	old := `{"limits":[{"a":"token_bucket","l":10,"p":60000000000}],"states":[{"t":4,"a":5}]}`
	if _, err := e.db.Exec(`INSERT INTO buckets (key, tenant_id, part, state, full_at, seq, updated_at) VALUES (?, 'ten_a', ?, ?, ?, 1, 0)`,
		"ten_a/p/ip:192.0.2.1", bus.Partition([]byte("ten_a/p/ip:192.0.2.1")), old, future); err != nil {
		t.Fatal(err)
	}
	e.publish(t, bus.StateSubjectPrefix+"n1", "", stateBatch("ten_a/p/ip:192.0.2.2", 7, future))
	e.publish(t, bus.StateSubjectPrefix+"n1", "", stateBatch("ten_a/p/ip:192.0.2.3", 10, 1)) // full again
	e.run(t)
	ask := func(req bus.BucketsRequest) bus.BucketsPage {
		t.Helper()
		var page bus.BucketsPage
		eventually(t, 10*time.Second, "buckets page", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return bus.Request(ctx, e.nc, bus.BucketsSubject, req, &page) == nil
		})
		return page
	}
	tokens := func(page bus.BucketsPage) map[string]float64 {
		t.Helper()
		got := map[string]float64{}
		for _, b := range page.Buckets {
			got[b.Key] = b.States[0].Tokens
		}
		err := bus.WalkPacked(page.Packed, func(r bus.PackedRecord) error {
			_, states, err := bus.DecodeState(r.State)
			if err == nil {
				got[string(r.Key)] = states[0].Tokens
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	want := map[string]float64{"ten_a/p/ip:192.0.2.1": 4, "ten_a/p/ip:192.0.2.2": 7}
	for _, req := range []bus.BucketsRequest{
		{}, {Packed: true},
		{Keys: []string{"ten_a/p/ip:192.0.2.1", "ten_a/p/ip:192.0.2.2", "ten_a/p/ip:192.0.2.3", "ten_a/p/ip:192.0.2.4"}},
		{Keys: []string{"ten_a/p/ip:192.0.2.2", "ten_a/p/ip:192.0.2.1"}, Packed: true},
	} {
		page := ask(req)
		if got := tokens(page); !reflect.DeepEqual(got, want) || page.Next != "" {
			t.Fatalf("%+v: got %v next %q, want %v", req, got, page.Next, want)
		}
		if req.Packed != (len(page.Packed) > 0) || req.Packed == (len(page.Buckets) > 0) {
			t.Fatalf("%+v: answered packed %d bytes and %d records", req, len(page.Packed), len(page.Buckets))
		}
	}
	// A packed page travels raw, outside the JSON envelope.
	req, _ := json.Marshal(bus.BucketsRequest{Packed: true})
	msg, err := e.nc.Request(bus.BucketsSubject, req, 5*time.Second)
	if err != nil || msg.Header.Get(bus.RawReplyHeader) == "" || msg.Data[0] == '{' {
		t.Fatalf("packed page: header %v, %d bytes, err %v", msg.Header, len(msg.Data), err)
	}
	var page bus.BucketsPage
	err = bus.Request(context.Background(), e.nc, bus.BucketsSubject, bus.BucketsRequest{Keys: make([]string, maxPageKeys+1)}, &page)
	if errs.Code(err) != errs.Invalid {
		t.Fatalf("too many keys: %v", err)
	}
}

// Everything servers load from the worker fits the NATS server's
// max_payload, whatever the data's size: hydration pages end early and the
// config snapshot comes in parts. The server here allows 64 KiB messages
// (NATS's default is 1 MiB) so a few thousand records exceed it many times.
func TestLargeLoadsFitMaxPayload(t *testing.T) {
	const maxPayload = 64 << 10
	e := newEnvPayload(t, Config{}, maxPayload)
	future := time.Now().Add(time.Hour).UnixNano()
	const buckets = 3000
	for b := 0; b < buckets; b += 100 {
		batch := bus.StateBatch{V: bus.WireVersion, Node: "n1"}
		for i := b; i < b+100; i++ {
			rec := stateBatch(fmt.Sprintf("ten_a/pol_0123456789abcdef/ip:198.51.%d.%d", i/256, i%256), 1, future).Buckets[0]
			batch.Buckets = append(batch.Buckets, rec)
		}
		e.publish(t, bus.StateSubjectPrefix+"n1", "", batch)
	}

	// A reply too large for one message would be dropped: bound the wait.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tn, _, _, err := e.w.store.Tenants().Create(ctx, "big", "owner@big.test", "a long passphrase", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	const keys = 600
	for i := range keys {
		if _, _, _, err := e.w.store.Keys().Create(ctx, tn.ID, fmt.Sprintf("customer key number %04d", i), "pro", nil, nil, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	e.run(t)
	eventually(t, 10*time.Second, "worker answering", func() bool {
		var v bus.Version
		return bus.Request(ctx, e.nc, bus.OpVersion.Subject(), struct{}{}, &v) == nil
	})

	got, pages := 0, 0
	req := bus.BucketsRequest{}
	for {
		var page bus.BucketsPage
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := bus.Request(rctx, e.nc, bus.BucketsSubject, req, &page)
		cancel()
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		got += len(page.Buckets)
		pages++
		if page.Next == "" {
			break
		}
		req.After = page.Next
	}
	if got != buckets || pages < 2 {
		t.Fatalf("hydration read %d buckets in %d pages, want %d in several", got, pages, buckets)
	}

	snap, err := bus.LoadSnapshot(ctx, e.nc)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(snap.ConsumerKeys); n != keys {
		t.Fatalf("snapshot holds %d keys, want %d", n, keys)
	}
	raw, _ := json.Marshal(snap)
	perKey, _ := json.Marshal(snap.ConsumerKeys)
	t.Logf("snapshot %d bytes; %d bytes per consumer key record", len(raw), len(perKey)/keys)
	if len(raw) <= maxPayload {
		t.Fatalf("snapshot is %d bytes: too small to need parts", len(raw))
	}

	// Any other large reply comes in parts too: a tenant's key list.
	var list []tenants.ConsumerKey
	if err := bus.Request(ctx, e.nc, bus.OpKeyList.Subject(), bus.TenantScoped{TenantID: tn.ID}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != keys {
		t.Fatalf("key list holds %d keys, want %d", len(list), keys)
	}
}

// NATS can lose its streams (its data directory wiped, a stream deleted by
// hand). The worker makes them again, and the new streams, whose sequences
// start again at 1, still update bucket rows and add up counters.
func TestStreamsMadeAnewKeepApplying(t *testing.T) {
	e := newEnv(t, Config{})
	e.run(t)
	ctx := context.Background()
	key := "ten_a/pol_1/ip:192.0.2.1"
	future := time.Now().Add(time.Hour).UnixNano()
	tokens := func() float64 {
		var state []byte
		if err := e.db.QueryRow(`SELECT state FROM buckets_live WHERE key = ?`, key).Scan(&state); err != nil {
			return -1
		}
		_, states, err := bus.DecodeState(state)
		if err != nil || len(states) == 0 {
			return -1
		}
		return states[0].Tokens
	}
	for i := range 5 {
		e.publish(t, bus.StateSubjectPrefix+"n1", "", stateBatch(key, float64(i), future))
	}
	e.publish(t, bus.CounterSubjectPrefix+"n1", "", counterBatch(3, 4))
	eventually(t, 5*time.Second, "the first streams applied", func() bool {
		a, d := e.counterTotals(t)
		return tokens() == 4 && a == 3 && d == 4
	})

	for _, s := range []string{bus.StateStream, bus.CounterStream} {
		if err := e.js.DeleteStream(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "the worker makes the streams again", func() bool {
		_, err1 := e.js.Stream(ctx, bus.StateStream)
		_, err2 := e.js.Stream(ctx, bus.CounterStream)
		return err1 == nil && err2 == nil
	})
	e.publish(t, bus.StateSubjectPrefix+"n1", "", stateBatch(key, 7, future)) // sequence 1 again
	e.publish(t, bus.CounterSubjectPrefix+"n1", "", counterBatch(1, 10))
	eventually(t, 10*time.Second, "the new streams applied", func() bool {
		a, d := e.counterTotals(t)
		return tokens() == 7 && a == 4 && d == 14
	})
}

// lateCreateJS is JetStream whose first consumer create takes effect but
// answers too late for its caller, as happens while JetStream elects new
// leaders after a NATS node died.
type lateCreateJS struct {
	jetstream.JetStream
	deletes, creates atomic.Int32
	firstCreated     time.Time
}

func (j *lateCreateJS) DeleteConsumer(ctx context.Context, stream, name string) error {
	j.deletes.Add(1)
	return j.JetStream.DeleteConsumer(ctx, stream, name)
}

func (j *lateCreateJS) CreateOrUpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	c, err := j.JetStream.CreateOrUpdateConsumer(ctx, stream, cfg)
	if j.creates.Add(1) == 1 && err == nil {
		j.firstCreated = c.CachedInfo().Created
		return nil, context.DeadlineExceeded
	}
	return c, err
}

// The worker makes its consumer anew when it starts, but only its first
// attempt deletes it: a retry after a create that answered too late keeps
// the consumer that create made instead of throwing it away.
func TestOpenDeletesTheConsumerOnlyOnce(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	// A consumer from an earlier worker, which the first attempt resets.
	old, err := e.js.CreateOrUpdateConsumer(ctx, bus.StateStream, jetstream.ConsumerConfig{Durable: bus.WorkerDurable, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	oldCreated := old.CachedInfo().Created
	time.Sleep(10 * time.Millisecond) // creation times apart
	js := &lateCreateJS{JetStream: e.w.js}
	e.w.js = js
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cons, ok := e.w.open(octx, bus.StateStream)
	if !ok {
		t.Fatal("open gave up")
	}
	if n := js.deletes.Load(); n != 1 {
		t.Errorf("the consumer was deleted %d times, want once (the first attempt)", n)
	}
	if n := js.creates.Load(); n != 2 {
		t.Errorf("%d creates, want 2 (the late one and the retry)", n)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Created.Equal(oldCreated) {
		t.Error("the earlier worker's consumer was kept: the first attempt did not reset it")
	}
	if !info.Created.Equal(js.firstCreated) {
		t.Errorf("the consumer was made %v, want the late create's %v: a retry threw it away", info.Created, js.firstCreated)
	}
}
