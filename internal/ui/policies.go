package ui

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/route"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// policyHandler serves the policy list, the policy form and the path
// tester.
type policyHandler struct {
	config service.Services
	engine checker
	wait   versionWaiter
	now    func() time.Time
}

func (h *policyHandler) list(c echo.Context) error {
	return h.renderList(c, http.StatusOK, views.PathTest{Method: "GET"})
}

func (h *policyHandler) renderList(c echo.Context, status int, test views.PathTest) error {
	s := mustSession(c)
	ps, err := listPolicies(c.Request().Context(), h.config, s.TenantID)
	if err != nil {
		return err
	}
	v := views.PoliciesView{Test: test}
	v.Test.Methods = methods
	for _, p := range ps {
		if p.Descriptor == nil {
			v.Policies = append(v.Policies, policyRow(p))
		}
	}
	slices.SortFunc(v.Policies, func(a, b views.PolicyRow) int { return strings.Compare(a.Name, b.Name) })
	v.Domains = descriptorDomains(ps)
	if test.Result != nil && test.Result.Matched {
		for _, p := range ps {
			if p.Name == test.Result.Policy {
				test.Result.PolicyURL = policyURL(p.ID)
			}
		}
	}
	return render(c, status, views.Policies(page(c, "Policies", views.NavPolicies), v))
}

func policyURL(id string) string { return "/ui/policies/" + url.PathEscape(id) }

func policyRow(p tenants.Policy) views.PolicyRow {
	r := views.PolicyRow{ID: p.ID, Name: p.Name, Method: p.Method, Path: p.Path, Consistency: p.Consistency, Shadow: p.Shadow, UpdatedAt: p.UpdatedAt, URL: policyURL(p.ID)}
	if r.Method == tenants.MethodAny {
		r.Method = "ANY"
	}
	var q []string
	for _, k := range slices.Sorted(maps.Keys(p.Query)) {
		q = append(q, k+"="+p.Query[k])
	}
	r.Query = strings.Join(q, "&")
	for _, t := range sortedTiers(p.Tiers) {
		r.Tiers = append(r.Tiers, views.TierSummary{Name: t, Limits: describeLimits(p.Tiers[t])})
	}
	return r
}

