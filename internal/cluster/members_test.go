package cluster

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/bus/bustest"
)

// A member's entry reads as bus.MemberEntry, the worker's view of it: its
// node, a live expiry, and that it compiles concurrency limits, with a
// direct listener or without one.
func TestMemberEntryReadsAsBusMemberEntry(t *testing.T) {
	ns := bustest.Start(t, "cluster-test")
	var loads atomic.Int64
	plain := member(t, ns.URL(), "plain", &loads)
	defer plain.Close(context.Background())
	direct := memberWith(t, ns.URL(), Config{Node: "direct", LeaseTTL: time.Second, RenewInterval: 200 * time.Millisecond,
		Margin: 200 * time.Millisecond, Direct: &DirectConfig{Listen: "127.0.0.1:0"}}, &loads)
	defer direct.Close(context.Background())
	if err := direct.Serve(func([]Item, []Result) {}); err != nil {
		t.Fatal(err)
	}

	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ms, err := bus.ReadMembers(context.Background(), js, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bus.MemberEntry{}
		for _, m := range ms {
			got[m.Node] = m
		}
		p, d := got["plain"], got["direct"]
		if p.Live(time.Now()) && d.Live(time.Now()) && d.FwdLeases {
			if !p.CompilesConcurrency() || !p.Concurrency || p.FwdLeases || !d.CompilesConcurrency() {
				t.Fatalf("entries %+v", ms)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("entries %+v", ms)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
