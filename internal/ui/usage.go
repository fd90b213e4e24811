package ui

import (
	"context"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// usageHandler serves the usage page: a month's units per key and policy
// and per policy, and the CSV a tenant bills from, the same file as the
// API's GET /v1/usage?format=csv.
type usageHandler struct {
	config    service.Services
	analytics service.Analytics
	now       func() time.Time
}

// month reads a month ("2027-01"), by default the current month in the
// tenant's time zone, and answers its first and last day.
func (h *usageHandler) month(ctx context.Context, tenantID, month string) (string, string, string, error) {
	if month == "" {
		t, err := h.config.Tenants.Get(ctx, tenantID)
		if err != nil {
			return "", "", "", err
		}
		loc, lerr := time.LoadLocation(t.Tenant.TimeZone)
		if lerr != nil || t.Tenant.TimeZone == "" {
			loc = time.UTC
		}
		month = h.now().In(loc).Format("2006-01")
	}
	first, perr := time.Parse("2006-01", month)
	if perr != nil {
		return "", "", "", errs.Errorf(errs.Invalid, "month: must be a month such as 2027-01")
	}
	return month, first.Format(time.DateOnly), first.AddDate(0, 1, -1).Format(time.DateOnly), nil
}

func (h *usageHandler) show(c echo.Context) error {
	s := mustSession(c)
	ctx := c.Request().Context()
	v := views.UsageView{}
	month, from, to, err := h.month(ctx, s.TenantID, c.QueryParam("month"))
	if errs.Is(err, errs.Invalid) {
		// A month that is not one: say so, and show the current one.
		v.Error = userMessage(err)
		month, from, to, err = h.month(ctx, s.TenantID, "")
	}
	if err != nil {
		return err
	}
	v.Month = month
	v.CSVByKey = "/ui/usage/csv?" + url.Values{"month": {month}, "group": {service.UsageByKey}}.Encode()
	v.CSVByPolicy = "/ui/usage/csv?" + url.Values{"month": {month}, "group": {service.UsageByPolicy}}.Encode()
	byKey, err := h.analytics.Usage(ctx, service.UsageQuery{TenantID: s.TenantID, From: from, To: to, Group: service.UsageByKey})
	if err != nil {
		v.Error = userMessage(err)
		return render(c, http.StatusOK, views.Usage(page(c, "Usage", views.NavUsage), v))
	}
	v.TimeZone, v.From, v.To, v.Total = byKey.TimeZone, byKey.From, byKey.To, byKey.Total
	v.Keys = usageKeyRows(byKey.Rows)
	byPolicy, err := h.analytics.Usage(ctx, service.UsageQuery{TenantID: s.TenantID, From: from, To: to, Group: service.UsageByPolicy})
	if err != nil {
		v.Error = userMessage(err)
	}
	v.Policies = usagePolicyRows(byPolicy.Rows)
	return render(c, http.StatusOK, views.Usage(page(c, "Usage", views.NavUsage), v))
}

// usageKeyRows sums a month's daily rows per key and policy, keys by name
// (callers without a key last).
func usageKeyRows(rows []service.UsageRow) []views.UsageKeyRow {
	type k struct{ key, policy string }
	idx := map[k]int{}
	var out []views.UsageKeyRow
	for _, r := range rows {
		i, ok := idx[k{r.KeyID, r.Policy}]
		if !ok {
			i = len(out)
			idx[k{r.KeyID, r.Policy}] = i
			out = append(out, views.UsageKeyRow{KeyID: r.KeyID, Name: r.KeyName, Prefix: r.KeyPrefix, Policy: r.Policy})
		}
		out[i].Units += r.Units
	}
	slices.SortFunc(out, func(a, b views.UsageKeyRow) int {
		if (a.KeyID == "") != (b.KeyID == "") {
			if a.KeyID == "" {
				return 1
			}
			return -1
		}
		if c := strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name)); c != 0 {
			return c
		}
		if c := strings.Compare(a.KeyID, b.KeyID); c != 0 {
			return c
		}
		return strings.Compare(a.Policy, b.Policy)
	})
	return out
}

// usagePolicyRows sums a month's daily rows per policy, by name.
func usagePolicyRows(rows []service.UsageRow) []views.UsagePolicyRow {
	idx := map[string]int{}
	var out []views.UsagePolicyRow
	for _, r := range rows {
		i, ok := idx[r.Policy]
		if !ok {
			i = len(out)
			idx[r.Policy] = i
			out = append(out, views.UsagePolicyRow{Policy: r.Policy})
		}
		out[i].Units += r.Units
	}
	slices.SortFunc(out, func(a, b views.UsagePolicyRow) int { return strings.Compare(a.Policy, b.Policy) })
	return out
}

// csv answers the month's daily usage as the API's CSV file.
func (h *usageHandler) csv(c echo.Context) error {
	s := mustSession(c)
	_, from, to, err := h.month(c.Request().Context(), s.TenantID, c.QueryParam("month"))
	if err != nil {
		return err
	}
	u, err := h.analytics.Usage(c.Request().Context(), service.UsageQuery{TenantID: s.TenantID, From: from, To: to, Group: c.QueryParam("group")})
	if err != nil {
		return err
	}
	res := c.Response()
	res.Header().Set(echo.HeaderContentType, "text/csv; charset=utf-8")
	res.Header().Set(echo.HeaderContentDisposition, mime.FormatMediaType("attachment", map[string]string{"filename": service.UsageCSVName(u)}))
	res.WriteHeader(http.StatusOK)
	return service.WriteUsageCSV(res, u)
}
