package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// keyHandler serves the consumer key pages.
type keyHandler struct {
	config    service.Services
	analytics service.Analytics
	engine    callerPeeker // the key's quotas now
	wait      versionWaiter
	sess      *sessions
	now       func() time.Time
}

// newConsumerKeyCookie carries a new consumer key, with its secret, sealed
// for the session that made it, from the form's POST to the list it
// redirects to, which shows it once and deletes the cookie: a reload shows
// nothing and makes no second key.
const newConsumerKeyCookie = "sluice_new_key"

// lastUsedWindow is how far back "last used" looks.
const lastUsedWindow = 30 * 24 * time.Hour

// inputTime is the datetime-local format; the forms say the zone is UTC.
const inputTime = "2006-01-02T15:04"

func keyURL(id string) string { return "/ui/keys/" + url.PathEscape(id) }

func keyStatus(k tenants.ConsumerKey, now time.Time) string {
	switch {
	case k.RevokedAt != nil:
		return "revoked"
	case !k.Active(now):
		return "expired"
	}
	return "active"
}

// keyUsage is a key's checks in the last lastUsedWindow: the newest minute
// it was seen in and its decisions by outcome.
type keyUsage struct {
	last   time.Time
	totals views.Totals
}

func usageOf(e service.TopEntry) keyUsage {
	return keyUsage{last: e.LastSeen, totals: views.Totals{Allowed: e.Allowed, Denied: e.Denied,
		RateLimited: e.RateLimited, InvalidKey: e.InvalidKey, Blocked: e.Blocked}}
}

// lastUsed asks the analytics for each key's usage. It is best effort:
// without it the list shows "—" and no counts.
func (h *keyHandler) lastUsed(ctx context.Context, tenantID string, now time.Time) map[string]keyUsage {
	entries, err := top(ctx, h.analytics, service.TopQuery{
		TenantID: tenantID, From: now.Add(-lastUsedWindow), To: now.Add(time.Minute),
		Limit: 1000, IdentityKind: tenants.IdentityKey, IncludeAllowed: true,
	})
	if err != nil {
		return nil
	}
	m := make(map[string]keyUsage, len(entries))
	for _, e := range entries {
		m[e.Identity.ID] = usageOf(e)
	}
	return m
}

func (h *keyHandler) keyRow(k tenants.ConsumerKey, used map[string]keyUsage, now time.Time) views.KeyRow {
	r := views.KeyRow{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Tier: k.Tier, Status: keyStatus(k, now), ExpiresAt: k.ExpiresAt, CreatedAt: k.CreatedAt, URL: keyURL(k.ID), Overrides: len(k.Overrides), CustomerID: k.CustomerID}
	if u, ok := used[k.ID]; ok {
		r.LastUsed, r.Usage = &u.last, u.totals
	}
	return r
}

func (h *keyHandler) list(c echo.Context) error {
	var created *views.CreatedKey
	if ck, err := c.Cookie(newConsumerKeyCookie); err == nil && ck.Value != "" {
		var k views.CreatedKey
		if plain, ok := h.sess.open(mustSession(c).SID, ck.Value); ok && json.Unmarshal([]byte(plain), &k) == nil {
			created = &k
		}
		c.SetCookie(h.newKeyCookie(c, "", -1))
	}
	return h.renderList(c, http.StatusOK, views.KeyForm{}, created)
}

func (h *keyHandler) newKeyCookie(c echo.Context, value string, maxAge int) *http.Cookie {
	ck := h.sess.cookie(c.Request(), newConsumerKeyCookie, value, maxAge)
	ck.Path = "/ui/keys"
	return ck
}

// keySorts are the list's sortable columns and the worker's sort for each.
// "last_used" ranks the keys analytics saw, most recent first, ahead of the
// rest.
var keySorts = []struct{ key, label, sort string }{
	{"name", "Name", tenants.KeySortName}, {"prefix", "Prefix", tenants.KeySortPrefix}, {"tier", "Tier", tenants.KeySortTier},
	{"expires", "Expires", tenants.KeySortExpires}, {"last_used", "Last used", tenants.KeySortRanked},
}

