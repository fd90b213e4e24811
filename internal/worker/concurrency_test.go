package worker

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/worker/analytics"
)

// Denials by a concurrency limit have their own column, beside
// rate_limited, through the open minute's fold, the roll-ups into hours
// and days, the time series and the top list (which ranks by them).
func TestConcurrencyDenialsInTheCounters(t *testing.T) {
	e := newEnv(t, Config{Analytics: analytics.Retention{TopK: 3}})
	e.run(t)
	const minute = 29000100
	row := func(id string, rl, cl int64) bus.CounterRow {
		return bus.CounterRow{CounterKey: bus.CounterKey{TenantID: "ten_a", Policy: "p", Tier: "pro", IdentityKind: "key", IdentityID: id, Minute: minute},
			Allowed: 1, Denied: rl + cl, RateLimited: rl, ConcurrencyLimited: cl}
	}
	rows := []bus.CounterRow{row("key_a", 0, 5), row("key_b", 2, 1), row("key_a", 1, 3)}
	for i := range 40 { // past 10 × TopK cells: folded as it is applied
		rows = append(rows, row(fmt.Sprintf("key_%02d", i), 0, 1))
	}
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-cl-1", bus.CounterBatch{V: bus.WireVersion, Node: "n1", Rows: rows})
	const wantCL, wantRL = 5 + 1 + 3 + 40, 2 + 1
	ctx := context.Background()
	from, to := time.Unix(minute*60, 0), time.Unix((minute+1)*60, 0)
	sums := func() (cl, rl, d int64) {
		ts, err := analytics.Timeseries(ctx, e.db, service.TimeseriesQuery{TenantID: "ten_a", From: from.Add(-48 * time.Hour), To: to.Add(48 * time.Hour), Step: "60m"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ts.Points {
			cl, rl, d = cl+p.ConcurrencyLimited, rl+p.RateLimited, d+p.Denied
		}
		return cl, rl, d
	}
	eventually(t, 10*time.Second, "counters committed", func() bool { cl, rl, d := sums(); return cl == wantCL && rl == wantRL && d == wantCL+wantRL })
	top, err := analytics.Top(ctx, e.db, service.TopQuery{TenantID: "ten_a", From: from, To: to, Limit: 1, Reason: "concurrency_limited"})
	if err != nil || len(top) != 1 || top[0].Identity.ID != "key_a" || top[0].ConcurrencyLimited != 8 {
		t.Fatalf("top by concurrency_limited: %+v %v", top, err)
	}
	r := analytics.Retention{MinuteRows: time.Hour, HourRows: 24 * time.Hour, DayRows: 30 * 24 * time.Hour, TopK: 3}
	if _, err := analytics.Maintain(ctx, e.db, r, from.Add(3*24*time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	if cl, rl, d := sums(); cl != wantCL || rl != wantRL || d != wantCL+wantRL {
		t.Fatalf("after the roll-ups: %d concurrency_limited, %d rate_limited, %d denied", cl, rl, d)
	}
}

// The policy ranking splits a policy's denials by a concurrency limit out
// of its denials, through the minute's fold and the roll-ups.
func TestPolicyRankSplitsConcurrencyDenials(t *testing.T) {
	e := newEnv(t, Config{Analytics: analytics.Retention{TopK: 2}})
	e.run(t)
	client := bus.NewClient(e.nc, 5*time.Second)
	op := tenants.WithActor(context.Background(), tenants.OperatorTokenActor())
	var ten service.Written[service.TenantCreated]
	eventually(t, 10*time.Second, "worker answering", func() bool {
		return bus.CallInto(op, client, bus.OpTenantCreate, bus.TenantCreate{Name: "alpha", OwnerEmail: "owner@alpha.test", OwnerPassword: "correct horse battery"}, &ten) == nil
	})
	tenantID := ten.Result.Tenant.ID
	var pol service.Written[tenants.Policy]
	p := tenants.Policy{Name: "llm", Path: "/llm", Tiers: map[string]tenants.Limits{"pro": {
		{Name: "rate", Algorithm: tenants.TokenBucket, Limit: 100, Period: "60s"}, {Name: "slots", Algorithm: tenants.Concurrency, Limit: 10}}}}
	if err := bus.CallInto(op, client, bus.OpPolicyCreate, bus.PolicyWrite{TenantID: tenantID, Policy: p}, &pol); err != nil {
		t.Fatal(err)
	}
	const minute = 29000200
	var rows []bus.CounterRow
	for i := range 30 { // past 10 × TopK cells: folded as it is applied
		rows = append(rows, bus.CounterRow{CounterKey: bus.CounterKey{TenantID: tenantID, Policy: "llm", Tier: "pro", IdentityKind: "key", IdentityID: fmt.Sprintf("key_%02d", i), Minute: minute},
			Allowed: 2, Denied: 3, RateLimited: 1, ConcurrencyLimited: 2})
	}
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-rank-1", bus.CounterBatch{V: bus.WireVersion, Node: "n1", Rows: rows})
	eventually(t, 10*time.Second, "counters committed", func() bool { _, d := e.counterTotals(t); return d == 90 })

	from, to := time.Unix(minute*60, 0), time.Unix((minute+1)*60, 0)
	want := []service.PolicyRank{{ID: pol.Result.ID, Name: "llm", Allowed: 60, Denied: 90, RateLimited: 30, ConcurrencyLimited: 60}}
	rank := func(when string, q service.PolicyRankQuery) {
		t.Helper()
		var got []service.PolicyRank
		if err := bus.CallInto(op, client, bus.QueryTopPolicies, bus.PolicyRankRequest{V: bus.WireVersion, PolicyRankQuery: q}, &got); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: ranking %+v, want %+v", when, got, want)
		}
	}
	q := service.PolicyRankQuery{TenantID: tenantID, From: from, To: to, Limit: 5}
	rank("minute rows", q)
	r := analytics.Retention{MinuteRows: time.Hour, HourRows: 24 * time.Hour, DayRows: 30 * 24 * time.Hour, TopK: 2}
	if _, err := analytics.Maintain(context.Background(), e.db, r, from.Add(3*24*time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	q.From, q.To = from.Add(-24*time.Hour), to.Add(24*time.Hour)
	rank("day rows", q)
}
