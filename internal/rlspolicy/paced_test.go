package rlspolicy

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/rlsconf"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/service/servicetest"
	"github.com/sluicehq/sluice/internal/tenants"
)

// limitedPolicies refuses every other write with rate_limited, as the
// worker does to a tenant past its config write limit.
type limitedPolicies struct {
	PolicyService
	wait    time.Duration
	writes  int
	refused int
}

func (l *limitedPolicies) Create(ctx context.Context, tenantID string, p tenants.Policy) (service.Written[tenants.Policy], error) {
	if l.writes++; l.writes%2 == 1 {
		l.refused++
		return service.Written[tenants.Policy]{}, errs.Limited(l.wait, "config write: more than 20 a second")
	}
	return l.PolicyService.Create(ctx, tenantID, p)
}

// A plan whose writes the tenant's config write limit refuses now and then
// is applied whole, each refused write made again after the wait named;
// a wait longer than maxPaceWait is the caller's, and Apply stops.
func TestApplyPacedByTheWriteLimit(t *testing.T) {
	ctx := context.Background()
	m := servicetest.New(time.Now)
	m.AddTenant(tenants.Tenant{ID: "ten_a", Name: "a"})
	f, err := rlsconf.Parse("f.yaml", []byte("domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: c\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Diff(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc := &limitedPolicies{PolicyService: m.Services().Policies, wait: time.Millisecond}
	a, err := Apply(ctx, svc, "ten_a", plan)
	if err != nil || a.Created != 3 || svc.refused != 3 {
		t.Fatalf("applied %+v, %d refused: %v", a, svc.refused, err)
	}
	svc = &limitedPolicies{PolicyService: m.Services().Policies, wait: time.Minute}
	if _, err := Apply(ctx, svc, "ten_a", plan); errs.Code(err) != errs.RateLimited || svc.writes != 1 {
		t.Fatalf("a wait past maxPaceWait: %v after %d writes", err, svc.writes)
	}
}
