// Package ui is Sluice's browser dashboard: server-rendered pages (templ
// components in package views) for tenants to manage policies and keys and
// read their analytics, and for the operator to manage tenants and block
// abusers. It is added to the API's Echo instance under /ui.
//
// Handlers are thin: they read the form, call the worker (config and
// analytics over NATS) or the engine (the path tester's peek), and render a
// view value. Each handler type declares the few methods it needs, so a
// test can give it a double where the test is about the handler itself.
//
// Every page but sign-in needs a session (session.go); every POST needs
// the session's form token; tenant pages act on the session's tenant only,
// so another tenant's ids answer 404 exactly as the API's do.
package ui

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/httpsec"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
	"github.com/sluicehq/sluice/web/static"
)

// Engine is what the dashboard needs from the data plane.
type Engine interface {
	checker
	versionWaiter
	sessionVersions
	callerPeeker
}

// The small interfaces handlers declare.
type (
	checker interface {
		Check(ctx context.Context, tenantID string, req *engine.CheckRequest, now time.Time) (engine.Answer, error)
	}
	versionWaiter interface {
		WaitVersion(ctx context.Context, v int64)
	}
	// sessionVersions is the server's cached session version of each user.
	sessionVersions interface {
		SessionVersion(userID string) (int64, bool)
	}
)

// Deps wires the dashboard.
type Deps struct {
	Engine Engine
	// Services are the worker's config and analytics (bus.NewServices
	// over NATS).
	Services service.Services
	// DataDir holds session.key, the secret session tokens are signed with.
	DataDir string
	// SessionKey, when set, is used instead of the data directory's key.
	SessionKey []byte
	// SessionTTL is how long a sign-in lasts; 12 hours when zero.
	SessionTTL time.Duration
	// LoginLimit and LoginIPLimit bound sign-in attempts per email and
	// client address pair and per client address; 5 and 20 per 5 minutes
	// when zero (only their Limit and Period are read). Past a few recent
	// failures, attempts on an email also wait a growing delay (see
	// loginLimiter).
	LoginLimit, LoginIPLimit quota.Limit
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client to the sign-in limiter, as for forward-auth; without them
	// the connection's peer is the client.
	TrustedProxies []netip.Prefix
	// Tarpit, if set, slows the refusals (429) of an address that keeps
	// asking past its limit (the setup link, password work).
	Tarpit *httpsec.Tarpit
	// CheckJWKSURL, if set, checks where a JWT issuer's jwks_url points
	// before it is stored (engine.JWKSURLChecker).
	CheckJWKSURL func(ctx context.Context, url string) error
	// SetupClosed, when set and true, says the first-run setup link is dead
	// on every server (an operator login exists): the setup page answers
	// so without asking the worker.
	SetupClosed func() bool
	// SetupLookLimit bounds how often one client address may open the
	// first-run setup page; 20 per 5 minutes when zero (only Limit and
	// Period are read).
	SetupLookLimit quota.Limit
	// PasswordWorkLimit bounds each user's invites and changes of password
	// or email, which make the worker hash; 20 per 10 minutes when zero.
	PasswordWorkLimit quota.Limit
	// Revocations remembers signed-out sessions cluster-wide; without it,
	// sign-out only deletes the browser's cookie.
	Revocations Revoker
	// Transport decides which requests came over HTTPS, making the
	// dashboard's cookies Secure. The security headers themselves are set
	// for every route by httpsec.Headers on the Echo instance (api.New).
	Transport httpsec.Transport
	Now       func() time.Time
	// Sleep waits d, or until ctx ends (then it returns ctx's error);
	// a sign-in's delay uses it. A timer when nil.
	Sleep func(ctx context.Context, d time.Duration) error
	Log   *slog.Logger
}

// DefaultSessionTTL is how long a sign-in lasts unless Deps says otherwise.
const DefaultSessionTTL = 12 * time.Hour

// Revoker records signed-out sessions until they would have expired.
type Revoker interface {
	Revoke(ctx context.Context, sid string, until time.Time) error
	Revoked(sid string) bool
	// State reports whether the list of signed-out sessions is loaded and,
	// if it is not, since when it is known to be unavailable (zero while it
	// is still loading). The dashboard refuses sessions until it is loaded
	// (see gate.valid).
	State() (loaded bool, unavailableSince time.Time)
}

