package api

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

func (h tenantRoutes) createTenant(c echo.Context) error {
	var b struct {
		Name          string `json:"name"`
		OwnerEmail    string `json:"owner_email"`
		OwnerPassword string `json:"owner_password"`
		TimeZone      string `json:"time_zone"`
	}
	if err := bind(c, &b); err != nil {
		return err
	}
	// The zone is checked before anything is made, so a bad one makes no
	// tenant; it is set right after the tenant, in a write of its own.
	if b.TimeZone != "" {
		if err := tenants.ValidateTimeZone("time_zone", b.TimeZone); err != nil {
			return err
		}
	}
	ctx := c.Request().Context()
	w, err := h.Services.Tenants.Create(ctx, b.Name, b.OwnerEmail, b.OwnerPassword)
	if err != nil {
		return err
	}
	t := w.Result.Tenant
	version := w.Version
	if b.TimeZone != "" && b.TimeZone != t.Zone() {
		tz, err := h.Services.Tenants.SetTimeZone(ctx, t.ID, b.TimeZone)
		if err != nil {
			return err
		}
		t, version = tz.Result, tz.Version
	}
	h.applied(c, version)
	return c.JSON(http.StatusCreated, map[string]any{"id": t.ID, "name": t.Name, "created_at": t.CreatedAt, "time_zone": t.Zone(), "service_key": w.Result.ServiceKey})
}

// patchTenant changes what an operator may change of a tenant: its time
// zone.
func (h tenantRoutes) patchTenant(c echo.Context) error { return h.setTimeZone(c, c.Param("id")) }

// tenantSelf answers the calling tenant.
func (h tenantRoutes) tenantSelf(c echo.Context) error {
	t, err := h.Services.Tenants.Get(c.Request().Context(), tenantID(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t.Tenant)
}

// tenantPatchSelf changes the calling tenant's time zone.
func (h tenantRoutes) tenantPatchSelf(c echo.Context) error { return h.setTimeZone(c, tenantID(c)) }

func (h tenantRoutes) setTimeZone(c echo.Context, id string) error {
	var b struct {
		TimeZone *string `json:"time_zone"`
	}
	if err := bind(c, &b); err != nil {
		return err
	}
	if b.TimeZone == nil {
		return errs.Errorf(errs.Invalid, "time_zone: required, an IANA time zone name such as \"Europe/Paris\"")
	}
	w, err := h.Services.Tenants.SetTimeZone(c.Request().Context(), id, *b.TimeZone)
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.JSON(http.StatusOK, w.Result)
}

func (h tenantRoutes) listTenants(c echo.Context) error {
	ts, err := h.Services.Tenants.List(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"tenants": orEmpty(ts)})
}

func (h tenantRoutes) getTenant(c echo.Context) error {
	t, err := h.Services.Tenants.Get(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t)
}

func (h tenantRoutes) suspendTenant(c echo.Context) error {
	return h.tenantState(c, h.Services.Tenants.Suspend)
}

func (h tenantRoutes) resumeTenant(c echo.Context) error {
	return h.tenantState(c, h.Services.Tenants.Resume)
}

// tenantState suspends or resumes a tenant and answers it as it now is.
func (h tenantRoutes) tenantState(c echo.Context, change func(ctx context.Context, id string) (service.Written[tenants.Tenant], error)) error {
	w, err := change(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.JSON(http.StatusOK, w.Result)
}

func (h tenantRoutes) deleteTenant(c echo.Context) error {
	w, err := h.Services.Tenants.Delete(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.NoContent(http.StatusNoContent)
}

func (h blockRoutes) abuse(c echo.Context) error { return h.rankIdentities(c, "") }

func (h blockRoutes) createBlock(c echo.Context) error {
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
	blk := tenants.Block{TenantID: b.TenantID, Identity: b.Identity, Reason: b.Reason, ExpiresAt: b.ExpiresAt}
	w, err := h.Services.Blocks.Create(c.Request().Context(), blk)
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.JSON(http.StatusCreated, w.Result)
}

func (h blockRoutes) listBlocks(c echo.Context) error {
	bs, err := h.Services.Blocks.List(c.Request().Context(), c.QueryParam("tenant_id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"blocks": orEmpty(bs)})
}

func (h blockRoutes) deleteBlock(c echo.Context) error {
	w, err := h.Services.Blocks.Delete(c.Request().Context(), "", c.Param("id"))
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.NoContent(http.StatusNoContent)
}

// orEmpty answers s, or an empty slice for nil, so that a list answers
// [] and never null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
