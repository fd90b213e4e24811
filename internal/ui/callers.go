package ui

import (
	"context"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// callerHandler serves the Callers page: look one caller up by IP, key id,
// key prefix or JWT subject, see its buckets now (read through the engine's peek path,
// which takes nothing and resets nothing), its recent decisions from the
// analytics counters, and reset, block or unblock it from there. Every
// lookup and action is scoped to the session's tenant: another tenant's
// keys and blocks do not exist here.
type callerHandler struct {
	config    service.Services
	analytics service.Analytics
	engine    callerPeeker
	wait      versionWaiter
	now       func() time.Time
}

// callerPeeker reads a caller's buckets without taking anything.
type callerPeeker interface {
	PeekCaller(tenantID string, who engine.Caller, now time.Time) (engine.CallerState, error)
}

var _ callerPeeker = (*engine.Engine)(nil)

// recentMinutes is how far back a caller's recent decisions go.
const recentMinutes = 15

func callerURL(kind, id, policy string) string {
	q := url.Values{"kind": {kind}, "id": {id}}
	if policy != "" {
		q.Set("policy", policy)
	}
	return "/ui/callers?" + q.Encode()
}

// find turns a search into one caller, or into the keys it matches.
func (h *callerHandler) find(ctx context.Context, tenantID, q string) (id tenants.Identity, matches []views.CallerMatch, msg string, err error) {
	if ip, ok := engine.NormalizeIP(q); ok {
		return tenants.Identity{Kind: tenants.IdentityIP, ID: ip}, nil, "", nil
	}
	if sub, ok := strings.CutPrefix(q, "jwt:"); ok {
		return tenants.Identity{Kind: tenants.IdentityJWT, ID: strings.TrimSpace(sub)}, nil, "", nil
	}
	if !strings.HasPrefix(q, "ckey_") && !strings.HasPrefix(q, "ck_") {
		return id, nil, "Enter an IP address, a key id (ckey_…), a key prefix (ck_…) or jwt: and a token's subject.", nil
	}
	if strings.HasPrefix(q, "ck_") && len(q) < 4 {
		return id, nil, "Enter at least one character after ck_.", nil
	}
	ks, err := listKeys(ctx, h.config, tenantID)
	if err != nil {
		return id, nil, "", err
	}
	prefix := q[:min(len(q), 8)]
	for _, k := range ks {
		if k.ID == q || (strings.HasPrefix(q, "ck_") && strings.HasPrefix(k.Prefix, prefix)) {
			matches = append(matches, views.CallerMatch{Label: k.Name, Prefix: k.Prefix, Tier: k.Tier, URL: callerURL(tenants.IdentityKey, k.ID, "")})
			id = tenants.Identity{Kind: tenants.IdentityKey, ID: k.ID}
		}
	}
	switch len(matches) {
	case 0:
		return tenants.Identity{}, nil, "No key of yours matches " + q + ".", nil
	case 1:
		return id, nil, "", nil
	}
	return tenants.Identity{}, matches, "", nil
}

func (h *callerHandler) show(c echo.Context) error {
	if q := strings.TrimSpace(c.QueryParam("q")); strings.HasPrefix(q, "ck_") && len(q) > 8 {
		// A whole secret pasted in: look it up by its prefix, so that the
		// secret stays out of the address bar and the browser's history.
		return c.Redirect(http.StatusSeeOther, "/ui/callers?"+url.Values{"q": {q[:8]}}.Encode())
	}
	return h.render(c, http.StatusOK, nil)
}

// callerForms carries a refused action back into the page.
type callerForms struct {
	reset *views.ResetForm
	block *views.CallerBlockForm
}

func (h *callerHandler) render(c echo.Context, status int, back *callerForms) error {
	s := mustSession(c)
	ctx := c.Request().Context()
	v := views.CallersView{Query: strings.TrimSpace(c.QueryParam("q"))}
	var id tenants.Identity
	switch {
	case c.QueryParam("kind") != "":
		id = tenants.Identity{Kind: c.QueryParam("kind"), ID: c.QueryParam("id")}
	case v.Query != "":
		var err error
		if id, v.Matches, v.Message, err = h.find(ctx, s.TenantID, v.Query); err != nil {
			return err
		}
	}
	if id.Kind != "" {
		who := engine.Caller{Kind: id.Kind, ID: id.ID}
		if id.Kind == tenants.IdentityJWT {
			who.Tier = strings.TrimSpace(c.QueryParam("tier"))
		}
		cv, err := h.caller(c, who, c.QueryParam("policy"))
		if err != nil {
			if !errs.Is(err, errs.NotFound) && !isInvalid(err) {
				return err
			}
			// A key id that is not this tenant's is no caller here.
			v.Message = "No caller of yours matches."
			status = max(status, http.StatusNotFound)
		} else {
			if back != nil && back.reset != nil {
				cv.Reset = *back.reset
				cv.Reset.Action, cv.Reset.Policies = "/ui/callers/reset", cv.Reset.Policies[:0]
				for _, p := range cv.Policies {
					cv.Reset.Policies = append(cv.Reset.Policies, p.Policy)
				}
			}
			if back != nil && back.block != nil {
				cv.BlockForm = *back.block
				cv.BlockForm.Expiries = expiryChoices(cv.BlockForm.Expiry)
			}
			v.Caller = &cv
		}
	}
	p := page(c, "Callers", views.NavCallers)
	tenantBlocked(c, h.config, &p, s.TenantID, h.now())
	return render(c, status, views.Callers(p, v))
}

// caller reads one caller's state, recent decisions and block.
func (h *callerHandler) caller(c echo.Context, who engine.Caller, policy string) (views.CallerView, error) {
	s := mustSession(c)
	ctx := c.Request().Context()
	now := h.now()
	st, err := h.engine.PeekCaller(s.TenantID, who, now)
	if err != nil {
		return views.CallerView{}, err
	}
	cv := views.CallerView{
		Kind: st.Kind, ID: st.ID, Tier: st.Tier, KeyStatus: st.KeyStatus,
		HistoryURL: identityURL(st.Kind, st.ID, "24h", ""),
		Minutes:    recentMinutes,
		BlockForm:  views.CallerBlockForm{Expiry: "24h", Expiries: expiryChoices("24h")},
	}
	if st.Kind == tenants.IdentityKey {
		k, err := h.config.Keys.Get(ctx, s.TenantID, st.ID)
		if err == nil {
			cv.Label, cv.KeyURL = k.Name, keyURL(k.ID)
		}
	}
	if b := st.Block; b != nil {
		cv.Block = &views.CallerBlock{ID: b.ID, Reason: b.Reason, Since: b.CreatedAt, Until: b.ExpiresAt}
	}
	names := make([]string, 0, len(st.Policies))
	for _, p := range st.Policies {
		row := views.CallerPolicyRow{
			Policy: p.Policy, Tier: p.Tier, Override: p.Override, Unlisted: p.Unlisted, DenyUnlisted: p.DenyUnlisted,
			Allowed: p.Allowed, Err: p.Err, ResetURL: callerURL(st.Kind, st.ID, p.Policy) + "#reset-title",
		}
		if !p.Allowed && p.RetryAfter > 0 {
			row.RetryAfter = views.FormatWait(p.RetryAfter)
		}
		for _, l := range p.Limits {
			lr := views.CallerLimitRow{Name: l.Name, Limit: l.Limit, Remaining: l.Remaining, FullIn: views.FormatWait(l.Reset)}
			if l.Period > 0 { // a concurrency limit has none: its limit is "at once"
				lr.Period = views.FormatPeriod(l.Period)
			}
			row.Limits = append(row.Limits, lr)
		}
		cv.Policies = append(cv.Policies, row)
		names = append(names, p.Policy)
	}
	cv.Reset = views.ResetForm{Action: "/ui/callers/reset", Kind: st.Kind, ID: st.ID, Policies: names, Policy: policy}
	from, to := window(recentMinutes*time.Minute, time.Minute, now)
	points, err := timeseries(ctx, h.analytics, service.TimeseriesQuery{
		TenantID: s.TenantID, From: from, To: to, Step: "1m", Identity: &tenants.Identity{Kind: st.Kind, ID: st.ID},
	})
	if err != nil {
		cv.Error = userMessage(err)
	}
	cv.Recent = views.NewChart("Decisions for "+st.Kind+" "+st.ID+" in the last 15 minutes", points, time.Minute)
	return cv, nil
}

// identityForm reads the caller a form acts on; a key must be this
// tenant's (PeekCaller answers not found otherwise).
func (h *callerHandler) identityForm(c echo.Context) (tenants.Identity, error) {
	kind, id := c.FormValue("kind"), strings.TrimSpace(c.FormValue("id"))
	st, err := h.engine.PeekCaller(mustSession(c).TenantID, engine.Caller{Kind: kind, ID: id}, h.now())
	if err != nil {
		if isInvalid(err) {
			return tenants.Identity{}, errs.Errorf(errs.NotFound, "no such caller")
		}
		return tenants.Identity{}, err
	}
	return tenants.Identity{Kind: st.Kind, ID: st.ID}, nil
}

// again shows the caller's page with a refused form.
func (h *callerHandler) again(c echo.Context, id tenants.Identity, back *callerForms) error {
	q := url.Values{"kind": {id.Kind}, "id": {id.ID}}
	if back.reset != nil {
		q.Set("policy", back.reset.Policy)
	}
	c.Request().URL.RawQuery = q.Encode()
	return h.render(c, http.StatusBadRequest, back)
}

func (h *callerHandler) reset(c echo.Context) error {
	id, err := h.identityForm(c)
	if err != nil {
		return err
	}
	r := views.ResetForm{Kind: id.Kind, ID: id.ID, Policy: c.FormValue("policy")}
	if err := resetBucket(c, h.config, h.wait, r); err != nil {
		if !isInvalid(err) && !errs.Is(err, errs.NotFound) {
			return err
		}
		r.Error = resetError(err)
		return h.again(c, id, &callerForms{reset: &r})
	}
	return seeOther(c, callerURL(id.Kind, id.ID, ""), "reset")
}

// blockIdentity is the identity a block is stored under: an IPv6 caller
// is named by its /64, and a block on its first address blocks all of it.
func blockIdentity(id tenants.Identity) tenants.Identity {
	if p, err := netip.ParsePrefix(id.ID); err == nil && id.Kind == tenants.IdentityIP {
		id.ID = p.Masked().Addr().String()
	}
	return id
}

func (h *callerHandler) block(c echo.Context) error {
	id, err := h.identityForm(c)
	if err != nil {
		return err
	}
	f := views.CallerBlockForm{Reason: strings.TrimSpace(c.FormValue("reason")), Expiry: c.FormValue("expiry")}
	b := tenants.Block{TenantID: mustSession(c).TenantID, Identity: blockIdentity(id), Reason: f.Reason}
	found := false
	for _, e := range blockExpiries {
		if e.value == f.Expiry {
			found = true
			if e.d > 0 {
				t := h.now().Add(e.d)
				b.ExpiresAt = &t
			}
		}
	}
	if !found {
		f.Error = "Choose how long the block lasts."
		return h.again(c, id, &callerForms{block: &f})
	}
	w, err := h.config.Blocks.Create(c.Request().Context(), b)
	if err != nil {
		if !isInvalid(err) {
			return err
		}
		f.Error = errs.Message(err)
		return h.again(c, id, &callerForms{block: &f})
	}
	applied(c.Request().Context(), h.wait, w.Version)
	return seeOther(c, withBlock(callerURL(id.Kind, id.ID, ""), w.Result.ID), "blocked")
}

func (h *callerHandler) unblock(c echo.Context) error {
	id, err := h.identityForm(c)
	if err != nil {
		return err
	}
	s := mustSession(c)
	ctx := c.Request().Context()
	// Only a block of this tenant on this caller may be lifted here; the
	// worker's delete takes any id, so the id is checked against the
	// tenant's own list first.
	bs, err := h.config.Blocks.List(ctx, s.TenantID)
	if err != nil {
		return err
	}
	want := c.FormValue("block_id")
	found := false
	for _, b := range bs {
		if b.ID != want || b.TenantID != s.TenantID || b.Identity.Kind != id.Kind {
			continue
		}
		// The block must be on this caller (an IPv6 block names its /64
		// by its first address; the caller by the /64).
		if norm, err := engine.NormalizeIdentity("identity", b.Identity.Kind, b.Identity.ID); err == nil && norm == id.ID {
			found = true
		}
	}
	if !found {
		return errs.Errorf(errs.NotFound, "no such block")
	}
	w, err := h.config.Blocks.Delete(ctx, s.TenantID, want)
	if err != nil {
		return err
	}
	applied(ctx, h.wait, w.Version)
	return seeOther(c, callerURL(id.Kind, id.ID, ""), "unblocked")
}
