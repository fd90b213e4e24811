package worker

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// The page, names and count ops answer over NATS for the asking tenant
// only, refuse payload versions they do not know, and leave key.list as
// older servers knew it.
func TestKeyPageOps(t *testing.T) {
	e := newEnv(t, Config{})
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
	key := func(tenantID, name string) string {
		t.Helper()
		var w service.Written[service.KeyCreated]
		if err := bus.CallInto(op, client, bus.OpKeyCreate, service.KeyCreate{TenantID: tenantID, Name: name, Tier: "pro"}, &w); err != nil {
			t.Fatal(err)
		}
		return w.Result.Key.ID
	}
	a, b := tenant("alpha"), tenant("beta")
	a1, a2, a3 := key(a, "app one"), key(a, "app two"), key(a, "app three")
	b1 := key(b, "app of beta")

	var page tenants.KeyPage
	q := bus.KeyPageQuery{V: bus.WireVersion, KeyQuery: tenants.KeyQuery{TenantID: a, Search: "APP", Limit: 2, Offset: 2}}
	if err := bus.CallInto(op, client, bus.OpKeyPage, q, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Keys) != 1 || page.Keys[0].ID != a2 || page.Offset != 2 || page.Total != 3 || page.Matched != 3 {
		t.Errorf("page %+v, want the third of three (app two)", page)
	}
	q.TenantID, q.Offset = b, 0
	if err := bus.CallInto(op, client, bus.OpKeyPage, q, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Keys) != 1 || page.Keys[0].ID != b1 || page.Total != 1 {
		t.Errorf("tenant b's page %+v", page)
	}
	q.TenantID = "ten_nope"
	if err := bus.CallInto(op, client, bus.OpKeyPage, q, &page); !errs.Is(err, errs.NotFound) {
		t.Errorf("unknown tenant: %v", err)
	}
	q.TenantID, q.V = a, bus.WireVersion+1
	if err := bus.CallInto(op, client, bus.OpKeyPage, q, &page); !errs.Is(err, errs.Invalid) {
		t.Errorf("a newer payload version: %v", err)
	}

	names := map[string]string{}
	if err := bus.CallInto(op, client, bus.OpKeyNames, bus.KeyNames{V: bus.WireVersion, TenantID: a, IDs: []string{a1, a3, b1}}, &names); err != nil {
		t.Fatal(err)
	}
	if len(names) != 2 || names[a1] != "app one" || names[a3] != "app three" {
		t.Errorf("names %v: want tenant a's two keys only", names)
	}
	if err := bus.CallInto(op, client, bus.OpKeyNames, bus.KeyNames{TenantID: a, IDs: []string{a1}}, &names); !errs.Is(err, errs.Invalid) {
		t.Errorf("names without a payload version: %v", err)
	}

	var counts tenants.KeyCounts
	if err := bus.CallInto(op, client, bus.OpKeyCount, bus.TenantScoped{TenantID: b}, &counts); err != nil || counts.Total != 1 {
		t.Errorf("tenant b's count %+v, %v", counts, err)
	}

	// The request an older server sends still answers every key.
	var all []tenants.ConsumerKey
	if err := bus.CallInto(op, client, bus.OpKeyList, bus.TenantScoped{TenantID: a}, &all); err != nil || len(all) != 3 {
		t.Errorf("key.list: %d keys, %v", len(all), err)
	}
}
