package ui

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// customerHandler serves the customers pages: a searched page of them,
// adding one, and one customer with its keys.
type customerHandler struct {
	config service.Services
	now    func() time.Time
}

// customersPage is how many customers a page shows; customerKeysShown
// how many of a customer's keys its page lists.
const (
	customersPage     = 50
	customerKeysShown = 100
)

func customerRow(c tenants.Customer) views.CustomerRow {
	return views.CustomerRow{ID: c.ID, ExternalID: c.ExternalID, Name: c.Name, Tier: c.Tier, BillingAnchor: c.BillingAnchor, CreatedAt: c.CreatedAt}
}

func (h *customerHandler) list(c echo.Context) error {
	return h.render(c, http.StatusOK, views.CustomersView{})
}

// customersHref is the list's address for a search and an offset.
func customersHref(search string, offset int) string {
	q := url.Values{}
	if search != "" {
		q.Set("q", search)
	}
	if offset > 0 {
		q.Set("offset", strconv.Itoa(offset))
	}
	if len(q) == 0 {
		return "/ui/customers"
	}
	return "/ui/customers?" + q.Encode()
}

func (h *customerHandler) render(c echo.Context, status int, v views.CustomersView) error {
	v.Search = strings.TrimSpace(c.QueryParam("q"))
	offset, _ := strconv.Atoi(c.QueryParam("offset"))
	p, err := h.config.Customers.Page(c.Request().Context(), tenants.CustomerQuery{TenantID: mustSession(c).TenantID,
		Search: v.Search, Offset: max(offset, 0), Limit: customersPage})
	if err != nil {
		return err
	}
	for _, cu := range p.Customers {
		v.Rows = append(v.Rows, customerRow(cu))
	}
	v.Offset, v.Matched, v.Total = p.Offset, p.Matched, p.Total
	if p.Offset > 0 {
		v.PrevHref = customersHref(v.Search, max(p.Offset-customersPage, 0))
	}
	if p.Offset+len(p.Customers) < p.Matched {
		v.NextHref = customersHref(v.Search, p.Offset+customersPage)
	}
	return render(c, status, views.Customers(page(c, "Customers", views.NavCustomers), v))
}

func (h *customerHandler) create(c echo.Context) error {
	f := views.CustomerForm{ExternalID: strings.TrimSpace(c.FormValue("external_id")), Name: strings.TrimSpace(c.FormValue("name")),
		Tier: strings.TrimSpace(c.FormValue("tier"))}
	b := tenants.CustomerBody{ExternalID: &f.ExternalID, Name: &f.Name, Tier: &f.Tier}
	w, err := h.config.Customers.Create(c.Request().Context(), mustSession(c).TenantID, b)
	if err == nil {
		return seeOther(c, "/ui/customers/"+url.PathEscape(w.Result.ID), "customer-created")
	}
	if errs.Is(err, errs.Invalid) || errs.Is(err, errs.Conflict) {
		return h.render(c, http.StatusBadRequest, views.CustomersView{Form: f, Error: errs.Message(err)})
	}
	return err
}

func (h *customerHandler) show(c echo.Context) error {
	ctx, tenantID := c.Request().Context(), mustSession(c).TenantID
	cu, err := h.config.Customers.Get(ctx, tenantID, c.Param("id"))
	if err != nil {
		return err
	}
	keys, err := h.config.Keys.Page(ctx, tenants.KeyQuery{TenantID: tenantID, CustomerID: cu.ID, IncludeRevoked: true, Limit: customerKeysShown})
	if err != nil {
		return err
	}
	v := views.CustomerView{Customer: customerRow(cu), KeysMatched: keys.Matched}
	for _, k := range slices.Sorted(maps.Keys(cu.Metadata)) {
		v.Metadata = append(v.Metadata, [2]string{k, cu.Metadata[k]})
	}
	now := h.now()
	for _, k := range keys.Keys {
		v.Keys = append(v.Keys, views.CustomerKeyRow{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Tier: k.Tier, Status: keyStatus(k, now)})
	}
	return render(c, http.StatusOK, views.Customer(page(c, cu.ExternalID, views.NavCustomers), v))
}
