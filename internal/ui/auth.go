package ui

import (
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
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
	sess    *sessions
	revoker Revoker // nil: no sign-out revocation
}

// session admits a request with a valid session cookie and sends anyone
// else to the sign-in page (back here afterwards, for a GET).
func (g *gate) session(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ck, err := c.Cookie(sessionCookie)
		if err == nil && ck.Value != "" {
			if s, err := g.sess.parse(ck.Value); err == nil && (g.revoker == nil || !g.revoker.Revoked(s.SID)) {
				c.Set(ctxSession, s)
				c.Set(ctxFormToken, g.sess.formToken(purposeSession, s.SID))
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
			return errs.Errorf(errs.Forbidden, "Only the tenant's owner may invite members.")
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
	users   configCaller
	sess    *sessions
	limiter *loginLimiter
	revoker Revoker
	now     func() time.Time
	log     *slog.Logger
}

// maxCredential bounds what a sign-in may make the server hash.
const maxCredential = 1024

// dummyHash is checked when the email is unknown, so that answer takes as
// long as a wrong password and does not reveal which emails exist.
var dummyHash = sync.OnceValue(func() string {
	h, err := tenants.HashPassword("no dashboard user has this password")
	if err != nil {
		panic(err)
	}
	return h
})

func (h *authHandler) form(c echo.Context) error {
	if ck, err := c.Cookie(sessionCookie); err == nil {
		if _, err := h.sess.parse(ck.Value); err == nil {
			return c.Redirect(http.StatusSeeOther, safeNext(c.QueryParam("next"), "/ui/"))
		}
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
	if ok, wait := h.limiter.allow(email, remoteIP(c.Request()), now); !ok {
		v.Error = fmt.Sprintf("Too many sign-in attempts. Try again in %s.", humanWait(wait))
		c.Response().Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(wait.Seconds()))))
		return h.render(c, http.StatusTooManyRequests, v)
	}

	var rec bus.UserRecord
	err := h.users.Call(c.Request().Context(), bus.OpUserByEmail, bus.UserByEmail{Email: email}, &rec)
	switch {
	case errs.Is(err, errs.NotFound):
		tenants.CheckPassword(dummyHash(), password)
		v.Error = "Wrong email or password."
		return h.render(c, http.StatusUnauthorized, v)
	case err != nil:
		if errs.Code(err) == errs.Internal {
			h.log.Error("sign-in lookup failed", "err", err)
		}
		v.Error = "Sluice cannot check your password right now. Try again in a moment."
		return h.render(c, http.StatusServiceUnavailable, v)
	case !tenants.CheckPassword(rec.PasswordHash, password):
		v.Error = "Wrong email or password."
		return h.render(c, http.StatusUnauthorized, v)
	}

	u := session{UserID: rec.User.ID, TenantID: rec.User.TenantID, Role: rec.User.Role, Email: rec.User.Email}
	if u.TenantID != "" {
		u.TenantName = h.tenantName(c, u.TenantID)
	}
	tok, s, err := h.sess.issue(u)
	if err != nil {
		return err
	}
	c.SetCookie(h.sess.cookie(c.Request(), sessionCookie, tok, int(s.Expires.Sub(now).Seconds())))
	c.SetCookie(h.sess.cookie(c.Request(), loginCookie, "", -1))
	h.log.Info("dashboard sign-in", "user", s.UserID, "role", s.Role, "tenant", s.TenantID)
	home := "/ui/"
	if s.Role == tenants.RoleOperator {
		home = "/ui/admin/tenants"
	}
	return c.Redirect(http.StatusSeeOther, safeNext(v.Next, home))
}

// tenantName is shown beside the user's email; a failed lookup only
// leaves it out.
func (h *authHandler) tenantName(c echo.Context, id string) string {
	var ts []tenants.TenantSummary
	if err := h.users.Call(c.Request().Context(), bus.OpTenantList, struct{}{}, &ts); err != nil {
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
// copy of it is worthless too.
func (h *authHandler) logout(c echo.Context) error {
	if s, ok := currentSession(c); ok && h.revoker != nil {
		if err := h.revoker.Revoke(c.Request().Context(), s.SID, s.Expires); err != nil {
			h.log.Warn("sign-out could not revoke the session; the cookie is deleted", "err", err)
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

// remoteIP is the connection's address. Forwarding headers are not
// trusted: anyone can send them, and they would let one client spread its
// attempts over invented addresses.
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
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
