package ui

import (
	"context"
	"log/slog"
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
	log       *slog.Logger
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
	var keys usageKeySums
	err = service.UsagePages(ctx, h.analytics, service.UsageQuery{TenantID: s.TenantID, From: from, To: to, Group: service.UsageByKey}, func(u service.Usage) error {
		v.TimeZone, v.From, v.To, v.Total = u.TimeZone, u.From, u.To, u.Total
		keys.add(u.Rows)
		return nil
	})
	if err != nil {
		v.Error = userMessage(err)
		return render(c, http.StatusOK, views.Usage(page(c, "Usage", views.NavUsage), v))
	}
	v.Keys = keys.rows()
	var policies []service.UsageRow
	err = service.UsagePages(ctx, h.analytics, service.UsageQuery{TenantID: s.TenantID, From: from, To: to, Group: service.UsageByPolicy}, func(u service.Usage) error {
		policies = append(policies, u.Rows...) // a row per day and policy: at most 31 × the policies
		return nil
	})
	if err != nil {
		v.Error = userMessage(err)
	}
	v.Policies = usagePolicyRows(policies)
	return render(c, http.StatusOK, views.Usage(page(c, "Usage", views.NavUsage), v))
}

// usageKeySums sums a month's daily rows per key and policy, page after
// page: it holds a row per key and policy, not per day.
type usageKeySums struct {
	idx map[[2]string]int
	out []views.UsageKeyRow
}

func (a *usageKeySums) add(rows []service.UsageRow) {
	if a.idx == nil {
		a.idx = map[[2]string]int{}
	}
	for _, r := range rows {
		k := [2]string{r.KeyID, r.Policy}
		i, ok := a.idx[k]
		if !ok {
			i = len(a.out)
			a.idx[k] = i
			a.out = append(a.out, views.UsageKeyRow{KeyID: r.KeyID, Name: r.KeyName, Prefix: r.KeyPrefix, Policy: r.Policy})
		}
		a.out[i].Units += r.Units
	}
}

// rows answers the sums, keys by name (callers without a key last).
func (a *usageKeySums) rows() []views.UsageKeyRow {
	out := a.out
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

// csv answers the month's daily usage as the API's CSV file, every page
// of it: the first page is read before anything is written, so that its
// error is answered as one; a later page's error cuts the download short
// (the client sees it end early) and is logged.
func (h *usageHandler) csv(c echo.Context) error {
	s := mustSession(c)
	ctx := c.Request().Context()
	_, from, to, err := h.month(ctx, s.TenantID, c.QueryParam("month"))
	if err != nil {
		return err
	}
	var cw *service.UsageCSV
	err = service.UsagePages(ctx, h.analytics, service.UsageQuery{TenantID: s.TenantID, From: from, To: to, Group: c.QueryParam("group")}, func(u service.Usage) error {
		if cw == nil {
			res := c.Response()
			res.Header().Set(echo.HeaderContentType, "text/csv; charset=utf-8")
			res.Header().Set(echo.HeaderContentDisposition, mime.FormatMediaType("attachment", map[string]string{"filename": service.UsageCSVName(u)}))
			res.WriteHeader(http.StatusOK)
			cw = service.NewUsageCSV(res)
		}
		return cw.Write(u.Rows)
	})
	if cw == nil {
		return err
	}
	if err != nil {
		h.log.Warn("a usage download was cut short", "tenant", s.TenantID, "err", err)
		return nil
	}
	return cw.Flush()
}
