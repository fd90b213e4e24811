package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/tenants"
)

// Service keys: a tenant lists, adds and revokes its own with a service
// key; the operator does the same for any tenant under /v1/admin. Both
// share these handlers and differ only in where the tenant id comes from.

func (h serviceKeyRoutes) listServiceKeys(c echo.Context, tenant string) error {
	ks, err := h.Services.ServiceKeys.List(c.Request().Context(), tenant)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"service_keys": orEmpty(ks)})
}

func (h serviceKeyRoutes) createServiceKey(c echo.Context, tenant string) error {
	w, err := h.Services.ServiceKeys.Create(c.Request().Context(), tenant)
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.JSON(http.StatusCreated, serviceKeyCreated{ServiceKey: w.Result.Key, Key: w.Result.Secret})
}

// serviceKeyCreated is a new key with its secret, shown only here.
type serviceKeyCreated struct {
	tenants.ServiceKey
	Key string `json:"key"`
}

func (h serviceKeyRoutes) revokeServiceKey(c echo.Context, tenant, id string) error {
	w, err := h.Services.ServiceKeys.Revoke(c.Request().Context(), tenant, id)
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.JSON(http.StatusOK, w.Result)
}

func (h serviceKeyRoutes) tenantListServiceKeys(c echo.Context) error {
	return h.listServiceKeys(c, tenantID(c))
}
func (h serviceKeyRoutes) tenantCreateServiceKey(c echo.Context) error {
	return h.createServiceKey(c, tenantID(c))
}
func (h serviceKeyRoutes) tenantRevokeServiceKey(c echo.Context) error {
	return h.revokeServiceKey(c, tenantID(c), c.Param("id"))
}

func (h serviceKeyRoutes) adminListServiceKeys(c echo.Context) error {
	return h.listServiceKeys(c, c.Param("id"))
}
func (h serviceKeyRoutes) adminCreateServiceKey(c echo.Context) error {
	return h.createServiceKey(c, c.Param("id"))
}
func (h serviceKeyRoutes) adminRevokeServiceKey(c echo.Context) error {
	return h.revokeServiceKey(c, c.Param("id"), c.Param("key_id"))
}
