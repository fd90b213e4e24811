package ui

import (
	"context"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// issuerHandler serves the tenant's JWT issuers page: the list, adding
// one with a JWKS URL, deleting one. Owners change them, as webhooks.
type issuerHandler struct {
	config service.Services
	// checkURL checks where a jwks_url points (Deps.CheckJWKSURL); nil
	// checks its form only.
	checkURL func(ctx context.Context, url string) error
}

// commaList splits "a, b c" into its non-empty parts.
func commaList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

func issuerRow(iss tenants.JWTIssuer) views.JWTIssuerRow {
	keys := iss.JWKSURL
	if keys == "" {
		keys = "inline key set"
	}
	claims := "subject: " + iss.Claims.Subject
	if iss.Claims.Tier != "" {
		claims += ", tier: " + iss.Claims.Tier
	}
	if iss.Claims.Customer != "" {
		claims += ", customer: " + iss.Claims.Customer
	}
	return views.JWTIssuerRow{ID: iss.ID, Issuer: iss.Issuer, Audiences: strings.Join(iss.Audiences, ", "), Keys: keys,
		Algorithms: strings.Join(iss.Algorithms, ", "), Claims: claims, CreatedAt: iss.CreatedAt}
}

func (h *issuerHandler) list(c echo.Context) error {
	return h.render(c, http.StatusOK, views.JWTIssuersView{Form: views.JWTIssuerForm{Algorithms: "RS256", Subject: "sub"}})
}

func (h *issuerHandler) render(c echo.Context, status int, v views.JWTIssuersView) error {
	is, err := h.config.JWTIssuers.List(c.Request().Context(), mustSession(c).TenantID)
	if err != nil {
		return err
	}
	for _, iss := range is {
		v.Issuers = append(v.Issuers, issuerRow(iss))
	}
	v.Full = len(is) >= tenants.MaxJWTIssuers
	return render(c, status, views.JWTIssuers(page(c, "JWT issuers", views.NavIssuers), v))
}

func (h *issuerHandler) create(c echo.Context) error {
	f := views.JWTIssuerForm{Issuer: strings.TrimSpace(c.FormValue("issuer")), Audiences: strings.TrimSpace(c.FormValue("audiences")),
		JWKSURL: strings.TrimSpace(c.FormValue("jwks_url")), Algorithms: strings.TrimSpace(c.FormValue("algorithms")),
		Subject: strings.TrimSpace(c.FormValue("subject")), Tier: strings.TrimSpace(c.FormValue("tier"))}
	audiences, algs := commaList(f.Audiences), commaList(f.Algorithms)
	b := tenants.JWTIssuerBody{Issuer: &f.Issuer, Audiences: &audiences, JWKSURL: &f.JWKSURL, Algorithms: &algs,
		Claims: &tenants.JWTClaims{Subject: f.Subject, Tier: f.Tier}}
	err := b.Apply(&tenants.JWTIssuer{})
	if err == nil && h.checkURL != nil {
		err = h.checkURL(c.Request().Context(), f.JWKSURL)
	}
	if err == nil {
		if _, err = h.config.JWTIssuers.Create(c.Request().Context(), mustSession(c).TenantID, b); err == nil {
			return seeOther(c, "/ui/jwt-issuers", "issuer-created")
		}
	}
	if errs.Is(err, errs.Invalid) || errs.Is(err, errs.Conflict) {
		return h.render(c, http.StatusBadRequest, views.JWTIssuersView{Form: f, Error: errs.Message(err)})
	}
	return err
}

func (h *issuerHandler) delete(c echo.Context) error {
	if _, err := h.config.JWTIssuers.Delete(c.Request().Context(), mustSession(c).TenantID, c.Param("id")); err != nil {
		return err
	}
	return seeOther(c, "/ui/jwt-issuers", "issuer-deleted")
}
