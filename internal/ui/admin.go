package ui

import (
	"context"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// adminHandler serves the operator's pages.
type adminHandler struct {
	config    service.Services
	analytics service.Analytics
	wait      versionWaiter
	auth      *authHandler // issues the session of an opened tenant
	now       func() time.Time
}

// maxUsageTenants bounds the per-tenant usage queries of the tenant list.
const maxUsageTenants = 200

var blockExpiries = []struct {
	value, label string
	d            time.Duration
}{
	{"1h", "1 hour", time.Hour},
	{"24h", "1 day", 24 * time.Hour},
	{"7d", "7 days", 7 * 24 * time.Hour},
	{"30d", "30 days", 30 * 24 * time.Hour},
	{"never", "Until unblocked", 0},
}

func expiryChoices(current string) []views.Choice {
	if current == "" {
		current = "24h"
	}
	out := make([]views.Choice, 0, len(blockExpiries))
	for _, e := range blockExpiries {
		out = append(out, views.Choice{Value: e.value, Label: e.label, Current: e.value == current})
	}
	return out
}

func (h *adminHandler) listTenants(c echo.Context) ([]tenants.TenantSummary, error) {
	ts, err := h.config.Tenants.List(c.Request().Context())
	return ts, err
}

func (h *adminHandler) tenants(c echo.Context) error {
	return h.renderTenants(c, http.StatusOK, views.TenantForm{}, nil)
}

func (h *adminHandler) renderTenants(c echo.Context, status int, form views.TenantForm, created *views.CreatedTenant) error {
	ctx := c.Request().Context()
	ts, err := h.listTenants(c)
	if err != nil {
		return err
	}
	v := views.TenantsView{Form: form, Created: created}
	from, to := window(24*time.Hour, time.Minute, h.now())
	for i, t := range ts {
		row := views.TenantRow{ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt, Suspended: t.Suspended(), Demo: t.Demo, Policies: t.Policies, Keys: t.ConsumerKeys, ServiceKeys: t.ServiceKeys, Users: t.Users}
		if i < maxUsageTenants {
			pts, err := timeseries(ctx, h.analytics, service.TimeseriesQuery{TenantID: t.ID, From: from, To: to, Step: stepParam(to.Sub(from))})
			if err != nil {
				v.Error = userMessage(err)
			}
			for _, p := range pts {
				row.Allowed += p.Allowed
				row.Denied += p.Denied
			}
		}
		v.Tenants = append(v.Tenants, row)
	}
	return render(c, status, views.Tenants(page(c, "Tenants", views.NavTenants), v))
}

func (h *adminHandler) createTenant(c echo.Context) error {
	f := views.TenantForm{Name: strings.TrimSpace(c.FormValue("name")), OwnerEmail: strings.TrimSpace(c.FormValue("owner_email"))}
	password := c.FormValue("owner_password")
	fe := fieldErrors{}
	fe.check("name", tenants.ValidateTenantName(f.Name))
	fe.check("owner_email", tenants.ValidateEmail(f.OwnerEmail))
	fe.check("owner_password", tenants.ValidatePassword(password))
	if len(fe) > 0 {
		f.Errors = fe
		return h.renderTenants(c, http.StatusBadRequest, f, nil)
	}
	w, err := h.config.Tenants.Create(c.Request().Context(), f.Name, f.OwnerEmail, password)
	if err != nil {
		if !isInvalid(err) {
			return err
		}
		if errs.Is(err, errs.Conflict) {
			f.FormError = errs.Message(err)
		} else {
			f.FormError = formError(err, fe, "name", "owner_email", "owner_password")
		}
		f.Errors = fe
		return h.renderTenants(c, http.StatusBadRequest, f, nil)
	}
	applied(c.Request().Context(), h.wait, w.Version)
	t := w.Result.Tenant
	created := &views.CreatedTenant{ID: t.ID, Name: t.Name, OwnerEmail: tenants.NormalizeEmail(f.OwnerEmail), ServiceKey: w.Result.ServiceKey}
	return h.renderTenants(c, http.StatusCreated, views.TenantForm{}, created)
}

func (h *adminHandler) abuse(c echo.Context) error {
	r := pickRange(analyticsRanges, c.QueryParam("range"))
	if c.QueryParam("range") == "" {
		r = pickRange(analyticsRanges, "24h")
	}
	from, to := window(r.length, time.Minute, h.now())
	v := views.AbuseView{Range: r.value, Ranges: rangeTabs(analyticsRanges, r, "/ui/admin/abuse", nil), Expiries: expiryChoices("")}
	ctx := c.Request().Context()
	entries, err := top(ctx, h.analytics, service.TopQuery{From: from, To: to, Limit: 100})
	if err != nil {
		v.Error = userMessage(err)
	}
	v.Rows = offenders(entries, nil, false)
	v.Now = h.now()
	h.nameKeys(ctx, v.Rows)
	// Callers blocked already get a note instead of a second block form.
	bs, err := h.config.Blocks.List(ctx, "")
	if err == nil {
		now := h.now()
		until := map[[3]string]string{}
		for _, b := range bs {
			if b.Active(now) {
				until[[3]string{b.TenantID, b.Identity.Kind, blockedID(b.Identity)}] = "until " + views.FormatOptTime(b.ExpiresAt, "unblocked by hand")
			}
		}
		for i := range v.Rows {
			o := &v.Rows[i]
			o.BlockedUntil = until[[3]string{o.TenantID, o.Kind, o.ID}]
		}
	}
	p := page(c, "Abuse report", views.NavAbuse)
	operatorBlocked(c, h.config, &p, h.now(), "abuse")
	return render(c, http.StatusOK, views.Abuse(p, v))
}

// nameKeys gives each key of the report its name and a link to the
// operator's view of it, a tenant at a time. Best effort: without names
// the rows show key ids.
func (h *adminHandler) nameKeys(ctx context.Context, rows []views.Offender) {
	ids := map[string][]string{}
	for _, o := range rows {
		if o.Kind == tenants.IdentityKey && o.ID != engine.InvalidKeyIdentity {
			ids[o.TenantID] = append(ids[o.TenantID], o.ID)
		}
	}
	names := map[string]map[string]string{}
	for tenant, keys := range ids {
		names[tenant], _ = h.config.Keys.Names(ctx, tenant, keys[:min(len(keys), tenants.MaxRankedKeys)])
	}
	for i := range rows {
		o := &rows[i]
		if o.Kind != tenants.IdentityKey || o.ID == engine.InvalidKeyIdentity {
			continue
		}
		if name := names[o.TenantID][o.ID]; name != "" {
			o.Label = name
			o.DrillURL = adminKeyURL(o.TenantID, o.ID)
		}
	}
}

func adminKeyURL(tenantID, keyID string) string {
	return "/ui/admin/tenants/" + url.PathEscape(tenantID) + "/keys/" + url.PathEscape(keyID)
}

// blockedID is the identity a block applies to as analytics name it: an
// IPv6 block covers its /64.
func blockedID(id tenants.Identity) string {
	if id.Kind == tenants.IdentityIP {
		if n, ok := engine.NormalizeIP(id.ID); ok {
			return n
		}
	}
	return id.ID
}

func (h *adminHandler) blocks(c echo.Context) error {
	return h.renderBlocks(c, http.StatusOK, views.BlockForm{})
}

func (h *adminHandler) renderBlocks(c echo.Context, status int, f views.BlockForm) error {
	ctx := c.Request().Context()
	ts, err := h.listTenants(c)
	if err != nil {
		return err
	}
	bs, err := h.config.Blocks.List(ctx, "")
	if err != nil {
		return err
	}
	names := map[string]string{}
	for _, t := range ts {
		names[t.ID] = t.Name
		f.Tenants = append(f.Tenants, views.Choice{Value: t.ID, Label: t.Name, Current: t.ID == f.TenantID})
	}
	f.Expiries = expiryChoices(f.Expiry)
	now := h.now()
	v := views.BlocksView{Form: f}
	for _, b := range bs {
		v.Blocks = append(v.Blocks, views.BlockRow{
			ID: b.ID, TenantID: b.TenantID, TenantName: names[b.TenantID],
			Kind: b.Identity.Kind, IdentityID: b.Identity.ID, Reason: b.Reason,
			ExpiresAt: b.ExpiresAt, CreatedAt: b.CreatedAt, Active: b.Active(now),
		})
	}
	p := page(c, "Blocks", views.NavBlocks)
	operatorBlocked(c, h.config, &p, now, "blocks")
	return render(c, status, views.Blocks(p, v))
}

func (h *adminHandler) createBlock(c echo.Context) error {
	f := views.BlockForm{
		TenantID: c.FormValue("tenant_id"), Kind: c.FormValue("kind"), ID: strings.TrimSpace(c.FormValue("id")),
		Reason: strings.TrimSpace(c.FormValue("reason")), Expiry: c.FormValue("expiry"),
	}
	b := tenants.Block{TenantID: f.TenantID, Identity: tenants.Identity{Kind: f.Kind, ID: f.ID}, Reason: f.Reason}
	if p, err := netip.ParsePrefix(f.ID); err == nil && f.Kind == tenants.IdentityIP {
		// The report names IPv6 callers by their /64; a block on any
		// address of it blocks the whole /64.
		b.Identity.ID = p.Masked().Addr().String()
	}
	fe := fieldErrors{}
	found := false
	for _, e := range blockExpiries {
		if e.value == f.Expiry {
			found = true
			if e.d > 0 {
				t := h.now().Add(e.d)
				b.ExpiresAt = &t
			}
		}
	}
	if !found {
		fe.add("expires_at", "choose how long the block lasts")
	}
	if f.TenantID == "" {
		fe.add("tenant_id", "choose a tenant")
	}
	if err := tenants.ValidateIdentity("identity", b.Identity); err != nil {
		if path, text, ok := splitMessage(errs.Message(err)); ok {
			fe.add(path, text)
		}
	}
	var w service.Written[tenants.Block]
	if len(fe) == 0 {
		var err error
		if w, err = h.config.Blocks.Create(c.Request().Context(), b); err != nil {
			if !isInvalid(err) && !errs.Is(err, errs.NotFound) {
				return err
			}
			if errs.Is(err, errs.NotFound) {
				fe.add("tenant_id", "no such tenant")
			} else {
				f.FormError = formError(err, fe, "tenant_id", "identity.kind", "identity.id", "reason", "expires_at")
			}
		}
	}
	if len(fe) > 0 || f.FormError != "" {
		f.Errors = fe
		return h.renderBlocks(c, http.StatusBadRequest, f)
	}
	applied(c.Request().Context(), h.wait, w.Version)
	back := "/ui/admin/blocks"
	if c.FormValue("from") == "abuse" {
		back = "/ui/admin/abuse"
	}
	return seeOther(c, withBlock(back, w.Result.ID), "blocked")
}

func (h *adminHandler) deleteBlock(c echo.Context) error {
	w, err := h.config.Blocks.Delete(c.Request().Context(), "", c.Param("id"))
	if err != nil {
		return err
	}
	applied(c.Request().Context(), h.wait, w.Version)
	back := "/ui/admin/blocks"
	if c.FormValue("from") == "abuse" {
		back = "/ui/admin/abuse"
	}
	return seeOther(c, back, "unblocked")
}
