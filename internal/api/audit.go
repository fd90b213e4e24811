package api

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// The audit log: a tenant reads its own entries with a service key, the
// operator every tenant's (and the platform's) under /v1/admin.

// withActor puts who is calling into the request's context, so the config
// writes a handler makes carry it to the worker (bus.ActorHeader) and into
// the audit log. It wraps config routes only: the check path allocates
// nothing for it.
func (h *handler) withActor(actor func(c echo.Context) tenants.Actor, next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		c.SetRequest(r.WithContext(tenants.WithActor(r.Context(), actor(c))))
		return next(c)
	}
}

// serviceKeyActor names the tenant's server by the prefix of the service
// key it authenticated with (serviceAuth ran first).
func serviceKeyActor(c echo.Context) tenants.Actor {
	token, _ := bearer(c)
	return tenants.ServiceKeyActor(token)
}

func operatorActor(echo.Context) tenants.Actor { return tenants.OperatorTokenActor() }

// auditQuery reads the page and filters from the query string.
func auditQuery(c echo.Context) (tenants.AuditQuery, error) {
	q := tenants.AuditQuery{ObjectType: c.QueryParam("object_type"), Actor: c.QueryParam("actor")}
	if v := c.QueryParam("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return q, errs.Errorf(errs.Invalid, "before: must be an entry id (a positive integer)")
		}
		q.Before = n
	}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > tenants.MaxAuditPage {
			return q, errs.Errorf(errs.Invalid, "limit: must be between 1 and %d", tenants.MaxAuditPage)
		}
		q.Limit = n
	}
	return q, nil
}

func (h auditRoutes) listAudit(c echo.Context, q tenants.AuditQuery) error {
	page, err := h.Services.Audit.List(c.Request().Context(), q)
	if err != nil {
		return err
	}
	out := map[string]any{"entries": page.Entries}
	if page.Next > 0 {
		out["next_before"] = page.Next
	}
	return c.JSON(http.StatusOK, out)
}

func (h auditRoutes) tenantAudit(c echo.Context) error {
	q, err := auditQuery(c)
	if err != nil {
		return err
	}
	q.TenantID = tenantID(c)
	return h.listAudit(c, q)
}

func (h auditRoutes) tenantAuditEntry(c echo.Context) error {
	id, err := tenants.ParseAuditID(c.Param("id"))
	if err != nil {
		return err
	}
	e, err := h.Services.Audit.Get(c.Request().Context(), service.AuditGet{TenantID: tenantID(c), ID: id})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, e)
}

func (h auditRoutes) adminAudit(c echo.Context) error {
	q, err := auditQuery(c)
	if err != nil {
		return err
	}
	q.TenantID, q.AllTenants = c.QueryParam("tenant_id"), true
	return h.listAudit(c, q)
}
