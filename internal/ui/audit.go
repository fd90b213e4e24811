package ui

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// auditHandler serves the audit log: a tenant's at /ui/audit (its users'
// session tenant only), every tenant's at /ui/admin/audit.
type auditHandler struct {
	config   service.Services
	operator bool
}

// objectTypeLabels are the object types as the page names them.
var objectTypeLabels = map[string]string{
	tenants.AuditPolicy:      "policy",
	tenants.AuditConsumerKey: "consumer key",
	tenants.AuditServiceKey:  "service key",
	tenants.AuditUser:        "member",
	tenants.AuditBlock:       "block",
	tenants.AuditBucket:      "bucket of",
	tenants.AuditWebhook:     "webhook",
	tenants.AuditJWTIssuer:   "JWT issuer",
	tenants.AuditCustomer:    "customer",
	tenants.AuditTenant:      "tenant",
	tenants.AuditOperator:    "operator",
}

func (h *auditHandler) show(c echo.Context) error {
	path := "/ui/audit"
	if h.operator {
		path = "/ui/admin/audit"
	}
	q := tenants.AuditQuery{ObjectType: c.QueryParam("object_type"), Actor: strings.TrimSpace(c.QueryParam("actor"))}
	if _, ok := objectTypeLabels[q.ObjectType]; !ok {
		q.ObjectType = ""
	}
	if b, err := strconv.ParseInt(c.QueryParam("before"), 10, 64); err == nil && b > 0 {
		q.Before = b
	}
	if h.operator {
		q.AllTenants, q.TenantID = true, c.QueryParam("tenant_id")
	} else {
		q.TenantID = mustSession(c).TenantID
	}

	v := views.AuditView{Operator: h.operator, Action: path, Actor: q.Actor, Filtered: q.ObjectType != "" || q.Actor != "" || (h.operator && q.TenantID != "")}
	v.ObjectTypes = append(v.ObjectTypes, views.Choice{Value: "", Label: "Everything", Current: q.ObjectType == ""})
	for _, t := range tenants.AuditObjectTypes {
		if !h.operator && t == tenants.AuditOperator {
			continue
		}
		v.ObjectTypes = append(v.ObjectTypes, views.Choice{Value: t, Label: objectTypeName(t), Current: q.ObjectType == t})
	}
	ctx := c.Request().Context()
	if h.operator {
		ts, err := h.config.Tenants.List(ctx)
		if err != nil {
			return err
		}
		v.Tenants = append(v.Tenants, views.Choice{Value: "", Label: "All tenants", Current: q.TenantID == ""})
		for _, t := range ts {
			v.Tenants = append(v.Tenants, views.Choice{Value: t.ID, Label: t.Name, Current: q.TenantID == t.ID})
		}
	}

	res, err := h.config.Audit.List(ctx, q)
	if err != nil {
		if errs.Code(err) != errs.Unavailable && errs.Code(err) != errs.Internal {
			return err
		}
		v.Error = userMessage(err)
	}
	link := func(before int64, actor string) string {
		vals := url.Values{}
		if h.operator && q.TenantID != "" {
			vals.Set("tenant_id", q.TenantID)
		}
		if q.ObjectType != "" {
			vals.Set("object_type", q.ObjectType)
		}
		if actor != "" {
			vals.Set("actor", actor)
		}
		if before > 0 {
			vals.Set("before", strconv.FormatInt(before, 10))
		}
		if len(vals) == 0 {
			return path
		}
		return path + "?" + vals.Encode()
	}
	for _, e := range res.Entries {
		row := views.AuditRow{ID: e.ID, At: e.At, TenantName: e.TenantName, Actor: e.Actor.String(), ActorURL: link(0, e.Actor.Label),
			Action: strings.ReplaceAll(e.Action, "_", " "), ObjectType: objectTypeName(e.ObjectType), ObjectName: e.ObjectName, ObjectID: e.ObjectID}
		for _, ch := range e.Changes {
			row.Changes = append(row.Changes, views.AuditChange{Field: ch.Field, Before: ch.Before, After: ch.After})
		}
		v.Entries = append(v.Entries, row)
	}
	if res.Next > 0 {
		v.OlderURL = link(res.Next, q.Actor)
	}
	if q.Before > 0 {
		v.NewestURL = link(0, q.Actor)
	}
	return render(c, http.StatusOK, views.Audit(page(c, "Audit log", views.NavAudit), v))
}

func objectTypeName(t string) string {
	if l, ok := objectTypeLabels[t]; ok {
		return l
	}
	return t
}
