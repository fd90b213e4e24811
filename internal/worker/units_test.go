package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/worker/analytics"
)

// The units decisions consumed reach the minute counters beside the
// decisions — those counted where the answer was given, those an owner
// counted alone (a forwarded check's, a settle's charge or refund) — and
// keep their total through the open minute's fold, the close's fold and
// the roll-ups into hours and days; a caller with units alone is no caller
// in the top list.
func TestUnitsInTheMinuteCountersAndRollups(t *testing.T) {
	e := newEnv(t, Config{Analytics: analytics.Retention{TopK: 3}})
	e.run(t)
	const minute = 29000000
	row := func(id string, allowed, denied, units int64) bus.CounterRow {
		return bus.CounterRow{CounterKey: bus.CounterKey{TenantID: "ten_a", Policy: "p", Tier: "pro", IdentityKind: "key", IdentityID: id, Minute: minute},
			Allowed: allowed, Denied: denied, RateLimited: denied, Units: units}
	}
	rows := []bus.CounterRow{
		row("key_a", 10, 2, 0),   // decided on one server...
		row("key_a", 0, 0, 250),  // ...its units counted by the owner
		row("key_b", 3, 0, 30),   // decided and counted in one place
		row("key_c", 0, 0, -40),  // a settle's refund alone
		row("key_d", 0, 0, 1000), // a forwarded check's units, its decision in a later batch
	}
	for i := range 40 { // past 10 × TopK cells: folded as it is applied
		rows = append(rows, row(fmt.Sprintf("key_%02d", i), 1, 0, 7))
	}
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-c-1", bus.CounterBatch{V: bus.WireVersion, Node: "n1", Rows: rows})
	e.publish(t, bus.CounterSubjectPrefix+"n2", "n2-c-1", bus.CounterBatch{V: bus.WireVersion, Node: "n2", Rows: []bus.CounterRow{row("key_d", 1, 0, 0)}})
	const wantUnits = 250 + 30 - 40 + 1000 + 40*7
	ctx := context.Background()
	from, to := time.Unix(minute*60, 0), time.Unix((minute+1)*60, 0)
	units := func() (u, a int64) {
		ts, err := analytics.Timeseries(ctx, e.db, service.TimeseriesQuery{TenantID: "ten_a", From: from.Add(-48 * time.Hour), To: to.Add(48 * time.Hour), Step: "60m"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ts.Points {
			u, a = u+p.Units, a+p.Allowed
		}
		return u, a
	}
	eventually(t, 10*time.Second, "counters committed", func() bool { u, a := units(); return u == wantUnits && a == 10+3+1+40 })
	top, err := analytics.Top(ctx, e.db, service.TopQuery{TenantID: "ten_a", From: from, To: to, Limit: 100, IncludeAllowed: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range top {
		if en.Allowed+en.Denied == 0 {
			t.Fatalf("a caller with units alone is listed: %+v", en)
		}
	}
	r := analytics.Retention{MinuteRows: time.Hour, HourRows: 24 * time.Hour, DayRows: 30 * 24 * time.Hour, TopK: 3}
	if _, err := analytics.Maintain(ctx, e.db, r, from.Add(3*24*time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, e.db, `SELECT count(*) FROM counter_rollups WHERE res = 1440`); n == 0 {
		t.Fatal("nothing was rolled up into a day")
	}
	if u, a := units(); u != wantUnits || a != 10+3+1+40 {
		t.Fatalf("after the roll-ups: %d units and %d allowed, want %d and %d", u, a, wantUnits, 54)
	}
}