// keysPerPage is the length of one page of the key list.
const keysPerPage = 50

// keyListParams are the list's query parameters, kept by every link of it.
type keyListParams struct {
	filter, tier, sort string
	revoked            bool
	page               int // from 1
}

func keyListParamsOf(c echo.Context) keyListParams {
	p := keyListParams{filter: strings.TrimSpace(c.QueryParam("q")), tier: strings.TrimSpace(c.QueryParam("tier")),
		sort: "name", revoked: c.QueryParam("revoked") != "", page: 1}
	for _, col := range keySorts {
		if col.key == c.QueryParam("sort") {
			p.sort = col.key
		}
	}
	if n, err := strconv.Atoi(c.QueryParam("page")); err == nil && n > 1 {
		p.page = n
	}
	return p
}

func (p keyListParams) url() string {
	q := url.Values{}
	if p.filter != "" {
		q.Set("q", p.filter)
	}
	if p.tier != "" {
		q.Set("tier", p.tier)
	}
	if p.revoked {
		q.Set("revoked", "1")
	}
	if p.sort != "name" {
		q.Set("sort", p.sort)
	}
	if p.page > 1 {
		q.Set("page", strconv.Itoa(p.page))
	}
	if len(q) == 0 {
		return "/ui/keys"
	}
	return "/ui/keys?" + q.Encode()
}

// rankedByUse is the ids of used keys, most recently used first.
func rankedByUse(used map[string]keyUsage) []string {
	ids := make([]string, 0, len(used))
	for id := range used {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		if c := used[b].last.Compare(used[a].last); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return ids
}

func (h *keyHandler) renderList(c echo.Context, status int, form views.KeyForm, created *views.CreatedKey) error {
	s := mustSession(c)
	ctx := c.Request().Context()
	now := h.now()
	p := keyListParamsOf(c)
	ps, err := listPolicies(ctx, h.config, s.TenantID)
	if err != nil {
		return err
	}
	used := h.lastUsed(ctx, s.TenantID, now)
	q := tenants.KeyQuery{TenantID: s.TenantID, Search: p.filter, Tier: p.tier, IncludeRevoked: p.revoked,
		Offset: (p.page - 1) * keysPerPage, Limit: keysPerPage}
	for _, col := range keySorts {
		if col.key == p.sort {
			q.Sort = col.sort
		}
	}
	if q.Sort == tenants.KeySortRanked {
		q.Ranked = rankedByUse(used)
		q.Ranked = q.Ranked[:min(len(q.Ranked), tenants.MaxRankedKeys)]
	}
	kp, err := h.config.Keys.Page(ctx, q)
	if err != nil {
		return err
	}
	tiers := tierNames(ps)
	v := views.KeysView{
		Total:         kp.Total,
		Filter:        p.filter,
		Tier:          p.tier,
		ShowRevoked:   p.revoked,
		HiddenRevoked: kp.HiddenRevoked,
		Create:        form,
		Created:       created,
		Tiers:         tiers,
	}
	v.TierChoices = append(v.TierChoices, views.Choice{Value: "", Label: "Any tier", Current: p.tier == ""})
	for _, t := range tiers {
		v.TierChoices = append(v.TierChoices, views.Choice{Value: t, Label: t, Current: t == p.tier})
	}
	if p.tier != "" && !slices.Contains(tiers, p.tier) {
		// A key's tier no policy lists any more can still be filtered on.
		v.TierChoices = append(v.TierChoices, views.Choice{Value: p.tier, Label: p.tier, Current: true})
	}
	for _, k := range kp.Keys {
		v.Keys = append(v.Keys, h.keyRow(k, used, now))
	}
	if len(v.Keys) > 0 {
		v.Page = views.KeysPage{From: kp.Offset + 1, To: kp.Offset + len(v.Keys), Of: kp.Matched}
		at := p
		at.page = kp.Offset/keysPerPage + 1
		if at.page > 1 {
			prev := at
			prev.page--
			v.Page.PrevURL = prev.url()
		}
		if v.Page.To < kp.Matched {
			next := at
			next.page++
			v.Page.NextURL = next.url()
		}
	}
	for _, col := range keySorts {
		sorted := p
		sorted.sort, sorted.page = col.key, 1
		v.Columns = append(v.Columns, views.SortColumn{Label: col.label, URL: sorted.url(), Current: col.key == p.sort})
	}
	return render(c, status, views.Keys(page(c, "Keys", views.NavKeys), v))
}

// parseExpiry reads an optional datetime-local value as UTC.
func parseExpiry(v string, fe fieldErrors) *time.Time {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil
	}
	t, err := time.ParseInLocation(inputTime, v, time.UTC)
	if err != nil {
		if t, err = time.Parse(time.RFC3339, v); err != nil {
			fe.add("expires_at", "must be a date and time such as 2027-01-01T00:00")
			return nil
		}
	}
	return &t
}

