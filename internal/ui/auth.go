package ui

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/httpsec"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// Context keys of the signed-in session and its form token.
const (
	ctxSession   = "ui.session"
	ctxFormToken = "ui.form_token"
)

// Form token purposes: a signed-in session's forms, and the sign-in form.
const (
	purposeSession = "session"
	purposeLogin   = "login"
)

func currentSession(c echo.Context) (session, bool) {
	s, ok := c.Get(ctxSession).(session)
	return s, ok
}

func formTokenOf(c echo.Context) string { s, _ := c.Get(ctxFormToken).(string); return s }

// mustSession is the session of a handler behind gate.session.
func mustSession(c echo.Context) session { s, _ := currentSession(c); return s }

// gate admits signed-in users and checks form tokens.
type gate struct {
	sess     *sessions
	versions sessionVersions
	revoker  Revoker // nil: no sign-out revocation
}

// valid reports whether a signed, unexpired session may be used: it
// carries its user's current session version (so it predates no change of
// password, email or role, and its user still exists) and was not signed
// out. It fails closed: until this server has loaded its config, and while
// the list of signed-out sessions is still loading, no session is valid.
// When that list cannot be loaded at all, sessions issued after the server
// gave up waiting for it are checked by their session version alone (a
// sign-out that cannot be recorded then ends all the user's sessions; see
// authHandler.logout), while older ones stay refused.
func (g *gate) valid(s session) bool {
	if v, ok := g.versions.SessionVersion(s.UserID); !ok || v != s.Version {
		return false
	}
	if g.revoker == nil {
		return true
	}
	loaded, unavailableSince := g.revoker.State()
	switch {
	case loaded:
		return !g.revoker.Revoked(s.SID)
	case unavailableSince.IsZero():
		return false
	default:
		// Token times are whole seconds.
		return !s.Issued.Before(unavailableSince.Truncate(time.Second))
	}
}

// current returns the request's session if it has a valid one.
func (g *gate) current(c echo.Context) (session, bool) {
	ck, err := c.Cookie(sessionCookie)
	if err != nil || ck.Value == "" {
		return session{}, false
	}
	s, err := g.sess.parse(ck.Value)
	if err != nil || !g.valid(s) {
		return session{}, false
	}
	return s, true
}

// session admits a request with a valid session cookie and sends anyone
// else to the sign-in page (back here afterwards, for a GET).
func (g *gate) session(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ck, err := c.Cookie(sessionCookie)
		if err == nil && ck.Value != "" {
			if s, ok := g.current(c); ok {
				c.Set(ctxSession, s)
				c.Set(ctxFormToken, g.sess.formToken(purposeSession, s.SID))
				// Every config write the request makes is recorded in
				// the audit log as this user's.
				r := c.Request()
				c.SetRequest(r.WithContext(tenants.WithActor(r.Context(), tenants.UserActor(s.UserID, s.Email, s.Role))))
				return next(c)
			}
			c.SetCookie(g.sess.cookie(c.Request(), sessionCookie, "", -1))
		}
		target := "/ui/login"
		if r := c.Request(); r.Method == http.MethodGet && r.URL.RequestURI() != "/ui/" {
			target += "?next=" + url.QueryEscape(r.URL.RequestURI())
		}
		return c.Redirect(http.StatusSeeOther, target)
	}
}

// formToken refuses a POST whose _csrf field is not the session's token.
func (g *gate) formToken(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if c.Request().Method != http.MethodPost {
			return next(c)
		}
		s := mustSession(c)
		if !g.sess.checkFormToken(purposeSession, s.SID, c.FormValue(csrfField)) {
			return errs.Errorf(errs.Forbidden, "This form has expired or did not come from this dashboard. Reload the page and try again.")
		}
		return next(c)
	}
}

func requireTenant(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if mustSession(c).TenantID == "" {
			return errs.Errorf(errs.Forbidden, "This page belongs to a tenant. The operator's pages are Tenants, Abuse report and Blocks.")
		}
		return next(c)
	}
}

func requireOwner(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s := mustSession(c); s.TenantID == "" || s.Role != tenants.RoleOwner {
			return errs.Errorf(errs.Forbidden, "Only the tenant's owners may open this page.")
		}
		return next(c)
	}
}

