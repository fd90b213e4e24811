package ui

import (
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// Bounds on what one policy form may carry (the domain's own bounds are
// checked by the worker).
const (
	maxFormTiers  = tenants.MaxTiers
	maxFormLimits = tenants.MaxLimitsPerTier
)

// readPolicyForm reads the inputs as typed.
func readPolicyForm(form url.Values) views.PolicyForm {
	f := views.PolicyForm{
		Name:        strings.TrimSpace(form.Get("name")),
		Method:      strings.ToUpper(strings.TrimSpace(form.Get("method"))),
		Path:        strings.TrimSpace(form.Get("path")),
		Query:       form.Get("query"),
		Consistency: form.Get("consistency"),
		Shadow:      form.Get("shadow") != "",

		UnlistedTiers: form.Get("unlisted_tiers"),
	}
	for i := range count(form, "tiers", maxFormTiers) {
		tk := "tier." + itoa(i)
		t := views.TierRow{Name: strings.TrimSpace(form.Get(tk + ".name"))}
		for j := range count(form, tk+".limits", maxFormLimits) {
			t.Limits = append(t.Limits, readLimitRow(form, tk+".limit."+itoa(j)))
		}
		f.Tiers = append(f.Tiers, t)
	}
	return f
}

// editTiers applies a row button: add or remove a tier or a limit.
func editTiers(f *views.PolicyForm, act string, args []int) {
	blank := views.LimitRow{Algorithm: tenants.TokenBucket}
	switch {
	case act == "add-tier" && len(f.Tiers) < maxFormTiers:
		f.Tiers = append(f.Tiers, views.TierRow{Limits: []views.LimitRow{blank}})
	case act == "remove-tier" && len(args) == 1 && args[0] < len(f.Tiers):
		f.Tiers = slices.Delete(f.Tiers, args[0], args[0]+1)
	case act == "add-limit" && len(args) == 1 && args[0] < len(f.Tiers):
		if t := &f.Tiers[args[0]]; len(t.Limits) < maxFormLimits {
			t.Limits = append(t.Limits, blank)
		}
	case act == "remove-limit" && len(args) == 2 && args[0] < len(f.Tiers) && args[1] < len(f.Tiers[args[0]].Limits):
		t := &f.Tiers[args[0]]
		t.Limits = slices.Delete(t.Limits, args[1], args[1]+1)
	}
}

// policyOfForm builds the policy the form describes. Blank limit rows and
// blank tiers are dropped; what cannot be converted at all (a tier without
// a name, a limit that is not a number) is reported by input name.
func policyOfForm(f views.PolicyForm) (tenants.Policy, map[string]limitGroup, fieldErrors) {
	fe := fieldErrors{}
	p := tenants.Policy{Name: f.Name, Method: f.Method, Path: f.Path, Consistency: f.Consistency, Shadow: f.Shadow, UnlistedTiers: f.UnlistedTiers}
	if p.Method == "*" {
		p.Method = tenants.MethodAny
	}
	p.Query = parseQueryLines(f.Query, fe)
	groups := map[string]limitGroup{}
	p.Tiers = map[string]tenants.Limits{}
	for i, t := range f.Tiers {
		tk := "tier." + itoa(i)
		g := limitGroup{key: tk}
		errsBefore := len(fe)
		var ls tenants.Limits
		for j, r := range t.Limits {
			if blankLimit(r) {
				continue
			}
			lk := tk + ".limit." + itoa(j)
			ls = append(ls, limitFromRow(r, lk, fe))
			g.limits = append(g.limits, lk)
		}
		switch {
		case len(ls) == 0 && len(fe) == errsBefore:
			// Every row was left empty (the new form's "default" tier
			// comes so): the hint says such rows are ignored.
			continue
		case t.Name == "":
			fe.add(tk+".name", "required: anonymous, default, or the tier your keys carry")
			continue
		case p.Tiers[t.Name] != nil || groups[t.Name].key != "":
			fe.add(tk+".name", "is used by another tier above")
			continue
		}
		if ls == nil {
			ls = tenants.Limits{}
		}
		p.Tiers[t.Name] = ls
		groups[t.Name] = g
	}
	return p, groups, fe
}

// parseQueryLines reads "name=value" lines.
func parseQueryLines(text string, fe fieldErrors) map[string]string {
	q := map[string]string{}
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			fe.add("query", "line "+itoa(n+1)+": write name=value, such as mode=heavy")
			continue
		}
		if _, dup := q[k]; dup {
			fe.add("query", "line "+itoa(n+1)+": "+k+" is already required above")
			continue
		}
		q[k] = v
	}
	if len(q) == 0 {
		return nil
	}
	return q
}

