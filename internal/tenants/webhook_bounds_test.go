package tenants_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tenants"
)

// webhookStoreDB is webhookStore with the database, to look at plans and
// rows.
func webhookStoreDB(t *testing.T) (*tenants.Store, *sql.DB) {
	t.Helper()
	db, err := sqlitedb.Open(context.Background(), filepath.Join(t.TempDir(), "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s := tenants.NewStore(db)
	s.SetWebhookSealer(xorSealer{})
	return s, db
}

// crossings enqueues n quota.threshold deliveries for the tenant, one per
// consumer key (so n queues), in one transaction.
func crossings(t *testing.T, s *tenants.Store, tenantID string, from, n int, at time.Time) {
	t.Helper()
	ctx := context.Background()
	var cs []tenants.QuotaCrossing
	for i := from; i < from+n; i++ {
		cs = append(cs, tenants.QuotaCrossing{TenantID: tenantID, KeyID: fmt.Sprintf("ck_%06d", i), Policy: "api", Limit: "daily", Calendar: "day",
			Quota: 10, Before: 7, After: 8, PeriodStart: at.Truncate(24 * time.Hour).Unix(), PeriodEnd: at.Truncate(24 * time.Hour).Add(24 * time.Hour).Unix(), At: at.UnixNano()})
	}
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := s.Outbox().EnqueueQuotaCrossings(ctx, tx, cs, at)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func thresholdHook(t *testing.T, s *tenants.Store, tenantID string) tenants.Webhook {
	t.Helper()
	c, err := s.Webhooks().Create(context.Background(), tenantID, tenants.WebhookBody{URL: ptr("https://example.com/" + tenantID),
		Events: &[]string{tenants.EventQuotaThreshold}, Thresholds: &[]int{80}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return c.Webhook
}

// The delivery loop's reads cost what they answer, not an endpoint's
// backlog: the due endpoints come from an index of one row per endpoint,
// and an endpoint's due queues from its own part of an index, limited.
func TestWebhookDueReadsUseTheirIndexes(t *testing.T) {
	ctx := context.Background()
	s, db := webhookStoreDB(t)
	a, b := mustTenant(t, s, "acme"), mustTenant(t, s, "globex")
	dead, other := thresholdHook(t, s, a.ID), thresholdHook(t, s, b.ID)
	crossings(t, s, a.ID, 0, 3000, t0) // a backlog of 3000 queues
	crossings(t, s, b.ID, 0, 2, t0)

	eps, err := s.DeliveryQueue().DueEndpoints(ctx, t0)
	// By tenant.
	want := []tenants.DueEndpoint{{WebhookID: dead.ID, TenantID: a.ID}, {WebhookID: other.ID, TenantID: b.ID}}
	if b.ID < a.ID {
		want[0], want[1] = want[1], want[0]
	}
	if err != nil || fmt.Sprint(eps) != fmt.Sprint(want) {
		t.Fatalf("due endpoints %v %v, want %v", eps, err, want)
	}
	qs, err := s.DeliveryQueue().DueQueues(ctx, dead.ID, t0, 8)
	if err != nil || len(qs) != 8 {
		t.Fatalf("due queues %d %v", len(qs), err)
	}
	if qs, _ := s.DeliveryQueue().DueQueues(ctx, other.ID, t0, 8); len(qs) != 2 {
		t.Fatalf("the other endpoint's due queues: %v", qs)
	}
	// Nothing is due before its time.
	if eps, _ := s.DeliveryQueue().DueEndpoints(ctx, t0.Add(-time.Second)); len(eps) != 0 {
		t.Fatalf("due early: %v", eps)
	}
	for _, tc := range []struct {
		query string
		args  []any
		index string
	}{
		{`SELECT id, tenant_id FROM webhooks INDEXED BY webhooks_due
			WHERE next_due IS NOT NULL AND deleted_at = 0 AND paused = '' AND next_due <= ? ORDER BY tenant_id, id`, []any{t0.UnixMilli()}, "webhooks_due"},
		{`SELECT order_key FROM webhook_queues INDEXED BY webhook_queues_endpoint
			WHERE webhook_id = ? AND next_at <= ? ORDER BY next_at LIMIT ?`, []any{dead.ID, t0.UnixMilli(), 8}, "webhook_queues_endpoint"},
	} {
		plan := queryPlan(t, db, tc.query, tc.args...)
		if !strings.Contains(plan, "SEARCH") || !strings.Contains(plan, tc.index) || strings.Contains(plan, "SCAN") {
			t.Errorf("plan of %s:\n%s", tc.index, plan)
		}
	}
	// A paused or deleted endpoint is not due.
	if _, err := s.Webhooks().Update(ctx, a.ID, dead.ID, tenants.WebhookBody{Paused: ptr(true)}, t0); err != nil {
		t.Fatal(err)
	}
	if eps, _ := s.DeliveryQueue().DueEndpoints(ctx, t0); len(eps) != 1 || eps[0].WebhookID != other.ID {
		t.Fatalf("due with one paused: %v", eps)
	}
	if _, err := s.Webhooks().Delete(ctx, b.ID, other.ID, t0); err != nil {
		t.Fatal(err)
	}
	if eps, _ := s.DeliveryQueue().DueEndpoints(ctx, t0); len(eps) != 0 {
		t.Fatalf("due with one deleted: %v", eps)
	}
}

func queryPlan(t *testing.T, db *sql.DB, query string, args ...any) string {
	t.Helper()
	rows, err := db.Query(`EXPLAIN QUERY PLAN `+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var sb strings.Builder
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		sb.WriteString(detail + "\n")
	}
	return sb.String()
}

// A deleted endpoint is gone at once, but its deliveries go in batches,
// each its own transaction, never all in the delete's.
func TestDeletedWebhookPurgedInBatches(t *testing.T) {
	ctx := context.Background()
	s, db := webhookStoreDB(t)
	a := mustTenant(t, s, "acme")
	w := thresholdHook(t, s, a.ID)
	crossings(t, s, a.ID, 0, 2500, t0)
	if _, err := s.Webhooks().Delete(ctx, a.ID, w.ID, t0); err != nil {
		t.Fatal(err)
	}
	_, err := s.Webhooks().Get(ctx, a.ID, w.ID)
	wantCode(t, err, errs.NotFound)
	if ws, _ := s.Webhooks().List(ctx, a.ID); len(ws) != 0 {
		t.Fatalf("listed after delete: %v", ws)
	}
	if _, err := s.DeliveryQueue().Secrets(ctx, w.ID, t0); !errs.Is(err, errs.NotFound) {
		t.Fatalf("secrets of a deleted endpoint: %v", err)
	}
	count := func(table string) int {
		column := "webhook_id"
		if table == "webhooks" {
			column = "id"
		}
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM `+table+` WHERE `+column+` = ?`, w.ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count("webhook_deliveries"); n != 2500 {
		t.Fatalf("%d deliveries right after the delete, want all 2500 still there (removed later, in batches)", n)
	}
	var steps []int64
	for {
		n, err := s.DeliveryQueue().PurgeDeleted(ctx, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if n > 1000 {
			t.Fatalf("one step removed %d rows", n)
		}
		steps = append(steps, n)
		if len(steps) > 20 {
			t.Fatal("purge does not end")
		}
	}
	// 2500 deliveries, 2500 queues, the endpoint.
	if want := []int64{1000, 1000, 500, 1000, 1000, 500, 1}; fmt.Sprint(steps) != fmt.Sprint(want) {
		t.Fatalf("steps %v, want %v", steps, want)
	}
	for _, table := range []string{"webhook_deliveries", "webhook_queues", "webhooks"} {
		if n := count(table); n != 0 {
			t.Fatalf("%d rows left in %s", n, table)
		}
	}
	if u, _ := s.Outbox().Usage(ctx, a.ID); u.Rows != 0 || u.Bytes != 0 || u.PendingRows != 0 || u.PendingBytes != 0 {
		t.Fatalf("outbox counts after the purge: %+v", u)
	}
}

// A tenant's outbox stays within its bounds, in rows and bytes, pending
// and kept: past the pending bound its oldest pending deliveries are
// dropped, visibly; past the kept bound its oldest finished ones go.
// Another tenant's outbox is not touched.
func TestWebhookOutboxBoundedPerTenant(t *testing.T) {
	ctx := context.Background()
	s, db := webhookStoreDB(t)
	a, b := mustTenant(t, s, "acme"), mustTenant(t, s, "globex")
	wa, wb := thresholdHook(t, s, a.ID), thresholdHook(t, s, b.ID)
	if err := s.Outbox().SetLimits(ctx, a.ID, tenants.OutboxLimits{Rows: 80, PendingRows: 50}); err != nil {
		t.Fatal(err)
	}
	if err := s.Outbox().SetLimits(ctx, a.ID, tenants.OutboxLimits{Rows: 10, PendingRows: 50}); !errs.Is(err, errs.Invalid) {
		t.Fatalf("pending bound above the kept one: %v", err)
	}
	crossings(t, s, b.ID, 0, 120, t0)
	crossings(t, s, a.ID, 0, 200, t0)
	u, err := s.Outbox().Usage(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if u.PendingRows != 50 || u.Dropped != 150 || u.Rows != 80 {
		t.Fatalf("outbox %+v, want 50 pending, 150 dropped, 80 kept", u)
	}
	// The counts are the rows.
	var rows, pending, bytes, pendingBytes int64
	if err := db.QueryRow(`SELECT COUNT(*), COALESCE(SUM(status = 'pending'), 0), COALESCE(SUM(length(payload)), 0),
		COALESCE(SUM(CASE WHEN status = 'pending' THEN length(payload) END), 0) FROM webhook_deliveries WHERE tenant_id = ?`, a.ID).
		Scan(&rows, &pending, &bytes, &pendingBytes); err != nil {
		t.Fatal(err)
	}
	if rows != u.Rows || pending != u.PendingRows || bytes != u.Bytes || pendingBytes != u.PendingBytes {
		t.Fatalf("counted %+v, rows say %d %d %d %d", u, rows, pending, bytes, pendingBytes)
	}
	// The newest 50 are pending; 30 of the dropped are kept to be seen,
	// as dropped, with why and without their payload.
	ds := deliveries(t, s, a.ID, wa.ID)
	if len(ds) != 80 {
		t.Fatalf("%d deliveries listed", len(ds))
	}
	for i, d := range ds {
		want := tenants.DeliveryPending
		if i >= 50 {
			want = tenants.DeliveryDropped
		}
		if d.Status != want {
			t.Fatalf("delivery %d (newest first): %s, want %s", i, d.Status, want)
		}
		if want == tenants.DeliveryDropped && (!strings.Contains(d.LastError, "outbox was full") || len(d.Payload) != 0 || d.NextAttemptAt != nil) {
			t.Fatalf("dropped delivery %+v", d)
		}
	}
	_, err = s.Webhooks().Resend(ctx, a.ID, wa.ID, ds[79].ID, t0)
	wantCode(t, err, errs.Conflict)
	// Dropped deliveries left their queues: only the 50 pending ones'
	// are there.
	if qs, _ := s.DeliveryQueue().DueQueues(ctx, wa.ID, t0, 1000); len(qs) != 50 {
		t.Fatalf("%d queues due, want 50", len(qs))
	}
	if u, _ := s.Outbox().Usage(ctx, b.ID); u.Rows != 120 || u.PendingRows != 120 || u.Dropped != 0 {
		t.Fatalf("the other tenant's outbox: %+v", u)
	}
	if n := len(deliveries(t, s, b.ID, wb.ID)); n != 120 {
		t.Fatalf("the other tenant has %d deliveries", n)
	}
	drops, err := s.DeliveryQueue().Drops(ctx)
	if err != nil || len(drops) != 1 || drops[a.ID] != 150 {
		t.Fatalf("drops %v %v", drops, err)
	}

	// In bytes: a pending bound of 4 KiB holds about a dozen of these.
	if err := s.Outbox().SetLimits(ctx, b.ID, tenants.OutboxLimits{PendingBytes: 4 << 10}); err != nil {
		t.Fatal(err)
	}
	crossings(t, s, b.ID, 1000, 5, t0)
	if u, _ := s.Outbox().Usage(ctx, b.ID); u.PendingBytes > 4<<10 || u.PendingRows == 0 || u.Dropped < 100 {
		t.Fatalf("the bytes bound: %+v", u)
	}
	if pb := payloadBytes(t, db, b.ID, "pending"); pb > 4<<10 {
		t.Fatalf("%d pending bytes", pb)
	}
	if err := s.Outbox().SetLimits(ctx, b.ID, tenants.OutboxLimits{Bytes: 6 << 10, PendingBytes: 4 << 10}); err != nil {
		t.Fatal(err)
	}
	// Delivered ones are kept within the kept bound.
	qs, _ := s.DeliveryQueue().DueQueues(ctx, wb.ID, t0, 1000)
	var as []tenants.Attempt
	for _, q := range qs {
		h, ok, err := s.DeliveryQueue().Head(ctx, q)
		if err != nil || !ok {
			t.Fatalf("head %v %v", ok, err)
		}
		as = append(as, tenants.Attempt{RowID: h.RowID, WebhookID: q.WebhookID, OrderKey: q.OrderKey, At: t0, Delivered: true, Code: 200})
	}
	if err := s.DeliveryQueue().RecordAttempts(ctx, as); err != nil {
		t.Fatal(err)
	}
	crossings(t, s, b.ID, 2000, 40, t0)
	if u, _ := s.Outbox().Usage(ctx, b.ID); u.Bytes > 6<<10 || u.PendingBytes > 4<<10 {
		t.Fatalf("kept bytes: %+v", u)
	}
	if kb := payloadBytes(t, db, b.ID, ""); kb > 6<<10 {
		t.Fatalf("%d bytes kept", kb)
	}
}

func payloadBytes(t *testing.T, db *sql.DB, tenantID, status string) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(`SELECT COALESCE(SUM(length(payload)), 0) FROM webhook_deliveries WHERE tenant_id = ? AND (? = '' OR status = ?)`,
		tenantID, status, status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Only owners change webhooks; a service key acts as one. A member sees
// them and changes nothing. When the user who added an endpoint is
// removed, it is paused: it hears nothing more, until an owner resumes it.
func TestWebhookChangesAreOwnersOnly(t *testing.T) {
	ctx := context.Background()
	s := webhookStore(t)
	a := mustTenant(t, s, "acme")
	users, err := s.Users().List(ctx, a.ID)
	if err != nil || len(users) != 1 {
		t.Fatal(users, err)
	}
	owner := users[0]
	second, err := s.Users().Create(ctx, a.ID, "second@example.com", "correct horse battery", tenants.RoleOwner, t0)
	if err != nil {
		t.Fatal(err)
	}
	member, err := s.Users().Create(ctx, a.ID, "member@example.com", "correct horse battery", tenants.RoleMember, t0)
	if err != nil {
		t.Fatal(err)
	}
	as := func(u tenants.User) context.Context {
		return tenants.WithActor(ctx, tenants.UserActor(u.ID, u.Email, u.Role))
	}
	byOwner, err := s.Webhooks().Create(as(owner), a.ID, tenants.WebhookBody{URL: ptr("https://example.com/owner")}, t0)
	if err != nil || byOwner.Webhook.CreatedBy != owner.ID {
		t.Fatalf("owner's create: %+v %v", byOwner.Webhook, err)
	}
	bySecond, err := s.Webhooks().Create(as(second), a.ID, tenants.WebhookBody{URL: ptr("https://example.com/second")}, t0)
	if err != nil {
		t.Fatal(err)
	}
	byKey, err := s.Webhooks().Create(tenants.WithActor(ctx, tenants.ServiceKeyActor("sk_abcdefgh")), a.ID, tenants.WebhookBody{URL: ptr("https://example.com/key")}, t0)
	if err != nil || byKey.Webhook.CreatedBy != "" {
		t.Fatalf("service key's create: %+v %v", byKey.Webhook, err)
	}
	id := byOwner.Webhook.ID
	m := as(member)
	for name, call := range map[string]func() error{
		"create": func() error {
			_, err := s.Webhooks().Create(m, a.ID, tenants.WebhookBody{URL: ptr("https://example.com/member")}, t0)
			return err
		},
		"update": func() error {
			_, err := s.Webhooks().Update(m, a.ID, id, tenants.WebhookBody{URL: ptr("https://example.com/x")}, t0)
			return err
		},
		"rotate": func() error { _, err := s.Webhooks().RotateSecret(m, a.ID, id, time.Hour, t0); return err },
		"delete": func() error { _, err := s.Webhooks().Delete(m, a.ID, id, t0); return err },
		"resend": func() error {
			_, err := s.Webhooks().Resend(m, a.ID, id, deliveries(t, s, a.ID, id)[0].ID, t0)
			return err
		},
	} {
		if err := call(); !errs.Is(err, errs.Forbidden) {
			t.Errorf("a member's %s: %v", name, err)
		}
	}
	if w, err := s.Webhooks().Get(ctx, a.ID, id); err != nil || w.URL != "https://example.com/owner" || w.SecretPrefix != byOwner.Webhook.SecretPrefix {
		t.Fatalf("after the member's attempts: %+v %v", w, err)
	}
	if ws, _ := s.Webhooks().List(ctx, a.ID); len(ws) != 3 {
		t.Fatalf("after the member's attempts: %d endpoints", len(ws))
	}

	// The second owner is removed: their endpoint is paused, says why,
	// and hears nothing more; the others still do.
	if _, _, err := s.Users().Delete(as(owner), a.ID, second.ID, t0); err != nil {
		t.Fatal(err)
	}
	paused, err := s.Webhooks().Get(ctx, a.ID, bySecond.Webhook.ID)
	if err != nil || paused.Paused != tenants.PausedCreatorRemoved {
		t.Fatalf("the removed owner's endpoint: %+v %v", paused, err)
	}
	before := len(deliveries(t, s, a.ID, paused.ID))
	if _, _, _, err := s.Keys().Create(ctx, a.ID, "alice", "pro", nil, nil, t0); err != nil {
		t.Fatal(err)
	}
	if n := len(deliveries(t, s, a.ID, paused.ID)); n != before {
		t.Fatalf("a paused endpoint got %d new deliveries", n-before)
	}
	var sawPause bool
	for _, d := range deliveries(t, s, a.ID, id) {
		sawPause = sawPause || d.Event == tenants.EventConfigChanged && strings.Contains(string(d.Payload), tenants.PausedCreatorRemoved)
	}
	if !sawPause {
		t.Fatal("the owner's endpoint did not hear of the pause")
	}
	// A member cannot resume it; an owner can, and becomes its creator.
	if _, err := s.Webhooks().Update(m, a.ID, paused.ID, tenants.WebhookBody{Paused: ptr(false)}, t0); !errs.Is(err, errs.Forbidden) {
		t.Fatalf("a member's resume: %v", err)
	}
	resumed, err := s.Webhooks().Update(as(owner), a.ID, paused.ID, tenants.WebhookBody{Paused: ptr(false)}, t0)
	if err != nil || resumed.Paused != "" || resumed.CreatedBy != owner.ID {
		t.Fatalf("resumed: %+v %v", resumed, err)
	}
	if _, _, _, err := s.Keys().Create(ctx, a.ID, "bob", "pro", nil, nil, t0); err != nil {
		t.Fatal(err)
	}
	if n := len(deliveries(t, s, a.ID, paused.ID)); n <= before {
		t.Fatal("a resumed endpoint got nothing")
	}
}

// An outbox far over its bounds (its bounds just lowered, or grown before
// they existed) comes back within them over a few enqueues, at most 1024
// rows each, never in one long transaction. A deleted tenant's counts go
// with it.
func TestWebhookOutboxCatchesUpInSteps(t *testing.T) {
	ctx := context.Background()
	s, _ := webhookStoreDB(t)
	a := mustTenant(t, s, "acme")
	thresholdHook(t, s, a.ID)
	crossings(t, s, a.ID, 0, 3000, t0)
	if err := s.Outbox().SetLimits(ctx, a.ID, tenants.OutboxLimits{PendingRows: 10}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{1024, 2048, 2993} {
		crossings(t, s, a.ID, 10_000+i, 1, t0)
		u, err := s.Outbox().Usage(ctx, a.ID)
		if err != nil || u.Dropped != want {
			t.Fatalf("after enqueue %d: %+v %v, want %d dropped", i+1, u, err, want)
		}
	}
	if u, _ := s.Outbox().Usage(ctx, a.ID); u.PendingRows != 10 {
		t.Fatalf("pending %d, want 10", u.PendingRows)
	}
	if _, _, err := s.Tenants().Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if drops, _ := s.DeliveryQueue().Drops(ctx); len(drops) != 0 {
		t.Fatalf("a deleted tenant's drops: %v", drops)
	}
}
