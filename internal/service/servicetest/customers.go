package servicetest

import (
	"context"
	"strings"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

type memCustomers struct{ m *Memory }

func (s memCustomers) Create(_ context.Context, tenantID string, b tenants.CustomerBody) (service.Written[tenants.Customer], error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.tenant(tenantID); err != nil {
		return service.Written[tenants.Customer]{}, err
	}
	c := tenants.Customer{ID: m.id("cus"), TenantID: tenantID, CreatedAt: m.now(), UpdatedAt: m.now()}
	if err := b.Apply(&c); err != nil {
		return service.Written[tenants.Customer]{}, err
	}
	if err := s.unique(c); err != nil {
		return service.Written[tenants.Customer]{}, err
	}
	m.customers[c.ID] = c
	return written(m, c), nil
}

// unique refuses an external id another customer of the tenant has;
// m.mu must be held.
func (s memCustomers) unique(c tenants.Customer) error {
	for _, o := range s.m.customers {
		if o.TenantID == c.TenantID && o.ExternalID == c.ExternalID && o.ID != c.ID {
			return errs.Errorf(errs.Conflict, "external_id: another customer of this tenant (%s) has external id %q", o.ID, c.ExternalID)
		}
	}
	return nil
}

// Page answers the tenant's customers in id order; Search matches the
// external id and name.
func (s memCustomers) Page(_ context.Context, q tenants.CustomerQuery) (tenants.CustomerPage, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	all := sorted(m.customers, func(c tenants.Customer) bool { return c.TenantID == q.TenantID })
	page := tenants.CustomerPage{Customers: []tenants.Customer{}, Offset: q.Offset, Limit: q.Limit, Total: len(all)}
	for _, c := range all {
		if q.Search != "" && !strings.Contains(strings.ToLower(c.ExternalID+" "+c.Name+" "+c.Tier), strings.ToLower(q.Search)) {
			continue
		}
		page.Matched++
		if page.Matched > q.Offset && (q.Limit == 0 || len(page.Customers) < q.Limit) {
			page.Customers = append(page.Customers, c)
		}
	}
	return page, nil
}

func (s memCustomers) Get(_ context.Context, tenantID, id string) (tenants.Customer, error) {
	return get(s.m, s.m.customers, customerTenant, "customer", tenantID, id)
}

func (s memCustomers) Update(_ context.Context, tenantID, id string, b tenants.CustomerBody) (service.Written[tenants.Customer], error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.customers[id]
	if !ok || c.TenantID != tenantID {
		return service.Written[tenants.Customer]{}, notFound("customer")
	}
	if err := b.Apply(&c); err != nil {
		return service.Written[tenants.Customer]{}, err
	}
	if err := s.unique(c); err != nil {
		return service.Written[tenants.Customer]{}, err
	}
	c.UpdatedAt = m.now()
	m.customers[id] = c
	return written(m, c), nil
}

func (s memCustomers) Delete(_ context.Context, tenantID, id string) (service.Written[service.None], error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.customers[id]
	if !ok || c.TenantID != tenantID {
		return service.Written[service.None]{}, notFound("customer")
	}
	for _, k := range m.keys {
		if k.CustomerID == id {
			return service.Written[service.None]{}, errs.Errorf(errs.Conflict, "customer %s holds keys: detach them first", id)
		}
	}
	delete(m.customers, id)
	return written(m, service.None{}), nil
}

// requireCustomer answers the store's error for a customer id that is not
// "" and not the tenant's; m.mu must be held.
func (m *Memory) requireCustomer(tenantID, id string) error {
	if c, ok := m.customers[id]; id != "" && (!ok || c.TenantID != tenantID) {
		return errs.Errorf(errs.NotFound, "customer_id: no customer %q in this tenant", id)
	}
	return nil
}

func customerTenant(c tenants.Customer) string { return c.TenantID }