// policyProblems is every problem of p mapped to the form's inputs, for
// the inputs fe has no error for yet: a form shows them all at once rather
// than one per save.
func policyProblems(p tenants.Policy, groups map[string]limitGroup, fe fieldErrors) (formError string) {
	for _, err := range p.Problems() {
		pe, msg := policyErrors(err, groups)
		for k, v := range pe {
			if _, ok := fe[k]; !ok {
				fe[k] = v
			}
		}
		if formError == "" {
			formError = msg
		}
	}
	return formError
}

// policyErrors maps the worker's validation error to the form's inputs.
func policyErrors(err error, groups map[string]limitGroup) (fieldErrors, string) {
	msg := errs.Message(err)
	if tenants.CapReached(err) {
		return nil, msg
	}
	// A conflict naming a limit (a concurrency limit some server cannot
	// read yet) goes to that limit's input below; any other is the name.
	if errs.Is(err, errs.Conflict) && !strings.HasPrefix(msg, "tiers.") {
		return fieldErrors{"name": "another policy already has this name"}, ""
	}
	path, text, ok := splitMessage(msg)
	if !ok {
		return nil, msg
	}
	switch {
	case path == "tiers" && strings.HasPrefix(text, "tier name "):
		// `tier name "Pro!" must be ...`: by the input that named it.
		rest := strings.TrimPrefix(text, "tier name ")
		if quoted, err := strconv.QuotedPrefix(rest); err == nil {
			name, _ := strconv.Unquote(quoted)
			if g, ok := groups[name]; ok {
				return fieldErrors{g.key + ".name": strings.TrimSpace(rest[len(quoted):])}, ""
			}
		}
		return fieldErrors{path: text}, ""
	case path == "name" || path == "method" || path == "path" || path == "consistency" || path == "tiers" || path == "unlisted_tiers":
		return fieldErrors{path: text}, ""
	case path == "query" || strings.HasPrefix(path, "query."):
		if k, ok := strings.CutPrefix(path, "query."); ok {
			text = k + ": " + text
		}
		return fieldErrors{"query": text}, ""
	case strings.HasPrefix(path, "tiers."):
		if name, ok := mapGroupPath(strings.TrimPrefix(path, "tiers."), groups); ok {
			return fieldErrors{name: text}, ""
		}
	}
	return nil, msg
}

// formOfPolicy fills the form from a stored policy.
func formOfPolicy(p tenants.Policy) views.PolicyForm {
	f := views.PolicyForm{ID: p.ID, Name: p.Name, Method: p.Method, Path: p.Path, Consistency: p.Consistency, Shadow: p.Shadow, UnlistedTiers: p.UnlistedTiers}
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(p.Query)) {
		lines = append(lines, k+"="+p.Query[k])
	}
	f.Query = strings.Join(lines, "\n")
	for _, name := range sortedTiers(p.Tiers) {
		t := views.TierRow{Name: name}
		for _, l := range p.Tiers[name] {
			t.Limits = append(t.Limits, limitRowOf(l))
		}
		f.Tiers = append(f.Tiers, t)
	}
	return f
}

func itoa(n int) string { return strconv.Itoa(n) }
