package rlspolicy

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// maxPaceWait bounds one wait of paced: a longer one is the caller's.
const maxPaceWait = 10 * time.Second

// paced is a PolicyService whose writes, refused by the tenant's config
// write limit (rate_limited, with the wait it names), are made again after
// that wait, until ctx ends: a plan is one request of the tenant's, and it
// should not stop half applied because its writes come faster than the
// limit. A refusal takes nothing, so making the write again is safe.
type paced struct{ PolicyService }

func (p paced) Create(ctx context.Context, tenantID string, pol tenants.Policy) (service.Written[tenants.Policy], error) {
	return again(ctx, func() (service.Written[tenants.Policy], error) { return p.PolicyService.Create(ctx, tenantID, pol) })
}

func (p paced) Update(ctx context.Context, tenantID, id string, pol tenants.Policy) (service.Written[tenants.Policy], error) {
	return again(ctx, func() (service.Written[tenants.Policy], error) { return p.PolicyService.Update(ctx, tenantID, id, pol) })
}

func (p paced) Delete(ctx context.Context, tenantID, id string) (service.Written[service.None], error) {
	return again(ctx, func() (service.Written[service.None], error) { return p.PolicyService.Delete(ctx, tenantID, id) })
}

func again[T any](ctx context.Context, write func() (T, error)) (T, error) {
	for {
		v, err := write()
		wait := errs.RetryAfter(err)
		if !errs.Is(err, errs.RateLimited) || wait <= 0 || wait > maxPaceWait {
			return v, err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return v, err
		}
	}
}