// requireWebhookOwner lets a tenant's owner, or the operator in a tenant's
// dashboard, change its webhooks; the worker refuses a member too.
func requireWebhookOwner(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if r := mustSession(c).Role; r != tenants.RoleOwner && r != tenants.RoleOperator {
			return errs.Errorf(errs.Forbidden, "Only the tenant's owners may change webhooks.")
		}
		return next(c)
	}
}

// requireIssuerOwner lets a tenant's owner, or the operator in a tenant's
// dashboard, change its JWT issuers.
func requireIssuerOwner(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if r := mustSession(c).Role; r != tenants.RoleOwner && r != tenants.RoleOperator {
			return errs.Errorf(errs.Forbidden, "Only the tenant's owners may change JWT issuers.")
		}
		return next(c)
	}
}

func requireOperator(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if mustSession(c).Role != tenants.RoleOperator {
			return errs.Errorf(errs.Forbidden, "Only the platform operator may open this page.")
		}
		return next(c)
	}
}

// authHandler signs users in and out.
type authHandler struct {
	config  service.Services
	gate    *gate
	sess    *sessions
	limiter *loginLimiter
	trusted []netip.Prefix // proxies whose X-Forwarded-For names the client
	revoker Revoker
	now     func() time.Time
	sleep   func(ctx context.Context, d time.Duration) error
	log     *slog.Logger

	// setupLooks bounds openings of the setup page per client address
	// (setup.go).
	setupLooks *userLimiter
	// setupClosed says the setup link is dead everywhere (Deps.SetupClosed);
	// claimed is set once a claim succeeded through this server.
	setupClosed func() bool
	claimed     atomic.Bool
}

// maxCredential bounds what a sign-in may make the server hash.
const maxCredential = 1024

func (h *authHandler) form(c echo.Context) error {
	if _, ok := h.gate.current(c); ok {
		return c.Redirect(http.StatusSeeOther, safeNext(c.QueryParam("next"), "/ui/"))
	}
	return h.render(c, http.StatusOK, views.LoginView{Next: safeNext(c.QueryParam("next"), "")})
}

// render shows the sign-in form with a fresh form token.
func (h *authHandler) render(c echo.Context, status int, v views.LoginView) error {
	nonce := randomToken(16)
	c.SetCookie(h.sess.cookie(c.Request(), loginCookie, nonce, 3600))
	v.CSRF = h.sess.formToken(purposeLogin, nonce)
	return render(c, status, views.Login(page(c, "Sign in", ""), v))
}

func (h *authHandler) login(c echo.Context) error {
	email := tenants.NormalizeEmail(c.FormValue("email"))
	password := c.FormValue("password")
	v := views.LoginView{Email: email, Next: safeNext(c.FormValue("next"), "")}

	nonce := ""
	if ck, err := c.Cookie(loginCookie); err == nil {
		nonce = ck.Value
	}
	if !h.sess.checkFormToken(purposeLogin, nonce, c.FormValue(csrfField)) {
		v.Error = "The sign-in form expired. Please try again."
		return h.render(c, http.StatusForbidden, v)
	}
	if email == "" || password == "" {
		v.Error = "Enter your email and password."
		return h.render(c, http.StatusBadRequest, v)
	}
	if len(email) > maxCredential || len(password) > maxCredential {
		v.Error = "Wrong email or password."
		return h.render(c, http.StatusUnauthorized, v)
	}
	now := h.now()
	ok, wait, delay := h.limiter.attempt(email, httpsec.ClientIP(c.Request(), h.trusted), now)
	if !ok {
		v.Error = fmt.Sprintf("Too many sign-in attempts. Try again in %s.", humanWait(wait))
		c.Response().Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(wait.Seconds()))))
		return h.render(c, http.StatusTooManyRequests, v)
	}
	// Recent failures on this email, from anywhere, slow every attempt on
	// it down, its owner's too, but never refuse it.
	if delay > 0 {
		if err := h.sleep(c.Request().Context(), delay); err != nil {
			return err
		}
	}

	// The worker checks the password: no password hash reaches a server.
	rec, err := h.config.Users.SignIn(c.Request().Context(), email, password)
	switch {
	case errs.Is(err, errs.Unauthenticated):
		h.limiter.failed(email, now)
		v.Error = "Wrong email or password."
		return h.render(c, http.StatusUnauthorized, v)
	case err != nil:
		if errs.Code(err) == errs.Internal {
			h.log.Error("sign-in check failed", "err", err)
		}
		v.Error = "Sluice cannot check your password right now. Try again in a moment."
		return h.render(c, http.StatusServiceUnavailable, v)
	case rec.TenantSuspended:
		// Said only after the password is right: it tells nothing to a guesser.
		v.Error = "Your tenant is suspended by the platform operator, so its users cannot sign in. Nothing of it was deleted; ask the operator to resume it."
		return h.render(c, http.StatusForbidden, v)
	}

	u := session{UserID: rec.User.ID, TenantID: rec.User.TenantID, Role: rec.User.Role, Email: rec.User.Email, Version: rec.SessionVersion}
	if u.TenantID != "" {
		u.TenantName = h.tenantName(c, u.TenantID)
	}
	// A user announced a moment ago may not have reached this server yet;
	// a session it would refuse is no sign-in.
	if !h.waitKnown(c.Request().Context(), u.UserID, u.Version) {
		v.Error = "Sluice is starting and cannot sign you in yet. Try again in a moment."
		return h.render(c, http.StatusServiceUnavailable, v)
	}
	if err := h.startSession(c, u); err != nil {
		return err
	}
	c.SetCookie(h.sess.cookie(c.Request(), loginCookie, "", -1))
	h.log.Info("dashboard sign-in", "user", u.UserID, "role", u.Role, "tenant", u.TenantID)
	home := "/ui/"
	if u.Role == tenants.RoleOperator {
		home = "/ui/admin/tenants"
	}
	return c.Redirect(http.StatusSeeOther, safeNext(v.Next, home))
}

