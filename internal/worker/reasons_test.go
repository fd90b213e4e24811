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

// sumReasons adds up a timeseries' denials by reason.
func sumReasons(ps []service.TimeseriesPoint) (rl, ik, bl int64) {
	for _, p := range ps {
		rl += p.RateLimited
		ik += p.InvalidKey
		bl += p.Blocked
	}
	return
}

// Denials travel by reason from the counter stream to the analytics
// queries, and every bound keeps the split exact: a minute folded to its
// top identities while open, and roll-ups into hours and days. Top ranks
// by one reason's denials when asked.
func TestDenialReasonsSurviveFoldsAndRollups(t *testing.T) {
	e := newEnv(t, Config{Analytics: analytics.Retention{TopK: 3}})
	e.run(t)
	const minute = 29000000
	row := func(kind, id string, allowed, rl, ik, bl int64) bus.CounterRow {
		return bus.CounterRow{
			CounterKey: bus.CounterKey{TenantID: "ten_a", Policy: "p", Tier: "anonymous", IdentityKind: kind, IdentityID: id, Minute: minute},
			Allowed:    allowed, Denied: rl + ik + bl, RateLimited: rl, InvalidKey: ik, Blocked: bl,
		}
	}
	rows := []bus.CounterRow{
		row("ip", "198.51.100.1", 5, 40, 0, 0), // the heavy scraper
		row("ip", "198.51.100.2", 0, 0, 0, 7),  // blocked
		row("key", "key_revoked", 0, 0, 1, 0),  // one check with a revoked key
		row("ip", "198.51.100.3", 2, 3, 0, 2),  // some of both
	}
	// Enough small callers to take the open minute past 10 × TopK cells,
	// so it is folded as it is applied.
	for i := range 40 {
		rows = append(rows, row("ip", fmt.Sprintf("192.0.2.%d", i), 1, 1, 0, 0))
	}
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-c-1", bus.CounterBatch{V: bus.WireVersion, Node: "n1", Rows: rows})
	wantA, wantRL, wantIK, wantBL := int64(5+2+40), int64(40+3+40), int64(1), int64(7+2)
	eventually(t, 10*time.Second, "counters committed", func() bool {
		a, d := e.counterTotals(t)
		return a == wantA && d == wantRL+wantIK+wantBL
	})
	if n := countRows(t, e.db, `SELECT count(*) FROM counters`); n > 10*3 {
		t.Fatalf("%d rows in the open minute: it was not folded", n)
	}
	ctx := context.Background()
	from, to := time.Unix(minute*60, 0), time.Unix((minute+1)*60, 0)
	exact := func(when string) {
		t.Helper()
		ts, err := analytics.Timeseries(ctx, e.db, service.TimeseriesQuery{TenantID: "ten_a", From: from.Add(-48 * time.Hour), To: to.Add(48 * time.Hour), Step: "60m"})
		if err != nil {
			t.Fatal(err)
		}
		a, d := sumPoints(ts.Points)
		rl, ik, bl := sumReasons(ts.Points)
		if a != wantA || rl != wantRL || ik != wantIK || bl != wantBL || d != rl+ik+bl {
			t.Fatalf("%s: allowed %d, denied %d = %d rate_limited + %d invalid_key + %d blocked; want %d, %d + %d + %d",
				when, a, d, rl, ik, bl, wantA, wantRL, wantIK, wantBL)
		}
	}
	exact("after the open minute's fold")

	top := func(reason string) []service.TopEntry {
		t.Helper()
		es, err := analytics.Top(ctx, e.db, service.TopQuery{TenantID: "ten_a", From: from, To: to, Limit: 10, Reason: reason})
		if err != nil {
			t.Fatal(err)
		}
		return es
	}
	if es := top("blocked"); len(es) != 2 || es[0].Identity.ID != "198.51.100.2" || es[0].Blocked != 7 || es[1].Identity.ID != "198.51.100.3" || es[1].Blocked != 2 {
		t.Fatalf("top by blocked: %+v", es)
	}
	if es := top("rate_limited"); len(es) == 0 || es[0].Identity.ID != "198.51.100.1" || es[0].RateLimited != 40 || es[0].Allowed != 5 {
		t.Fatalf("top by rate_limited: %+v", es)
	}
	if _, err := analytics.Top(ctx, e.db, service.TopQuery{TenantID: "ten_a", From: from, To: to, Limit: 10, Reason: "denied; DROP TABLE counters"}); err == nil {
		t.Fatal("an unknown reason was accepted")
	}

	// Roll the minute up into an hour and the hour into a day.
	r := analytics.Retention{MinuteRows: time.Hour, HourRows: 24 * time.Hour, DayRows: 30 * 24 * time.Hour, TopK: 3}
	if _, err := analytics.Maintain(ctx, e.db, r, from.Add(3*24*time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, e.db, `SELECT count(*) FROM counter_rollups WHERE res = 1440`); n == 0 {
		t.Fatal("nothing was rolled up into a day")
	}
	exact("after the roll-ups")
}
