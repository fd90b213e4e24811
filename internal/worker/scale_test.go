package worker

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/bus/bustest"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/sqlitedb"
)

// syncBuffer is a log destination safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// impatientDB reopens the migrated database at path with a busy timeout of
// 1 ms: any two write transactions that overlap fail at once with
// "database is locked" instead of waiting, so a test sees every overlap.
func impatientDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_busy_timeout=1&_foreign_keys=on&_synchronous=NORMAL&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// manyBuckets is a state batch of n new buckets named prefix-i.
func manyBuckets(prefix string, n int) bus.StateBatch {
	b := bus.StateBatch{V: bus.WireVersion, Node: "n1"}
	future := time.Now().Add(time.Hour).UnixNano()
	for i := range n {
		b.Buckets = append(b.Buckets, stateBatch(fmt.Sprintf("ten_a/p/ip:%s-%d", prefix, i), 3, future).Buckets[0])
	}
	return b
}

func (e *env) count(t *testing.T, query string) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow(query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The worker's own jobs never meet in SQLite: stream batches on both
// streams, config writes over request/reply and bucket sweeps all run at
// once against a database whose busy timeout is 1 ms, and none of them
// fails with "database is locked".
func TestWorkerJobsNeverLockEachOther(t *testing.T) {
	dir := t.TempDir()
	nc := bustest.InProcess(t, bus.EmbeddedConfig{DataDir: dir, Name: "worker-lock-test"})
	path := filepath.Join(dir, "sluice.db")
	setup, err := sqlitedb.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	setup.Close()
	db := impatientDB(t, path)
	var logs syncBuffer
	// Sweeps every few milliseconds: rows full long ago are sweepable.
	w, err := New(Config{Log: slog.New(slog.NewJSONHandler(&logs, nil)), SweepInterval: 5 * time.Millisecond, FetchBatch: 4, ApplyInterval: 10 * time.Millisecond}, db, nc)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	e := &env{db: db, nc: nc, js: js, w: w}
	e.run(t)
	eventually(t, 10*time.Second, "worker serving", func() bool {
		var v bus.Version
		return bus.Request(context.Background(), nc, bus.OpVersion.Subject(), struct{}{}, &v) == nil
	})

	const messages, perMessage = 40, 200
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range messages {
			e.publish(t, bus.StateSubjectPrefix+"n1", fmt.Sprintf("s-%d", i), manyBuckets(fmt.Sprint(i), perMessage))
			// Buckets full long ago, which the sweep deletes while the
			// others are written.
			old := stateBatch(fmt.Sprintf("ten_a/p/ip:old-%d", i), 10, 1)
			e.publish(t, bus.StateSubjectPrefix+"n1", fmt.Sprintf("o-%d", i), old)
		}
	})
	wg.Go(func() {
		for i := range messages {
			e.publish(t, bus.CounterSubjectPrefix+"n1", fmt.Sprintf("c-%d", i), counterBatch(1, 1))
		}
	})
	errc := make(chan error, 8)
	for i := range 4 {
		wg.Go(func() {
			var out service.Written[service.TenantCreated]
			errc <- bus.Request(context.Background(), nc, bus.OpTenantCreate.Subject(),
				bus.TenantCreate{Name: fmt.Sprintf("t%d", i), OwnerEmail: fmt.Sprintf("o%d@example.test", i), OwnerPassword: "a long passphrase"}, &out)
		})
	}
	wg.Go(func() {
		for range 20 {
			w.sweeper.sweep(context.Background())
		}
	})
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Errorf("config write failed: %v", err)
		}
	}
	eventually(t, 60*time.Second, "every batch committed", func() bool {
		a, _ := e.counterTotals(t)
		return a == messages && e.count(t, `SELECT count(*) FROM buckets_live WHERE key NOT LIKE '%old%'`) == messages*perMessage
	})
	if n := e.count(t, `SELECT count(*) FROM tenants`); n != 4 {
		t.Errorf("%d tenants, want 4", n)
	}
	if strings.Contains(logs.String(), "locked") || strings.Contains(logs.String(), "busy") {
		t.Fatalf("the worker's jobs met in SQLite:\n%s", logs.String())
	}
}

