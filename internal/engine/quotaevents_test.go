package engine

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/tenants"
)

// A key's checks report each whole percent of a calendar quota they pass,
// with the period they pass it in; IP callers, denied checks, peeks and
// limits without a calendar report nothing; a settle's charge reports
// what it passes; and the reports reach the quota stream.
func TestQuotaCrossings(t *testing.T) {
	snap, last := calendarSnapshot(t)
	ny := last.Location()
	plain, _, hash, _ := tenants.GenerateKey("ck_")
	snap.Policies[0].Tiers["pro"] = tenants.Limits{
		{Name: "minute", Algorithm: "fixed_window", Limit: 1000, Period: "1m"},
		{Name: "monthly", Algorithm: "fixed_window", Limit: 200, Calendar: "month"},
	}
	snap.ConsumerKeys = []tenants.ConsumerKeyRecord{
		{ConsumerKey: tenants.ConsumerKey{ID: "key_1", TenantID: "ten_a", Name: "k", Tier: "pro", Hash: hash}},
	}
	e := newTestEngine(t, snap)
	answerMarks(t, e)
	at := time.Date(2027, time.March, 5, 12, 0, 0, 0, ny)
	check := func(req CheckRequest) Answer {
		t.Helper()
		req.Path = "/api/x"
		a, err := e.Check(context.Background(), "ten_a", &req, at)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	pending := func() []bus.QuotaCrossing {
		e.pub.crossings.mu.Lock()
		defer e.pub.crossings.mu.Unlock()
		return append([]bus.QuotaCrossing(nil), e.pub.crossings.pending...)
	}

	check(CheckRequest{APIKey: plain, Cost: 1}) // 0.5 %: nothing
	if p := pending(); len(p) != 0 {
		t.Fatalf("half a percent reported %+v", p)
	}
	check(CheckRequest{APIKey: plain, Cost: 1, Peek: true})
	check(CheckRequest{APIKey: plain, Cost: 160}) // 1 → 161: passes 1 % … 80 %
	check(CheckRequest{IP: "192.0.2.1", Cost: 5})
	p := pending()
	start, end := time.Date(2027, time.March, 1, 0, 0, 0, 0, ny), time.Date(2027, time.April, 1, 0, 0, 0, 0, ny)
	if len(p) != 1 || p[0] != (bus.QuotaCrossing{TenantID: "ten_a", KeyID: "key_1", Policy: "monthly", Limit: "monthly", Calendar: "month",
		Quota: 200, Before: 1, After: 161, PeriodStart: start.Unix(), PeriodEnd: end.Unix(), At: at.UnixNano()}) {
		t.Fatalf("crossings %+v", p)
	}
	if a := check(CheckRequest{APIKey: plain, Cost: 100}); a.Allowed {
		t.Fatalf("161 + 100 of 200 allowed: %+v", a)
	}
	if p := pending(); len(p) != 1 {
		t.Fatalf("a denied check reported %+v", p[1:])
	}
	// A reservation of 10 whose settle charges 39 more: 161 → 171 → 210.
	// The charge reports the real use before and after it, past the quota
	// too, so it starts from 171 and no percent is reported twice.
	a := check(CheckRequest{APIKey: plain, Cost: 10, Hold: true})
	if a.Hold == nil {
		t.Fatalf("no hold: %+v", a)
	}
	if err := e.Settle(context.Background(), settled("ten_a", "rsv_1", *a.Hold, 39, at), at); err != nil {
		t.Fatal(err)
	}
	p = pending()
	if len(p) != 3 || p[1].Before != 161 || p[1].After != 171 || p[2].Before != 171 || p[2].After != 210 {
		t.Fatalf("after a reserve and a charge: %+v", p)
	}
	// Another charge past the quota crosses nothing: 210 → 215.
	if err := e.Settle(context.Background(), settled("ten_a", "rsv_4", *a.Hold, 5, at), at); err != nil {
		t.Fatal(err)
	}
	if p := pending(); len(p) != 3 {
		t.Fatalf("a charge from past the quota reported %+v", p[3:])
	}
	// A refund passes nothing.
	if err := e.Settle(context.Background(), settled("ten_a", "rsv_2", *a.Hold, -5, at), at); err != nil {
		t.Fatal(err)
	}
	if len(pending()) != 3 {
		t.Fatal("a refund reported a crossing")
	}
	if err := e.Settle(context.Background(), settled("ten_b", "rsv_3", *a.Hold, 5, at), at); err == nil {
		t.Fatal("another tenant settled a hold of ten_a's")
	}

	// Published to the quota stream.
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, e.pub.js, 1); err != nil {
		t.Fatal(err)
	}
	e.pub.flushCrossings(ctx)
	if n := e.pub.pendingCrossings(); n != 0 {
		t.Fatalf("%d crossings still pending", n)
	}
	s, err := e.pub.js.Stream(ctx, bus.QuotaStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var b bus.QuotaBatch
	if err := json.Unmarshal(m.Data, &b); err != nil || b.V != bus.WireVersion || len(b.Crossings) != 3 || b.Crossings[2].After != 210 {
		t.Fatalf("stream message %+v, %v", b, err)
	}
}

// settled is a reservation of h made at since whose settle changes its
// buckets by diff.
func settled(tenantID, id string, h reserve.Hold, diff int64, since time.Time) reserve.Reservation {
	var actual int64
	reserved := -diff
	if diff > 0 {
		reserved, actual = 0, diff
	}
	return reserve.Reservation{ID: id, TenantID: tenantID, Hold: h, Reserved: reserved, Actual: &actual, CreatedAt: since}
}
