package tenants_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

// xorSealer stands in for the worker's AES-GCM sealer: the store only
// needs sealed bytes that differ from the secret and open back.
type xorSealer struct{}

func (xorSealer) Seal(p []byte) ([]byte, error) { return xor(p), nil }
func (xorSealer) Open(p []byte) ([]byte, error) {
	if len(p) == 0 {
		return nil, errors.New("empty")
	}
	return xor(p), nil
}
func xor(p []byte) []byte {
	out := bytes.Clone(p)
	for i := range out {
		out[i] ^= 0x5a
	}
	return out
}

func webhookStore(t *testing.T) *tenants.Store {
	s := newStore(t)
	s.SetWebhookSealer(xorSealer{})
	return s
}

func ptr[T any](v T) *T { return &v }

func TestWebhookCRUDAndValidation(t *testing.T) {
	ctx := context.Background()
	s := webhookStore(t)
	a, b := mustTenant(t, s, "acme"), mustTenant(t, s, "globex")

	for _, tc := range []struct {
		body  tenants.WebhookBody
		field string
	}{
		{tenants.WebhookBody{}, "url"},
		{tenants.WebhookBody{URL: ptr("http://example.com/hook")}, "url: must be https"},
		{tenants.WebhookBody{URL: ptr("https://user:pw@example.com/")}, "url"},
		{tenants.WebhookBody{URL: ptr("https:///nohost")}, "url"},
		{tenants.WebhookBody{URL: ptr("https://example.com/"), Events: &[]string{"key.created", "nope"}}, "events"},
		{tenants.WebhookBody{URL: ptr("https://example.com/"), Events: &[]string{}}, "events"},
		{tenants.WebhookBody{URL: ptr("https://example.com/"), Thresholds: &[]int{0}}, "thresholds"},
		{tenants.WebhookBody{URL: ptr("https://example.com/"), Thresholds: &[]int{101}}, "thresholds"},
	} {
		_, err := s.Webhooks().Create(ctx, a.ID, tc.body, t0)
		wantCode(t, err, errs.Invalid)
		if !strings.Contains(errs.Message(err), tc.field) {
			t.Errorf("%+v: error %q does not name %q", tc.body, errs.Message(err), tc.field)
		}
	}
	if ws, _ := s.Webhooks().List(ctx, a.ID); len(ws) != 0 {
		t.Fatalf("refused creates left %d webhooks", len(ws))
	}

	c, err := s.Webhooks().Create(ctx, a.ID, tenants.WebhookBody{URL: ptr("https://example.com/hook")}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.Secret, "whsec_") || !strings.HasPrefix(c.Secret, c.Webhook.SecretPrefix) {
		t.Fatalf("secret %q, prefix %q", c.Secret, c.Webhook.SecretPrefix)
	}
	if len(c.Webhook.Events) != len(tenants.WebhookEvents) || len(c.Webhook.Thresholds) != 2 {
		t.Fatalf("defaults: %+v", c.Webhook)
	}
	got, err := s.Webhooks().Get(ctx, a.ID, c.Webhook.ID)
	if err != nil || got.URL != "https://example.com/hook" {
		t.Fatalf("get: %+v %v", got, err)
	}
	// Another tenant's id answers as a missing one.
	_, err = s.Webhooks().Get(ctx, b.ID, c.Webhook.ID)
	wantCode(t, err, errs.NotFound)
	_, err = s.Webhooks().Update(ctx, b.ID, c.Webhook.ID, tenants.WebhookBody{Description: ptr("x")}, t0)
	wantCode(t, err, errs.NotFound)
	_, err = s.Webhooks().Delete(ctx, b.ID, c.Webhook.ID, t0)
	wantCode(t, err, errs.NotFound)
	_, err = s.Webhooks().Deliveries(ctx, tenants.DeliveryQuery{TenantID: b.ID, WebhookID: c.Webhook.ID})
	wantCode(t, err, errs.NotFound)

	up, err := s.Webhooks().Update(ctx, a.ID, c.Webhook.ID, tenants.WebhookBody{Thresholds: &[]int{100, 50, 50}}, t0)
	if err != nil || len(up.Thresholds) != 2 || up.Thresholds[0] != 50 {
		t.Fatalf("update: %+v %v", up, err)
	}
	secrets, err := s.DeliveryQueue().Secrets(ctx, c.Webhook.ID, t0)
	if err != nil || len(secrets) != 1 || secrets[0] != c.Secret {
		t.Fatalf("secrets %v %v", secrets, err)
	}
	r, err := s.Webhooks().RotateSecret(ctx, a.ID, c.Webhook.ID, 24*time.Hour, t0)
	if err != nil || r.Secret == c.Secret {
		t.Fatalf("rotate: %v", err)
	}
	secrets, _ = s.DeliveryQueue().Secrets(ctx, c.Webhook.ID, t0.Add(time.Hour))
	if len(secrets) != 2 || secrets[0] != r.Secret || secrets[1] != c.Secret {
		t.Fatalf("during the overlap: %d secrets", len(secrets))
	}
	secrets, _ = s.DeliveryQueue().Secrets(ctx, c.Webhook.ID, t0.Add(25*time.Hour))
	if len(secrets) != 1 || secrets[0] != r.Secret {
		t.Fatalf("after the overlap: %d secrets", len(secrets))
	}
	if _, err := s.Webhooks().Delete(ctx, a.ID, c.Webhook.ID, t0); err != nil {
		t.Fatal(err)
	}
	_, err = s.Webhooks().Get(ctx, a.ID, c.Webhook.ID)
	wantCode(t, err, errs.NotFound)

	for range tenants.MaxWebhooks {
		if _, err := s.Webhooks().Create(ctx, a.ID, tenants.WebhookBody{URL: ptr("https://example.com/")}, t0); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.Webhooks().Create(ctx, a.ID, tenants.WebhookBody{URL: ptr("https://example.com/")}, t0)
	wantCode(t, err, errs.Conflict)
}

func deliveries(t *testing.T, s *tenants.Store, tenantID, webhookID string) []tenants.WebhookDelivery {
	t.Helper()
	p, err := s.Webhooks().Deliveries(context.Background(), tenants.DeliveryQuery{TenantID: tenantID, WebhookID: webhookID, Limit: 200})
	if err != nil {
		t.Fatal(err)
	}
	return p.Deliveries
}

func TestWebhookOutboxCommitsWithTheChange(t *testing.T) {
	ctx := context.Background()
	s := webhookStore(t)
	a := mustTenant(t, s, "acme")
	keysOnly, err := s.Webhooks().Create(ctx, a.ID, tenants.WebhookBody{URL: ptr("https://example.com/k"), Events: &[]string{tenants.EventKeyCreated, tenants.EventKeyRevoked}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.Webhooks().Create(ctx, a.ID, tenants.WebhookBody{URL: ptr("https://example.com/all")}, t0)
	if err != nil {
		t.Fatal(err)
	}
	k, _, _, err := s.Keys().Create(ctx, a.ID, "alice", "pro", nil, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Keys().Revoke(ctx, a.ID, k.ID, t0); err != nil {
		t.Fatal(err)
	}
	// A write that fails enqueues nothing.
	if _, _, _, err := s.Keys().Create(ctx, a.ID, "", "pro", nil, nil, t0); err == nil {
		t.Fatal("a key without a name was created")
	}

	ds := deliveries(t, s, a.ID, keysOnly.Webhook.ID)
	if len(ds) != 2 || ds[0].Event != tenants.EventKeyRevoked || ds[1].Event != tenants.EventKeyCreated {
		t.Fatalf("key events: %+v", ds)
	}
	var body struct {
		Type string
		Data map[string]any
	}
	if err := json.Unmarshal(ds[1].Payload, &body); err != nil || body.Type != "key.created" || body.Data["id"] != k.ID || body.Data["prefix"] != k.Prefix {
		t.Fatalf("key.created body %s", ds[1].Payload)
	}
	if bytes.Contains(ds[1].Payload, []byte("hash")) {
		t.Fatalf("key event holds the key's hash: %s", ds[1].Payload)
	}
	// The second endpoint also hears the config changes: its own creation
	// (the audit entry commits with it) and the key's create and revoke.
	events := map[string]int{}
	for _, d := range deliveries(t, s, a.ID, all.Webhook.ID) {
		events[d.Event]++
	}
	if events[tenants.EventKeyCreated] != 1 || events[tenants.EventKeyRevoked] != 1 || events[tenants.EventConfigChanged] != 3 {
		t.Fatalf("events of the second endpoint: %v", events)
	}
}

func TestWebhookQuotaCrossingsOncePerThreshold(t *testing.T) {
	ctx := context.Background()
	s := webhookStore(t)
	a := mustTenant(t, s, "acme")
	w, err := s.Webhooks().Create(ctx, a.ID, tenants.WebhookBody{URL: ptr("https://example.com/q"), Events: &[]string{tenants.EventQuotaThreshold, tenants.EventQuotaReset},
		Thresholds: &[]int{50, 80, 100}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	start, end := t0.Truncate(24*time.Hour), t0.Truncate(24*time.Hour).Add(24*time.Hour)
	c := func(before, after int64) tenants.QuotaCrossing {
		return tenants.QuotaCrossing{TenantID: a.ID, KeyID: "ck_1", Policy: "api", Limit: "daily", Calendar: "day", Quota: 10,
			Before: before, After: after, PeriodStart: start.Unix(), PeriodEnd: end.Unix(), At: t0.UnixNano()}
	}
	// Two servers report the same crossings, one of them twice.
	batches := [][]tenants.QuotaCrossing{{c(4, 5), c(7, 8)}, {c(4, 5), c(7, 8), c(9, 10)}, {c(9, 10)}}
	total := 0
	for _, b := range batches {
		err := s.WriteTx(ctx, func(tx *sql.Tx) error {
			n, err := s.Outbox().EnqueueQuotaCrossings(ctx, tx, b, t0)
			total += n
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// 50 %, 80 %, 100 % and the reset at the period's end.
	if total != 4 {
		t.Fatalf("%d deliveries written, want 4", total)
	}
	ds := deliveries(t, s, a.ID, w.Webhook.ID)
	if len(ds) != 4 {
		t.Fatalf("%d deliveries", len(ds))
	}
	reset := ds[0]
	if reset.Event != tenants.EventQuotaReset || reset.NextAttemptAt == nil || !reset.NextAttemptAt.Equal(end) {
		t.Fatalf("reset: %+v", reset)
	}
	// Only the 50 % crossing is due now; the others wait their turn
	// behind it (one key), the reset until the period ends.
	if eps, err := s.DeliveryQueue().DueEndpoints(ctx, t0); err != nil || len(eps) != 1 || eps[0] != (tenants.DueEndpoint{WebhookID: w.Webhook.ID, TenantID: a.ID}) {
		t.Fatalf("due endpoints %v %v", eps, err)
	}
	q, err := s.DeliveryQueue().DueQueues(ctx, w.Webhook.ID, t0, 10)
	if err != nil || len(q) != 1 {
		t.Fatalf("due queues %v %v", q, err)
	}
	h, ok, err := s.DeliveryQueue().Head(ctx, q[0])
	if err != nil || !ok || !strings.Contains(string(h.Payload), `"threshold":50`) {
		t.Fatalf("head %s %v %v", h.Payload, ok, err)
	}
}

// Delivered and failed deliveries go after the retention; pending ones
// stay however old.
func TestWebhookDeliveriesPruned(t *testing.T) {
	ctx := context.Background()
	s := webhookStore(t)
	a := mustTenant(t, s, "acme")
	w, err := s.Webhooks().Create(ctx, a.ID, tenants.WebhookBody{URL: ptr("https://example.com/k"), Events: &[]string{tenants.EventKeyCreated}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} {
		if _, _, _, err := s.Keys().Create(ctx, a.ID, name, "pro", nil, nil, t0); err != nil {
			t.Fatal(err)
		}
	}
	qs, err := s.DeliveryQueue().DueQueues(ctx, w.Webhook.ID, t0, 10)
	if err != nil || len(qs) != 3 {
		t.Fatalf("queues %v %v", qs, err)
	}
	var as []tenants.Attempt
	for i, q := range qs[:2] {
		h, _, _ := s.DeliveryQueue().Head(ctx, q)
		as = append(as, tenants.Attempt{RowID: h.RowID, WebhookID: q.WebhookID, OrderKey: q.OrderKey, At: t0, Delivered: i == 0, Code: 500})
	}
	if err := s.DeliveryQueue().RecordAttempts(ctx, as); err != nil {
		t.Fatal(err)
	}
	if qs, _ := s.DeliveryQueue().DueQueues(ctx, w.Webhook.ID, t0, 10); len(qs) != 1 {
		t.Fatalf("%d queues left, want the one pending", len(qs))
	}
	n, err := s.DeliveryQueue().Prune(ctx, t0.Add(time.Hour), t0, 100)
	if err != nil || n != 2 {
		t.Fatalf("pruned %d %v", n, err)
	}
	if ds := deliveries(t, s, a.ID, w.Webhook.ID); len(ds) != 1 || ds[0].Status != tenants.DeliveryPending {
		t.Fatalf("left %+v", ds)
	}
}
