package api

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

func (h *handler) createTenant(c echo.Context) error {
	// Its own type: the API takes these three fields only (a tenant the
	// API makes is never a demo tenant, bus.TenantCreate.Demo).
	var b struct {
		Name          string `json:"name"`
		OwnerEmail    string `json:"owner_email"`
		OwnerPassword string `json:"owner_password"`
	}
	if err := bind(c, &b); err != nil {
		return err
	}
	req := bus.TenantCreate{Name: b.Name, OwnerEmail: b.OwnerEmail, OwnerPassword: b.OwnerPassword}
	var w bus.Written[bus.TenantCreated]
	if err := h.Worker.Call(c.Request().Context(), bus.OpTenantCreate, req, &w); err != nil {
		return err
	}
	h.applied(c, w.Version)
	t := w.Result.Tenant
	return c.JSON(http.StatusCreated, map[string]any{"id": t.ID, "name": t.Name, "created_at": t.CreatedAt, "service_key": w.Result.ServiceKey})
}

func (h *handler) listTenants(c echo.Context) error {
	ts := []tenants.TenantSummary{}
	if err := h.Worker.Call(c.Request().Context(), bus.OpTenantList, struct{}{}, &ts); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"tenants": ts})
}

func (h *handler) getTenant(c echo.Context) error {
	var t tenants.TenantSummary
	if err := h.Worker.Call(c.Request().Context(), bus.OpTenantGet, bus.TenantScoped{TenantID: c.Param("id")}, &t); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t)
}

func (h *handler) suspendTenant(c echo.Context) error { return h.tenantState(c, bus.OpTenantSuspend) }
func (h *handler) resumeTenant(c echo.Context) error  { return h.tenantState(c, bus.OpTenantResume) }

// tenantState suspends or resumes a tenant and answers it as it now is.
func (h *handler) tenantState(c echo.Context, op string) error {
	var w bus.Written[tenants.Tenant]
	if err := h.Worker.Call(c.Request().Context(), op, bus.TenantScoped{TenantID: c.Param("id")}, &w); err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.JSON(http.StatusOK, w.Result)
}

func (h *handler) deleteTenant(c echo.Context) error {
	var w bus.Written[tenants.Tenant]
	if err := h.Worker.Call(c.Request().Context(), bus.OpTenantDelete, bus.TenantScoped{TenantID: c.Param("id")}, &w); err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.NoContent(http.StatusNoContent)
}

func (h *handler) abuse(c echo.Context) error { return h.rankIdentities(c, "") }

func (h *handler) createBlock(c echo.Context) error {
	var b struct {
		TenantID  string           `json:"tenant_id"`
		Identity  tenants.Identity `json:"identity"`
		Reason    string           `json:"reason"`
		ExpiresAt *time.Time       `json:"expires_at"`
	}
	if err := bind(c, &b); err != nil {
		return err
	}
	if b.TenantID == "" {
		return errs.Errorf(errs.Invalid, "tenant_id: required")
	}
	var w bus.Written[tenants.Block]
	blk := tenants.Block{TenantID: b.TenantID, Identity: b.Identity, Reason: b.Reason, ExpiresAt: b.ExpiresAt}
	if err := h.Worker.Call(c.Request().Context(), bus.OpBlockCreate, blk, &w); err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.JSON(http.StatusCreated, w.Result)
}

func (h *handler) listBlocks(c echo.Context) error {
	bs := []tenants.Block{}
	if err := h.Worker.Call(c.Request().Context(), bus.OpBlockList, bus.TenantScoped{TenantID: c.QueryParam("tenant_id")}, &bs); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"blocks": bs})
}

func (h *handler) deleteBlock(c echo.Context) error {
	var w bus.Written[struct{}]
	if err := h.Worker.Call(c.Request().Context(), bus.OpBlockDelete, bus.TenantScoped{ID: c.Param("id")}, &w); err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.NoContent(http.StatusNoContent)
}
