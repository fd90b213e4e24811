package api

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Webhooks: a tenant's endpoints and their deliveries. Servers hold
// nothing of them, so no write here waits for a config version.

// webhookAnswer is an endpoint as the API shows it, with its secret only
// when it was just made (create, rotate).
type webhookAnswer struct {
	tenants.Webhook
	Secret string `json:"secret,omitempty"`
}

func (h webhookRoutes) createWebhook(c echo.Context) error {
	var b tenants.WebhookBody
	if err := bind(c, &b); err != nil {
		return err
	}
	w, err := h.Services.Webhooks.Create(c.Request().Context(), tenantID(c), b)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, webhookAnswer{Webhook: w.Webhook, Secret: w.Secret})
}

func (h webhookRoutes) listWebhooks(c echo.Context) error {
	ws, err := h.Services.Webhooks.List(c.Request().Context(), tenantID(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"webhooks": orEmpty(ws)})
}

func (h webhookRoutes) getWebhook(c echo.Context) error {
	w, err := h.Services.Webhooks.Get(c.Request().Context(), tenantID(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, w)
}

func (h webhookRoutes) updateWebhook(c echo.Context) error {
	var b tenants.WebhookBody
	if err := bind(c, &b); err != nil {
		return err
	}
	w, err := h.Services.Webhooks.Update(c.Request().Context(), tenantID(c), c.Param("id"), b)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, w)
}

func (h webhookRoutes) deleteWebhook(c echo.Context) error {
	if _, err := h.Services.Webhooks.Delete(c.Request().Context(), tenantID(c), c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (h webhookRoutes) rotateWebhook(c echo.Context) error {
	w, err := h.Services.Webhooks.Rotate(c.Request().Context(), tenantID(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, webhookAnswer{Webhook: w.Webhook, Secret: w.Secret})
}

func (h webhookRoutes) listDeliveries(c echo.Context) error {
	q := tenants.DeliveryQuery{TenantID: tenantID(c), WebhookID: c.Param("id")}
	if v := c.QueryParam("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return errs.Errorf(errs.Invalid, "before: must be the next_before of a previous page")
		}
		q.Before = n
	}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > tenants.MaxDeliveryPage {
			return errs.Errorf(errs.Invalid, "limit: must be between 1 and %d", tenants.MaxDeliveryPage)
		}
		q.Limit = n
	}
	page, err := h.Services.Webhooks.Deliveries(c.Request().Context(), q)
	if err != nil {
		return err
	}
	out := map[string]any{"deliveries": orEmpty(page.Deliveries)}
	if page.Next > 0 {
		out["next_before"] = page.Next
	}
	return c.JSON(http.StatusOK, out)
}

func (h webhookRoutes) resendDelivery(c echo.Context) error {
	d, err := h.Services.Webhooks.Resend(c.Request().Context(), tenantID(c), c.Param("id"), c.Param("delivery_id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, d)
}