// Register adds the dashboard's routes under /ui to e and makes e's error
// handler answer /ui paths with HTML pages.
func Register(e *echo.Echo, d Deps) error {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Sleep == nil {
		d.Sleep = sleepCtx
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.SessionTTL <= 0 {
		d.SessionTTL = DefaultSessionTTL
	}
	if d.LoginLimit.Algorithm == 0 {
		d.LoginLimit = defaultUserLimit
	}
	if d.LoginIPLimit.Algorithm == 0 {
		d.LoginIPLimit = defaultIPLimit
	}
	if d.SetupLookLimit.Algorithm == 0 {
		d.SetupLookLimit = defaultSetupLookLimit
	}
	if d.PasswordWorkLimit.Algorithm == 0 {
		d.PasswordWorkLimit = defaultPasswordWorkLimit
	}
	key := d.SessionKey
	if key == nil {
		var err error
		if key, err = loadSessionKey(d.DataDir); err != nil {
			return err
		}
	}
	sess := newSessions(key, d.SessionTTL, d.Now)
	sess.transport = d.Transport

	gate := &gate{sess: sess, versions: d.Engine, revoker: d.Revocations}
	auth := &authHandler{config: d.Services, gate: gate, sess: sess, limiter: newLoginLimiter(d.LoginLimit, d.LoginIPLimit, defaultDelay, defaultMaxEntries),
		setupLooks: newUserLimiter(d.SetupLookLimit, defaultMaxEntries), setupClosed: d.SetupClosed, trusted: d.TrustedProxies, revoker: d.Revocations, now: d.Now, sleep: d.Sleep, log: d.Log}
	over := &overviewHandler{config: d.Services, analytics: d.Services.Analytics, now: d.Now}
	pol := &policyHandler{config: d.Services, engine: d.Engine, wait: d.Engine, now: d.Now}
	keys := &keyHandler{config: d.Services, analytics: d.Services.Analytics, engine: d.Engine, wait: d.Engine, sess: sess, now: d.Now}
	an := &analyticsHandler{config: d.Services, analytics: d.Services.Analytics, wait: d.Engine, now: d.Now}
	usage := &usageHandler{config: d.Services, analytics: d.Services.Analytics, now: d.Now, log: d.Log}
	callers := &callerHandler{config: d.Services, analytics: d.Services.Analytics, engine: d.Engine, wait: d.Engine, now: d.Now}
	mem := &memberHandler{config: d.Services, wait: d.Engine, auth: auth}
	svcKeys := &serviceKeyHandler{config: d.Services, wait: d.Engine, sess: sess}
	admKeys := &serviceKeyHandler{config: d.Services, wait: d.Engine, sess: sess, operator: true}
	acct := &accountHandler{config: d.Services, wait: d.Engine, auth: auth, emailLimit: newUserLimiter(defaultEmailChangeLimit, defaultMaxEntries)}
	adm := &adminHandler{config: d.Services, analytics: d.Services.Analytics, wait: d.Engine, auth: auth, now: d.Now}
	audit := &auditHandler{config: d.Services}
	admAudit := &auditHandler{config: d.Services, operator: true}
	hooks := &webhookHandler{config: d.Services, sess: sess}
	issuers := &issuerHandler{config: d.Services, checkURL: d.CheckJWKSURL}
	customers := &customerHandler{config: d.Services, now: d.Now}

	prev := e.HTTPErrorHandler
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		if isUI(c.Request().URL.Path) {
			if d.Tarpit != nil && errs.Is(err, errs.RateLimited) {
				d.Tarpit.Hold(c.Request().Context(), "a:"+httpsec.ClientIP(c.Request(), d.TrustedProxies), errs.RetryAfter(err), d.Now())
			}
			renderError(c, err, d.Log)
			return
		}
		prev(err, c)
	}

	// Middleware is attached per route, as the API does (see api.New).
	pub := []echo.MiddlewareFunc{}
	signedIn := []echo.MiddlewareFunc{gate.session, gate.formToken}
	tenant := append(signedIn[:len(signedIn):len(signedIn)], requireTenant)
	owner := append(signedIn[:len(signedIn):len(signedIn)], requireOwner)
	// Webhook changes are the owners' (and the operator's, in a tenant's
	// dashboard); members see endpoints and deliveries.
	hookOwner := append(tenant[:len(tenant):len(tenant)], requireWebhookOwner)
	// JWT issuers decide who may authenticate: the owners' too.
	issuerOwner := append(tenant[:len(tenant):len(tenant)], requireIssuerOwner)
	operator := append(signedIn[:len(signedIn):len(signedIn)], requireOperator)
	// Routes that make the worker hash a password are limited per user.
	pwLimit := newPasswordWorkLimiter(d.PasswordWorkLimit, d.Now).middleware
	hashing := func(mw []echo.MiddlewareFunc) []echo.MiddlewareFunc { return append(mw[:len(mw):len(mw)], pwLimit) }

	e.GET("/ui", func(c echo.Context) error { return c.Redirect(http.StatusMovedPermanently, "/ui/") }, pub...)
	e.GET("/ui/static/:hash/:name", serveStatic)
	e.GET("/ui/login", auth.form, pub...)
	e.POST("/ui/login", auth.login, pub...)
	e.POST("/ui/logout", auth.logout, signedIn...)
	e.GET("/ui/setup", auth.setupForm, pub...)
	e.POST("/ui/setup", auth.setup, pub...)

	e.GET("/ui/", over.show, signedIn...)
	e.GET("/ui/policies", pol.list, tenant...)
	e.GET("/ui/policies/new", pol.newForm, tenant...)
	e.POST("/ui/policies", pol.create, tenant...)
	e.POST("/ui/policies/test", pol.test, tenant...)
	e.GET("/ui/policies/:id", pol.edit, tenant...)
	e.POST("/ui/policies/:id", pol.update, tenant...)
	e.POST("/ui/policies/:id/delete", pol.delete, tenant...)

	e.GET("/ui/keys", keys.list, tenant...)
	e.POST("/ui/keys", keys.create, tenant...)
	e.GET("/ui/keys/:id", keys.show, tenant...)
	e.POST("/ui/keys/:id", keys.update, tenant...)
	e.POST("/ui/keys/:id/overrides", keys.overrides, tenant...)
	e.POST("/ui/keys/:id/revoke", keys.revoke, tenant...)
	e.POST("/ui/keys/:id/reset", keys.reset, tenant...)

	e.GET("/ui/analytics", an.show, tenant...)
	e.GET("/ui/analytics/identity", an.identity, tenant...)
	e.POST("/ui/analytics/reset", an.reset, tenant...)
	e.GET("/ui/callers", callers.show, tenant...)
	e.POST("/ui/callers/reset", callers.reset, tenant...)
	e.POST("/ui/callers/block", callers.block, tenant...)
	e.POST("/ui/callers/unblock", callers.unblock, tenant...)
	e.GET("/ui/usage", usage.show, tenant...)
	e.GET("/ui/usage/csv", usage.csv, tenant...)
	e.GET("/ui/audit", audit.show, tenant...)
	e.GET("/ui/customers", customers.list, tenant...)
	e.POST("/ui/customers", customers.create, tenant...)
	e.GET("/ui/customers/:id", customers.show, tenant...)
	e.GET("/ui/jwt-issuers", issuers.list, tenant...)
	e.POST("/ui/jwt-issuers", issuers.create, issuerOwner...)
	e.GET("/ui/jwt-issuers/:id", issuers.edit, issuerOwner...)
	e.POST("/ui/jwt-issuers/:id", issuers.update, issuerOwner...)
	e.POST("/ui/jwt-issuers/:id/delete", issuers.delete, issuerOwner...)
	e.GET("/ui/webhooks", hooks.list, tenant...)
	e.POST("/ui/webhooks", hooks.create, hookOwner...)
	e.GET("/ui/webhooks/:id", hooks.show, tenant...)
	e.POST("/ui/webhooks/:id", hooks.update, hookOwner...)
	e.POST("/ui/webhooks/:id/rotate", hooks.rotate, hookOwner...)
	e.POST("/ui/webhooks/:id/pause", hooks.pause, hookOwner...)
	e.POST("/ui/webhooks/:id/resume", hooks.resume, hookOwner...)
	e.POST("/ui/webhooks/:id/delete", hooks.delete, hookOwner...)
	e.POST("/ui/webhooks/:id/deliveries/:delivery_id/resend", hooks.resend, hookOwner...)

	e.GET("/ui/members", mem.show, owner...)
	e.POST("/ui/members", mem.invite, hashing(owner)...)
	e.POST("/ui/members/:id/role", mem.role, owner...)
	e.POST("/ui/members/:id/remove", mem.remove, owner...)
	e.GET("/ui/service-keys", svcKeys.list, owner...)
	e.POST("/ui/service-keys", svcKeys.create, owner...)
	e.POST("/ui/service-keys/:key_id/revoke", svcKeys.revoke, owner...)

	e.GET("/ui/account", acct.show, signedIn...)
	e.POST("/ui/account/password", acct.password, hashing(signedIn)...)
	e.POST("/ui/account/email", acct.email, hashing(signedIn)...)
	e.POST("/ui/account/sessions", acct.endOthers, signedIn...)

	e.GET("/ui/admin/tenants", adm.tenants, operator...)
	e.POST("/ui/admin/tenants", adm.createTenant, hashing(operator)...)
	e.GET("/ui/admin/abuse", adm.abuse, operator...)
	e.GET("/ui/admin/blocks", adm.blocks, operator...)
	e.POST("/ui/admin/blocks", adm.createBlock, operator...)
	e.POST("/ui/admin/blocks/:id/delete", adm.deleteBlock, operator...)
	e.GET("/ui/admin/audit", admAudit.show, operator...)
	e.GET("/ui/admin/tenants/:id", adm.tenant, operator...)
	e.POST("/ui/admin/tenants/:id/suspend", adm.suspendTenant, operator...)
	e.POST("/ui/admin/tenants/:id/resume", adm.resumeTenant, operator...)
	e.POST("/ui/admin/tenants/:id/delete", adm.deleteTenant, operator...)
	e.POST("/ui/admin/tenants/:id/open", adm.openTenant, operator...)
	e.POST("/ui/admin/leave", adm.leaveTenant, operator...)
	e.GET("/ui/admin/tenants/:id/keys/:key_id", keys.operatorShow, operator...)
	e.GET("/ui/admin/tenants/:id/service-keys", admKeys.list, operator...)
	e.POST("/ui/admin/tenants/:id/service-keys", admKeys.create, operator...)
	e.POST("/ui/admin/tenants/:id/service-keys/:key_id/revoke", admKeys.revoke, operator...)
	return nil
}

