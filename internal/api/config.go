package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// applied waits (briefly) until this server enforces a write it just made,
// so a client that writes and then checks sees its own write.
func (h *handler) applied(c echo.Context, version int64) {
	ctx, cancel := context.WithTimeout(c.Request().Context(), time.Second)
	defer cancel()
	h.Engine.WaitVersion(ctx, version)
}

func (h policyRoutes) createPolicy(c echo.Context) error {
	var b tenants.PolicyBody
	if err := bind(c, &b); err != nil {
		return err
	}
	w, err := h.Services.Policies.Create(c.Request().Context(), tenantID(c), b.Policy())
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.JSON(http.StatusCreated, w.Result)
}

func (h policyRoutes) updatePolicy(c echo.Context) error {
	var b tenants.PolicyBody
	if err := bind(c, &b); err != nil {
		return err
	}
	w, err := h.Services.Policies.Update(c.Request().Context(), tenantID(c), c.Param("id"), b.Policy())
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.JSON(http.StatusOK, w.Result)
}

func (h policyRoutes) getPolicy(c echo.Context) error {
	p, err := h.Services.Policies.Get(c.Request().Context(), tenantID(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, p)
}

func (h policyRoutes) listPolicies(c echo.Context) error {
	ps, err := h.Services.Policies.List(c.Request().Context(), tenantID(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"policies": orEmpty(ps)})
}

func (h policyRoutes) deletePolicy(c echo.Context) error {
	w, err := h.Services.Policies.Delete(c.Request().Context(), tenantID(c), c.Param("id"))
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.NoContent(http.StatusNoContent)
}

// keyAnswer is a consumer key as the API shows it, with the secret only on
// creation.
type keyAnswer struct {
	tenants.ConsumerKey
	Key string `json:"key,omitempty"`
}

func (h keyRoutes) createKey(c echo.Context) error {
	var b struct {
		Name          string                    `json:"name"`
		Tier          string                    `json:"tier"`
		ExpiresAt     *time.Time                `json:"expires_at"`
		Overrides     map[string]tenants.Limits `json:"overrides"`
		BillingAnchor *int                      `json:"billing_anchor"`
		CustomerID    *string                   `json:"customer_id"`
	}
	if err := bind(c, &b); err != nil {
		return err
	}
	req := service.KeyCreate{TenantID: tenantID(c), Name: b.Name, Tier: b.Tier, ExpiresAt: b.ExpiresAt, Overrides: b.Overrides}
	if b.CustomerID != nil {
		if *b.CustomerID == "" {
			return errs.Errorf(errs.Invalid, "customer_id: must be a customer id (cus_…), or absent for none")
		}
		req.CustomerID = *b.CustomerID
	}
	if a := b.BillingAnchor; a != nil {
		// 0 is not a day of the month: omit the anchor (or send null) for
		// quotas that reset on the 1st.
		if *a < 1 || *a > tenants.MaxBillingAnchor {
			return errs.Errorf(errs.Invalid, "billing_anchor: must be a day of the month from 1 to 31, or absent for none (the 1st); got %d", *a)
		}
		req.BillingAnchor = *a
	}
	w, err := h.Services.Keys.Create(c.Request().Context(), req)
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.JSON(http.StatusCreated, keyAnswer{ConsumerKey: w.Result.Key, Key: w.Result.Secret})
}

func (h keyRoutes) getKey(c echo.Context) error {
	k, err := h.Services.Keys.Get(c.Request().Context(), tenantID(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, k)
}

func (h keyRoutes) listKeys(c echo.Context) error {
	ks, err := h.Services.Keys.List(c.Request().Context(), tenantID(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"keys": orEmpty(ks)})
}

func (h keyRoutes) updateKey(c echo.Context) error {
	var p tenants.KeyPatch
	if err := bind(c, &p); err != nil {
		return err
	}
	w, err := h.Services.Keys.Update(c.Request().Context(), tenantID(c), c.Param("id"), p)
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.JSON(http.StatusOK, w.Result)
}

func (h keyRoutes) revokeKey(c echo.Context) error {
	w, err := h.Services.Keys.Revoke(c.Request().Context(), tenantID(c), c.Param("id"))
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.JSON(http.StatusOK, w.Result)
}

func (h policyRoutes) resetBucket(c echo.Context) error {
	var b struct {
		Policy   string           `json:"policy"`
		Identity tenants.Identity `json:"identity"`
	}
	if err := bind(c, &b); err != nil {
		return err
	}
	w, err := h.Services.Buckets.Reset(c.Request().Context(), tenantID(c), b.Policy, b.Identity)
	if err != nil {
		return err
	}
	h.applied(c, w.Version)
	return c.JSON(http.StatusOK, map[string]any{"reset": true})
}

// DefaultRange is the range analytics and the abuse report answer when a
// request names neither end: the last 24 hours.
const DefaultRange = 24 * time.Hour

// timeRange reads from/to (RFC 3339) query parameters. Without to the
// range ends now; without from it starts DefaultRange before its end. The
// answer says which range it used.
func timeRange(c echo.Context, now time.Time) (time.Time, time.Time, error) {
	parse := func(name string) (time.Time, bool, error) {
		v := c.QueryParam(name)
		if v == "" {
			return time.Time{}, false, nil
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return time.Time{}, false, errs.Errorf(errs.Invalid, "%s: must be an RFC 3339 time such as 2026-01-02T15:04:05Z", name)
		}
		return t, true, nil
	}
	from, hasFrom, err := parse("from")
	if err != nil {
		return from, from, err
	}
	to, hasTo, err := parse("to")
	if err != nil {
		return from, to, err
	}
	if !hasTo {
		to = now.UTC().Truncate(time.Second)
	}
	if !hasFrom {
		from = to.Add(-DefaultRange)
	}
	return from, to, nil
}

func (h analyticsRoutes) timeseries(c echo.Context) error {
	from, to, err := timeRange(c, h.Now())
	if err != nil {
		return err
	}
	q := service.TimeseriesQuery{TenantID: tenantID(c), From: from, To: to, Step: c.QueryParam("step"), Policy: c.QueryParam("policy")}
	ts, err := h.Services.Analytics.Timeseries(c.Request().Context(), q)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ts)
}

func limitParam(c echo.Context) (int, error) {
	v := c.QueryParam("limit")
	if v == "" {
		return 20, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return 0, errs.Errorf(errs.Invalid, "limit: must be an integer between 1 and 1000")
	}
	return n, nil
}

func (h analyticsRoutes) top(c echo.Context) error { return h.rankIdentities(c, tenantID(c)) }

// rankIdentities answers identities ranked by denials, in one tenant or,
// with tenant empty, across all of them (the operator's abuse report).
func (h *handler) rankIdentities(c echo.Context, tenant string) error {
	from, to, err := timeRange(c, h.Now())
	if err != nil {
		return err
	}
	n, err := limitParam(c)
	if err != nil {
		return err
	}
	q := service.TopQuery{TenantID: tenant, From: from, To: to, Limit: n, Policy: c.QueryParam("policy")}
	entries, err := h.Services.Analytics.Top(c.Request().Context(), q)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"from": from.UTC(), "to": to.UTC(), "identities": orEmpty(entries)})
}
