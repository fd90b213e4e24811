package repl

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/bus/bustest"
	"github.com/sluicehq/sluice/internal/sqlitedb"
)

// Every argument kind a statement may bind comes back from the log as it
// was bound, and a statement's wire form stays what records already in a
// log hold.
func TestStatementsRoundTrip(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 30, 0, 123456789, time.UTC)
	in := []sqlitedb.Statement{
		{Query: `DELETE FROM tenants`},
		{Query: `INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`, Rows: true,
			Args: []any{nil, int64(-7), math.Pi, true, false, "tenant", []byte{0, 1, 2}, []byte{}, at}},
	}
	data, err := encodeStatements(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeStatements(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out[0], sqlitedb.Statement{Query: `DELETE FROM tenants`, Args: []any{}}) {
		t.Fatalf("statement 0: %#v", out[0])
	}
	if out[1].Query != in[1].Query || !out[1].Rows || !reflect.DeepEqual(out[1].Args, in[1].Args) {
		t.Fatalf("statement 1:\n got %#v\nwant %#v", out[1], in[1])
	}
	if one, _ := encodeStatements(in[:1]); string(one) != `[{"q":"DELETE FROM tenants"}]` {
		t.Fatalf("wire form %s", one)
	}
	if _, err := encodeStatements([]sqlitedb.Statement{{Query: `SELECT ?`, Args: []any{int32(1)}}}); err == nil {
		t.Fatal("an argument of a type the log cannot carry was encoded")
	}
}

// A standby that read the lease from a replica behind the leader tries the
// revision it saw; the leader's entry decides: expired, so taken; live, so
// held. The bucket's TTL is an hour (made so beforehand), as a replica
// that missed an expiry would keep the entry.
func TestClaimLeaseAsksTheLeader(t *testing.T) {
	ns := bustest.Start(t, "repl-claim")
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.WorkerLeaseBucket, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r := New(Config{NC: nc, JS: js, LeaseTTL: time.Second, Name: "a"})
	if err := r.ensureRepl(ctx, js); err != nil {
		t.Fatal(err)
	}

	dead, _ := json.Marshal(leaseValue{Worker: "ghost", Epoch: 7, Instance: "ghost", Expires: time.Now().Add(-time.Second).UnixMilli()})
	stale, err := kv.Create(ctx, bus.WorkerLeaseKey, dead)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, bus.WorkerLeaseKey, dead); err != nil {
		t.Fatal(err)
	}
	rev, err := r.claimLease(ctx, []byte(`{"worker":"a"}`), stale)
	if err != nil || rev == 0 {
		t.Fatalf("claiming an expired lease at a stale revision: %d, %v", rev, err)
	}
	live, _ := json.Marshal(leaseValue{Worker: "b", Epoch: 9, Instance: "b", Expires: time.Now().Add(time.Hour).UnixMilli()})
	if _, err := kv.Put(ctx, bus.WorkerLeaseKey, live); err != nil {
		t.Fatal(err)
	}
	if _, err := r.claimLease(ctx, []byte(`{"worker":"a"}`), rev); !errors.Is(err, errLeaseHeld) {
		t.Fatalf("claiming a live lease: %v, want errLeaseHeld", err)
	}
}
