package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
)

// Units reach the daily usage through the counter stream exactly once,
// each on its day in the tenant's zone: in Kolkata (+05:30) the minute
// starting at 18:29 UTC is still January 31, the next is February 1. A
// key's units past the analytics' top identities stay the key's; IP
// callers count under no key; a refund subtracts.
func TestDailyUsageInTheTenantsZone(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	tn, _, _, err := e.w.store.Tenants().Create(ctx, "billing", "owner@billing.test", "a long passphrase", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.w.store.Tenants().SetTimeZone(ctx, tn.ID, "Asia/Kolkata", time.Now()); err != nil {
		t.Fatal(err)
	}
	key, _, _, err := e.w.store.Keys().Create(ctx, tn.ID, "customer", "pro", nil, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.run(t)
	lastJan := time.Date(2027, time.January, 31, 18, 29, 0, 0, time.UTC).Unix() / 60 // 23:59 in Kolkata
	row := func(policy, kind, id string, minute, allowed, denied, units int64) bus.CounterRow {
		return bus.CounterRow{CounterKey: bus.CounterKey{TenantID: tn.ID, Policy: policy, Tier: "pro", IdentityKind: kind, IdentityID: id, Minute: minute},
			Allowed: allowed, Denied: denied, Units: units}
	}
	batch := bus.CounterBatch{V: bus.WireVersion, Node: "n1", Rows: []bus.CounterRow{
		row("api", "key", key.ID, lastJan, 2, 1, 7),
		row("api", "key", key.ID, lastJan+1, 1, 0, 5),
		row("api", "ip", "192.0.2.1", lastJan, 1, 0, 1),
		row("search", "key", key.ID, lastJan+1, 3, 0, 3),
		row("api", "key", key.ID, lastJan+1, 0, 0, -2), // a refund, units alone
		row("api", "key", "key_gone", lastJan, 1, 0, 4),
		row("api", "key", "invalid_key", lastJan, 0, 9, 0),
	}}
	// Many more identities than the analytics keep: the usage rows stay.
	for i := range 50 {
		batch.Rows = append(batch.Rows, row("api", "ip", fmt.Sprintf("10.0.0.%d", i), lastJan, 0, 1, 0))
	}
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-c-1", batch)
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-c-1", batch) // a retried publish
	// Another tenant's units, and a tenant that no longer exists.
	other := bus.CounterBatch{V: bus.WireVersion, Node: "n1", Rows: []bus.CounterRow{
		{CounterKey: bus.CounterKey{TenantID: "ten_gone", Policy: "api", IdentityKind: "ip", IdentityID: "192.0.2.9", Minute: lastJan}, Allowed: 1, Units: 100},
	}}
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-c-2", other)
	eventually(t, 10*time.Second, "usage committed", func() bool {
		var n int64
		_ = e.db.QueryRow(`SELECT COALESCE(SUM(units), 0) FROM usage_daily`).Scan(&n)
		return n == 7+5+1+3-2+4
	})
	time.Sleep(300 * time.Millisecond) // the duplicate and the gone tenant's batch had their chance
	byKey, err := e.w.usage.query(ctx, service.UsageQuery{TenantID: tn.ID, From: "2027-01-31", To: "2027-02-01"})
	if err != nil {
		t.Fatal(err)
	}
	if byKey.Group != "key" || byKey.TimeZone != "Asia/Kolkata" || byKey.Total != 18 {
		t.Fatalf("usage %+v", byKey)
	}
	want := []service.UsageRow{
		{Day: "2027-01-31", KeyID: "", Policy: "api", Units: 1},
		{Day: "2027-01-31", KeyID: key.ID, KeyName: "customer", KeyPrefix: key.Prefix, Policy: "api", Units: 7},
		{Day: "2027-01-31", KeyID: "key_gone", Policy: "api", Units: 4},
		{Day: "2027-02-01", KeyID: key.ID, KeyName: "customer", KeyPrefix: key.Prefix, Policy: "api", Units: 3},
		{Day: "2027-02-01", KeyID: key.ID, KeyName: "customer", KeyPrefix: key.Prefix, Policy: "search", Units: 3},
	}
	if fmt.Sprint(byKey.Rows) != fmt.Sprint(want) {
		t.Fatalf("rows by key\n got %+v\nwant %+v", byKey.Rows, want)
	}
	byPolicy, err := e.w.usage.query(ctx, service.UsageQuery{TenantID: tn.ID, From: "2027-01-31T18:30:00Z", To: "2027-02-01", Group: "policy"})
	if err != nil {
		t.Fatal(err)
	}
	wantP := []service.UsageRow{{Day: "2027-02-01", Policy: "api", Units: 3}, {Day: "2027-02-01", Policy: "search", Units: 3}}
	if byPolicy.From != "2027-02-01" || fmt.Sprint(byPolicy.Rows) != fmt.Sprint(wantP) {
		t.Fatalf("by policy from an RFC 3339 time (February 1 in Kolkata): %+v", byPolicy)
	}

	for _, c := range []struct {
		q     service.UsageQuery
		field string
	}{
		{service.UsageQuery{From: "soon", To: "2027-01-01"}, "from"},
		{service.UsageQuery{From: "2027-01-01", To: "1 Jan"}, "to"},
		{service.UsageQuery{From: "2027-13-01", To: "2027-01-01"}, "from"},
		{service.UsageQuery{From: "2027-02-01", To: "2027-01-01"}, "to"},
		{service.UsageQuery{From: "2026-01-01", To: "2027-02-05"}, "to"},
		{service.UsageQuery{From: "2027-01-01", To: "2027-01-02", Group: "tier"}, "group"},
	} {
		c.q.TenantID = tn.ID
		_, err := e.w.usage.query(ctx, c.q)
		if errs.Code(err) != errs.Invalid || !strings.HasPrefix(errs.Message(err), c.field+":") {
			t.Errorf("%+v: %v, want an invalid request naming %s", c.q, err, c.field)
		}
	}
	if _, err := e.w.usage.query(ctx, service.UsageQuery{TenantID: tn.ID, From: "2026-01-01", To: "2027-02-04"}); err != nil {
		t.Errorf("400 days: %v", err)
	}

	// Retention: rows older than 400 days go, the rest stay.
	if _, err := e.db.Exec(`INSERT INTO usage_daily (tenant_id, day, policy, key_id, units) VALUES (?, '2025-12-01', 'api', '', 1)`, tn.ID); err != nil {
		t.Fatal(err)
	}
	n, err := e.w.usage.prune(ctx, time.Date(2027, time.February, 1, 0, 0, 0, 0, time.UTC))
	if err != nil || n != 1 {
		t.Fatalf("pruned %d rows (%v), want the one older than 400 days", n, err)
	}
}

// A range whose answer would pass MaxUsageRows is refused, naming to, and
// the same days per policy, a few rows, are answered.
func TestDailyUsageRowCap(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	tn, _, _, err := e.w.store.Tenants().Create(ctx, "big", "owner@big.test", "a long passphrase", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tx, err := e.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	st, err := tx.Prepare(`INSERT INTO usage_daily (tenant_id, day, policy, key_id, units) VALUES (?, ?, 'api', ?, 1)`)
	if err != nil {
		t.Fatal(err)
	}
	for i := range service.MaxUsageRows + 1 {
		day := "2027-01-01"
		if i%2 == 1 {
			day = "2027-01-02"
		}
		if _, err := st.Exec(tn.ID, day, fmt.Sprintf("key_%06d", i)); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	_, err = e.w.usage.query(ctx, service.UsageQuery{TenantID: tn.ID, From: "2027-01-01", To: "2027-01-02"})
	if errs.Code(err) != errs.Invalid || !strings.HasPrefix(errs.Message(err), "to: ") {
		t.Fatalf("a range of %d rows: %v", service.MaxUsageRows+1, err)
	}
	one, err := e.w.usage.query(ctx, service.UsageQuery{TenantID: tn.ID, From: "2027-01-01", To: "2027-01-01"})
	if err != nil || len(one.Rows) != service.MaxUsageRows/2+1 {
		t.Fatalf("one day: %d rows, %v", len(one.Rows), err)
	}
	byPolicy, err := e.w.usage.query(ctx, service.UsageQuery{TenantID: tn.ID, From: "2027-01-01", To: "2027-01-02", Group: "policy"})
	if err != nil || len(byPolicy.Rows) != 2 || byPolicy.Total != service.MaxUsageRows+1 {
		t.Fatalf("per policy: %+v, %v", byPolicy.Rows, err)
	}
}

// insertUsage writes usage rows straight into usage_daily, as applied
// counters would have left them.
func insertUsage(t *testing.T, e *env, tenant string, rows []service.UsageRow) {
	t.Helper()
	tx, err := e.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	st, err := tx.Prepare(`INSERT INTO usage_daily (tenant_id, day, policy, key_id, units) VALUES (?, ?, ?, ?, ?)`)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if _, err := st.Exec(tenant, r.Day, r.Policy, r.KeyID, r.Units); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// pages reads every page of q, checking each page's total, and answers
// the rows and how many pages they took.
func pages(t *testing.T, e *env, q service.UsageQuery, total int64) ([]service.UsageRow, int) {
	t.Helper()
	var all []service.UsageRow
	n := 0
	for {
		u, err := e.w.usage.query(context.Background(), q)
		if err != nil {
			t.Fatalf("page %d: %v", n+1, err)
		}
		n++
		if u.Total != total || !u.Paged || len(u.Rows) > q.Limit {
			t.Fatalf("page %d: total %d, paged %v, %d rows; want the range's total %d and at most %d rows", n, u.Total, u.Paged, len(u.Rows), total, q.Limit)
		}
		all = append(all, u.Rows...)
		if u.NextCursor == "" {
			return all, n
		}
		if len(u.Rows) != q.Limit {
			t.Fatalf("page %d: %d rows and a next cursor; a page is full before it has a next", n, len(u.Rows))
		}
		q.Cursor = u.NextCursor
	}
}

// The export is paged and never drops its tail: rows of 0 units (refunds
// that gave back all that was used) take no room in a page, every other
// row comes exactly once in order, and every page's total is the range's.
func TestDailyUsagePages(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	tn, _, _, err := e.w.store.Tenants().Create(ctx, "paged", "owner@paged.test", "a long passphrase", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var rows, wantKey []service.UsageRow
	perPolicy := map[[2]string]int64{}
	var total int64
	add := func(r service.UsageRow) {
		rows = append(rows, r)
		total += r.Units
		if r.Units != 0 {
			wantKey = append(wantKey, r)
		}
		perPolicy[[2]string{r.Day, r.Policy}] += r.Units
	}
	for d := 1; d <= 4; d++ {
		day := fmt.Sprintf("2027-03-%02d", d)
		for k := range 9 {
			for _, p := range []string{"api", "search"} {
				units := int64((d*k+len(p))%5) - 1 // -1 to 3, a fifth of them 0
				add(service.UsageRow{Day: day, KeyID: fmt.Sprintf("key_%d", k), Policy: p, Units: units})
			}
		}
	}
	// The last day's search units add up to 0: no row by policy.
	add(service.UsageRow{Day: "2027-03-05", KeyID: "key_0", Policy: "api", Units: 2})
	add(service.UsageRow{Day: "2027-03-05", KeyID: "key_0", Policy: "search", Units: 4})
	add(service.UsageRow{Day: "2027-03-05", KeyID: "key_1", Policy: "search", Units: -4})
	insertUsage(t, e, tn.ID, rows)
	var wantPolicy []service.UsageRow
	for d := 1; d <= 5; d++ {
		for _, p := range []string{"api", "search"} {
			day := fmt.Sprintf("2027-03-%02d", d)
			if u := perPolicy[[2]string{day, p}]; u != 0 {
				wantPolicy = append(wantPolicy, service.UsageRow{Day: day, Policy: p, Units: u})
			}
		}
	}
	if len(wantKey) < 3*7 || len(wantKey) == len(rows) || len(wantPolicy) != 9 {
		t.Fatalf("the fixture: %d rows with units of %d, %d by policy", len(wantKey), len(rows), len(wantPolicy))
	}
	q := service.UsageQuery{TenantID: tn.ID, From: "2027-03-01", To: "2027-03-05", Limit: 7}
	got, n := pages(t, e, q, total)
	if fmt.Sprint(got) != fmt.Sprint(wantKey) || n != (len(wantKey)+6)/7 {
		t.Fatalf("by key in pages of 7: %d pages\n got %v\nwant %v", n, got, wantKey)
	}
	q.Group = service.UsageByPolicy
	q.Limit = 3
	if got, _ := pages(t, e, q, total); fmt.Sprint(got) != fmt.Sprint(wantPolicy) {
		t.Fatalf("by policy in pages of 3:\n got %v\nwant %v", got, wantPolicy)
	}

	// Bad pages: each names its field.
	first, err := e.w.usage.query(ctx, service.UsageQuery{TenantID: tn.ID, From: "2027-03-01", To: "2027-03-05", Limit: 2})
	if err != nil || first.NextCursor == "" {
		t.Fatalf("a first page of 2: %+v, %v", first, err)
	}
	for _, c := range []struct {
		q     service.UsageQuery
		field string
	}{
		{service.UsageQuery{Limit: -1}, "limit"},
		{service.UsageQuery{Limit: service.MaxUsageRows + 1}, "limit"},
		{service.UsageQuery{Limit: 5, Cursor: "not a cursor"}, "cursor"},
		{service.UsageQuery{Limit: 5, Cursor: strings.Repeat("A", 2000)}, "cursor"},
		{service.UsageQuery{Limit: 5, Cursor: first.NextCursor, Group: service.UsageByPolicy}, "cursor"},
		{service.UsageQuery{Cursor: first.NextCursor}, "cursor"},
	} {
		c.q.TenantID, c.q.From, c.q.To = tn.ID, "2027-03-01", "2027-03-05"
		if _, err := e.w.usage.query(ctx, c.q); errs.Code(err) != errs.Invalid || !strings.HasPrefix(errs.Message(err), c.field+":") {
			t.Errorf("%+v: %v, want an invalid request naming %s", c.q, err, c.field)
		}
	}
}

// At the default page size (the API's, MaxUsageRows), a range whose rows
// of 0 units come first still answers every other row: the whole-range
// answer of a server older than paging holds all MaxUsageRows of them,
// and one more row makes it refuse (never cut), while pages carry the
// rest in a second page.
func TestDailyUsageDefaultPageKeepsItsTail(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	tn, _, _, err := e.w.store.Tenants().Create(ctx, "big", "owner@big.test", "a long passphrase", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]service.UsageRow, 0, service.MaxUsageRows+2000)
	var total int64
	for i := range 2000 {
		rows = append(rows, service.UsageRow{Day: "2027-01-01", KeyID: fmt.Sprintf("key_0_%06d", i), Policy: "api"})
	}
	for i := range service.MaxUsageRows {
		day := "2027-01-01"
		if i%2 == 1 {
			day = "2027-01-02"
		}
		u := int64(i%3 + 1)
		rows = append(rows, service.UsageRow{Day: day, KeyID: fmt.Sprintf("key_1_%06d", i), Policy: "api", Units: u})
		total += u
	}
	insertUsage(t, e, tn.ID, rows)
	whole, err := e.w.usage.query(ctx, service.UsageQuery{TenantID: tn.ID, From: "2027-01-01", To: "2027-01-03"})
	if err != nil || len(whole.Rows) != service.MaxUsageRows || whole.Total != total || whole.Paged || whole.NextCursor != "" {
		t.Fatalf("the whole range: %d rows, total %d (%v), want %d rows and %d", len(whole.Rows), whole.Total, err, service.MaxUsageRows, total)
	}
	if last := whole.Rows[len(whole.Rows)-1]; last.Day != "2027-01-02" {
		t.Fatalf("the whole range ends on %s, want its last day", last.Day)
	}
	insertUsage(t, e, tn.ID, []service.UsageRow{{Day: "2027-01-03", Policy: "api", Units: 5}})
	total += 5
	if _, err := e.w.usage.query(ctx, service.UsageQuery{TenantID: tn.ID, From: "2027-01-01", To: "2027-01-03"}); errs.Code(err) != errs.Invalid {
		t.Fatalf("the whole range past %d rows: %v, want a refusal", service.MaxUsageRows, err)
	}
	got, n := pages(t, e, service.UsageQuery{TenantID: tn.ID, From: "2027-01-01", To: "2027-01-03", Limit: service.MaxUsageRows}, total)
	var sum int64
	for _, r := range got {
		sum += r.Units
	}
	if n != 2 || len(got) != service.MaxUsageRows+1 || sum != total || got[len(got)-1].Day != "2027-01-03" {
		t.Fatalf("pages of %d: %d pages, %d rows summing to %d, want 2 pages, %d rows and %d", service.MaxUsageRows, n, len(got), sum, service.MaxUsageRows+1, total)
	}

	// The dashboard's download: every page in one CSV file.
	var file strings.Builder
	cw := service.NewUsageCSV(&file)
	if err := service.UsagePages(ctx, usageReader(e.w.usage.query), service.UsageQuery{TenantID: tn.ID, From: "2027-01-01", To: "2027-01-03"},
		func(u service.Usage) error { return cw.Write(u.Rows) }); err != nil {
		t.Fatal(err)
	}
	if err := cw.Flush(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(file.String(), "\n"), "\n")
	if len(lines) != service.MaxUsageRows+2 || lines[0] != strings.Join(service.UsageCSVHeader, ",") || lines[len(lines)-1] != "2027-01-03,,,,api,5" {
		t.Fatalf("the download: %d lines, the last %q", len(lines), lines[len(lines)-1])
	}
}

// usageReader serves service.UsagePages from the worker's own answer.
type usageReader func(context.Context, service.UsageQuery) (service.Usage, error)

func (f usageReader) Usage(ctx context.Context, q service.UsageQuery) (service.Usage, error) {
	return f(ctx, q)
}

// Without from and to, usage is the current month in the tenant's zone;
// one end given keeps it and defaults the other.
func TestUsageRangeDefaults(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Skip(err)
	}
	now := time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC) // December 1st in Tokyo
	for _, tc := range []struct {
		from, to         string
		loc              *time.Location
		wantFrom, wantTo string
	}{
		{"", "", time.UTC, "2026-11-01", "2026-11-30"},
		{"", "", tokyo, "2026-12-01", "2026-12-31"},
		{"2026-11-10", "", time.UTC, "2026-11-10", "2026-11-30"},
		{"", "2026-10-12", time.UTC, "2026-10-01", "2026-10-12"},
		{"2026-09-01", "2026-09-03", tokyo, "2026-09-01", "2026-09-03"},
	} {
		from, to, err := usageRange(tc.from, tc.to, tc.loc, now)
		if err != nil || from.Format(time.DateOnly) != tc.wantFrom || to.Format(time.DateOnly) != tc.wantTo {
			t.Errorf("%q–%q in %s: %s–%s %v, want %s–%s", tc.from, tc.to, tc.loc, from.Format(time.DateOnly), to.Format(time.DateOnly), err, tc.wantFrom, tc.wantTo)
		}
	}
	if _, _, err := usageRange("soon", "", time.UTC, now); err == nil {
		t.Error("a from that is no date: no error")
	}
}