func isUI(path string) bool { return path == "/ui" || strings.HasPrefix(path, "/ui/") }

// serveStatic serves an embedded asset. A URL with the current hash may be
// cached for a year; an older hash still gets the current file (a page
// rendered before a deploy), but not cached.
func serveStatic(c echo.Context) error {
	a, ok := static.Lookup(c.Param("name"))
	if !ok {
		return errs.Errorf(errs.NotFound, "No such file.")
	}
	h := c.Response().Header()
	if c.Param("hash") == a.Hash {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	return c.Blob(http.StatusOK, a.ContentType, a.Body)
}

var assets = views.Assets{
	CSS:     "/ui/static/" + static.Path("app.css"),
	JS:      "/ui/static/" + static.Path("app.js"),
	Logo:    "/ui/static/" + static.Path("logo.svg"),
	Favicon: "/ui/static/" + static.Path("favicon.svg"),
}

// page builds the frame of a page for the signed-in user.
func page(c echo.Context, title, nav string) views.Page {
	p := views.Page{Title: title, Nav: nav, Assets: assets}
	if s, ok := currentSession(c); ok {
		p.User = &views.UserInfo{
			Email:      s.Email,
			Role:       s.Role,
			TenantName: s.TenantName,
			Operator:   s.Role == tenants.RoleOperator,
			Owner:      s.Role == tenants.RoleOwner,
			InTenant:   s.Role == tenants.RoleOperator && s.TenantID != "",
		}
		p.CSRF = formTokenOf(c)
	}
	p.Flash = flashes[c.QueryParam("done")]
	return p
}

// render writes a component as the whole answer. It renders to a buffer
// first, so a failing component produces an error page, not half a page.
func render(c echo.Context, status int, comp templ.Component) error {
	var buf bytes.Buffer
	if err := comp.Render(c.Request().Context(), &buf); err != nil {
		return err
	}
	return c.HTMLBlob(status, buf.Bytes())
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// seeOther redirects after a successful POST, with a notice code.
func seeOther(c echo.Context, path, done string) error {
	if done != "" {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		path += sep + "done=" + url.QueryEscape(done)
	}
	return c.Redirect(http.StatusSeeOther, path)
}

// flashes are the notices a redirect may ask for; codes, not text, travel
// in the URL, so a link cannot make the dashboard say anything else.
var flashes = map[string]string{
	"policy-created": "Policy created. Every server enforces it within a second.",
	"policy-saved":   "Policy saved. Every server enforces it within a second.",
	"policy-deleted": "Policy deleted.",
	"key-saved":      "Key saved.",
	"key-revoked":    "Key revoked. Checks with it now answer invalid_key.",
	"overrides":      "Overrides saved.",
	"reset":          "Bucket reset: the caller starts again with a full bucket.",
	"blocked":        "Blocked. Checks from this caller now answer blocked.",
	"unblocked":      "Unblocked.",
	"signed-out":     "You are signed out.",

	"customer-created": "Customer added. Keys join it with customer_id on POST or PATCH /v1/keys.",
	"issuer-created":   "Issuer added. Every server fetches its keys now; its tokens verify once they have them.",
	"issuer-deleted":   "Issuer deleted. Its tokens answer invalid_token.",
	"issuer-updated":   "Issuer saved. Every server uses it as changed at once; keys at a new JWKS URL are fetched in the background.",
	"webhook-created":  "Webhook added. Copy its signing secret now; events are sent to it from now on.",
	"webhook-saved":    "Webhook saved.",
	"webhook-rotated":  "Secret rotated. For 24 hours deliveries are signed with the new and the previous secret.",
	"webhook-deleted":  "Webhook deleted, with its deliveries.",
	"webhook-paused":   "Webhook paused: it gets no events, and its pending deliveries wait.",
	"webhook-resumed":  "Webhook resumed: its pending deliveries go now, and new events are sent to it.",
	"webhook-resent":   "Delivery queued to be sent again.",

	"service-key-created": "Service key added. Deploy it, then revoke the key it replaces.",
	"service-key-revoked": "Service key revoked. Every server refuses it within a second.",
	"role-changed":        "Role changed. Their sessions have ended; they sign in again with the new role.",
	"member-removed":      "Member removed. Their sessions have ended.",
	"password-changed":    "Password changed. Your other sessions have ended.",
	"email-submitted":     "If no other login uses that address, it is now your sign-in email and your other sessions have ended; the email you sign in with is the one shown at the top of the page.",
	"sessions-ended":      "Your other sessions have ended.",
	"tenant-suspended":    "Tenant suspended. Every server refuses its service keys with 403 within a second, and its users are signed out.",
	"tenant-resumed":      "Tenant resumed. Its service keys work again; its users sign in again.",
	"tenant-deleted":      "Tenant deleted, with its policies, keys, users, buckets and analytics.",
	"tenant-opened":       "You are in this tenant's dashboard as the operator; what you change here is in its audit log under your login.",
	"operator-created":    "The operator login is created and the setup link no longer works. Create a tenant below, then open its dashboard from its page.",
}

// renderError answers a failed /ui request with an HTML page.
func renderError(c echo.Context, err error, log *slog.Logger) {
	if c.Response().Committed {
		return
	}
	status, title, msg := http.StatusInternalServerError, "Something went wrong", "An internal error occurred. Try again in a moment."
	var he *echo.HTTPError
	switch {
	case errors.As(err, &he):
		status = he.Code
		switch he.Code {
		case http.StatusNotFound:
			title, msg = "Page not found", "There is no such page, or it belongs to someone else."
		case http.StatusMethodNotAllowed:
			title, msg = "Not here", "This address does not take that kind of request."
		case http.StatusRequestEntityTooLarge:
			title, msg = "Too large", "The form was larger than 1 MiB."
		default:
			title, msg = http.StatusText(he.Code), "The request could not be handled."
		}
	default:
		code := errs.Code(err)
		switch code {
		case errs.NotFound:
			status, title, msg = http.StatusNotFound, "Not found", "There is no such page, or it belongs to someone else."
		case errs.Forbidden:
			status, title, msg = http.StatusForbidden, "Not allowed", errs.Message(err)
		case errs.Invalid:
			status, title, msg = http.StatusBadRequest, "Bad request", errs.Message(err)
		case errs.Conflict:
			status, title, msg = http.StatusConflict, "Not possible", errs.Message(err)
		case errs.Unavailable:
			status, title, msg = http.StatusServiceUnavailable, "Temporarily unavailable", "Sluice's worker is not reachable right now. Try again in a moment."
		case errs.RateLimited:
			status, title, msg = http.StatusTooManyRequests, "Too many requests", errs.Message(err)
			if wait := errs.RetryAfter(err); wait > 0 && c.Response().Header().Get("Retry-After") == "" {
				c.Response().Header().Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
			}
		case errs.Unauthenticated:
			status, title, msg = http.StatusUnauthorized, "Sign in again", errs.Message(err)
		case errs.TooLarge:
			status, title, msg = http.StatusRequestEntityTooLarge, "Too large", "The form was larger than 1 MiB."
		default:
			log.Error("dashboard request failed", "method", c.Request().Method, "path", c.Path(), "err", err)
		}
	}
	p := page(c, title, "")
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(status)
		return
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	if err := render(c, status, views.ErrorPage(p, views.ErrorView{Status: status, Title: title, Message: msg})); err != nil {
		_ = c.String(status, msg)
	}
}
