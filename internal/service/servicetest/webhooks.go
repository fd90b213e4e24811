package servicetest

import (
	"context"
	"slices"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

// AddDelivery adds a delivery to one of the endpoints, as the worker's
// outbox would.
func (m *Memory) AddDelivery(d tenants.WebhookDelivery) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deliveries[d.WebhookID] = append(m.deliveries[d.WebhookID], d)
}

func webhookTenant(w tenants.Webhook) string { return w.TenantID }

type memWebhooks struct{ m *Memory }

// body applies b over w as the store does, without its validation beyond
// the URL's scheme.
func applyWebhookBody(w *tenants.Webhook, b tenants.WebhookBody) error {
	if b.URL != nil {
		if _, err := tenants.ValidateWebhookURL(*b.URL); err != nil {
			return err
		}
		w.URL = *b.URL
	}
	if b.Description != nil {
		w.Description = *b.Description
	}
	if b.Events != nil {
		w.Events = slices.Clone(*b.Events)
	}
	if b.Thresholds != nil {
		w.Thresholds = slices.Clone(*b.Thresholds)
	}
	if b.Paused != nil {
		w.Paused = ""
		if *b.Paused {
			w.Paused = tenants.PausedByOwner
		}
	}
	return nil
}

func (s memWebhooks) Create(_ context.Context, tenantID string, b tenants.WebhookBody) (tenants.WebhookCreated, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.tenant(tenantID); err != nil {
		return tenants.WebhookCreated{}, err
	}
	if b.URL == nil {
		return tenants.WebhookCreated{}, errs.Errorf(errs.Invalid, "url: required")
	}
	w := tenants.Webhook{ID: m.id("wh"), TenantID: tenantID, Events: slices.Clone(tenants.WebhookEvents),
		Thresholds: slices.Clone(tenants.DefaultWebhookThresholds), CreatedAt: m.now(), UpdatedAt: m.now()}
	if err := applyWebhookBody(&w, b); err != nil {
		return tenants.WebhookCreated{}, err
	}
	secret := tenants.NewWebhookSecret()
	w.SecretPrefix = secret[:10]
	m.webhooks[w.ID] = w
	return tenants.WebhookCreated{Webhook: w, Secret: secret}, nil
}

func (s memWebhooks) List(_ context.Context, tenantID string) ([]tenants.Webhook, error) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if _, err := s.m.tenant(tenantID); err != nil {
		return nil, err
	}
	return sorted(s.m.webhooks, func(w tenants.Webhook) bool { return w.TenantID == tenantID }), nil
}

func (s memWebhooks) Get(_ context.Context, tenantID, id string) (tenants.Webhook, error) {
	return get(s.m, s.m.webhooks, webhookTenant, "webhook", tenantID, id)
}

func (s memWebhooks) Update(_ context.Context, tenantID, id string, b tenants.WebhookBody) (tenants.Webhook, error) {
	var bad error
	w, err := change(s.m, s.m.webhooks, webhookTenant, "webhook", tenantID, id, func(w *tenants.Webhook) {
		next := *w
		if bad = applyWebhookBody(&next, b); bad == nil {
			*w = next
		}
	})
	if err == nil {
		err = bad
	}
	return w.Result, err
}

func (s memWebhooks) Delete(_ context.Context, tenantID, id string) (tenants.Webhook, error) {
	w, err := remove(s.m, s.m.webhooks, webhookTenant, "webhook", tenantID, id)
	return w.Result, err
}

func (s memWebhooks) Rotate(_ context.Context, tenantID, id string) (tenants.WebhookCreated, error) {
	secret := tenants.NewWebhookSecret()
	w, err := change(s.m, s.m.webhooks, webhookTenant, "webhook", tenantID, id, func(w *tenants.Webhook) {
		w.SecretPrefix = secret[:10]
	})
	return tenants.WebhookCreated{Webhook: w.Result, Secret: secret}, err
}

func (s memWebhooks) Deliveries(_ context.Context, q tenants.DeliveryQuery) (tenants.DeliveryPage, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := lookup(m.webhooks, webhookTenant, "webhook", q.TenantID, q.WebhookID); err != nil {
		return tenants.DeliveryPage{}, err
	}
	ds := slices.Clone(m.deliveries[q.WebhookID])
	slices.Reverse(ds)
	if ds == nil {
		ds = []tenants.WebhookDelivery{}
	}
	return tenants.DeliveryPage{Deliveries: ds}, nil
}

func (s memWebhooks) Resend(_ context.Context, tenantID, webhookID, deliveryID string) (tenants.WebhookDelivery, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := lookup(m.webhooks, webhookTenant, "webhook", tenantID, webhookID); err != nil {
		return tenants.WebhookDelivery{}, err
	}
	for i, d := range m.deliveries[webhookID] {
		if d.ID == deliveryID {
			d.Status = tenants.DeliveryPending
			m.deliveries[webhookID][i] = d
			return d, nil
		}
	}
	return tenants.WebhookDelivery{}, notFound("delivery")
}
