package webhook

import (
	"slices"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/tenants"
)

// The pool's bounds, step by step: a queue once, an endpoint's bound, a
// tenant's share across its endpoints, the pool; a release frees each.
func TestSlotsBounds(t *testing.T) {
	s := newSlots(5, 2, 3)
	s.reserve = 0 // TestSlotsReserve
	q := func(wh, key string) tenants.DueQueue { return tenants.DueQueue{WebhookID: wh, OrderKey: key} }
	for i, step := range []struct {
		take    bool // take, or release
		q       tenants.DueQueue
		tenant  string
		want    bool
		comment string
	}{
		{true, q("a1", "k1"), "A", true, ""},
		{true, q("a1", "k1"), "A", false, "a queue in flight once"},
		{true, q("a1", "k2"), "A", true, ""},
		{true, q("a1", "k3"), "A", false, "the endpoint's bound (2)"},
		{true, q("a2", "k1"), "A", true, "another endpoint of the tenant"},
		{true, q("a3", "k1"), "A", false, "the tenant's share (3), whatever the endpoint"},
		{true, q("b1", "k1"), "B", true, "another tenant is not held up"},
		{true, q("b1", "k2"), "B", true, ""},
		{true, q("c1", "k1"), "C", false, "the pool (5)"},
		{false, q("a1", "k1"), "", true, "a release"},
		{false, q("a1", "k1"), "", false, "released once"},
		{true, q("c1", "k1"), "C", true, "the freed slot goes to whoever takes it"},
		{true, q("a3", "k1"), "A", false, "the pool again"},
		{false, q("c1", "k1"), "", true, ""},
		{true, q("a3", "k1"), "A", true, "the tenant's share has room again"},
	} {
		var got bool
		if step.take {
			got = s.take(step.q, step.tenant)
		} else {
			got = s.release(step.q)
		}
		if got != step.want {
			t.Fatalf("step %d (%s %v %s): %v, want %v", i, map[bool]string{true: "take", false: "release"}[step.take], step.q, step.comment, got, step.want)
		}
	}
	if !s.tenantFull("B") {
		t.Fatal("a full pool leaves room")
	}
	s.release(q("b1", "k1"))
	if !s.tenantFull("A") || s.tenantFull("B") {
		t.Fatal("tenantFull: A holds its share, B does not")
	}
	if n, room := s.endpointRoom("a1"); n != 1 || room != 1 {
		t.Fatalf("endpoint a1: %d in flight, room %d", n, room)
	}
}

// The last slots of the pool go only to tenants holding none: tenants
// filling their share with endpoints that never answer leave a slot to
// each other tenant in turn.
func TestSlotsReserve(t *testing.T) {
	s := newSlots(32, 8, 8)
	if s.reserve != 8 {
		t.Fatalf("reserve %d, want 8", s.reserve)
	}
	q := func(tenant string, i int) tenants.DueQueue {
		return tenants.DueQueue{WebhookID: tenant + "-" + strconv.Itoa(i%4), OrderKey: strconv.Itoa(i)}
	}
	// Three noisy tenants take their 8 each; a fourth, 0 of its 8: the
	// last 8 slots are the reserve.
	for _, tn := range []string{"A", "B", "C"} {
		for i := range 8 {
			if !s.take(q(tn, i), tn) {
				t.Fatalf("%s's slot %d refused", tn, i)
			}
		}
	}
	if s.take(q("D", 0), "D") != true || s.take(q("D", 1), "D") != false || !s.tenantFull("D") {
		t.Fatal("a tenant holding one took more of the reserve")
	}
	// Seven more tenants get one each; then the pool is full.
	for i := range 7 {
		tn := "Q" + strconv.Itoa(i)
		if !s.take(q(tn, 0), tn) {
			t.Fatalf("%s refused with %d free", tn, 32-len(s.inflight))
		}
	}
	if s.take(q("Z", 0), "Z") || !s.tenantFull("Z") {
		t.Fatal("took a slot of a full pool")
	}
	// Pool and share equal: no reserve, one tenant may take them all.
	one := newSlots(2, 2, 2)
	if !one.take(q("A", 0), "A") || !one.take(q("A", 1), "A") {
		t.Fatal("a share equal to the pool")
	}
}

// A claim does not start a queue released after its read (it may have
// read the delivery just recorded); once the claim is done, the release
// is forgotten.
func TestSlotsReleasedSinceTheRead(t *testing.T) {
	s := newSlots(4, 4, 4)
	q := tenants.DueQueue{WebhookID: "a1", OrderKey: "k"}
	s.take(q, "A")
	_, mark := s.read()
	s.release(q)
	if s.startable(q, mark) {
		t.Fatal("started a queue released after the read")
	}
	_, later := s.read()
	if !s.startable(q, later) {
		t.Fatal("a later read may start it")
	}
	s.forget(later)
	if !s.startable(q, mark) || len(s.releasedAt) != 0 {
		t.Fatal("the release was not forgotten")
	}
}

// Tenants take turns, starting after the one served last, whatever the
// order of their ids.
func TestTurnsStartAfterTheLastTenant(t *testing.T) {
	eps := []tenants.DueEndpoint{{WebhookID: "a1", TenantID: "A"}, {WebhookID: "a2", TenantID: "A"}, {WebhookID: "b1", TenantID: "B"}, {WebhookID: "c1", TenantID: "C"}}
	for last, want := range map[string][]string{"": {"A", "B", "C"}, "A": {"B", "C", "A"}, "B": {"C", "A", "B"}, "C": {"A", "B", "C"}, "Bx": {"C", "A", "B"}} {
		var got []string
		for _, tt := range turnsAfter(eps, last) {
			got = append(got, tt.tenantID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("after %q: %v, want %v", last, got, want)
		}
	}
	if ts := turnsAfter(eps, ""); len(ts[0].endpoints) != 2 {
		t.Fatalf("tenant A's endpoints: %d", len(ts[0].endpoints))
	}
}