// checkKeyForm checks every input of a key's form, as the worker would,
// and returns the expiry it names. An expiry the key already has (was) is
// not checked again: a key that expired can still be renamed.
func checkKeyForm(f views.KeyForm, fe fieldErrors, was *time.Time, now time.Time) *time.Time {
	fe.check("name", tenants.KeyPatch{Name: &f.Name}.Validate(now))
	fe.check("tier", tenants.ValidateTier("tier", f.Tier))
	exp := parseExpiry(f.ExpiresAt, fe)
	if exp != nil && (was == nil || !exp.Equal(*was)) {
		fe.check("expires_at", tenants.KeyPatch{ExpiresAt: exp}.Validate(now))
	}
	return exp
}

// formError puts a worker error next to its input when it names one.
func formError(err error, fe fieldErrors, known ...string) string {
	path, text, ok := splitMessage(errs.Message(err))
	if ok && slices.Contains(known, path) {
		fe.add(path, text)
		return ""
	}
	return errs.Message(err)
}

func (h *keyHandler) create(c echo.Context) error {
	f := views.KeyForm{Name: strings.TrimSpace(c.FormValue("name")), Tier: strings.TrimSpace(c.FormValue("tier")), ExpiresAt: c.FormValue("expires_at")}
	fe := fieldErrors{}
	exp := checkKeyForm(f, fe, nil, h.now())
	if len(fe) > 0 {
		f.Errors = fe
		return h.renderList(c, http.StatusBadRequest, f, nil)
	}
	req := service.KeyCreate{TenantID: mustSession(c).TenantID, Name: f.Name, Tier: f.Tier, ExpiresAt: exp}
	w, err := h.config.Keys.Create(c.Request().Context(), req)
	if err != nil {
		if !isInvalid(err) {
			return err
		}
		f.FormError = formError(err, fe, "name", "tier", "expires_at")
		f.Errors = fe
		return h.renderList(c, formStatus(err), f, nil)
	}
	applied(c.Request().Context(), h.wait, w.Version)
	k := w.Result.Key
	// The secret is stored nowhere and never put in a URL: it travels to
	// the list in a short-lived cookie sealed for this session.
	created, _ := json.Marshal(views.CreatedKey{Name: k.Name, Tier: k.Tier, Prefix: k.Prefix, Secret: w.Result.Secret, URL: keyURL(k.ID)})
	c.SetCookie(h.newKeyCookie(c, h.sess.seal(mustSession(c).SID, string(created)), 300))
	return seeOther(c, "/ui/keys", "")
}

func (h *keyHandler) get(c echo.Context) (tenants.ConsumerKey, error) {
	k, err := h.config.Keys.Get(c.Request().Context(), mustSession(c).TenantID, c.Param("id"))
	return k, err
}

func (h *keyHandler) show(c echo.Context) error {
	k, err := h.get(c)
	if err != nil {
		return err
	}
	return h.renderKey(c, http.StatusOK, k, nil)
}

