package configsvc

import (
	"context"
	"strings"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

// A server older than concurrency limits cannot compile a config that
// holds one: it refuses that change and every snapshot after it, so it
// stops taking every tenant's config changes. So while such a server is
// live (a rolling upgrade), no write may put a concurrency limit in the
// config: a policy's tiers and a consumer key's overrides are where a
// limit is written. The limits are validated first, so that a write with
// another problem answers that problem.

// checkPolicyConcurrency refuses pol when it holds a concurrency limit
// that some live server cannot compile.
func (s *Service) checkPolicyConcurrency(ctx context.Context, pol tenants.Policy) error {
	field := pol.ConcurrencyField()
	if field == "" {
		return nil
	}
	if err := pol.Validate(); err != nil {
		return err
	}
	return s.checkConcurrency(ctx, field)
}

// checkOverridesConcurrency is checkPolicyConcurrency for a consumer
// key's overrides.
func (s *Service) checkOverridesConcurrency(ctx context.Context, overrides map[string]tenants.Limits) error {
	field := tenants.OverridesConcurrencyField(overrides)
	if field == "" {
		return nil
	}
	if err := tenants.ValidateOverrides(overrides); err != nil {
		return err
	}
	return s.checkConcurrency(ctx, field)
}

// checkConcurrency answers errs.Conflict naming field while a live server
// cannot compile a concurrency limit, and errs.Unavailable when the
// servers' announcements cannot be read.
func (s *Service) checkConcurrency(ctx context.Context, field string) error {
	if s.hooks.ServersWithoutConcurrency == nil {
		return nil
	}
	older, err := s.hooks.ServersWithoutConcurrency(ctx)
	if err != nil {
		s.log.Warn("a config write with a concurrency limit refused: which servers support them could not be read", "field", field, "err", err)
		return errs.Errorf(errs.Unavailable, "%s: could not tell whether every server supports concurrency limits; nothing was changed, try again", field)
	}
	if len(older) == 0 {
		return nil
	}
	// The servers are named to the operator, in the log; the tenant
	// learns how many.
	s.log.Warn("a config write with a concurrency limit refused: upgrade these servers first", "field", field, "servers", strings.Join(older, ","))
	return errs.Errorf(errs.Conflict, "%s: concurrency limits need every server of the cluster upgraded, and %d live server(s) run an earlier version that cannot read them; nothing was changed: the operator must upgrade every server first", field, len(older))
}
