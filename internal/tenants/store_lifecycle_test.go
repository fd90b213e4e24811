package tenants_test

import (
	"context"
	"database/sql"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/internal/tenants"
)

// Suspending keeps everything and moves the users' session versions;
// resuming clears it; deleting removes the tenant and all it owns, in
// SQLite and in a snapshot that follows the changes, and leaves another
// tenant as it was.
func TestTenantLifecycle(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	for _, tn := range []tenants.Tenant{a, b} {
		must[tenants.Policy](t)(first(s.Policies().Create(ctx, tn.ID, samplePolicy("heavy"), t0)))
		must[tenants.ConsumerKey](t)(first4(s.Keys().Create(ctx, tn.ID, "k", "pro", nil, nil, t0)))
		must[tenants.Block](t)(first(s.Blocks().Create(ctx, tenants.Block{TenantID: tn.ID, Identity: tenants.Identity{Kind: "ip", ID: "192.0.2.9"}}, t0)))
	}
	m := must[tenants.User](t)(s.Users().Create(ctx, a.ID, "m@a.test", "member password 1", tenants.RoleMember, t0))
	start := must[tenants.Snapshot](t)(s.Snapshot(ctx))
	var all []tenants.Change

	before := version(t, s)
	susp, changes, err := s.Tenants().Suspend(ctx, a.ID, t0)
	if err != nil || susp.SuspendedAt == nil || !susp.SuspendedAt.Equal(t0.Truncate(1e6)) {
		t.Fatalf("suspend: %+v %v", susp, err)
	}
	checkChanges(t, s, before, changes, tenants.ChangeTenant, tenants.ChangeUserSession, tenants.ChangeUserSession)
	all = append(all, changes...)
	if u := must[tenants.User](t)(s.Users().Get(ctx, m.ID)); u.SessionVersion != m.SessionVersion+1 {
		t.Fatalf("member's session version %d, want %d", u.SessionVersion, m.SessionVersion+1)
	}
	if got := must[tenants.TenantSummary](t)(s.Tenants().Summary(ctx, a.ID)); got.SuspendedAt == nil || got.Policies != 1 || got.ConsumerKeys != 1 || got.Users != 2 {
		t.Fatalf("suspended tenant: %+v", got)
	}
	if got := must[tenants.TenantSummary](t)(s.Tenants().Summary(ctx, b.ID)); got.SuspendedAt != nil {
		t.Fatal("suspending a suspended b")
	}
	if _, changes, err := s.Tenants().Suspend(ctx, a.ID, t0); err != nil || len(changes) != 0 {
		t.Fatalf("suspend twice: %v %v", changes, err)
	}
	_, _, err = s.Tenants().Suspend(ctx, "ten_missing", t0)
	wantCode(t, err, "not_found")

	before = version(t, s)
	res, changes, err := s.Tenants().Resume(ctx, a.ID)
	if err != nil || res.SuspendedAt != nil {
		t.Fatalf("resume: %+v %v", res, err)
	}
	checkChanges(t, s, before, changes, tenants.ChangeTenant)
	all = append(all, changes...)
	if _, changes, err := s.Tenants().Resume(ctx, a.ID); err != nil || len(changes) != 0 {
		t.Fatalf("resume twice: %v %v", changes, err)
	}

	// Buckets and analytics of both tenants, as the worker writes them.
	err = s.WriteTx(ctx, func(tx *sql.Tx) error {
		for _, tn := range []tenants.Tenant{a, b} {
			key := tn.ID + "/pol_x/ip:192.0.2.1"
			if _, err := tx.Exec(`INSERT INTO buckets (part, key, tenant_id, state, full_at, seq, updated_at) VALUES (7, ?, ?, '{}', 0, 1, 0)`, key, tn.ID); err != nil {
				return err
			}
			// A state staged in a run, not yet merged into buckets.
			if _, err := tx.Exec(`INSERT OR IGNORE INTO bucket_run_ids (run) VALUES (1)`); err != nil {
				return err
			}
			if _, err := tx.Exec(`INSERT INTO bucket_runs (run, part, key, tenant_id, state, full_at, seq, updated_at) VALUES (1, 9, ?, ?, x'01', 0, 2, 0)`, tn.ID+"/pol_y/ip:192.0.2.2", tn.ID); err != nil {
				return err
			}
			if _, err := tx.Exec(`INSERT INTO counters (tenant_id, minute, policy, tier, identity_kind, identity_id, allowed) VALUES (?, 1, 'p', 't', 'ip', '192.0.2.1', 1)`, tn.ID); err != nil {
				return err
			}
			if _, err := tx.Exec(`INSERT INTO counter_rollups (tenant_id, res, start, policy, tier, identity_kind, identity_id, allowed, first_minute, last_minute) VALUES (?, 60, 0, 'p', 't', 'ip', '192.0.2.1', 1, 0, 0)`, tn.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	before = version(t, s)
	del, changes, err := s.Tenants().Delete(ctx, a.ID)
	if err != nil || del.ID != a.ID {
		t.Fatalf("delete: %+v %v", del, err)
	}
	checkChanges(t, s, before, changes, tenants.ChangeUserDeleted, tenants.ChangeUserDeleted, tenants.ChangeTenantDeleted)
	all = append(all, changes...)
	_, _, err = s.Tenants().Delete(ctx, a.ID)
	wantCode(t, err, "not_found")

	count := func(table, tenantID string) int {
		var n int
		col := "tenant_id"
		if table == "tenants" {
			col = "id"
		}
		err := s.WriteTx(ctx, func(tx *sql.Tx) error {
			return tx.QueryRow(`SELECT COUNT(*) FROM `+table+` WHERE `+col+` = ?`, tenantID).Scan(&n)
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, table := range []string{"tenants", "users", "service_keys", "consumer_keys", "policies", "blocks", "buckets", "bucket_runs", "counters", "counter_rollups"} {
		if n := count(table, a.ID); n != 0 {
			t.Errorf("%s keeps %d rows of the deleted tenant", table, n)
		}
		if n := count(table, b.ID); n == 0 {
			t.Errorf("%s lost the other tenant's rows", table)
		}
	}
	// A late counter of the deleted tenant is purged; b's are not.
	err = s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO counters (tenant_id, minute, policy, tier, identity_kind, identity_id, allowed) VALUES (?, 2, 'p', 't', 'ip', '192.0.2.1', 1)`, a.ID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tenants().PurgeData(ctx, a.ID); err != nil || count("counters", a.ID) != 0 {
		t.Fatalf("purge: %v, %d rows left", err, count("counters", a.ID))
	}
	if err := s.Tenants().PurgeData(ctx, b.ID); err != nil || count("counters", b.ID) == 0 {
		t.Fatalf("purging an existing tenant deleted its data: %v", err)
	}

	// A snapshot that follows the changes equals a fresh one.
	replayed := roundTrip(t, start)
	if err := replayed.Apply(roundTrip(t, all)...); err != nil {
		t.Fatal(err)
	}
	if end := must[tenants.Snapshot](t)(s.Snapshot(ctx)); !reflect.DeepEqual(replayed, end) {
		t.Fatalf("replayed snapshot differs\n got %+v\nwant %+v", replayed, end)
	}
}
