package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// analyticsHandler serves the analytics page and one identity's history.
type analyticsHandler struct {
	config    service.Services
	analytics service.Analytics
	wait      versionWaiter
	now       func() time.Time
}

// maxOffenders is the length of the top offenders table.
const maxOffenders = 25

func policyChoices(ps []tenants.PolicyName, current string) []views.Choice {
	out := []views.Choice{{Value: "", Label: "All policies", Current: current == ""}}
	for _, p := range ps {
		out = append(out, views.Choice{Value: p.Name, Label: p.Name, Current: p.Name == current})
	}
	return out
}

func (h *analyticsHandler) show(c echo.Context) error {
	s := mustSession(c)
	ctx := c.Request().Context()
	r := pickRange(analyticsRanges, c.QueryParam("range"))
	stepName := c.QueryParam("step")
	step, ok := pickStep(stepName, r.step)
	ps, err := policyNameList(ctx, h.config, s.TenantID)
	if err != nil {
		return err
	}
	policy := c.QueryParam("policy")
	v := views.AnalyticsView{
		Range: r.value, Step: stepName, Policy: policy,
		Ranges:   rangeChoices(analyticsRanges, r),
		Steps:    stepChoices(stepName),
		Policies: policyChoices(ps, policy),
	}
	if !ok {
		v.Error = "Choose a step from the list."
	}
	if n := r.length / step; n > maxChartPoints {
		v.Error = fmt.Sprintf("A %s step over %s makes %d points; choose a longer step (at most %d points).", stepName, r.label, n, maxChartPoints)
		step = r.step
	}
	from, to := window(r.length, step, h.now())
	points, err := timeseries(ctx, h.analytics, service.TimeseriesQuery{TenantID: s.TenantID, From: from, To: to, Step: stepParam(step), Policy: policy})
	if err != nil {
		v.Error = userMessage(err)
	}
	v.Chart = views.NewChart("Allowed and denied checks "+r.phrase, points, step)
	rows, err := reasonOffenders(ctx, h.analytics, service.TopQuery{TenantID: s.TenantID, From: from, To: to, Limit: maxOffenders, Policy: policy})
	if err != nil && v.Error == "" {
		v.Error = userMessage(err)
	}
	entries := make([]service.TopEntry, len(rows))
	for i, r := range rows {
		entries[i].Identity = tenants.Identity{Kind: r.Kind, ID: r.ID}
	}
	// Best effort: without names the rows show key ids.
	names, _ := keyNames(ctx, h.config, s.TenantID, entries)
	for i := range rows {
		o := &rows[i].Offender
		if o.Label == "" {
			o.Label = names[o.ID]
		}
		o.DrillURL = identityURL(o.Kind, o.ID, r.value, policy)
	}
	v.Offenders = rows
	return render(c, http.StatusOK, views.Analytics(page(c, "Analytics", views.NavAnalytics), v))
}

// identityParam reads and checks the identity a drill-down names.
func identityParam(kind, id string) (tenants.Identity, error) {
	switch kind {
	case tenants.IdentityIP:
		norm, err := engine.NormalizeIdentity("identity", kind, id)
		if err != nil {
			return tenants.Identity{}, errs.Errorf(errs.NotFound, "no such identity")
		}
		return tenants.Identity{Kind: kind, ID: norm}, nil
	case tenants.IdentityKey, engine.KindDescriptor:
		if id == "" || len(id) > 256 {
			return tenants.Identity{}, errs.Errorf(errs.NotFound, "no such identity")
		}
		return tenants.Identity{Kind: kind, ID: id}, nil
	}
	return tenants.Identity{}, errs.Errorf(errs.NotFound, "no such identity")
}

func (h *analyticsHandler) identity(c echo.Context) error {
	return h.renderIdentity(c, http.StatusOK, "")
}

func (h *analyticsHandler) renderIdentity(c echo.Context, status int, resetErr string) error {
	s := mustSession(c)
	ctx := c.Request().Context()
	id, err := identityParam(c.QueryParam("kind"), c.QueryParam("id"))
	if err != nil {
		return err
	}
	r := pickRange(analyticsRanges, c.QueryParam("range"))
	if c.QueryParam("range") == "" {
		r = pickRange(analyticsRanges, "24h")
	}
	policy := c.QueryParam("policy")
	ps, err := policyNameList(ctx, h.config, s.TenantID)
	if err != nil {
		return err
	}
	v := views.IdentityView{
		Kind: id.Kind, ID: id.ID, Range: r.value, Policy: policy,
		Ranges:    rangeChoices(analyticsRanges, r),
		Policies:  policyChoices(ps, policy),
		BackURL:   "/ui/analytics?" + url.Values{"range": {r.value}, "policy": {policy}}.Encode(),
		CallerURL: callerURL(id.Kind, id.ID, ""),
		Reset:     views.ResetForm{Action: "/ui/analytics/reset", Kind: id.Kind, ID: id.ID, Policies: nameStrings(ps), Policy: policy, Error: resetErr},
	}
	if id.Kind == engine.KindDescriptor {
		// An Envoy descriptor's values: analytics only, no bucket of its
		// own to show, reset or block.
		v.CallerURL = ""
	}
	if id.Kind == tenants.IdentityKey {
		// Only this tenant's keys have a page; a foreign id is just a string.
		k, err := h.config.Keys.Get(ctx, s.TenantID, id.ID)
		if err == nil {
			v.Label, v.KeyURL = k.Name, keyURL(k.ID)
		}
	}
	from, to := window(r.length, r.step, h.now())
	points, err := timeseries(ctx, h.analytics, service.TimeseriesQuery{TenantID: s.TenantID, From: from, To: to, Step: stepParam(r.step), Policy: policy, Identity: &id})
	if err != nil {
		v.Error = userMessage(err)
	}
	v.Chart = views.NewChart("Decisions for "+id.Kind+" "+id.ID+" "+r.phrase, points, r.step)
	v.Totals = v.Chart.Totals
	if entries, err := top(ctx, h.analytics, service.TopQuery{TenantID: s.TenantID, From: from, To: to, Limit: 1, Policy: policy, Identity: &id, IncludeAllowed: true}); err == nil && len(entries) > 0 {
		o := offenders(entries, nil, false)[0]
		v.Summary = &o
	}
	return render(c, status, views.IdentityHistory(page(c, "Caller "+id.ID, views.NavAnalytics), v))
}

func (h *analyticsHandler) reset(c echo.Context) error {
	id, err := identityParam(c.FormValue("kind"), c.FormValue("id"))
	if err != nil {
		return err
	}
	policy := c.FormValue("policy")
	back := identityURL(id.Kind, id.ID, "", policy)
	if err := resetBucket(c, h.config, h.wait, views.ResetForm{Kind: id.Kind, ID: id.ID, Policy: policy}); err != nil {
		if !isInvalid(err) && !errs.Is(err, errs.NotFound) {
			return err
		}
		// Show the identity's page again, with the reason under the form.
		q := c.QueryParams()
		q.Set("kind", id.Kind)
		q.Set("id", id.ID)
		c.Request().URL.RawQuery = q.Encode()
		return h.renderIdentity(c, http.StatusBadRequest, resetError(err))
	}
	return seeOther(c, back, "reset")
}
