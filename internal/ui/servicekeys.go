package ui

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// newKeyCookie carries a new service key's secret, sealed for the session
// that made it, from the form's POST to the page it redirects to, which
// shows it once and deletes the cookie; a reload shows nothing and makes
// nothing.
const newKeyCookie = "sluice_new_service_key"

// serviceKeyHandler lists, adds and revokes service keys: a tenant owner's
// own (/ui/service-keys) and, for the operator, any tenant's
// (/ui/admin/tenants/:id/service-keys).
type serviceKeyHandler struct {
	config service.Services
	wait   versionWaiter
	sess   *sessions
	// operator: the tenant comes from the path, not the session.
	operator bool
}

func (h *serviceKeyHandler) tenant(c echo.Context) string {
	if h.operator {
		return c.Param("id")
	}
	return mustSession(c).TenantID
}

func (h *serviceKeyHandler) base(c echo.Context) string {
	if h.operator {
		return "/ui/admin/tenants/" + c.Param("id") + "/service-keys"
	}
	return "/ui/service-keys"
}

func (h *serviceKeyHandler) list(c echo.Context) error {
	v := views.ServiceKeysView{}
	if ck, err := c.Cookie(newKeyCookie); err == nil && ck.Value != "" {
		if secret, ok := h.sess.open(mustSession(c).SID, ck.Value); ok {
			v.Secret = secret
		}
		c.SetCookie(h.cookie(c, "", -1))
	}
	return h.render(c, http.StatusOK, v)
}

// render fills the key list and shows the page.
func (h *serviceKeyHandler) render(c echo.Context, status int, v views.ServiceKeysView) error {
	ks, err := h.config.ServiceKeys.List(c.Request().Context(), h.tenant(c))
	if err != nil {
		return err
	}
	v.Base = h.base(c)
	for _, k := range ks {
		row := views.ServiceKeyRow{ID: k.ID, Prefix: k.Prefix, CreatedAt: k.CreatedAt, LastUsed: k.LastUsedAt, Status: "active"}
		if k.RevokedAt != nil {
			row.Status = "revoked"
		}
		v.Keys = append(v.Keys, row)
	}
	nav := views.NavService
	if h.operator {
		nav = views.NavTenants
		v.TenantName = h.tenantName(c)
	}
	return render(c, status, views.ServiceKeys(page(c, "Service keys", nav), v))
}

func (h *serviceKeyHandler) tenantName(c echo.Context) string {
	ts, err := h.config.Tenants.List(c.Request().Context())
	if err == nil {
		for _, t := range ts {
			if t.ID == c.Param("id") {
				return t.Name
			}
		}
	}
	return c.Param("id")
}

func (h *serviceKeyHandler) cookie(c echo.Context, value string, maxAge int) *http.Cookie {
	ck := h.sess.cookie(c.Request(), newKeyCookie, value, maxAge)
	ck.Path = h.base(c)
	return ck
}

func (h *serviceKeyHandler) create(c echo.Context) error {
	w, err := h.config.ServiceKeys.Create(c.Request().Context(), h.tenant(c))
	if err != nil {
		if tenants.CapReached(err) {
			return h.render(c, http.StatusConflict, views.ServiceKeysView{Error: errs.Message(err)})
		}
		return err
	}
	h.wait.WaitVersion(c.Request().Context(), w.Version)
	c.SetCookie(h.cookie(c, h.sess.seal(mustSession(c).SID, w.Result.Secret), 300))
	return seeOther(c, h.base(c), "service-key-created")
}

func (h *serviceKeyHandler) revoke(c echo.Context) error {
	w, err := h.config.ServiceKeys.Revoke(c.Request().Context(), h.tenant(c), c.Param("key_id"))
	if errs.Is(err, errs.Conflict) {
		return h.render(c, http.StatusConflict, views.ServiceKeysView{Error: "This is the last active service key, so it stays: add a new key first, then revoke this one."})
	}
	if err != nil {
		return err
	}
	h.wait.WaitVersion(c.Request().Context(), w.Version)
	return seeOther(c, h.base(c), "service-key-revoked")
}