// startSession issues a session for u and sets its cookie.
func (h *authHandler) startSession(c echo.Context, u session) error {
	tok, s, err := h.sess.issue(u)
	if err != nil {
		return err
	}
	c.SetCookie(h.sess.cookie(c.Request(), sessionCookie, tok, int(s.Expires.Sub(h.now()).Seconds())))
	return nil
}

// waitKnown waits, briefly, until this server holds at least version v of
// the user's session version.
func (h *authHandler) waitKnown(ctx context.Context, userID string, v int64) bool {
	deadline := time.Now().Add(2 * time.Second)
	for {
		if cur, ok := h.gate.versions.SessionVersion(userID); ok && cur >= v {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tenantName is shown beside the user's email; a failed lookup only
// leaves it out.
func (h *authHandler) tenantName(c echo.Context, id string) string {
	ts, err := h.config.Tenants.List(c.Request().Context())
	if err != nil {
		return ""
	}
	for _, t := range ts {
		if t.ID == id {
			return t.Name
		}
	}
	return ""
}

// logout ends the session: the cookie is deleted and, where sessions can be
// revoked, the token itself is refused from now on by every server, so a
// copy of it is worthless too. When the revocation cannot be recorded, the
// user's session version moves instead, which ends every session of theirs:
// a sign-out never leaves a working copy behind.
func (h *authHandler) logout(c echo.Context) error {
	if s, ok := currentSession(c); ok && h.revoker != nil {
		if err := h.revoker.Revoke(c.Request().Context(), s.SID, s.Expires); err != nil {
			h.log.Warn("sign-out could not revoke the session; ending all the user's sessions instead", "user", s.UserID, "err", err)
			if _, err := h.config.Users.EndSessions(c.Request().Context(), s.UserID); err != nil {
				h.log.Error("sign-out could not end the session; only the cookie is deleted", "user", s.UserID, "err", err)
			}
		}
	}
	c.SetCookie(h.sess.cookie(c.Request(), sessionCookie, "", -1))
	return seeOther(c, "/ui/login", "signed-out")
}

// safeNext keeps a post-sign-in redirect on the dashboard: a path under
// /ui/, never another host ("//evil", "/\evil").
func safeNext(next, fallback string) string {
	if !strings.HasPrefix(next, "/ui/") || strings.ContainsAny(next, "\\\r\n") || strings.HasPrefix(next, "//") {
		return fallback
	}
	return next
}

func humanWait(d time.Duration) string {
	s := int(math.Ceil(d.Seconds()))
	switch {
	case s <= 1:
		return "a second"
	case s < 60:
		return fmt.Sprintf("%d seconds", s)
	case s < 120:
		return "a minute"
	default:
		return fmt.Sprintf("%d minutes", (s+59)/60)
	}
}
