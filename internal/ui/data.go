package ui

import (
	"cmp"
	"context"
	"net/url"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// Reads shared by several pages.

func timeseries(ctx context.Context, q service.Analytics, tq service.TimeseriesQuery) ([]views.ChartPoint, error) {
	ts, err := q.Timeseries(ctx, tq)
	if err != nil {
		return nil, err
	}
	out := make([]views.ChartPoint, len(ts.Points))
	for i, p := range ts.Points {
		out[i] = views.ChartPoint{Start: p.Start, Allowed: p.Allowed, Denied: p.Denied,
			RateLimited: p.RateLimited, InvalidKey: p.InvalidKey, Blocked: p.Blocked, ConcurrencyLimited: p.ConcurrencyLimited}
	}
	return out, nil
}

func top(ctx context.Context, q service.Analytics, tq service.TopQuery) ([]service.TopEntry, error) {
	out, err := q.Top(ctx, tq)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// offenders turns ranked entries into rows, naming keys and linking to
// each identity's history when drill is true.
func offenders(entries []service.TopEntry, names map[string]string, drill bool) []views.Offender {
	out := make([]views.Offender, 0, len(entries))
	for _, e := range entries {
		o := views.Offender{
			TenantID: e.TenantID, TenantName: e.TenantName,
			Kind: e.Identity.Kind, ID: e.Identity.ID, Label: names[e.Identity.ID],
			Allowed: e.Allowed, Denied: e.Denied, Ratio: e.DenialRatio,
			RateLimited: e.RateLimited, InvalidKey: e.InvalidKey, Blocked: e.Blocked,
			FirstSeen: e.FirstSeen, LastSeen: e.LastSeen,
		}
		if e.Identity.Kind == tenants.IdentityKey && e.Identity.ID == engine.InvalidKeyIdentity {
			// Every key that is not the tenant's, counted as one caller.
			o.Label = "unknown keys"
		}
		if drill {
			o.DrillURL = identityURL(e.Identity.Kind, e.Identity.ID, "", "")
		}
		out = append(out, o)
	}
	return out
}

// denialReasons are the reasons a check is denied for, as analytics count them.
var denialReasons = []string{"rate_limited", "invalid_key", "blocked", "concurrency_limited"}

// reasonOffenders ranks (identity, reason) pairs by that reason's denials:
// the top q.Limit identities of each reason, merged and cut to q.Limit. An
// identity's one invalid-key check is one denial, ranked below every
// caller denied more often, whatever its share.
func reasonOffenders(ctx context.Context, q service.Analytics, tq service.TopQuery) ([]views.ReasonOffender, error) {
	var out []views.ReasonOffender
	for _, reason := range denialReasons {
		tq.Reason = reason
		entries, err := top(ctx, q, tq)
		if err != nil {
			return nil, err
		}
		for i, o := range offenders(entries, nil, false) {
			e := entries[i]
			n := map[string]int64{"rate_limited": e.RateLimited, "invalid_key": e.InvalidKey, "blocked": e.Blocked, "concurrency_limited": e.ConcurrencyLimited}[reason]
			out = append(out, views.ReasonOffender{Offender: o, Reason: reason, Count: n, Checks: e.Allowed + e.Denied})
		}
	}
	slices.SortStableFunc(out, func(a, b views.ReasonOffender) int {
		if a.Count != b.Count {
			return cmp.Compare(b.Count, a.Count)
		}
		return cmp.Compare(b.Share(), a.Share())
	})
	if len(out) > tq.Limit {
		out = out[:tq.Limit]
	}
	return out, nil
}

func identityURL(kind, id, rng, policy string) string {
	q := url.Values{"kind": {kind}, "id": {id}}
	if rng != "" {
		q.Set("range", rng)
	}
	if policy != "" {
		q.Set("policy", policy)
	}
	return "/ui/analytics/identity?" + q.Encode()
}

func listPolicies(ctx context.Context, c service.Services, tenantID string) ([]tenants.Policy, error) {
	return c.Policies.List(ctx, tenantID)
}

// policyNameList reads the ids and names of the tenant's policies, by
// name, for the pages that only name them (a menu, a form's choices).
func policyNameList(ctx context.Context, c service.Services, tenantID string) ([]tenants.PolicyName, error) {
	l, err := c.Policies.Names(ctx, tenantID, nil)
	return l.Policies, err
}

// countPolicies counts the tenant's policies.
func countPolicies(ctx context.Context, c service.Services, tenantID string) (int, error) {
	return c.Policies.Count(ctx, tenantID)
}

// topPolicies ranks the tenant's policies by denials over a range.
func topPolicies(ctx context.Context, q service.Analytics, pq service.PolicyRankQuery) ([]service.PolicyRank, error) {
	return q.TopPolicies(ctx, pq)
}

// listKeys reads every key of the tenant: only the callers page's lookup
// by key prefix still needs it, and only when asked for a key.
func listKeys(ctx context.Context, c service.Services, tenantID string) ([]tenants.ConsumerKey, error) {
	ks, err := c.Keys.List(ctx, tenantID)
	return ks, err
}

// keyNames names the consumer keys among entries' identities, for
// labelling them: only the tenant's keys are named, and only those shown.
func keyNames(ctx context.Context, c service.Services, tenantID string, entries []service.TopEntry) (map[string]string, error) {
	var ids []string
	for _, e := range entries {
		if e.Identity.Kind == tenants.IdentityKey && e.Identity.ID != engine.InvalidKeyIdentity && !slices.Contains(ids, e.Identity.ID) {
			ids = append(ids, e.Identity.ID)
		}
	}
	if len(ids) == 0 {
		return map[string]string{}, nil
	}
	return c.Keys.Names(ctx, tenantID, ids)
}

func policyNames(ps []tenants.Policy) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

func nameStrings(ps []tenants.PolicyName) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// tierNames lists every tier the tenant's policies define, for the key
// forms' suggestions.
func tierNames(ps []tenants.Policy) []string {
	out := []string{"default"}
	seen := map[string]bool{"default": true, "anonymous": true}
	for _, p := range ps {
		for _, t := range sortedTiers(p.Tiers) {
			if !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
		}
	}
	return out
}

// applied waits (at most a second) until this server enforces a write, so
// the page after a save already reflects it, as the API does.
func applied(ctx context.Context, w versionWaiter, version int64) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	w.WaitVersion(ctx, version)
}

// userMessage is an error as a sentence for a page; unexpected failures
// stay generic.
func userMessage(err error) string {
	switch errs.Code(err) {
	case errs.Unavailable:
		return "Sluice's worker is not reachable right now; the numbers below may be missing. Try again in a moment."
	case errs.Internal:
		return "Something went wrong loading this data."
	}
	return errs.Message(err)
}
