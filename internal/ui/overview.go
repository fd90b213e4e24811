package ui

import (
	"net/http"
	"net/url"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// overviewHandler serves a tenant's landing page.
type overviewHandler struct {
	config    service.Services
	analytics service.Analytics
	now       func() time.Time
}

// maxTopPolicies is the length of the most denied policies table.
const maxTopPolicies = 5

func (h *overviewHandler) show(c echo.Context) error {
	s := mustSession(c)
	if s.TenantID == "" {
		return c.Redirect(http.StatusSeeOther, "/ui/admin/tenants")
	}
	ctx := c.Request().Context()
	r := pickRange(overviewRanges, c.QueryParam("range"))
	from, to := window(r.length, r.step, h.now())

	policyCount, err := countPolicies(ctx, h.config, s.TenantID)
	if err != nil {
		return err
	}
	keys, err := h.config.Keys.Count(ctx, s.TenantID)
	if err != nil {
		return err
	}
	v := views.OverviewView{
		Ranges:       rangeTabs(overviewRanges, r, "/ui/", nil),
		RangeLabel:   r.phrase,
		PolicyCount:  policyCount,
		KeyCount:     keys.Total,
		AnalyticsURL: "/ui/analytics?" + url.Values{"range": {r.value}}.Encode(),
	}
	points, err := timeseries(ctx, h.analytics, service.TimeseriesQuery{TenantID: s.TenantID, From: from, To: to, Step: stepParam(r.step)})
	if err != nil {
		v.Error = userMessage(err)
	}
	v.Chart = views.NewChart("Allowed and denied checks "+r.phrase, points, r.step)
	v.Totals = v.Chart.Totals

	if v.Totals.Denied > 0 {
		// One ranking over the range, not a timeseries per policy.
		ranked, err := topPolicies(ctx, h.analytics, service.PolicyRankQuery{TenantID: s.TenantID, From: from, To: to, Limit: maxTopPolicies})
		if err == nil {
			for _, p := range ranked {
				v.TopPolicies = append(v.TopPolicies, views.PolicyStat{Name: p.Name, URL: policyURL(p.ID), Allowed: p.Allowed, Denied: p.Denied,
					RateLimited: p.RateLimited, ConcurrencyLimited: p.ConcurrencyLimited})
			}
		}

		entries, err := top(ctx, h.analytics, service.TopQuery{TenantID: s.TenantID, From: from, To: to, Limit: 5})
		if err == nil {
			// Unnamed keys are still listed, by id, if the names are missing.
			names, _ := keyNames(ctx, h.config, s.TenantID, entries)
			v.TopIdentities = offenders(entries, names, true)
		}
	}
	return render(c, http.StatusOK, views.Overview(page(c, "Overview", views.NavOverview), v))
}
