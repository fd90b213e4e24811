package api

import (
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
)

// usageLimit is one limit of one policy as a key has used it in its
// current period.
type usageLimit struct {
	Policy    string    `json:"policy"`
	Limit     string    `json:"limit,omitempty"` // the limit's name, when the tier has several
	Tier      string    `json:"tier"`
	Override  bool      `json:"override,omitempty"`
	Quota     int64     `json:"quota"`
	Used      int64     `json:"used"`
	Remaining int64     `json:"remaining"`
	ResetsAt  time.Time `json:"resets_at"`
	Period    string    `json:"period,omitempty"`
	Calendar  string    `json:"calendar,omitempty"`
}

// keyUsage answers, for each policy that limits the key, what it has used
// of each limit in its current period and when that period resets: read
// from the buckets as a peek reads them, so nothing is taken or counted.
func (h usageRoutes) keyUsage(c echo.Context) error {
	now := h.Now()
	st, err := h.Engine.PeekCaller(tenantID(c), engine.Caller{Kind: engine.KindKey, ID: c.Param("id")}, now)
	if err != nil {
		return err
	}
	out := []usageLimit{}
	for _, p := range st.Policies {
		if p.Unlisted || p.Err != "" {
			continue
		}
		for _, l := range p.Limits {
			u := usageLimit{Policy: p.Policy, Tier: p.Tier, Override: p.Override, Quota: l.Limit, Remaining: l.Remaining,
				Used: max(l.Limit-l.Remaining, 0), Calendar: l.Calendar}
			if name, ok := strings.CutPrefix(l.Name, p.Policy+"."); ok {
				u.Limit = name
			}
			if l.Calendar == "" {
				u.Period = l.Period.String()
			}
			reset := l.Reset
			if l.PeriodEnd > 0 {
				reset = l.PeriodEnd
			}
			u.ResetsAt = now.Add(reset).UTC().Truncate(time.Millisecond)
			out = append(out, u)
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"key_id": st.ID, "key_status": st.KeyStatus, "tier": st.Tier, "at": now.UTC().Truncate(time.Millisecond), "usage": out})
}

// usage answers the units the tenant's callers consumed per day, per key
// or per policy, as JSON or as a CSV file, a page at a time: limit rows
// (default and most service.MaxUsageRows), the next page named by a
// cursor (next_cursor in JSON; a Link header and Sluice-Next-Cursor for
// CSV).
func (h usageRoutes) usage(c echo.Context) error {
	format := c.QueryParam("format")
	switch format {
	case "", "json", "csv":
	default:
		return errs.Errorf(errs.Invalid, "format: must be \"json\" or \"csv\"")
	}
	group := c.QueryParam("group")
	switch group {
	case "", service.UsageByKey, service.UsageByPolicy:
	default:
		return errs.Errorf(errs.Invalid, "group: must be %q or %q", service.UsageByKey, service.UsageByPolicy)
	}
	limit := service.MaxUsageRows
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > service.MaxUsageRows {
			return errs.Errorf(errs.Invalid, "limit: must be an integer between 1 and %d", service.MaxUsageRows)
		}
		limit = n
	}
	cursor := c.QueryParam("cursor")
	u, err := h.Services.Analytics.Usage(c.Request().Context(), service.UsageQuery{TenantID: tenantID(c),
		From: c.QueryParam("from"), To: c.QueryParam("to"), Group: group, Limit: limit, Cursor: cursor})
	if err != nil {
		return err
	}
	if !u.Paged && (cursor != "" || len(u.Rows) > limit) {
		// A worker older than paging answered the whole range: it cannot
		// read a cursor, nor cut a page.
		return errs.Errorf(errs.Unavailable, "Paged usage is not available until the worker is upgraded; try again shortly.")
	}
	if format == "csv" {
		if u.NextCursor != "" {
			q := c.QueryParams()
			q.Set("cursor", u.NextCursor)
			c.Response().Header().Set("Link", "<"+c.Request().URL.Path+"?"+q.Encode()+">; rel=\"next\"")
			c.Response().Header().Set(UsageNextCursorHeader, u.NextCursor)
		}
		return WriteUsageCSV(c, u)
	}
	rows := make([]map[string]any, len(u.Rows))
	for i, r := range u.Rows {
		if u.Group == service.UsageByPolicy {
			rows[i] = map[string]any{"day": r.Day, "policy": r.Policy, "units": r.Units}
		} else {
			rows[i] = map[string]any{"day": r.Day, "key_id": r.KeyID, "key_name": r.KeyName, "key_prefix": r.KeyPrefix, "policy": r.Policy, "units": r.Units}
		}
	}
	out := map[string]any{"from": u.From, "to": u.To, "group": u.Group, "time_zone": u.TimeZone, "total": u.Total, "usage": rows}
	if u.NextCursor != "" {
		out["next_cursor"] = u.NextCursor
	}
	return c.JSON(http.StatusOK, out)
}

// UsageNextCursorHeader carries a CSV page's next cursor, beside its Link.
const UsageNextCursorHeader = "Sluice-Next-Cursor"

// WriteUsageCSV answers u as a CSV download; the dashboard answers its
// download with it too.
func WriteUsageCSV(c echo.Context, u service.Usage) error {
	res := c.Response()
	res.Header().Set(echo.HeaderContentType, "text/csv; charset=utf-8")
	res.Header().Set(echo.HeaderContentDisposition, mime.FormatMediaType("attachment", map[string]string{"filename": service.UsageCSVName(u)}))
	res.WriteHeader(http.StatusOK)
	return service.WriteUsageCSV(res, u)
}
