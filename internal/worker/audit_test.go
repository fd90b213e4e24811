package worker

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/bus/bustest"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/worker/analytics"
)

// TestAuditEntryCommitsWithItsChange runs config writes through NATS with
// an actor, on a database whose commits pass through a recorder hook (as a
// worker with a standby's do): each change and its audit entry are one
// transaction, recorded together, and a transaction that fails at COMMIT
// leaves neither.
func TestAuditEntryCommitsWithItsChange(t *testing.T) {
	dir := t.TempDir()
	nc := bustest.InProcess(t, bus.EmbeddedConfig{DataDir: dir, Name: "audit-test"})
	rec := &sqlitedb.Recorder{}
	db, err := sqlitedb.OpenRecorded(context.Background(), filepath.Join(dir, "sluice.db"), rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	js, _ := jetstream.New(nc)
	if err := bus.EnsureStreams(context.Background(), js, 1); err != nil {
		t.Fatal(err)
	}
	w, err := New(Config{}, db, nc)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{db: db, nc: nc, js: js, w: w}
	e.run(t)

	var mu sync.Mutex
	var txs [][]string // the tables each committed transaction wrote
	failNext := false
	rec.SetHook(func(stmts []sqlitedb.Statement, _ func(string, ...any) (int64, error)) error {
		mu.Lock()
		defer mu.Unlock()
		if failNext {
			failNext = false
			return errors.New("refused by the test")
		}
		var tables []string
		for _, s := range stmts {
			for _, tb := range []string{"policies", "audit_log", "consumer_keys", "tenants"} {
				if strings.Contains(s.Query, "INTO "+tb) || strings.Contains(s.Query, "UPDATE "+tb) {
					tables = append(tables, tb)
				}
			}
		}
		txs = append(txs, tables)
		return nil
	})

	client := bus.NewClient(nc, 5*time.Second)
	op := tenants.WithActor(context.Background(), tenants.OperatorTokenActor())
	var ten service.Written[service.TenantCreated]
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := bus.CallInto(op, client, bus.OpTenantCreate, bus.TenantCreate{Name: "acme", OwnerEmail: "owner@acme.test", OwnerPassword: "correct horse battery"}, &ten)
		if err == nil {
			break
		}
		if errs.Code(err) != errs.Unavailable || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tenantID := ten.Result.Tenant.ID

	user := tenants.WithActor(context.Background(), tenants.Actor{Kind: tenants.ActorUser, ID: "usr_x", Label: "owner@acme.test"})
	pol := tenants.Policy{Name: "search", Path: "/api/search", Tiers: map[string]tenants.Limits{"default": {{Algorithm: tenants.TokenBucket, Limit: 100, Period: "1m"}}}}
	var created service.Written[tenants.Policy]
	if err := bus.CallInto(user, client, bus.OpPolicyCreate, bus.PolicyWrite{TenantID: tenantID, Policy: pol}, &created); err != nil {
		t.Fatal(err)
	}

	// The update's COMMIT is refused: the policy keeps its limit and the
	// log gains no entry.
	mu.Lock()
	failNext = true
	mu.Unlock()
	pol.Tiers["default"][0].Limit = 200
	err = bus.CallInto(user, client, bus.OpPolicyUpdate, bus.PolicyWrite{TenantID: tenantID, ID: created.Result.ID, Policy: pol}, nil)
	if err == nil {
		t.Fatal("a refused commit answered success")
	}
	var list tenants.AuditPage
	if err := bus.CallInto(user, client, bus.OpAuditList, tenants.AuditQuery{TenantID: tenantID}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Entries) != 2 {
		t.Fatalf("after a failed update: %d entries, want 2 (tenant, policy)", len(list.Entries))
	}
	var got tenants.Policy
	if err := bus.CallInto(user, client, bus.OpPolicyGet, bus.TenantScoped{TenantID: tenantID, ID: created.Result.ID}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Tiers["default"][0].Limit != 100 {
		t.Fatalf("the refused update changed the policy: %+v", got.Tiers)
	}

	// A write refused by the store (a taken name) records nothing either.
	if err := bus.CallInto(user, client, bus.OpPolicyCreate, bus.PolicyWrite{TenantID: tenantID, Policy: pol}, nil); !errs.Is(err, errs.Conflict) {
		t.Fatalf("duplicate policy: err = %v, want conflict", err)
	}

	// The update again, accepted.
	if err := bus.CallInto(user, client, bus.OpPolicyUpdate, bus.PolicyWrite{TenantID: tenantID, ID: created.Result.ID, Policy: pol}, nil); err != nil {
		t.Fatal(err)
	}
	if err := bus.CallInto(user, client, bus.OpAuditList, tenants.AuditQuery{TenantID: tenantID}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Entries) != 3 {
		t.Fatalf("%d entries, want 3", len(list.Entries))
	}
	upd := list.Entries[0]
	if upd.Actor != (tenants.Actor{Kind: tenants.ActorUser, ID: "usr_x", Label: "owner@acme.test"}) || upd.Action != tenants.ActionUpdated ||
		len(upd.Changes) != 1 || upd.Changes[0] != (tenants.FieldChange{Field: "default › limit", Before: "100", After: "200"}) {
		t.Fatalf("update entry = %+v", upd)
	}
	if a := list.Entries[2].Actor; a.Kind != tenants.ActorOperator {
		t.Fatalf("tenant created by %+v, want the operator", a)
	}
	var one tenants.AuditEntry
	if err := bus.CallInto(user, client, bus.OpAuditGet, service.AuditGet{TenantID: "ten_other", ID: upd.ID}, &one); !errs.Is(err, errs.NotFound) {
		t.Fatalf("another tenant's entry: err = %v, want not_found", err)
	}

	mu.Lock()
	defer mu.Unlock()
	writes := 0
	for _, tables := range txs {
		changed := false
		for _, tb := range tables {
			changed = changed || tb == "policies" || tb == "tenants"
		}
		if !changed {
			continue
		}
		writes++
		if !strings.Contains(strings.Join(tables, " "), "audit_log") {
			t.Fatalf("a committed change without its audit entry in the same transaction: %v", tables)
		}
	}
	if writes != 3 { // tenant, policy, update
		t.Fatalf("%d committed config transactions, want 3", writes)
	}
}

// TestRequestWithoutActorIsRecordedAsUnknown: a server that does not send
// bus.ActorHeader (an older one) still writes, as an unknown actor.
func TestRequestWithoutActorIsRecordedAsUnknown(t *testing.T) {
	e := newEnv(t, Config{})
	e.run(t)
	if err := createTenant(t, e.nc, "acme"); err != nil {
		t.Fatal(err)
	}
	var list tenants.AuditPage
	if err := bus.CallInto(context.Background(), bus.NewClient(e.nc, 5*time.Second), bus.OpAuditList, tenants.AuditQuery{AllTenants: true}, &list); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, en := range list.Entries {
		if en.ObjectType == tenants.AuditTenant {
			found = true
			if en.Actor.Kind != tenants.ActorUnknown {
				t.Fatalf("actor = %+v, want unknown", en.Actor)
			}
		}
	}
	if !found {
		t.Fatalf("no tenant entry in %+v", list.Entries)
	}
}

// TestMaintenanceDeletesAuditPastRetention: the maintenance pass deletes
// audit entries older than Retention.Audit and keeps the others.
func TestMaintenanceDeletesAuditPastRetention(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	st := tenants.NewStore(e.db)
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	tn, _, _, err := st.Tenants().Create(ctx, "acme", "owner@acme.test", "correct horse battery", now.Add(-500*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Policies().Create(ctx, tn.ID, tenants.Policy{Name: "p", Path: "/p", Tiers: map[string]tenants.Limits{"default": {{Algorithm: tenants.TokenBucket, Limit: 1, Period: "1s"}}}}, now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	ms, err := analytics.Maintain(ctx, e.db, analytics.Retention{}, now, nil) // the default: 400 days
	if err != nil {
		t.Fatal(err)
	}
	if ms.AuditDeleted != 1 {
		t.Fatalf("deleted %d audit entries, want 1 (the tenant's, 500 days old)", ms.AuditDeleted)
	}
	page, err := st.Audit().List(ctx, tenants.AuditQuery{TenantID: tn.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != 1 || page.Entries[0].ObjectType != tenants.AuditPolicy {
		t.Fatalf("left: %+v", page.Entries)
	}
}