// describeLimits writes a tier's limits in words: "10 per 60s (burst 20)".
func describeLimits(ls tenants.Limits) string {
	parts := make([]string, 0, len(ls))
	for _, l := range ls {
		s := fmt.Sprintf("%s per %s", views.FormatCount(l.Limit), l.Period)
		if l.Algorithm == tenants.Concurrency {
			s = fmt.Sprintf("%s at once", views.FormatCount(l.Limit))
		}
		if l.Calendar != "" {
			s = fmt.Sprintf("%s per calendar %s", views.FormatCount(l.Limit), l.Calendar)
		}
		if l.Burst > 0 {
			s += fmt.Sprintf(" (burst %s)", views.FormatCount(l.Burst))
		}
		if l.Algorithm != tenants.TokenBucket {
			s += ", " + strings.ReplaceAll(l.Algorithm, "_", " ")
		}
		if l.PerCustomer() {
			s += ", per customer"
		}
		if l.Name != "" {
			s = l.Name + ": " + s
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func (h *policyHandler) newForm(c echo.Context) error {
	f := views.PolicyForm{
		Method: "*", Consistency: tenants.ConsistencyExact,
		Tiers: []views.TierRow{
			{Name: "anonymous", Limits: []views.LimitRow{{Algorithm: tenants.TokenBucket}}},
			{Name: "default", Limits: []views.LimitRow{{Algorithm: tenants.TokenBucket}}},
		},
	}
	return h.renderForm(c, http.StatusOK, f)
}

func (h *policyHandler) edit(c echo.Context) error {
	p, err := h.get(c)
	if err != nil {
		return err
	}
	return h.renderForm(c, http.StatusOK, formOfPolicy(p))
}

// get loads the policy the URL names. A descriptor policy (a rule of
// Envoy's rate limit service) is not edited with the form, which cannot
// say what its domain's file says.
func (h *policyHandler) get(c echo.Context) (tenants.Policy, error) {
	p, err := h.config.Policies.Get(c.Request().Context(), mustSession(c).TenantID, c.Param("id"))
	if err == nil && p.Descriptor != nil {
		return tenants.Policy{}, errs.Errorf(errs.Conflict, "This rule belongs to the Envoy rate limit domain %q: change it by applying the domain's file with sluice apply -f.", p.Descriptor.Domain)
	}
	return p, err
}

func (h *policyHandler) renderForm(c echo.Context, status int, f views.PolicyForm) error {
	f.Methods, f.Algorithms = methods, algorithms
	title := "New policy"
	f.Action = "/ui/policies"
	if f.ID != "" {
		title = "Policy " + f.Name
		f.Action = policyURL(f.ID)
		f.DeleteURL = f.Action + "/delete"
	}
	return render(c, status, views.PolicyEdit(page(c, title, views.NavPolicies), f))
}

func (h *policyHandler) create(c echo.Context) error { return h.save(c, "") }

func (h *policyHandler) update(c echo.Context) error {
	// The id must be the tenant's before the form is even shown back.
	if _, err := h.get(c); err != nil {
		return err
	}
	return h.save(c, c.Param("id"))
}

func (h *policyHandler) save(c echo.Context, id string) error {
	form, err := c.FormParams()
	if err != nil {
		return errs.Errorf(errs.Invalid, "The form could not be read.")
	}
	f := readPolicyForm(form)
	f.ID = id
	if act, args := action(form); act != "save" {
		editTiers(&f, act, args)
		return h.renderForm(c, http.StatusOK, f)
	}
	p, groups, fe := policyOfForm(f)
	if formError := policyProblems(p, groups, fe); len(fe) > 0 || formError != "" {
		f.Errors, f.FormError = fe, formError
		return h.renderForm(c, http.StatusBadRequest, f)
	}
	ctx, tenantID := c.Request().Context(), mustSession(c).TenantID
	var w service.Written[tenants.Policy]
	done := "policy-created"
	if id == "" {
		w, err = h.config.Policies.Create(ctx, tenantID, p)
	} else {
		w, err = h.config.Policies.Update(ctx, tenantID, id, p)
		done = "policy-saved"
	}
	if err != nil {
		if !isInvalid(err) {
			return err
		}
		f.Errors, f.FormError = policyErrors(err, groups)
		return h.renderForm(c, formStatus(err), f)
	}
	applied(c.Request().Context(), h.wait, w.Version)
	return seeOther(c, "/ui/policies", done)
}

func (h *policyHandler) delete(c echo.Context) error {
	w, err := h.config.Policies.Delete(c.Request().Context(), mustSession(c).TenantID, c.Param("id"))
	if err != nil {
		return err
	}
	applied(c.Request().Context(), h.wait, w.Version)
	return seeOther(c, "/ui/policies", "policy-deleted")
}

// test answers the path tester with a peek: the engine decides as a check
// would, but consumes nothing and records nothing.
func (h *policyHandler) test(c echo.Context) error {
	t := views.PathTest{Method: strings.ToUpper(strings.TrimSpace(c.FormValue("method"))), Path: strings.TrimSpace(c.FormValue("path")), Caller: strings.TrimSpace(c.FormValue("caller"))}
	if t.Method == "" || t.Method == "*" {
		t.Method = "GET"
	}
	req := engine.CheckRequest{Method: t.Method, Path: t.Path, Peek: true}
	switch {
	case t.Path == "":
		t.Error = "Enter a path such as /api/example?mode=heavy."
	case strings.HasPrefix(t.Caller, tenants.KindConsumerKey):
		req.APIKey = t.Caller
	case t.Caller == "":
		req.IP = "192.0.2.1" // documentation address: a caller nobody is
	default:
		req.IP = t.Caller
	}
	if t.Error != "" {
		return h.renderList(c, http.StatusBadRequest, t)
	}
	a, err := h.engine.Check(c.Request().Context(), mustSession(c).TenantID, &req, h.now())
	if err != nil {
		if errs.Is(err, errs.Invalid) {
			t.Error = testError(err)
			return h.renderList(c, http.StatusBadRequest, t)
		}
		t.Error = "Sluice is still starting and cannot decide yet. Try again in a moment."
		return h.renderList(c, http.StatusServiceUnavailable, t)
	}
	target := route.NormalizeTarget(t.Path)
	r := &views.PathTestResult{
		Target:       t.Method + " " + t.Path,
		Normalized:   target.Path,
		Matched:      a.Policy != "",
		Policy:       a.Policy,
		Tier:         a.Tier,
		Identity:     a.IdentityKind + ":" + a.IdentityID,
		Reason:       a.Reason,
		Allowed:      a.Allowed,
		ShadowDenied: a.ShadowDenied,
		Limit:        a.Limit,
		Remaining:    a.Remaining,
		Reset:        humanDuration(a.Reset),
		NoLimit:      a.Policy != "" && len(a.Limits) == 0 && a.Reason == engine.ReasonOK && !a.ShadowDenied,
	}
	r.UnlistedDenied = a.Policy != "" && len(a.Limits) == 0 && (a.Reason == engine.ReasonRateLimited || a.ShadowDenied)
	if !a.Allowed && !r.UnlistedDenied {
		switch {
		case a.RetryAfter == quota.Never:
			r.RetryAfter = "never: the cost exceeds the limit"
		case a.RetryAfter > 0:
			r.RetryAfter = humanDuration(a.RetryAfter)
		}
	}
	t.Result = r
	return h.renderList(c, http.StatusOK, t)
}

func testError(err error) string {
	path, text, ok := splitMessage(errs.Message(err))
	if !ok {
		return errs.Message(err)
	}
	switch path {
	case "ip":
		return "Caller: " + text + " (or a consumer key starting with ck_)."
	case "path":
		return "Path: " + text + "."
	case "method":
		return "Method: " + text + "."
	}
	return errs.Message(err)
}

func humanDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "now"
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return d.Round(time.Minute).String()
	}
}

// descriptorDomains groups the descriptor policies by domain, each tree
// in depth-first order (a node's full key sorts after its parent's).
func descriptorDomains(ps []tenants.Policy) []views.DomainView {
	byDomain := map[string][]tenants.Policy{}
	for _, p := range ps {
		if d := p.Descriptor; d != nil {
			byDomain[d.Domain] = append(byDomain[d.Domain], p)
		}
	}
	var out []views.DomainView
	for _, name := range slices.Sorted(maps.Keys(byDomain)) {
		rules := byDomain[name]
		slices.SortFunc(rules, func(a, b tenants.Policy) int {
			return slices.CompareFunc(a.Descriptor.Path, b.Descriptor.Path, func(x, y tenants.DescriptorEntry) int {
				return cmp.Or(strings.Compare(x.Key, y.Key), strings.Compare(x.Value, y.Value))
			})
		})
		dv := views.DomainView{Name: name}
		for _, p := range rules {
			dv.Rules = append(dv.Rules, descriptorRow(p))
		}
		out = append(out, dv)
	}
	return out
}

func descriptorRow(p tenants.Policy) views.DescriptorRow {
	d := p.Descriptor
	last := d.Path[len(d.Path)-1]
	r := views.DescriptorRow{Depth: len(d.Path) - 1, Match: last.Key, Name: p.Name, Shadow: p.Shadow}
	if last.Value != "" {
		r.Match += " = " + last.Value
	}
	switch {
	case d.Unlimited:
		r.Limit = "unlimited"
	case d.Limited:
		r.Limit = describeLimits(p.Tiers[tenants.TierDefault])
		if !d.Extras && d.Unit != "" {
			r.Limit = views.FormatCount(int64(d.RequestsPerUnit)) + " per " + strings.ToLower(d.Unit)
		}
	}
	if d.RuleName != "" {
		r.Flags = append(r.Flags, "name "+d.RuleName)
	}
	for _, n := range d.Replaces {
		r.Flags = append(r.Flags, "replaces "+n)
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{d.QuotaMode, "quota mode"}, {d.ShareThreshold, "share threshold"}, {d.DetailedMetric, "detailed metric"}, {d.ValueToMetric, "value to metric"}, {p.Consistency == tenants.ConsistencyLocal, "local"}} {
		if f.on {
			r.Flags = append(r.Flags, f.name)
		}
	}
	return r
}
