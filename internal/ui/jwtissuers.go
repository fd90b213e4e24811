package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// issuerHandler serves the tenant's JWT issuers pages: the list, adding
// one (with a JWKS URL or an inline key set), editing and deleting one.
// Owners change them, as webhooks.
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

// issuerForm reads the issuer form: f as submitted, b what it asks for.
// An inline key set, when given, replaces the URL. Claims the form does not
// show keep their value in claims.
func issuerForm(c echo.Context, claims tenants.JWTClaims) (f views.JWTIssuerForm, b tenants.JWTIssuerBody) {
	f = views.JWTIssuerForm{Issuer: strings.TrimSpace(c.FormValue("issuer")), Audiences: strings.TrimSpace(c.FormValue("audiences")),
		JWKSURL: strings.TrimSpace(c.FormValue("jwks_url")), JWKS: strings.TrimSpace(c.FormValue("jwks")),
		Algorithms: strings.TrimSpace(c.FormValue("algorithms")),
		Subject:    strings.TrimSpace(c.FormValue("subject")), Tier: strings.TrimSpace(c.FormValue("tier"))}
	audiences, algs := commaList(f.Audiences), commaList(f.Algorithms)
	claims.Subject, claims.Tier = f.Subject, f.Tier
	b = tenants.JWTIssuerBody{Issuer: &f.Issuer, Audiences: &audiences, JWKSURL: &f.JWKSURL, Algorithms: &algs, Claims: &claims}
	if f.JWKS != "" {
		raw := json.RawMessage(f.JWKS)
		b.JWKS = &raw
	}
	return f, b
}

// check validates b over iss and where its JWKS URL points.
func (h *issuerHandler) check(c echo.Context, b tenants.JWTIssuerBody, iss tenants.JWTIssuer) error {
	if b.JWKS != nil && !json.Valid(*b.JWKS) {
		return errs.Errorf(errs.Invalid, "jwks: not JSON: paste the key set as the issuer publishes it ({\"keys\": [...]})")
	}
	err := b.Apply(&iss)
	if err == nil && h.checkURL != nil && iss.JWKSURL != "" {
		err = h.checkURL(c.Request().Context(), iss.JWKSURL)
	}
	return err
}

func (h *issuerHandler) create(c echo.Context) error {
	f, b := issuerForm(c, tenants.JWTClaims{})
	err := h.check(c, b, tenants.JWTIssuer{})
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

// edit shows one issuer's form, filled in.
func (h *issuerHandler) edit(c echo.Context) error {
	iss, err := h.config.JWTIssuers.Get(c.Request().Context(), mustSession(c).TenantID, c.Param("id"))
	if err != nil {
		return err
	}
	f := views.JWTIssuerForm{ID: iss.ID, Issuer: iss.Issuer, Audiences: strings.Join(iss.Audiences, ", "), JWKSURL: iss.JWKSURL,
		Algorithms: strings.Join(iss.Algorithms, ", "), Subject: iss.Claims.Subject, Tier: iss.Claims.Tier}
	if iss.JWKS != nil {
		f.JWKS = string(iss.JWKS)
	}
	return render(c, http.StatusOK, views.JWTIssuerEdit(page(c, "JWT issuer", views.NavIssuers), views.JWTIssuersView{Form: f}))
}

// update writes the edited form over the issuer.
func (h *issuerHandler) update(c echo.Context) error {
	ctx, tenantID := c.Request().Context(), mustSession(c).TenantID
	iss, err := h.config.JWTIssuers.Get(ctx, tenantID, c.Param("id"))
	if err != nil {
		return err
	}
	f, b := issuerForm(c, iss.Claims)
	f.ID = iss.ID
	if err = h.check(c, b, iss); err == nil {
		if _, err = h.config.JWTIssuers.Update(ctx, tenantID, iss.ID, b); err == nil {
			return seeOther(c, "/ui/jwt-issuers", "issuer-updated")
		}
	}
	if errs.Is(err, errs.Invalid) || errs.Is(err, errs.Conflict) {
		return render(c, http.StatusBadRequest, views.JWTIssuerEdit(page(c, "JWT issuer", views.NavIssuers), views.JWTIssuersView{Form: f, Error: errs.Message(err)}))
	}
	return err
}

func (h *issuerHandler) delete(c echo.Context) error {
	if _, err := h.config.JWTIssuers.Delete(c.Request().Context(), mustSession(c).TenantID, c.Param("id")); err != nil {
		return err
	}
	return seeOther(c, "/ui/jwt-issuers", "issuer-deleted")
}