// keyPage carries a failed form back into the key's page.
type keyPage struct {
	edit      *views.KeyForm
	overrides *views.OverridesForm
	reset     *views.ResetForm
}

// operatorShow is the operator's read-only view of any tenant's key, the
// abuse report's link for a key.
func (h *keyHandler) operatorShow(c echo.Context) error {
	ctx := c.Request().Context()
	t, err := h.config.Tenants.Get(ctx, c.Param("id"))
	if err != nil {
		return err
	}
	k, err := h.config.Keys.Get(ctx, t.ID, c.Param("key_id"))
	if err != nil {
		return err
	}
	v, err := h.keyView(ctx, t.ID, k)
	if err != nil {
		return err
	}
	v.ReadOnly, v.TenantName, v.TenantURL = true, t.Name, "/ui/admin/tenants/"+url.PathEscape(t.ID)
	return render(c, http.StatusOK, views.KeyDetail(page(c, "Key "+k.Name+" of "+t.Name, views.NavAbuse), v))
}

// keyView is what the key's page shows of k, forms filled with its values.
func (h *keyHandler) keyView(ctx context.Context, tenantID string, k tenants.ConsumerKey) (views.KeyView, error) {
	now := h.now()
	ps, err := listPolicies(ctx, h.config, tenantID)
	if err != nil {
		return views.KeyView{}, err
	}
	v := views.KeyView{
		Key:          h.keyRow(k, h.lastUsedOne(ctx, tenantID, k.ID, now), now),
		RevokedAt:    k.RevokedAt,
		UpdatedAt:    k.UpdatedAt,
		Tiers:        tierNames(ps),
		AnalyticsURL: identityURL(tenants.IdentityKey, k.ID, "", ""),
		Edit:         views.KeyForm{Name: k.Name, Tier: k.Tier},
		Overrides:    overridesFormOf(k),
		Reset:        views.ResetForm{Kind: tenants.IdentityKey, ID: k.ID},
	}
	if k.ExpiresAt != nil {
		v.Edit.ExpiresAt = k.ExpiresAt.UTC().Format(inputTime)
	}
	v.Overrides.Policies, v.Overrides.Algorithms = policyNames(ps), algorithms
	v.Reset.Policies, v.Reset.Action = policyNames(ps), keyURL(k.ID)+"/reset"
	v.Quotas = h.quotas(tenantID, k.ID, now)
	return v, nil
}

func (h *keyHandler) renderKey(c echo.Context, status int, k tenants.ConsumerKey, back *keyPage) error {
	v, err := h.keyView(c.Request().Context(), mustSession(c).TenantID, k)
	if err != nil {
		return err
	}
	if back != nil {
		if back.edit != nil {
			v.Edit = *back.edit
		}
		if back.overrides != nil {
			back.overrides.Policies, back.overrides.Algorithms = v.Overrides.Policies, v.Overrides.Algorithms
			v.Overrides = *back.overrides
		}
		if back.reset != nil {
			back.reset.Policies, back.reset.Action = v.Reset.Policies, v.Reset.Action
			v.Reset = *back.reset
		}
	}
	return render(c, status, views.KeyDetail(page(c, "Key "+k.Name, views.NavKeys), v))
}

// quotas are the key's calendar limits as they stand now: a meter each,
// with the date it resets (the API's GET /v1/keys/{id}/usage, for a
// person). A key whose buckets cannot be read now shows none.
func (h *keyHandler) quotas(tenantID, keyID string, now time.Time) []views.QuotaMeter {
	if h.engine == nil {
		return nil
	}
	st, err := h.engine.PeekCaller(tenantID, engine.Caller{Kind: tenants.IdentityKey, ID: keyID}, now)
	if err != nil {
		return nil
	}
	var out []views.QuotaMeter
	for _, p := range st.Policies {
		for _, l := range p.Limits {
			if l.Calendar == "" || p.Err != "" {
				continue
			}
			out = append(out, views.QuotaMeter{Name: l.Name, Calendar: l.Calendar, Quota: l.Limit,
				Used: max(l.Limit-l.Remaining, 0), ResetsAt: now.Add(l.PeriodEnd)})
		}
	}
	return out
}

