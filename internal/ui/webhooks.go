package ui

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// webhookHandler serves the tenant's webhook pages: the endpoints, and
// per endpoint its settings and deliveries.
type webhookHandler struct {
	config service.Services
	sess   *sessions
}

// newWebhookSecretCookie carries a new or rotated endpoint's secret, sealed
// for the session that made it, from the form's POST to the page it
// redirects to, which shows it once and deletes the cookie.
const newWebhookSecretCookie = "sluice_new_webhook_secret"

func webhookURL(id string) string { return "/ui/webhooks/" + url.PathEscape(id) }

func webhookRow(w tenants.Webhook) views.WebhookRow {
	ts := make([]string, len(w.Thresholds))
	for i, t := range w.Thresholds {
		ts[i] = strconv.Itoa(t) + " %"
	}
	return views.WebhookRow{ID: w.ID, URL: w.URL, Description: w.Description, SecretPrefix: w.SecretPrefix,
		Events: w.Events, Thresholds: strings.Join(ts, ", "), CreatedAt: w.CreatedAt, PreviousSecretUntil: w.PreviousSecretUntil, Paused: w.Paused}
}

// webhookForm reads the endpoint form: url, description, the events
// ticked, thresholds as "80, 100".
func webhookForm(c echo.Context) (views.WebhookForm, tenants.WebhookBody, error) {
	f := views.WebhookForm{URL: strings.TrimSpace(c.FormValue("url")), Description: strings.TrimSpace(c.FormValue("description")),
		Thresholds: strings.TrimSpace(c.FormValue("thresholds")), Events: map[string]bool{}}
	params, _ := c.FormParams()
	events := []string{}
	for _, e := range params["events"] {
		f.Events[e] = true
		events = append(events, e)
	}
	b := tenants.WebhookBody{URL: &f.URL, Description: &f.Description, Events: &events}
	if f.Thresholds != "" {
		var ts []int
		for _, part := range strings.FieldsFunc(f.Thresholds, func(r rune) bool { return r == ',' || r == ' ' || r == '%' }) {
			n, err := strconv.Atoi(part)
			if err != nil {
				return f, b, errs.Errorf(errs.Invalid, "thresholds: %q is not a whole percent", part)
			}
			ts = append(ts, n)
		}
		b.Thresholds = &ts
	}
	return f, b, nil
}

func formOf(w tenants.Webhook) views.WebhookForm {
	f := views.WebhookForm{URL: w.URL, Description: w.Description, Events: map[string]bool{}}
	for _, e := range w.Events {
		f.Events[e] = true
	}
	ts := make([]string, len(w.Thresholds))
	for i, t := range w.Thresholds {
		ts[i] = strconv.Itoa(t)
	}
	f.Thresholds = strings.Join(ts, ", ")
	return f
}

func (h *webhookHandler) cookie(c echo.Context, value string, maxAge int) *http.Cookie {
	ck := h.sess.cookie(c.Request(), newWebhookSecretCookie, value, maxAge)
	ck.Path = "/ui/webhooks"
	return ck
}

// takeSecret answers the secret a redirect carried, once.
func (h *webhookHandler) takeSecret(c echo.Context) string {
	ck, err := c.Cookie(newWebhookSecretCookie)
	if err != nil || ck.Value == "" {
		return ""
	}
	c.SetCookie(h.cookie(c, "", -1))
	secret, _ := h.sess.open(mustSession(c).SID, ck.Value)
	return secret
}

func (h *webhookHandler) list(c echo.Context) error {
	f := views.WebhookForm{Thresholds: "80, 100", Events: map[string]bool{}}
	for _, e := range tenants.WebhookEvents {
		f.Events[e] = true
	}
	return h.renderList(c, http.StatusOK, views.WebhooksView{Form: f})
}

func (h *webhookHandler) renderList(c echo.Context, status int, v views.WebhooksView) error {
	ws, err := h.config.Webhooks.List(c.Request().Context(), mustSession(c).TenantID)
	if err != nil {
		return err
	}
	for _, w := range ws {
		v.Hooks = append(v.Hooks, webhookRow(w))
	}
	v.Events = tenants.WebhookEvents
	v.Full = len(ws) >= tenants.MaxWebhooks
	return render(c, status, views.Webhooks(page(c, "Webhooks", views.NavWebhooks), v))
}