// A stream at its max bytes bound refuses new messages: the publisher gets
// an error (a server keeps its pending states and retries), every message
// acknowledged before is kept and applied once the worker drains the
// stream, and publishing works again after that.
func TestStreamBoundRefusesNewKeepsAcknowledged(t *testing.T) {
	limits := bus.StreamLimits{MaxBytes: 64 << 10}
	reg := prometheus.NewRegistry()
	e := newEnv(t, Config{Streams: limits, Registerer: reg, LagInterval: 50 * time.Millisecond})
	ctx := context.Background()
	if err := bus.EnsureStreamsWith(limits)(ctx, e.js); err != nil {
		t.Fatal(err)
	}
	info, err := e.js.Stream(ctx, bus.StateStream)
	if err != nil {
		t.Fatal(err)
	}
	if c := info.CachedInfo().Config; c.MaxBytes != 64<<10 || c.Discard != jetstream.DiscardNew || c.MaxAge != bus.DefaultStreamMaxAge {
		t.Fatalf("stream config max_bytes %d discard %v max_age %s", c.MaxBytes, c.Discard, c.MaxAge)
	}
	// No worker yet: publish until the stream refuses.
	acked := 0
	var refused error
	for i := 0; i < 1000 && refused == nil; i++ {
		data, _ := json.Marshal(manyBuckets(fmt.Sprint(i), 20))
		_, err := e.js.Publish(ctx, bus.StateSubjectPrefix+"n1", data, jetstream.WithMsgID(fmt.Sprintf("s-%d", i)))
		if err != nil {
			refused = err
			break
		}
		acked++
	}
	if refused == nil || acked == 0 {
		t.Fatalf("acked %d, refused %v: want some acked, then a refusal", acked, refused)
	}
	var apiErr *jetstream.APIError
	if !errors.As(refused, &apiErr) || !strings.Contains(strings.ToLower(refused.Error()), "maximum bytes") {
		t.Fatalf("refusal %v: want JetStream's maximum bytes error", refused)
	}
	lag, err := e.w.StreamLag(ctx, bus.StateStream)
	if err != nil || lag.Messages != uint64(acked) || !lag.Full || lag.Oldest <= 0 {
		t.Fatalf("lag %+v, %v: want %d messages, full, an age", lag, err, acked)
	}
	// The worker comes: it reports the stream full, then drains it.
	e.run(t)
	eventually(t, 30*time.Second, "every acknowledged bucket committed", func() bool {
		return e.count(t, `SELECT count(*) FROM buckets_live`) == acked*20
	})
	eventually(t, 10*time.Second, "stream full counted", func() bool {
		return gauge(t, reg, "sluice_worker_stream_full_total", bus.StateStream) >= 1
	})
	eventually(t, 10*time.Second, "backlog gone", func() bool {
		return gauge(t, reg, "sluice_worker_stream_backlog_messages", bus.StateStream) == 0 &&
			gauge(t, reg, "sluice_worker_stream_full", bus.StateStream) == 0
	})
	data, _ := json.Marshal(manyBuckets("after", 20))
	if _, err := e.js.Publish(ctx, bus.StateSubjectPrefix+"n1", data, jetstream.WithMsgID("s-after")); err != nil {
		t.Fatalf("publish after the drain: %v", err)
	}
	eventually(t, 10*time.Second, "the refused batch, published again, committed", func() bool {
		return e.count(t, `SELECT count(*) FROM buckets_live`) == (acked+1)*20
	})
}

// gauge reads one labelled metric from reg; -1 when absent.
func gauge(t *testing.T, reg *prometheus.Registry, name, stream string) float64 {
	t.Helper()
	return gaugeBy(t, reg, name, "stream", stream)
}

// gaugeBy reads a gauge or counter by one label; with label "", a metric
// without labels.
func gaugeBy(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" && len(m.GetLabel()) == 0 {
				return m.Gauge.GetValue()
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					if m.Gauge != nil {
						return m.Gauge.GetValue()
					}
					return m.Counter.GetValue()
				}
			}
		}
	}
	return -1
}

// While the worker cannot commit, the lag metrics report the backlog in
// messages and bytes and the oldest message's age, and the log says the
// worker is behind; once it commits again they fall to zero.
func TestLagMetricsReportBacklog(t *testing.T) {
	reg := prometheus.NewRegistry()
	var logs syncBuffer
	e := newEnv(t, Config{Registerer: reg, LagInterval: 50 * time.Millisecond, ApplyInterval: 10 * time.Millisecond,
		Log: slog.New(slog.NewJSONHandler(&logs, nil))})
	e.run(t)
	// Once the worker has started (its operator bootstrap writes too),
	// hold the one writer: nothing is committed meanwhile.
	eventually(t, 10*time.Second, "worker serving", func() bool {
		return gauge(t, reg, "sluice_worker_stream_backlog_messages", bus.StateStream) == 0
	})
	release := make(chan struct{})
	held := make(chan struct{})
	go func() {
		_ = e.w.store.WriteTx(context.Background(), func(*sql.Tx) error { close(held); <-release; return nil })
	}()
	<-held
	for i := range 5 {
		e.publish(t, bus.StateSubjectPrefix+"n1", fmt.Sprintf("s-%d", i), manyBuckets(fmt.Sprint(i), 10))
	}
	eventually(t, 10*time.Second, "backlog reported", func() bool {
		return gauge(t, reg, "sluice_worker_stream_backlog_messages", bus.StateStream) == 5 &&
			gauge(t, reg, "sluice_worker_stream_backlog_bytes", bus.StateStream) > 0 &&
			gauge(t, reg, "sluice_worker_stream_oldest_unapplied_seconds", bus.StateStream) > 0
	})
	eventually(t, 10*time.Second, "behind logged", func() bool { return strings.Contains(logs.String(), `"msg":"worker is behind"`) })
	close(release)
	eventually(t, 10*time.Second, "backlog drained", func() bool {
		return gauge(t, reg, "sluice_worker_stream_backlog_messages", bus.StateStream) == 0 &&
			gauge(t, reg, "sluice_worker_stream_oldest_unapplied_seconds", bus.StateStream) == 0 &&
			e.count(t, `SELECT count(*) FROM buckets_live`) == 50
	})
	eventually(t, 10*time.Second, "caught up logged", func() bool { return strings.Contains(logs.String(), `"msg":"worker caught up"`) })
}

