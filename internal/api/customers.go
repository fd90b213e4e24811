package api

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Customers: a tenant's own customers, which hold its consumer keys. They
// are held in every server's config view (a check's answer names the
// key's customer), so writes wait (briefly) until this server has them.

func (h customerRoutes) createCustomer(c echo.Context) error {
	var b tenants.CustomerBody
	if err := bind(c, &b); err != nil {
		return err
	}
	w, err := h.Services.Customers.Create(c.Request().Context(), tenantID(c), b)
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.JSON(http.StatusCreated, w.Result)
}

// listCustomers answers one page of the tenant's customers, oldest first:
// ?search= keeps those whose external id, name or tier contains it (case
// ignored), ?limit= (1–500, default 50) and ?offset= page through them.
func (h customerRoutes) listCustomers(c echo.Context) error {
	q := tenants.CustomerQuery{TenantID: tenantID(c), Search: c.QueryParam("search")}
	var err error
	if q.Limit, q.Offset, err = pageParams(c, tenants.MaxCustomerPage); err != nil {
		return err
	}
	p, err := h.Services.Customers.Page(c.Request().Context(), q)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, p)
}

func (h customerRoutes) getCustomer(c echo.Context) error {
	cu, err := h.Services.Customers.Get(c.Request().Context(), tenantID(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, cu)
}

// customerKeys answers one page of the customer's keys, by name, revoked
// ones included: ?limit= and ?offset= as for customers.
func (h customerRoutes) customerKeys(c echo.Context) error {
	ctx := c.Request().Context()
	if _, err := h.Services.Customers.Get(ctx, tenantID(c), c.Param("id")); err != nil {
		return err
	}
	q := tenants.KeyQuery{TenantID: tenantID(c), CustomerID: c.Param("id"), IncludeRevoked: true}
	var err error
	if q.Limit, q.Offset, err = pageParams(c, tenants.MaxKeyPage); err != nil {
		return err
	}
	p, err := h.Services.Keys.Page(ctx, q)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"keys": orEmpty(p.Keys), "matched": p.Matched, "offset": p.Offset, "limit": p.Limit})
}

func (h customerRoutes) updateCustomer(c echo.Context) error {
	var b tenants.CustomerBody
	if err := bind(c, &b); err != nil {
		return err
	}
	w, err := h.Services.Customers.Update(c.Request().Context(), tenantID(c), c.Param("id"), b)
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.JSON(http.StatusOK, w.Result)
}

func (h customerRoutes) deleteCustomer(c echo.Context) error {
	w, err := h.Services.Customers.Delete(c.Request().Context(), tenantID(c), c.Param("id"))
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.NoContent(http.StatusNoContent)
}

// pageParams reads ?limit= (1 to maxLimit; 0 when absent, the store's
// default) and ?offset= (0 or more).
func pageParams(c echo.Context, maxLimit int) (limit, offset int, err error) {
	if v := c.QueryParam("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > maxLimit {
			return 0, 0, errs.Errorf(errs.Invalid, "limit: must be an integer between 1 and %d", maxLimit)
		}
	}
	if v := c.QueryParam("offset"); v != "" {
		if offset, err = strconv.Atoi(v); err != nil || offset < 0 {
			return 0, 0, errs.Errorf(errs.Invalid, "offset: must be an integer of 0 or more")
		}
	}
	return limit, offset, nil
}