func (h *webhookHandler) create(c echo.Context) error {
	f, b, err := webhookForm(c)
	if err == nil {
		var w tenants.WebhookCreated
		w, err = h.config.Webhooks.Create(c.Request().Context(), mustSession(c).TenantID, b)
		if err == nil {
			c.SetCookie(h.cookie(c, h.sess.seal(mustSession(c).SID, w.Secret), 300))
			return seeOther(c, webhookURL(w.Webhook.ID), "webhook-created")
		}
	}
	if errs.Is(err, errs.Invalid) || errs.Is(err, errs.Conflict) {
		return h.renderList(c, http.StatusBadRequest, views.WebhooksView{Form: f, Error: errs.Message(err)})
	}
	return err
}

func (h *webhookHandler) show(c echo.Context) error {
	w, err := h.config.Webhooks.Get(c.Request().Context(), mustSession(c).TenantID, c.Param("id"))
	if err != nil {
		return err
	}
	return h.renderOne(c, http.StatusOK, w, views.WebhookView{Form: formOf(w), Secret: h.takeSecret(c)})
}

func (h *webhookHandler) renderOne(c echo.Context, status int, w tenants.Webhook, v views.WebhookView) error {
	q := tenants.DeliveryQuery{TenantID: mustSession(c).TenantID, WebhookID: w.ID, Limit: tenants.DefaultDeliveryPage}
	if b, err := strconv.ParseInt(c.QueryParam("before"), 10, 64); err == nil && b > 0 {
		q.Before = b
	}
	p, err := h.config.Webhooks.Deliveries(c.Request().Context(), q)
	if err != nil {
		return err
	}
	v.Hook, v.Events = webhookRow(w), tenants.WebhookEvents
	for _, d := range p.Deliveries {
		v.Deliveries = append(v.Deliveries, views.DeliveryRow{ID: d.ID, Event: d.Event, Status: d.Status, Attempts: d.Attempts,
			Code: d.ResponseCode, LatencyMS: d.LatencyMS, Error: d.LastError, CreatedAt: d.CreatedAt, LastAttempt: d.LastAttemptAt, NextAttempt: d.NextAttemptAt})
	}
	if p.Next > 0 {
		v.Next = webhookURL(w.ID) + "?before=" + strconv.FormatInt(p.Next, 10)
	}
	return render(c, status, views.WebhookPage(page(c, "Webhook", views.NavWebhooks), v))
}

func (h *webhookHandler) update(c echo.Context) error {
	ctx := c.Request().Context()
	tenantID := mustSession(c).TenantID
	f, b, err := webhookForm(c)
	if err == nil {
		if _, err = h.config.Webhooks.Update(ctx, tenantID, c.Param("id"), b); err == nil {
			return seeOther(c, webhookURL(c.Param("id")), "webhook-saved")
		}
	}
	if !errs.Is(err, errs.Invalid) {
		return err
	}
	w, gerr := h.config.Webhooks.Get(ctx, tenantID, c.Param("id"))
	if gerr != nil {
		return gerr
	}
	return h.renderOne(c, http.StatusBadRequest, w, views.WebhookView{Form: f, Error: errs.Message(err)})
}

func (h *webhookHandler) rotate(c echo.Context) error {
	w, err := h.config.Webhooks.Rotate(c.Request().Context(), mustSession(c).TenantID, c.Param("id"))
	if err != nil {
		return err
	}
	c.SetCookie(h.cookie(c, h.sess.seal(mustSession(c).SID, w.Secret), 300))
	return seeOther(c, webhookURL(w.Webhook.ID), "webhook-rotated")
}

func (h *webhookHandler) pause(c echo.Context) error { return h.setPaused(c, true, "webhook-paused") }

func (h *webhookHandler) resume(c echo.Context) error {
	return h.setPaused(c, false, "webhook-resumed")
}

func (h *webhookHandler) setPaused(c echo.Context, paused bool, flash string) error {
	if _, err := h.config.Webhooks.Update(c.Request().Context(), mustSession(c).TenantID, c.Param("id"), tenants.WebhookBody{Paused: &paused}); err != nil {
		return err
	}
	return seeOther(c, webhookURL(c.Param("id")), flash)
}

func (h *webhookHandler) delete(c echo.Context) error {
	if _, err := h.config.Webhooks.Delete(c.Request().Context(), mustSession(c).TenantID, c.Param("id")); err != nil {
		return err
	}
	return seeOther(c, "/ui/webhooks", "webhook-deleted")
}

func (h *webhookHandler) resend(c echo.Context) error {
	if _, err := h.config.Webhooks.Resend(c.Request().Context(), mustSession(c).TenantID, c.Param("id"), c.Param("delivery_id")); err != nil {
		return err
	}
	return seeOther(c, webhookURL(c.Param("id")), "webhook-resent")
}
