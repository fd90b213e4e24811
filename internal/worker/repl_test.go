package worker

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/bus/bustest"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/sqlitedb"
)

// haWorker is one worker of a pair: its own SQLite file, the shared NATS.
type haWorker struct {
	db     *sql.DB
	w      *Worker
	cancel context.CancelFunc
	done   chan struct{}
}

func startHAWorker(t *testing.T, url, dir, name string) *haWorker {
	t.Helper()
	return startHAWorkerTTL(t, url, dir, name, time.Second)
}

func startHAWorkerTTL(t *testing.T, url, dir, name string, ttl time.Duration) *haWorker {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	rec := &sqlitedb.Recorder{}
	db, err := sqlitedb.OpenRecorded(context.Background(), filepath.Join(dir, "sluice.db"), rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	w, err := New(Config{Recorder: rec, LeaseTTL: ttl, Name: name,
		Log: slog.New(slog.NewTextHandler(t.Output(), nil)).With("worker", name)}, db, nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &haWorker{db: db, w: w, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(h.done); _ = w.Run(ctx) }()
	t.Cleanup(h.stop)
	return h
}

func (h *haWorker) stop() {
	h.cancel()
	<-h.done
}

func (h *haWorker) active() bool { return h.w.repl.Active() }

// leaseEntry is the worker lease's content as operators read it.
type leaseEntry struct {
	Worker   string `json:"worker"`
	Epoch    uint64 `json:"epoch"`
	Since    string `json:"since"`
	Instance string `json:"instance,omitempty"`
	Expires  int64  `json:"expires,omitempty"`
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dump reads every table of db, rows in a stable order, as text.
func dump(t *testing.T, db *sql.DB) map[string][]string {
	t.Helper()
	ctx := context.Background()
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name != 'goose_db_version'`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		_ = rows.Scan(&n)
		tables = append(tables, n)
	}
	rows.Close()
	out := map[string][]string{}
	for _, tb := range tables {
		r, err := db.QueryContext(ctx, `SELECT * FROM "`+tb+`" ORDER BY 1, 2`)
		if err != nil {
			r, err = db.QueryContext(ctx, `SELECT * FROM "`+tb+`" ORDER BY 1`)
		}
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := r.Columns()
		for r.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := r.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out[tb] = append(out[tb], fmt.Sprintf("%v", vals))
		}
		r.Close()
	}
	return out
}

// createTenant creates a tenant, asking again while no worker answers (a
// worker taking over starts serving a moment after it takes the lease).
func createTenant(t *testing.T, nc *nats.Conn, name string) error {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var out service.Written[service.TenantCreated]
		err := bus.Request(ctx, nc, bus.OpTenantCreate.Subject(),
			bus.TenantCreate{Name: name, OwnerEmail: name + "@example.com", OwnerPassword: "correct horse battery"}, &out)
		cancel()
		if err == nil || errs.Code(err) != errs.Unavailable || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// usageRows is the tenant_usage table as text, a row a line.
func usageRows(t *testing.T, db *sql.DB) string {
	t.Helper()
	rows, err := db.Query(`SELECT tenant_id, policies, consumer_keys, service_keys, blocks, users FROM tenant_usage ORDER BY tenant_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id string
		var p, ck, sk, bl, u int
		if err := rows.Scan(&id, &p, &ck, &sk, &bl, &u); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s|%d|%d|%d|%d|%d\n", id, p, ck, sk, bl, u)
	}
	return b.String()
}

func tenantCount(t *testing.T, db *sql.DB) int {
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM tenants`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStandbyWorkerTakesOver runs two workers with their own SQLite files:
// the second copies a snapshot of the first, follows its log, takes over
// when the first stops, and the first, back, follows the second; every
// acknowledged write ends up in both files, which end equal.
func TestStandbyWorkerTakesOver(t *testing.T) {
	dir := t.TempDir()
	ns := bustest.Start(t, "ha-test")
	client, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)

	dirA, dirB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	a := startHAWorker(t, ns.URL(), dirA, "a")
	waitFor(t, "the first worker is active", a.active)
	for i := range 3 {
		if err := createTenant(t, client, fmt.Sprintf("before%d", i)); err != nil {
			t.Fatal(err)
		}
	}

	// The second starts after those writes: it must copy a snapshot.
	b := startHAWorker(t, ns.URL(), dirB, "b")
	waitFor(t, "the standby has the snapshot", func() bool { return tenantCount(t, b.db) == 3 })
	if b.active() {
		t.Fatal("two active workers")
	}
	if err := createTenant(t, client, "after-snapshot"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the standby applied the log", func() bool { return tenantCount(t, b.db) == 4 })
	// The usage counts came with the snapshot, not doubled by the triggers
	// that fired while it was copied, and followed the log.
	if ua, ub := usageRows(t, a.db), usageRows(t, b.db); ua != ub || !strings.Contains(ua, "|0|0|1|0|1\n") {
		t.Fatalf("tenant usage: active\n%s\nstandby\n%s", ua, ub)
	}
	// A bucket state the active commits reaches the standby, which counts
	// the row as the active does.
	js, err := jetstream.New(client)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(stateBatch("ten_a/pol_1/ip:192.0.2.9", 3, time.Now().Add(time.Hour).UnixNano()))
	if _, err := js.Publish(context.Background(), bus.StateSubjectPrefix+"n1", data); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the standby has the bucket", func() bool {
		var n int
		_ = b.db.QueryRow(`SELECT COUNT(*) FROM buckets_live`).Scan(&n)
		return n == 1
	})
	if got := b.w.Stats().StateRows; got != 1 {
		t.Fatalf("the standby counted %d state rows, want 1", got)
	}

	a.stop()
	waitFor(t, "the standby is active", b.active)
	if err := createTenant(t, client, "on-b"); err != nil {
		t.Fatal(err)
	}
	if got := tenantCount(t, a.db); got != 4 {
		t.Fatalf("the stopped worker has %d tenants, want 4", got)
	}

	// The first comes back as a standby and catches up from the log.
	a2 := startHAWorker(t, ns.URL(), dirA, "a")
	waitFor(t, "the old worker caught up", func() bool { return tenantCount(t, a2.db) == 5 })
	if a2.active() {
		t.Fatal("two active workers")
	}
	if err := createTenant(t, client, "last"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both have every tenant", func() bool { return tenantCount(t, a2.db) == 6 })
	b.stop()
	a2.stop()
	da, db := dump(t, a2.db), dump(t, b.db)
	if !reflect.DeepEqual(da, db) {
		for tb := range da {
			if !reflect.DeepEqual(da[tb], db[tb]) {
				t.Errorf("table %s differs:\n a: %v\n b: %v", tb, da[tb], db[tb])
			}
		}
	}
	if len(da["tenants"]) != 6 {
		t.Fatalf("tenants: %v", da["tenants"])
	}
}

// A record whose writer died between its parts is dropped by every reader:
// the next term's marker goes after it, and the worker that takes over
// writes on. Here the unfinished part is appended by hand, which also
// makes the active worker's next publish fail: it steps down, catches up
// and takes the lease again.
func TestUnfinishedRecordIsDropped(t *testing.T) {
	dir := t.TempDir()
	ns := bustest.Start(t, "ha-partial")
	client, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	a := startHAWorker(t, ns.URL(), filepath.Join(dir, "a"), "a")
	waitFor(t, "the worker is active", a.active)
	if err := createTenant(t, client, "first"); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(client)
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: bus.ReplSubject, Header: nats.Header{}, Data: []byte(`[{"q":"DELETE FROM tenants"`)}
	msg.Header.Set(bus.ReplEpochHeader, "1")
	msg.Header.Set(bus.ReplPartHeader, "1/2")
	if _, err := js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	if err := createTenant(t, client, "second"); err != nil {
		t.Fatalf("no worker writes after an unfinished record: %v", err)
	}
	b := startHAWorker(t, ns.URL(), filepath.Join(dir, "b"), "b")
	if err := createTenant(t, client, "third"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the standby has every tenant", func() bool { return tenantCount(t, b.db) == 3 })
	if got := tenantCount(t, a.db); got != 3 {
		t.Fatalf("the active worker has %d tenants, want 3", got)
	}
}

// A transaction larger than NATS's max_payload travels in parts: bucket
// states committed in large batches on a NATS with 64 KiB messages reach
// the standby whole, and it counts them.
func TestLargeTransactionsReplicateInParts(t *testing.T) {
	dir := t.TempDir()
	ns := bustest.StartConfig(t, bus.EmbeddedConfig{Name: "ha-parts", MaxPayload: 64 << 10})
	client, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	a := startHAWorker(t, ns.URL(), filepath.Join(dir, "a"), "a")
	waitFor(t, "the worker is active", a.active)
	if err := createTenant(t, client, "first"); err != nil {
		t.Fatal(err)
	}
	b := startHAWorker(t, ns.URL(), filepath.Join(dir, "b"), "b")
	waitFor(t, "the standby has the snapshot", func() bool { return tenantCount(t, b.db) == 1 })
	js, err := jetstream.New(client)
	if err != nil {
		t.Fatal(err)
	}
	const msgs, per = 12, 250
	in := 0
	for i := range msgs {
		data, _ := json.Marshal(manyBuckets(fmt.Sprintf("m%d", i), per))
		in += len(data)
		if len(data) > 60<<10 {
			t.Fatalf("a state message of %d bytes does not fit 64 KiB", len(data))
		}
		if _, err := js.Publish(context.Background(), bus.StateSubjectPrefix+"n1", data); err != nil {
			t.Fatal(err)
		}
	}
	count := func(db *sql.DB) int {
		var n int
		_ = db.QueryRow(`SELECT COUNT(*) FROM buckets_live`).Scan(&n)
		return n
	}
	waitFor(t, "the active has every bucket", func() bool { return count(a.db) == msgs*per })
	waitFor(t, "the standby has every bucket", func() bool { return count(b.db) == msgs*per })
	if got := b.w.Stats().StateRows; got != msgs*per {
		t.Fatalf("the standby counted %d state rows, want %d", got, msgs*per)
	}
	info, err := js.Stream(context.Background(), bus.ReplStream)
	if err != nil {
		t.Fatal(err)
	}
	split := 0
	for seq := uint64(1); seq <= info.CachedInfo().State.LastSeq; seq++ {
		m, err := info.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Data) > 64<<10 {
			t.Fatalf("log message %d has %d bytes, over max_payload", seq, len(m.Data))
		}
		if _, n, _ := strings.Cut(m.Header.Get(bus.ReplPartHeader), "/"); n != "1" {
			split++
		}
	}
	if split == 0 {
		t.Fatal("no transaction went in parts")
	}
	t.Logf("%d log messages, %d of them parts of a larger transaction; %d bytes of state messages, %d bytes of log",
		info.CachedInfo().State.LastSeq, split, in, info.CachedInfo().State.Bytes)
	a.stop()
	b.stop()
	if da, db := dump(t, a.db), dump(t, b.db); !reflect.DeepEqual(da["buckets"], db["buckets"]) {
		t.Fatal("the buckets differ between the active and the standby")
	}
}

// A record from an ended term (a deposed active that appended after the
// new term began) changes no database: every reader skips it, the active
// whose append it overtook steps down, catches up and writes on.
func TestRecordOfAnEndedTermIsSkipped(t *testing.T) {
	dir := t.TempDir()
	ns := bustest.Start(t, "ha-fence")
	client, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	a := startHAWorker(t, ns.URL(), filepath.Join(dir, "a"), "a")
	waitFor(t, "the worker is active", a.active)
	b := startHAWorker(t, ns.URL(), filepath.Join(dir, "b"), "b")
	if err := createTenant(t, client, "kept"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the standby has the tenant", func() bool { return tenantCount(t, b.db) == 1 })

	// Term 0 ended before term 1 began: its record must not delete
	// anything. (The record's wire form is pinned in package repl.)
	js, _ := jetstream.New(client)
	msg := &nats.Msg{Subject: bus.ReplSubject, Header: nats.Header{}, Data: []byte(`[{"q":"DELETE FROM tenants"}]`)}
	msg.Header.Set(bus.ReplEpochHeader, "0")
	msg.Header.Set(bus.ReplPartHeader, "1/1")
	if _, err := js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	if err := createTenant(t, client, "after"); err != nil {
		t.Fatalf("no worker writes after a stale record: %v", err)
	}
	for name, h := range map[string]*haWorker{"a": a, "b": b} {
		waitFor(t, name+" has both tenants", func() bool { return tenantCount(t, h.db) == 2 })
	}
}

// A worker whose term ended without giving its lease back (NATS did not
// answer when it left) gives it back as a standby at once, instead of
// waiting out the lease's TTL (20 s here) before it can be active again.
// The entry is made by hand: this process's own, from an earlier term, so
// that the renewal fails and the leaving term does not recognise it.
func TestStandbyGivesBackItsOwnEndedLease(t *testing.T) {
	ns := bustest.Start(t, "ha-own-lease")
	client, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	a := startHAWorkerTTL(t, ns.URL(), filepath.Join(t.TempDir(), "a"), "a", 20*time.Second)
	waitFor(t, "the worker is active", a.active)
	ctx := context.Background()
	js, _ := jetstream.New(client)
	kv, err := js.KeyValue(ctx, bus.WorkerLeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, bus.WorkerLeaseKey)
	if err != nil {
		t.Fatal(err)
	}
	var v leaseEntry
	if err := json.Unmarshal(e.Value(), &v); err != nil || v.Instance == "" {
		t.Fatalf("lease %s: %v", e.Value(), err)
	}
	v.Epoch--
	stale, _ := json.Marshal(v)
	if _, err := kv.Update(ctx, bus.WorkerLeaseKey, stale, e.Revision()); err != nil {
		t.Fatal(err)
	}
	left := time.Now()
	waitFor(t, "the worker stepped down", func() bool { return !a.active() })
	waitFor(t, "the worker is active again", a.active)
	if took := time.Since(left); took > 10*time.Second {
		t.Fatalf("active again after %s: it waited for its own lease to expire", took)
	}
	if err := createTenant(t, client, "after"); err != nil {
		t.Fatal(err)
	}
}

// A lease whose term has ended by its own content is taken over although
// NATS still keeps the entry: here the bucket's TTL is an hour (made so
// beforehand), as a replica that missed its expiry would keep it. Another
// worker's dead lease, expired a second ago, is written over the live
// worker's: it steps down, and takes the lease again at once.
func TestExpiredLeaseIsTakenWhileNATSKeepsIt(t *testing.T) {
	ns := bustest.Start(t, "ha-expired-lease")
	client, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	js, _ := jetstream.New(client)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.WorkerLeaseBucket, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a := startHAWorker(t, ns.URL(), filepath.Join(t.TempDir(), "a"), "a")
	waitFor(t, "the worker is active", a.active)
	e, err := kv.Get(ctx, bus.WorkerLeaseKey)
	if err != nil {
		t.Fatal(err)
	}
	dead, _ := json.Marshal(leaseEntry{Worker: "ghost", Epoch: 7, Instance: "ghost", Expires: time.Now().Add(-time.Second).UnixMilli()})
	if _, err := kv.Update(ctx, bus.WorkerLeaseKey, dead, e.Revision()); err != nil {
		t.Fatal(err)
	}
	left := time.Now()
	waitFor(t, "the worker stepped down", func() bool { return !a.active() })
	waitFor(t, "the worker is active again", a.active)
	if took := time.Since(left); took > 5*time.Second {
		t.Fatalf("active again after %s", took)
	}
	if err := createTenant(t, client, "after"); err != nil {
		t.Fatal(err)
	}

	// It gave the lease back when it stopped (claiming a lease at a
	// revision a replica behind the leader reported is tested in package
	// repl: TestClaimLeaseAsksTheLeader).
	a.stop()
	if e, err := kv.Get(ctx, bus.WorkerLeaseKey); err == nil {
		t.Fatalf("the stopped worker left its lease: %s", e.Value())
	}
}
