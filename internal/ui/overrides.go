package ui

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// maxOverrideRows bounds one overrides form.
const maxOverrideRows = 200

// overridesFormOf lists a key's overrides as rows, policy by policy.
func overridesFormOf(k tenants.ConsumerKey) views.OverridesForm {
	var f views.OverridesForm
	names := make([]string, 0, len(k.Overrides))
	for n := range k.Overrides {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		for _, l := range k.Overrides[n] {
			f.Rows = append(f.Rows, views.OverrideRow{Policy: n, LimitRow: limitRowOf(l)})
		}
	}
	return f
}

func readOverrides(form url.Values) views.OverridesForm {
	var f views.OverridesForm
	for i := range count(form, "rows", maxOverrideRows) {
		k := "override." + itoa(i)
		f.Rows = append(f.Rows, views.OverrideRow{Policy: strings.TrimSpace(form.Get(k + ".policy")), LimitRow: readLimitRow(form, k)})
	}
	return f
}

// overridesOfForm groups rows by policy. Rows without a policy and without
// numbers are dropped.
func overridesOfForm(f views.OverridesForm) (map[string]tenants.Limits, map[string]limitGroup, fieldErrors) {
	fe := fieldErrors{}
	out := map[string]tenants.Limits{}
	groups := map[string]limitGroup{}
	for i, r := range f.Rows {
		k := "override." + itoa(i)
		if r.Policy == "" {
			if !blankLimit(r.LimitRow) {
				fe.add(k+".policy", "choose the policy this limit replaces")
			}
			continue
		}
		l := limitFromRow(r.LimitRow, k, fe)
		out[r.Policy] = append(out[r.Policy], l)
		g := groups[r.Policy]
		if g.key == "" {
			g.key = k + ".policy"
		}
		g.limits = append(g.limits, k)
		groups[r.Policy] = g
	}
	return out, groups, fe
}

func (h *keyHandler) overrides(c echo.Context) error {
	k, err := h.get(c)
	if err != nil {
		return err
	}
	form, err := c.FormParams()
	if err != nil {
		return errs.Errorf(errs.Invalid, "The form could not be read.")
	}
	f := readOverrides(form)
	switch act, args := action(form); {
	case act == "add" && len(f.Rows) < maxOverrideRows:
		f.Rows = append(f.Rows, views.OverrideRow{LimitRow: views.LimitRow{Algorithm: tenants.TokenBucket}})
		return h.renderKey(c, http.StatusOK, k, &keyPage{overrides: &f})
	case act == "remove" && len(args) == 1 && args[0] < len(f.Rows):
		f.Rows = slices.Delete(f.Rows, args[0], args[0]+1)
		return h.renderKey(c, http.StatusOK, k, &keyPage{overrides: &f})
	case act != "save":
		return h.renderKey(c, http.StatusOK, k, &keyPage{overrides: &f})
	}
	ov, groups, fe := overridesOfForm(f)
	// Every problem of every row at once; the worker answers only the first.
	for _, name := range slices.Sorted(maps.Keys(ov)) {
		for _, err := range tenants.LimitsProblems("overrides."+name, ov[name]) {
			if path, text, ok := splitMessage(errs.Message(err)); ok {
				if input, found := mapGroupPath(strings.TrimPrefix(path, "overrides."), groups); found {
					fe.add(input, text)
				}
			}
		}
	}
	if len(fe) > 0 {
		f.Errors = fe
		return h.renderKey(c, http.StatusBadRequest, k, &keyPage{overrides: &f})
	}
	patch := tenants.KeyPatch{Overrides: &ov}
	w, err := h.config.Keys.Update(c.Request().Context(), k.TenantID, k.ID, patch)
	if err != nil {
		if !isInvalid(err) {
			return err
		}
		f.Errors, f.FormError = fieldErrors{}, ""
		path, text, ok := splitMessage(errs.Message(err))
		if name, found := mapGroupPath(strings.TrimPrefix(path, "overrides."), groups); ok && strings.HasPrefix(path, "overrides.") && found {
			f.Errors[name] = text
		} else {
			f.FormError = errs.Message(err)
		}
		return h.renderKey(c, http.StatusBadRequest, k, &keyPage{overrides: &f})
	}
	applied(c.Request().Context(), h.wait, w.Version)
	return seeOther(c, keyURL(k.ID), "overrides")
}
