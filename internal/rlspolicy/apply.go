package rlspolicy

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/limitsfile"
	"github.com/sluicehq/sluice/internal/rlsconf"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Diff plans making a tenant's descriptor policies of f's domain exactly
// f's nodes (have is every policy of the tenant; those of other domains
// and HTTP policies are left out of the plan). Every node must be a policy
// the server takes: the problems of all of them are answered at once, as
// errs.Invalid, before anything can change.
func Diff(f *rlsconf.File, have []tenants.Policy) (limitsfile.Plan, error) {
	want, err := Policies(f)
	if err != nil {
		return limitsfile.Plan{}, err
	}
	var probs []string
	for i := range want {
		want[i].Normalize()
		for _, e := range want[i].Problems() {
			probs = append(probs, fmt.Sprintf("%s: %s: %s", f.Name, want[i].Name, errs.Message(e)))
		}
	}
	if len(probs) > 0 {
		return limitsfile.Plan{}, errs.Errorf(errs.Invalid, "%s", strings.Join(probs, "\n"))
	}
	lf := &limitsfile.File{Name: f.Name, Version: limitsfile.Version, Policies: want}
	return limitsfile.Diff(lf, limitsfile.State{Policies: tenants.DescriptorPolicies(have, f.Domain)}, true, time.Now())
}

// PolicyService is what Apply needs of the tenant's policies.
type PolicyService interface {
	Create(ctx context.Context, tenantID string, p tenants.Policy) (service.Written[tenants.Policy], error)
	Update(ctx context.Context, tenantID, id string, p tenants.Policy) (service.Written[tenants.Policy], error)
	Delete(ctx context.Context, tenantID, id string) (service.Written[service.None], error)
}

var _ PolicyService = service.Policies(nil)

// Applied is what Apply did: the counts, each change, and the config
// version of the last write (0 when nothing changed).
type Applied struct {
	Created, Changed, Deleted int
	Changes                   []limitsfile.Change
	Version                   int64
}

// Apply makes a plan's changes, creating and changing nodes before it
// deletes any (parents come before their children in a plan). It stops at
// the first refusal and answers what it made so far with the error; a
// write refused by the tenant's config write limit is made again after
// the wait it names (paced).
func Apply(ctx context.Context, svc PolicyService, tenantID string, plan limitsfile.Plan) (Applied, error) {
	svc = paced{svc}
	var a Applied
	var deletes []limitsfile.Change
	for _, c := range plan.Changes {
		var err error
		switch c.Action {
		case limitsfile.Create:
			var w service.Written[tenants.Policy]
			if w, err = svc.Create(ctx, tenantID, c.Policy); err == nil {
				a.Created, a.Version = a.Created+1, max(a.Version, w.Version)
			}
		case limitsfile.Update:
			var w service.Written[tenants.Policy]
			if w, err = svc.Update(ctx, tenantID, c.ID, c.Policy); err == nil {
				a.Changed, a.Version = a.Changed+1, max(a.Version, w.Version)
			}
		case limitsfile.Delete:
			deletes = append(deletes, c)
			continue
		default:
			continue
		}
		if err != nil {
			return a, fmt.Errorf("policy %s: %w", c.Name, err)
		}
		a.Changes = append(a.Changes, c)
	}
	for _, c := range deletes {
		w, err := svc.Delete(ctx, tenantID, c.ID)
		if err != nil {
			return a, fmt.Errorf("policy %s: %w", c.Name, err)
		}
		a.Deleted, a.Version = a.Deleted+1, max(a.Version, w.Version)
		a.Changes = append(a.Changes, c)
	}
	return a, nil
}
