package worker

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/worker/analytics"
)

// Through a real NATS stream and a real SQLite file: one tenant's minute
// with many more identities than the open bound keeps exact totals, a
// bounded number of rows, and its heavy callers exactly, even though they
// came in every batch and the small ones were folded in between.
func TestOpenMinuteStaysBoundedAndExact(t *testing.T) {
	e := newEnv(t, Config{Analytics: analytics.Retention{TopK: 5}})
	e.run(t)
	const minute = 29000000
	var allowed, denied int64
	for b := range 8 {
		batch := bus.CounterBatch{V: bus.WireVersion, Node: "n1"}
		add := func(policy, id string, a, d int64) {
			batch.Rows = append(batch.Rows, bus.CounterRow{
				CounterKey: bus.CounterKey{TenantID: "ten_a", Policy: policy, Tier: "anonymous", IdentityKind: "ip", IdentityID: id, Minute: minute},
				Allowed:    a, Denied: d,
			})
			allowed += a
			denied += d
		}
		// Three heavy callers in every batch...
		add("p", "203.0.113.1", 1, 100)
		add("p", "203.0.113.2", 2, 90)
		add("q", "203.0.113.3", 0, 80)
		// ...and 40 new small ones per batch.
		for i := range 40 {
			add("p", fmt.Sprintf("10.%d.0.%d", b, i), 1, 1)
		}
		e.publish(t, bus.CounterSubjectPrefix+"n1", fmt.Sprintf("n1-c-%d", b), batch)
	}
	eventually(t, 10*time.Second, "every batch committed", func() bool {
		a, d := e.counterTotals(t)
		return a == allowed && d == denied
	})
	// A last, small batch that fits the open bound: the minute now holds
	// more identities than its top 5.
	last := bus.CounterBatch{V: bus.WireVersion, Node: "n1"}
	for i := range 10 {
		last.Rows = append(last.Rows, bus.CounterRow{
			CounterKey: bus.CounterKey{TenantID: "ten_a", Policy: "p", Tier: "anonymous", IdentityKind: "ip", IdentityID: fmt.Sprintf("10.99.0.%d", i), Minute: minute},
			Denied:     1,
		})
		denied++
	}
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-c-last", last)
	eventually(t, 10*time.Second, "the last batch committed", func() bool {
		a, d := e.counterTotals(t)
		return a == allowed && d == denied
	})
	var rows int
	if err := e.db.QueryRow(`SELECT count(*) FROM counters`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows > analytics.OpenCellsPerK*5+2 {
		t.Fatalf("%d rows for one tenant's minute, want at most %d", rows, analytics.OpenCellsPerK*5+2)
	}
	ctx := context.Background()
	from := time.Unix(minute*60, 0)
	top, err := analytics.Top(ctx, e.db, service.TopQuery{TenantID: "ten_a", From: from, To: from.Add(time.Minute), Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id   string
		a, d int64
	}{{"203.0.113.1", 8, 800}, {"203.0.113.2", 16, 720}, {"203.0.113.3", 0, 640}}
	if len(top) != 3 {
		t.Fatalf("top = %+v", top)
	}
	for i, w := range want {
		if top[i].Identity.ID != w.id || top[i].Allowed != w.a || top[i].Denied != w.d {
			t.Fatalf("top[%d] = %+v, want %s with %d/%d exactly", i, top[i], w.id, w.a, w.d)
		}
	}

	// Once the minute is closed, maintenance folds it to its top 5.
	st, err := analytics.Maintain(ctx, e.db, analytics.Retention{TopK: 5}, from.Add(10*time.Minute), nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.MinutesFolded != 1 {
		t.Fatalf("maintenance folded %d minutes, want 1", st.MinutesFolded)
	}
	if a, d := e.counterTotals(t); a != allowed || d != denied {
		t.Fatalf("totals after folding %d/%d, want %d/%d", a, d, allowed, denied)
	}
	var ids int
	if err := e.db.QueryRow(`SELECT count(DISTINCT identity_kind || identity_id) FROM counters WHERE identity_kind != 'others'`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	if ids != 5 {
		t.Fatalf("%d identities after folding, want 5", ids)
	}
	ts, err := analytics.Timeseries(ctx, e.db, service.TimeseriesQuery{TenantID: "ten_a", From: from, To: from.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if p := ts.Points[0]; p.Allowed != allowed || p.Denied != denied {
		t.Fatalf("timeseries %+v, want %d/%d: the others cells count in totals", p, allowed, denied)
	}
	top, _ = analytics.Top(ctx, e.db, service.TopQuery{TenantID: "ten_a", From: from, To: from.Add(time.Minute), Limit: 100, IncludeAllowed: true})
	for _, en := range top {
		if en.Identity.Kind == bus.CounterOthers {
			t.Fatalf("top lists the others aggregate: %+v", en)
		}
	}
}

// insertMinute writes one minute row as applyCounters would.
func insertMinute(t *testing.T, db *sql.DB, tenant string, minute int64, policy, kind, id string, a, d int64) {
	t.Helper()
	if _, err := db.Exec(`INSERT INTO counters (tenant_id, minute, policy, tier, identity_kind, identity_id, allowed, denied)
		VALUES (?, ?, ?, 'anonymous', ?, ?, ?, ?)
		ON CONFLICT (tenant_id, minute, policy, tier, identity_kind, identity_id)
		DO UPDATE SET allowed = allowed + excluded.allowed, denied = denied + excluded.denied`, tenant, minute, policy, kind, id, a, d); err != nil {
		t.Fatal(err)
	}
}

type snapshot struct {
	byDay, byHour []service.TimeseriesPoint
	top           []service.TopEntry
}

func takeSnapshot(t *testing.T, w *Worker, tenant string, from, to time.Time) snapshot {
	t.Helper()
	ctx := context.Background()
	var s snapshot
	day, err := analytics.Timeseries(ctx, w.db, service.TimeseriesQuery{TenantID: tenant, From: from, To: to, Step: "1440m"})
	if err != nil {
		t.Fatal(err)
	}
	hour, err := analytics.Timeseries(ctx, w.db, service.TimeseriesQuery{TenantID: tenant, From: from, To: to, Step: "60m"})
	if err != nil {
		t.Fatal(err)
	}
	s.byDay, s.byHour = day.Points, hour.Points
	if s.top, err = analytics.Top(ctx, w.db, service.TopQuery{TenantID: tenant, From: from, To: to, Limit: 1000, IncludeAllowed: true}); err != nil {
		t.Fatal(err)
	}
	return s
}

func sumPoints(ps []service.TimeseriesPoint) (a, d int64) {
	for _, p := range ps {
		a += p.Allowed
		d += p.Denied
	}
	return
}

func countRows(t *testing.T, db *sql.DB, q string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Roll-ups keep totals: minute rows become hour rows and hour rows day
// rows, the timeseries and top answer the same totals over ranges that
// span day, hour and minute rows, first and last seen stay exact to the
// minute, and day rows leave after their retention.
func TestRollupsKeepTotalsOverMixedGranularities(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	r := analytics.Retention{MinuteRows: time.Hour, HourRows: 24 * time.Hour, DayRows: 3 * 24 * time.Hour, TopK: 2}
	day0 := int64(29000000/1440) * 1440 // a day's first minute
	// Three days of traffic, a few minutes every 5 hours, from 4 callers
	// of tenant A (one heavy), and one caller of tenant B.
	var minutes []int64
	for m := day0 + 7; m < day0+3*1440; m += 5*60 + 13 {
		minutes = append(minutes, m)
	}
	var wantA, wantD int64
	for i, m := range minutes {
		insertMinute(t, e.db, "ten_a", m, "p", "ip", "198.51.100.1", 1, 50)
		insertMinute(t, e.db, "ten_a", m, "q", "ip", "198.51.100.1", 0, 5)
		insertMinute(t, e.db, "ten_a", m, "p", "key", "key_2", 3, 20)
		insertMinute(t, e.db, "ten_a", m, "p", "ip", fmt.Sprintf("192.0.2.%d", i%3), 2, 1)
		insertMinute(t, e.db, "ten_b", m, "p", "ip", "198.51.100.1", 4, 4)
		wantA += 1 + 3 + 2
		wantD += 55 + 20 + 1
	}
	minutes = append(minutes, day0+3*1440+20) // within the last hour: stays a minute row
	for _, m := range minutes[len(minutes)-1:] {
		insertMinute(t, e.db, "ten_a", m, "p", "ip", "198.51.100.1", 1, 50)
		wantA++
		wantD += 50
	}
	now := time.Unix((day0+3*1440)*60, 0).Add(30 * time.Minute)
	from, to := time.Unix(day0*60, 0), now.Add(time.Hour)
	before := takeSnapshot(t, e.w, "ten_a", from, to)
	if a, d := sumPoints(before.byDay); a != wantA || d != wantD {
		t.Fatalf("before roll-up: %d/%d, want %d/%d", a, d, wantA, wantD)
	}

	st, err := analytics.Maintain(ctx, e.db, r, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.MinuteRowsUp == 0 || st.HourRowsUp == 0 {
		t.Fatalf("maintenance %+v rolled nothing up", st)
	}
	if n := countRows(t, e.db, `SELECT count(*) FROM counter_rollups WHERE res = 1440`); n == 0 {
		t.Fatal("no day rows")
	}
	if n := countRows(t, e.db, `SELECT count(*) FROM counter_rollups WHERE res = 60`); n == 0 {
		t.Fatal("no hour rows")
	}
	if n := countRows(t, e.db, `SELECT count(*) FROM counters`); n == 0 {
		t.Fatal("no minute rows left: the test would not span three granularities")
	}
	after := takeSnapshot(t, e.w, "ten_a", from, to)
	if fmt.Sprint(after.byDay) != fmt.Sprint(before.byDay) {
		t.Fatalf("per-day timeseries changed:\nbefore %v\nafter  %v", before.byDay, after.byDay)
	}
	// Hour steps are the same wherever rows are hours or minutes (days 0
	// and 1 are day rows now: each day's total moves to its first hour).
	if fmt.Sprint(after.byHour[48:]) != fmt.Sprint(before.byHour[48:]) {
		t.Fatalf("per-hour timeseries changed after day 1:\nbefore %v\nafter  %v", before.byHour[48:], after.byHour[48:])
	}
	if a, _ := sumPoints(after.byHour[:24]); after.byHour[0].Allowed != a || a != before.byDay[0].Allowed {
		t.Fatalf("day 0's total is not all in its first hour: %v", after.byHour[:24])
	}
	if a, d := sumPoints(after.byHour); a != wantA || d != wantD {
		t.Fatalf("after roll-up, hourly sum %d/%d, want %d/%d", a, d, wantA, wantD)
	}
	// The two heavy identities are kept exactly (with their first and last
	// minutes); the small ones are in "others", which top never lists.
	if len(after.top) != 2 || fmt.Sprint(after.top) != fmt.Sprint(before.top[:2]) {
		t.Fatalf("top after roll-up:\n%+v\nwant the first two of\n%+v", after.top, before.top)
	}
	if got := after.top[0].FirstSeen; !got.Equal(time.Unix(minutes[0]*60, 0)) {
		t.Fatalf("first seen %v, want %v", got, time.Unix(minutes[0]*60, 0))
	}
	// Tenant B is untouched by A's roll-up.
	b := takeSnapshot(t, e.w, "ten_b", from, to)
	if a, d := sumPoints(b.byDay); a != int64(4*(len(minutes)-1)) || d != int64(4*(len(minutes)-1)) {
		t.Fatalf("tenant B: %d/%d", a, d)
	}
	// A second pass at the same instant changes nothing.
	if st, err := analytics.Maintain(ctx, e.db, r, now, nil); err != nil || st.MinuteRowsUp+st.HourRowsUp != 0 {
		t.Fatalf("second pass: %+v, %v", st, err)
	}
	if again := takeSnapshot(t, e.w, "ten_a", from, to); fmt.Sprint(again) != fmt.Sprint(after) {
		t.Fatal("a second maintenance pass changed the answers")
	}

	// Four days later only the last day rows are within retention; a week
	// later nothing is left.
	if _, err := analytics.Maintain(ctx, e.db, r, now.Add(7*24*time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, e.db, `SELECT (SELECT count(*) FROM counters) + (SELECT count(*) FROM counter_rollups)`); n != 0 {
		t.Fatalf("%d rows left after every retention passed", n)
	}
}

// Old analytics and swept buckets give their space back: the file shrinks.
func TestMaintenanceShrinksTheFile(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	tx, err := e.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30000 {
		if _, err := tx.Exec(`INSERT INTO counters (tenant_id, minute, policy, tier, identity_kind, identity_id, allowed, denied)
			VALUES ('ten_a', ?, 'policy-name', 'anonymous', 'ip', ?, 1, 1)`, 1000+i%50, fmt.Sprintf("2001:db8:%x::/64", i)); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("ten_a/pol/ip:%d", i)
		if _, err := tx.Exec(`INSERT INTO buckets (key, tenant_id, part, state, full_at, seq, updated_at) VALUES (?, 'ten_a', ?, ?, 1, 1, 1)`,
			key, bus.Partition([]byte(key)), fmt.Sprintf(`{"limits":[{"a":"token_bucket","l":10,"p":60000000000}],"states":[{"t":%d}]}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(filepath.Dir(dbPath(t, e.db)), "sluice.db")
	full := statSize(t, path)
	e.w.sweeper.sweep(ctx) // the buckets are full and old: all go
	if n := countRows(t, e.db, `SELECT count(*) FROM buckets_live`); n != 0 {
		t.Fatalf("%d buckets left after the sweep", n)
	}
	st, err := analytics.Maintain(ctx, e.db, analytics.Retention{}, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, e.db, `SELECT (SELECT count(*) FROM counters) + (SELECT count(*) FROM counter_rollups)`); n != 0 {
		t.Fatalf("%d analytics rows left after a year", n)
	}
	after := statSize(t, path)
	if st.FreedPages == 0 || after > full/4 {
		t.Fatalf("file %d bytes before, %d after (%d pages freed): want it to shrink to under a quarter", full, after, st.FreedPages)
	}
	t.Logf("file %d → %d bytes, %d pages freed", full, after, st.FreedPages)
}

func dbPath(t *testing.T, db *sql.DB) string {
	t.Helper()
	var seq int
	var name, file string
	if err := db.QueryRow(`PRAGMA database_list`).Scan(&seq, &name, &file); err != nil {
		t.Fatal(err)
	}
	return file
}

func statSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
