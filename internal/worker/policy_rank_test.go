package worker

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/worker/analytics"
)

// The policy ranking and policy names answer over NATS for the asking
// tenant only, refuse payload versions they do not know, keep exact
// totals through folds and roll-ups, and leave policy.list as older
// servers knew it.
func TestPolicyRankAndNames(t *testing.T) {
	e := newEnv(t, Config{Analytics: analytics.Retention{TopK: 2}})
	e.run(t)
	client := bus.NewClient(e.nc, 5*time.Second)
	op := tenants.WithActor(context.Background(), tenants.OperatorTokenActor())
	tenant := func(name string) string {
		t.Helper()
		var ten service.Written[service.TenantCreated]
		eventually(t, 10*time.Second, "worker answering", func() bool {
			return bus.CallInto(op, client, bus.OpTenantCreate, bus.TenantCreate{Name: name, OwnerEmail: "owner@" + name + ".test", OwnerPassword: "correct horse battery"}, &ten) == nil
		})
		return ten.Result.Tenant.ID
	}
	policy := func(tenantID, name string) string {
		t.Helper()
		var w service.Written[tenants.Policy]
		p := tenants.Policy{Name: name, Path: "/" + name, Tiers: map[string]tenants.Limits{
			"anonymous": {{Algorithm: tenants.TokenBucket, Limit: 10, Period: "60s"}},
		}}
		if err := bus.CallInto(op, client, bus.OpPolicyCreate, bus.PolicyWrite{TenantID: tenantID, Policy: p}, &w); err != nil {
			t.Fatal(err)
		}
		return w.Result.ID
	}
	a, b := tenant("alpha"), tenant("beta")
	search, login, quiet := policy(a, "search"), policy(a, "login"), policy(a, "quiet")
	bSearch := policy(b, "search")

	const minute = 29000000
	row := func(tenantID, pol, kind, id string, allowed, rl, bl int64) bus.CounterRow {
		return bus.CounterRow{
			CounterKey: bus.CounterKey{TenantID: tenantID, Policy: pol, Tier: "anonymous", IdentityKind: kind, IdentityID: id, Minute: minute},
			Allowed:    allowed, Denied: rl + bl, RateLimited: rl, Blocked: bl,
		}
	}
	rows := []bus.CounterRow{
		row(a, "search", "ip", "198.51.100.1", 5, 10, 0),
		row(a, "search", "ip", "198.51.100.2", 1, 2, 0),
		row(a, "search", "ip", "198.51.100.3", 0, 0, 1),
		row(a, "search", bus.CounterOthers, "", 3, 4, 0), // callers counted together still count
		row(a, "login", "ip", "198.51.100.1", 0, 30, 0),
		row(a, "quiet", "ip", "198.51.100.4", 100, 0, 0),  // never denied: not ranked
		row(a, "gone", "ip", "198.51.100.1", 0, 50, 0),    // no such policy any more
		row(b, "search", "ip", "203.0.113.9", 0, 1000, 0), // the other tenant's policy of the same name
	}
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-c-1", bus.CounterBatch{V: bus.WireVersion, Node: "n1", Rows: rows})
	eventually(t, 10*time.Second, "counters committed", func() bool {
		_, d := e.counterTotals(t)
		return d == 10+2+1+4+30+50+1000
	})

	from, to := time.Unix(minute*60, 0), time.Unix((minute+1)*60, 0)
	want := []service.PolicyRank{
		{ID: login, Name: "login", Denied: 30, RateLimited: 30},
		{ID: search, Name: "search", Allowed: 9, Denied: 17, RateLimited: 16, Blocked: 1},
	}
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
	q := service.PolicyRankQuery{TenantID: a, From: from, To: to, Limit: 5}
	rank("minute rows", q)

	// Roll the minute up into an hour and the hour into a day, each folded
	// to two identities: the totals per policy stay.
	r := analytics.Retention{MinuteRows: time.Hour, HourRows: 24 * time.Hour, DayRows: 30 * 24 * time.Hour, TopK: 2}
	if _, err := analytics.Maintain(context.Background(), e.db, r, from.Add(3*24*time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, e.db, `SELECT count(*) FROM counter_rollups WHERE res = 1440`); n == 0 {
		t.Fatal("nothing was rolled up into a day")
	}
	q.From, q.To = from.Add(-24*time.Hour), to.Add(24*time.Hour)
	rank("day rows", q)

	var top1 []service.PolicyRank
	if err := bus.CallInto(op, client, bus.QueryTopPolicies, bus.PolicyRankRequest{V: bus.WireVersion, PolicyRankQuery: service.PolicyRankQuery{TenantID: b, From: q.From, To: q.To, Limit: 1}}, &top1); err != nil {
		t.Fatal(err)
	}
	if len(top1) != 1 || top1[0].ID != bSearch || top1[0].Denied != 1000 {
		t.Errorf("tenant b's ranking %+v", top1)
	}
	type pq = service.PolicyRankQuery
	for name, bad := range map[string]bus.PolicyRankRequest{
		"no payload version": {PolicyRankQuery: pq{TenantID: a, From: from, To: to}},
		"a newer version":    {V: bus.WireVersion + 1, PolicyRankQuery: pq{TenantID: a, From: from, To: to}},
		"no tenant":          {V: bus.WireVersion, PolicyRankQuery: pq{From: from, To: to}},
		"too many":           {V: bus.WireVersion, PolicyRankQuery: pq{TenantID: a, From: from, To: to, Limit: 1001}},
		"no range":           {V: bus.WireVersion, PolicyRankQuery: pq{TenantID: a}},
	} {
		if err := bus.CallInto(op, client, bus.QueryTopPolicies, bad, &top1); !errs.Is(err, errs.Invalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}

	var names service.PolicyNameList
	if err := bus.CallInto(op, client, bus.OpPolicyNames, bus.PolicyNames{V: bus.WireVersion, TenantID: a}, &names); err != nil {
		t.Fatal(err)
	}
	wantNames := []tenants.PolicyName{{ID: login, Name: "login"}, {ID: quiet, Name: "quiet"}, {ID: search, Name: "search"}}
	if names.Total != 3 || !reflect.DeepEqual(names.Policies, wantNames) {
		t.Errorf("tenant a's names %+v", names)
	}
	if err := bus.CallInto(op, client, bus.OpPolicyNames, bus.PolicyNames{V: bus.WireVersion, TenantID: a, IDs: []string{search, bSearch}}, &names); err != nil {
		t.Fatal(err)
	}
	if names.Total != 3 || !reflect.DeepEqual(names.Policies, []tenants.PolicyName{{ID: search, Name: "search"}}) {
		t.Errorf("names by id %+v: want tenant a's search only", names)
	}
	if err := bus.CallInto(op, client, bus.OpPolicyNames, bus.PolicyNames{V: bus.WireVersion, TenantID: b, CountOnly: true}, &names); err != nil || names.Total != 1 || len(names.Policies) != 0 {
		t.Errorf("tenant b's count %+v, %v", names, err)
	}
	if err := bus.CallInto(op, client, bus.OpPolicyNames, bus.PolicyNames{V: bus.WireVersion, TenantID: "ten_nope"}, &names); !errs.Is(err, errs.NotFound) {
		t.Errorf("unknown tenant: %v", err)
	}
	if err := bus.CallInto(op, client, bus.OpPolicyNames, bus.PolicyNames{TenantID: a}, &names); !errs.Is(err, errs.Invalid) {
		t.Errorf("names without a payload version: %v", err)
	}

	// The request an older server sends still answers whole policies.
	var all []tenants.Policy
	if err := bus.CallInto(op, client, bus.OpPolicyList, bus.TenantScoped{TenantID: a}, &all); err != nil || len(all) != 3 || len(all[0].Tiers) == 0 {
		t.Errorf("policy.list: %d policies, %v", len(all), err)
	}
}