// A worker killed in the middle of a batch (fetched, not committed, not
// acked) loses nothing: a new worker on the same SQLite file and streams
// commits every bucket and counts every decision exactly once.
func TestWorkerKilledMidBatchLosesNothing(t *testing.T) {
	dir := t.TempDir()
	ns, err := bus.StartEmbedded(bus.EmbeddedConfig{DataDir: dir, Name: "worker-kill-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	path := filepath.Join(dir, "sluice.db")
	connect := func() (*nats.Conn, *sql.DB) {
		nc, err := nats.Connect(ns.ClientURL(), nats.InProcessServer(ns))
		if err != nil {
			t.Fatal(err)
		}
		db, err := sqlitedb.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		return nc, db
	}
	ncA, dbA := connect()
	// Worker A holds what it fetched for up to 10 s before applying it.
	wA, err := New(Config{FetchBatch: 1000, ApplyInterval: 10 * time.Second, AckWait: time.Minute}, dbA, ncA)
	if err != nil {
		t.Fatal(err)
	}
	pub, dbB := connect()
	t.Cleanup(pub.Close)
	t.Cleanup(func() { dbB.Close() })
	js, _ := jetstream.New(pub)
	if err := bus.EnsureStreams(context.Background(), js, 1); err != nil {
		t.Fatal(err)
	}
	e := &env{db: dbB, nc: pub, js: js}
	const messages, perMessage = 20, 100
	for i := range messages {
		e.publish(t, bus.StateSubjectPrefix+"n1", fmt.Sprintf("s-%d", i), manyBuckets(fmt.Sprint(i), perMessage))
		e.publish(t, bus.CounterSubjectPrefix+"n1", fmt.Sprintf("c-%d", i), counterBatch(2, 1))
	}
	// Worker A fetches a batch and is killed before committing it.
	ctxA, killA := context.WithCancel(context.Background())
	doneA := make(chan struct{})
	go func() { defer close(doneA); _ = wA.Run(ctxA) }()
	eventually(t, 10*time.Second, "worker A holding a fetched batch", func() bool {
		c, err := js.Consumer(context.Background(), bus.StateStream, bus.WorkerDurable)
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumAckPending > 0
	})
	// Killed: its connection gone (no ack can leave), its work stopped.
	ncA.Close()
	killA()
	<-doneA
	dbA.Close()

	wB, err := New(Config{}, dbB, pub)
	if err != nil {
		t.Fatal(err)
	}
	e.w = wB
	e.run(t)
	eventually(t, 60*time.Second, "every bucket and counter committed by the new worker", func() bool {
		a, d := e.counterTotals(t)
		return e.count(t, `SELECT count(*) FROM buckets_live`) == messages*perMessage && a == 2*messages && d == messages
	})
	// Nothing more arrives later: every decision was counted once.
	time.Sleep(500 * time.Millisecond)
	if a, d := e.counterTotals(t); a != 2*messages || d != messages {
		t.Fatalf("counters %d/%d, want %d/%d", a, d, 2*messages, messages)
	}
}

// The sweep deletes, in several rounds of short transactions, every bucket
// that is full again and quiet, and keeps live buckets and ones written
// recently.
func TestSweepDeletesFullQuietBucketsOnly(t *testing.T) {
	now := time.Now()
	e := newEnv(t, Config{Now: func() time.Time { return now }, AckWait: time.Second})
	ctx := context.Background()
	var rows []bucketRow
	add := func(prefix string, n int, fullAt int64) {
		b := manyBuckets(prefix, n)
		for i := range b.Buckets {
			b.Buckets[i].FullAt = fullAt
		}
		rows = append(rows, bucketRows(&b)...)
	}
	add("full", sweepRead+sweepChunk+7, now.Add(-time.Minute).UnixNano())
	add("live", 10, now.Add(time.Hour).UnixNano())
	old := now.Add(-time.Hour).UnixNano()
	if err := e.w.store.WriteTx(ctx, func(tx *sql.Tx) error { return writeBucketRows(tx, rows, old) }); err != nil {
		t.Fatal(err)
	}
	// Full but written just now: a redelivery could still come, so it stays.
	b := manyBuckets("recent", 3)
	for i := range b.Buckets {
		b.Buckets[i].FullAt = now.Add(-time.Minute).UnixNano()
	}
	if err := e.w.store.WriteTx(ctx, func(tx *sql.Tx) error { return writeBucketRows(tx, bucketRows(&b), now.UnixNano()) }); err != nil {
		t.Fatal(err)
	}
	e.w.sweeper.sweep(ctx)
	if n := e.count(t, `SELECT count(*) FROM buckets_live WHERE key LIKE '%full-%'`); n != 0 {
		t.Fatalf("%d full, quiet buckets left", n)
	}
	if n := e.count(t, `SELECT count(*) FROM buckets_live`); n != 13 {
		t.Fatalf("%d buckets left, want the 10 live and 3 recent", n)
	}
}

// An idle worker gives back the memory a burst took: once a sweep finds
// that nothing was written since the sweep before, the idle SQLite
// connections (and their page caches) are closed, and again every
// releaseEvery while it stays idle; a busy worker keeps them.
func TestIdleWorkerClosesItsSQLiteConnections(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, Config{SweepInterval: time.Hour, Registerer: reg})
	ctx := context.Background()
	e.run(t)
	e.w.sweeper.sweep(ctx) // nothing written yet: idle
	base := e.db.Stats().MaxIdleClosed
	b := manyBuckets("burst", 500)
	e.publish(t, bus.StateSubjectPrefix+"n1", "", b)
	eventually(t, 30*time.Second, "the burst committed", func() bool { return e.w.Stats().StateRows == 500 })
	eventually(t, 30*time.Second, "the burst merged", func() bool { return e.w.runs.stagedRows() == 0 })
	closed := func() int64 { return e.db.Stats().MaxIdleClosed - base }
	e.w.sweeper.sweep(ctx) // rows were written since the last sweep: busy
	if n := closed(); n != 0 {
		t.Fatalf("%d connections closed after a busy spell, want 0", n)
	}
	// The release shows in the memory the process holds outside Go.
	sqliteBefore := gaugeBy(t, reg, "sluice_sqlite_memory_bytes", "", "")
	cHeapBefore := gaugeBy(t, reg, "sluice_c_heap_bytes", "state", "in_use")
	e.w.sweeper.sweep(ctx) // nothing written since: idle
	after := closed()
	if after == 0 {
		t.Fatal("no idle connection closed once the worker was idle")
	}
	sqliteAfter := gaugeBy(t, reg, "sluice_sqlite_memory_bytes", "", "")
	cHeapAfter := gaugeBy(t, reg, "sluice_c_heap_bytes", "state", "in_use")
	t.Logf("SQLite allocated %d -> %d bytes, C heap in use %d -> %d bytes", int64(sqliteBefore), int64(sqliteAfter), int64(cHeapBefore), int64(cHeapAfter))
	if sqliteBefore <= 0 || sqliteAfter >= sqliteBefore {
		t.Errorf("sluice_sqlite_memory_bytes %v before the release, %v after: want it to fall", sqliteBefore, sqliteAfter)
	}
	if cHeapBefore < sqliteBefore || cHeapAfter >= cHeapBefore {
		t.Errorf("sluice_c_heap_bytes{in_use} %v before the release, %v after (SQLite had %v): want at least SQLite's, falling", cHeapBefore, cHeapAfter, sqliteBefore)
	}
	e.w.sweeper.sweep(ctx) // still idle: not again so soon
	if n := closed(); n != after {
		t.Fatalf("%d more connections closed right after the release", n-after)
	}
	if n := e.count(t, `SELECT count(*) FROM buckets_live`); n != 500 {
		t.Fatalf("%d buckets after the release, want 500", n)
	}
	// That read left a connection (and its cache) idle in the pool: a
	// sweep releaseEvery later, still idle, closes it too.
	e.w.sweeper.releaseMu.Lock()
	e.w.sweeper.releasedAt = time.Now().Add(-releaseEvery - time.Second)
	e.w.sweeper.releaseMu.Unlock()
	e.w.sweeper.sweep(ctx)
	if n := closed(); n <= after {
		t.Fatal("an idle worker did not release again after releaseEvery")
	}
}
