package servicetest

import (
	"context"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

type memJWTIssuers struct{ m *Memory }

func (s memJWTIssuers) Create(_ context.Context, tenantID string, b tenants.JWTIssuerBody) (service.Written[tenants.JWTIssuer], error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.tenant(tenantID); err != nil {
		return service.Written[tenants.JWTIssuer]{}, err
	}
	iss := tenants.JWTIssuer{ID: m.id("iss"), TenantID: tenantID, CreatedAt: m.now(), UpdatedAt: m.now()}
	if err := b.Apply(&iss); err != nil {
		return service.Written[tenants.JWTIssuer]{}, err
	}
	if err := s.unique(iss); err != nil {
		return service.Written[tenants.JWTIssuer]{}, err
	}
	m.issuers[iss.ID] = iss
	return written(m, iss), nil
}

// unique refuses a second issuer of the tenant with the same "iss";
// m.mu must be held.
func (s memJWTIssuers) unique(iss tenants.JWTIssuer) error {
	for _, o := range s.m.issuers {
		if o.TenantID == iss.TenantID && o.Issuer == iss.Issuer && o.ID != iss.ID {
			return errs.Errorf(errs.Invalid, "issuer: this tenant already has an issuer %q (%s)", iss.Issuer, o.ID)
		}
	}
	return nil
}

func (s memJWTIssuers) List(_ context.Context, tenantID string) ([]tenants.JWTIssuer, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []tenants.JWTIssuer{}
	for _, iss := range m.issuers {
		if iss.TenantID == tenantID {
			out = append(out, iss)
		}
	}
	slices.SortFunc(out, func(a, b tenants.JWTIssuer) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (s memJWTIssuers) Get(_ context.Context, tenantID, id string) (tenants.JWTIssuer, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	iss, ok := m.issuers[id]
	if !ok || iss.TenantID != tenantID {
		return tenants.JWTIssuer{}, notFound("jwt issuer")
	}
	return iss, nil
}

func (s memJWTIssuers) Update(_ context.Context, tenantID, id string, b tenants.JWTIssuerBody) (service.Written[tenants.JWTIssuer], error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	iss, ok := m.issuers[id]
	if !ok || iss.TenantID != tenantID {
		return service.Written[tenants.JWTIssuer]{}, notFound("jwt issuer")
	}
	if err := b.Apply(&iss); err != nil {
		return service.Written[tenants.JWTIssuer]{}, err
	}
	if err := s.unique(iss); err != nil {
		return service.Written[tenants.JWTIssuer]{}, err
	}
	iss.UpdatedAt = m.now()
	m.issuers[id] = iss
	return written(m, iss), nil
}

func (s memJWTIssuers) Delete(_ context.Context, tenantID, id string) (service.Written[service.None], error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	iss, ok := m.issuers[id]
	if !ok || iss.TenantID != tenantID {
		return service.Written[service.None]{}, notFound("jwt issuer")
	}
	delete(m.issuers, id)
	return written(m, service.None{}), nil
}
