package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/tenants"
)

// JWT issuers: a tenant's identity providers, held in every server's
// config view, so writes wait (briefly) until this server verifies with
// them.

func (h jwtIssuerRoutes) createIssuer(c echo.Context) error {
	var b tenants.JWTIssuerBody
	if err := bind(c, &b); err != nil {
		return err
	}
	// The body's own errors first, then where its URL points.
	if err := b.Apply(&tenants.JWTIssuer{}); err != nil {
		return err
	}
	if err := h.checkJWKSURL(c, b); err != nil {
		return err
	}
	w, err := h.Services.JWTIssuers.Create(c.Request().Context(), tenantID(c), b)
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.JSON(http.StatusCreated, w.Result)
}

func (h jwtIssuerRoutes) listIssuers(c echo.Context) error {
	is, err := h.Services.JWTIssuers.List(c.Request().Context(), tenantID(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"issuers": orEmpty(is)})
}

func (h jwtIssuerRoutes) getIssuer(c echo.Context) error {
	iss, err := h.Services.JWTIssuers.Get(c.Request().Context(), tenantID(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, iss)
}

func (h jwtIssuerRoutes) updateIssuer(c echo.Context) error {
	var b tenants.JWTIssuerBody
	if err := bind(c, &b); err != nil {
		return err
	}
	if err := h.checkJWKSURL(c, b); err != nil {
		return err
	}
	w, err := h.Services.JWTIssuers.Update(c.Request().Context(), tenantID(c), c.Param("id"), b)
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.JSON(http.StatusOK, w.Result)
}

func (h jwtIssuerRoutes) deleteIssuer(c echo.Context) error {
	w, err := h.Services.JWTIssuers.Delete(c.Request().Context(), tenantID(c), c.Param("id"))
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.NoContent(http.StatusNoContent)
}

// checkJWKSURL checks a new jwks_url's form and where it points
// (Config.CheckJWKSURL) before anything is written.
func (h jwtIssuerRoutes) checkJWKSURL(c echo.Context, b tenants.JWTIssuerBody) error {
	if b.JWKSURL == nil || *b.JWKSURL == "" || h.CheckJWKSURL == nil {
		return nil
	}
	return h.CheckJWKSURL(c.Request().Context(), *b.JWKSURL)
}
