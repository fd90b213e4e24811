package ui

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// The operator's page of one tenant (/ui/admin/tenants/:id): details,
// suspend or resume, and delete. Deleting asks for the tenant's name typed
// out, checked here, so a slip of the mouse on the wrong tenant's page
// deletes nothing.

func (h *adminHandler) tenant(c echo.Context) error {
	return h.renderTenant(c, http.StatusOK, "")
}

func (h *adminHandler) renderTenant(c echo.Context, status int, confirmError string) error {
	ctx := c.Request().Context()
	id := c.Param("id")
	t, err := h.config.Tenants.Get(ctx, id)
	if err != nil {
		return err
	}
	users, err := h.config.Users.List(ctx, id)
	if err != nil {
		return err
	}
	v := views.TenantView{
		ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt, SuspendedAt: t.SuspendedAt, Demo: t.Demo,
		Policies: t.Policies, Keys: t.ConsumerKeys, ServiceKeys: t.ServiceKeys, Users: t.Users,
		ConfirmError: confirmError,
	}
	for _, u := range users {
		if u.Role == tenants.RoleOwner {
			v.Owners = append(v.Owners, u.Email)
		}
	}
	from, to := window(24*time.Hour, time.Minute, h.now())
	pts, err := timeseries(ctx, h.analytics, service.TimeseriesQuery{TenantID: id, From: from, To: to, Step: stepParam(to.Sub(from))})
	if err != nil {
		v.Error = userMessage(err)
	}
	for _, p := range pts {
		v.Allowed += p.Allowed
		v.Denied += p.Denied
	}
	return render(c, status, views.Tenant(page(c, t.Name, views.NavTenants), v))
}

func (h *adminHandler) suspendTenant(c echo.Context) error {
	return h.setSuspended(c, h.config.Tenants.Suspend, "tenant-suspended")
}

func (h *adminHandler) resumeTenant(c echo.Context) error {
	return h.setSuspended(c, h.config.Tenants.Resume, "tenant-resumed")
}

func (h *adminHandler) setSuspended(c echo.Context, change func(ctx context.Context, id string) (service.Written[tenants.Tenant], error), done string) error {
	id := c.Param("id")
	w, err := change(c.Request().Context(), id)
	if err != nil {
		return err
	}
	applied(c.Request().Context(), h.wait, w.Version)
	return seeOther(c, "/ui/admin/tenants/"+id, done)
}

func (h *adminHandler) deleteTenant(c echo.Context) error {
	ctx := c.Request().Context()
	id := c.Param("id")
	t, err := h.config.Tenants.Get(ctx, id)
	if err != nil {
		return err
	}
	if typed := strings.TrimSpace(c.FormValue("confirm_name")); typed != t.Name {
		msg := "type the tenant's name exactly, " + t.Name + ", to delete it"
		if typed == "" {
			msg = "type the tenant's name, " + t.Name + ", to delete it"
		}
		return h.renderTenant(c, http.StatusBadRequest, msg)
	}
	w, err := h.config.Tenants.Delete(ctx, id)
	if err != nil {
		if errs.Is(err, errs.NotFound) {
			return seeOther(c, "/ui/admin/tenants", "tenant-deleted")
		}
		return err
	}
	applied(ctx, h.wait, w.Version)
	return seeOther(c, "/ui/admin/tenants", "tenant-deleted")
}

// openTenant takes the operator into a tenant's dashboard: the same login
// with a new session that carries the tenant, so the tenant's pages act on
// it, and every change made there is audited under the operator's login.
// The worker records the opening in the tenant's audit log. The session
// it replaces is signed out.
func (h *adminHandler) openTenant(c echo.Context) error {
	s := mustSession(c)
	t, err := h.config.Tenants.Open(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	if err := h.switchSession(c, s, t.ID, t.Name); err != nil {
		return err
	}
	h.auth.log.Info("operator opened a tenant's dashboard", "user", s.UserID, "tenant", t.ID)
	return seeOther(c, "/ui/", "tenant-opened")
}

// leaveTenant takes the operator back to the operator's pages.
func (h *adminHandler) leaveTenant(c echo.Context) error {
	s := mustSession(c)
	if err := h.switchSession(c, s, "", ""); err != nil {
		return err
	}
	return seeOther(c, "/ui/admin/tenants", "")
}

func (h *adminHandler) switchSession(c echo.Context, s session, tenantID, tenantName string) error {
	next := session{UserID: s.UserID, TenantID: tenantID, TenantName: tenantName, Role: s.Role, Email: s.Email, Version: s.Version}
	if err := h.auth.startSession(c, next); err != nil {
		return err
	}
	if r := h.auth.revoker; r != nil {
		if err := r.Revoke(c.Request().Context(), s.SID, s.Expires); err != nil {
			h.auth.log.Warn("the session an operator left could not be signed out; it lasts until it expires", "user", s.UserID, "err", err)
		}
	}
	return nil
}
