package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/limitsfile"
	"github.com/sluicehq/sluice/internal/rlsconf"
	"github.com/sluicehq/sluice/internal/rlspolicy"
	"github.com/sluicehq/sluice/internal/tenants"
)

// envoyChange is one change of an applied configuration, as the API
// answers it.
type envoyChange struct {
	Action string       `json:"action"` // create, update, delete
	Policy string       `json:"policy"`
	Fields []fieldDelta `json:"fields,omitempty"`
}

// fieldDelta is one field a change sets: its value before and after.
type fieldDelta struct {
	Field string `json:"field"`
	Old   string `json:"old,omitempty"`
	New   string `json:"new,omitempty"`
}

func changeOf(c limitsfile.Change) envoyChange {
	ec := envoyChange{Action: envoyActions[c.Action], Policy: c.Name}
	for _, f := range c.Fields {
		ec.Fields = append(ec.Fields, fieldDelta{Field: f.Field, Old: f.Old, New: f.New})
	}
	return ec
}

var envoyActions = map[limitsfile.Action]string{limitsfile.Create: "create", limitsfile.Update: "update", limitsfile.Delete: "delete"}

// applyEnvoyConfig takes a configuration file of Envoy's reference rate
// limit server, as text, and makes its domain's descriptor policies
// exactly its nodes (docs/ENVOY.md), as `sluice apply -f` does.
func (h envoyRoutes) applyEnvoyConfig(c echo.Context) error {
	var b struct {
		Config string `json:"config"`
		DryRun bool   `json:"dry_run"`
	}
	if err := bind(c, &b); err != nil {
		return err
	}
	if b.Config == "" {
		return errs.Errorf(errs.Invalid, "config: required, the text of a reference rate limit configuration file")
	}
	f, err := rlsconf.Parse("config", []byte(b.Config))
	if err != nil {
		if ps, ok := err.(rlsconf.Problems); ok {
			return errs.Errorf(errs.Invalid, "%s", ps.Error())
		}
		return errs.Errorf(errs.Invalid, "config: %s", err.Error())
	}
	ctx, tenant := c.Request().Context(), tenantID(c)
	have, err := h.Services.Policies.List(ctx, tenant)
	if err != nil {
		return err
	}
	plan, err := rlspolicy.Diff(f, have)
	if err != nil {
		return err
	}
	out := map[string]any{"domain": f.Domain, "dry_run": b.DryRun}
	changes := []envoyChange{}
	if b.DryRun {
		cr, ch, del, _ := plan.Counts()
		out["created"], out["changed"], out["deleted"] = cr, ch, del
		for _, ch := range plan.Changes {
			if _, ok := envoyActions[ch.Action]; ok {
				changes = append(changes, changeOf(ch))
			}
		}
		out["changes"] = changes
		return c.JSON(http.StatusOK, out)
	}
	a, err := rlspolicy.Apply(ctx, h.Services.Policies, tenant, plan)
	if a.Version > 0 {
		h.applied(c, a.Version)
	}
	if err != nil {
		return err
	}
	for _, ch := range a.Changes {
		changes = append(changes, changeOf(ch))
	}
	out["created"], out["changed"], out["deleted"], out["changes"] = a.Created, a.Changed, a.Deleted, changes
	return c.JSON(http.StatusOK, out)
}

// getEnvoyConfig writes a domain's descriptor policies back as a
// configuration file of the reference server (with Sluice's own fields
// only when extras=true asks for them).
func (h envoyRoutes) getEnvoyConfig(c echo.Context) error {
	domain := c.Param("domain")
	ps, err := h.Services.Policies.List(c.Request().Context(), tenantID(c))
	if err != nil {
		return err
	}
	ps = tenants.DescriptorPolicies(ps, domain)
	if len(ps) == 0 {
		return errs.Errorf(errs.NotFound, "no descriptor policies of domain %q", domain)
	}
	f, err := rlspolicy.FromPolicies(domain, ps)
	if err != nil {
		return err
	}
	var text []byte
	if c.QueryParam("extras") == "true" {
		text, err = rlsconf.MarshalWithExtras(f)
	} else if text, err = rlsconf.Marshal(f); err != nil {
		return errs.Errorf(errs.Conflict, "%s; ask with extras=true to keep Sluice's own fields (the reference server refuses them)", err.Error())
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"domain": domain, "config": string(text)})
}