func (h *keyHandler) lastUsedOne(ctx context.Context, tenantID, id string, now time.Time) map[string]keyUsage {
	entries, err := top(ctx, h.analytics, service.TopQuery{
		TenantID: tenantID, From: now.Add(-lastUsedWindow), To: now.Add(time.Minute), Limit: 1,
		Identity: &tenants.Identity{Kind: tenants.IdentityKey, ID: id}, IncludeAllowed: true,
	})
	if err != nil || len(entries) == 0 {
		return nil
	}
	return map[string]keyUsage{id: usageOf(entries[0])}
}

func (h *keyHandler) update(c echo.Context) error {
	k, err := h.get(c)
	if err != nil {
		return err
	}
	f := views.KeyForm{Name: strings.TrimSpace(c.FormValue("name")), Tier: strings.TrimSpace(c.FormValue("tier")), ExpiresAt: c.FormValue("expires_at")}
	fe := fieldErrors{}
	exp := checkKeyForm(f, fe, k.ExpiresAt, h.now())
	if len(fe) > 0 {
		f.Errors = fe
		return h.renderKey(c, http.StatusBadRequest, k, &keyPage{edit: &f})
	}
	patch := tenants.KeyPatch{Name: &f.Name, Tier: &f.Tier}
	switch {
	case exp != nil && (k.ExpiresAt == nil || !exp.Equal(*k.ExpiresAt)):
		patch.ExpiresAt = exp
	case exp == nil && k.ExpiresAt != nil:
		patch.ClearExpiry = true
	}
	w, err := h.config.Keys.Update(c.Request().Context(), k.TenantID, k.ID, patch)
	if err != nil {
		if !isInvalid(err) {
			return err
		}
		f.FormError = formError(err, fe, "name", "tier", "expires_at")
		f.Errors = fe
		return h.renderKey(c, http.StatusBadRequest, k, &keyPage{edit: &f})
	}
	applied(c.Request().Context(), h.wait, w.Version)
	return seeOther(c, keyURL(k.ID), "key-saved")
}

func (h *keyHandler) revoke(c echo.Context) error {
	w, err := h.config.Keys.Revoke(c.Request().Context(), mustSession(c).TenantID, c.Param("id"))
	if err != nil {
		return err
	}
	// Answer once this server refuses the key; the others follow within a second.
	applied(c.Request().Context(), h.wait, w.Version)
	return seeOther(c, keyURL(w.Result.ID), "key-revoked")
}

func (h *keyHandler) reset(c echo.Context) error {
	k, err := h.get(c)
	if err != nil {
		return err
	}
	r := views.ResetForm{Kind: tenants.IdentityKey, ID: k.ID, Policy: c.FormValue("policy")}
	if err := resetBucket(c, h.config, h.wait, r); err != nil {
		if !isInvalid(err) && !errs.Is(err, errs.NotFound) {
			return err
		}
		r.Error = resetError(err)
		return h.renderKey(c, http.StatusBadRequest, k, &keyPage{reset: &r})
	}
	return seeOther(c, keyURL(k.ID), "reset")
}

// resetBucket refills one identity's bucket for a policy of the session's
// tenant.
func resetBucket(c echo.Context, config service.Services, wait versionWaiter, r views.ResetForm) error {
	if r.Policy == "" {
		return errs.Errorf(errs.Invalid, "policy: choose a policy")
	}
	id := tenants.Identity{Kind: r.Kind, ID: r.ID}
	w, err := config.Buckets.Reset(c.Request().Context(), mustSession(c).TenantID, r.Policy, id)
	if err != nil {
		return err
	}
	applied(c.Request().Context(), wait, w.Version)
	return nil
}

func resetError(err error) string {
	if errs.Is(err, errs.NotFound) {
		return "No policy has this name any more."
	}
	if _, text, ok := splitMessage(errs.Message(err)); ok {
		return text
	}
	return errs.Message(err)
}
