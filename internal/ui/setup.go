package ui

// The first-run setup link (/ui/setup?token=…). A server with no operator
// login to sign in with prints a one-time link on its start-up banner; the
// worker holds the token's hash (service.Setup.Offer). The page asks the
// worker whether the link is live, and its form has the worker create the
// operator login and delete the token in one step (service.Setup.Claim), so
// the link works once, on every server.
//
// Anyone may open the page, so it is bounded per client address: opening
// it takes from the address's setupLooks bucket before anything else, and
// a token that is not even shaped like one is answered here, without
// asking the worker. The form's submissions are limited per client address
// as sign-ins are. A wrong token costs only its own address: nothing is
// shared between addresses, so guesses from anywhere do not slow the real
// operator's claim.

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/httpsec"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// purposeSetup is the setup form's token purpose (it has no session yet).
const purposeSetup = "setup"

// setupLimitKey is the sign-in limiter's "email" for setup attempts: each
// address has its own pair of it. No failure is ever recorded on it, so it
// never delays an attempt.
const setupLimitKey = "\x00setup"

// defaultSetupLookLimit bounds how often one client address may open the
// setup page: 20 per 5 minutes.
var defaultSetupLookLimit = quota.Limit{Algorithm: quota.TokenBucket, Limit: 20, Period: 5 * time.Minute}

// setupTokenShape is the shape of a setup token ("st_" and rand.Text's
// base32), with room for other lengths: a token of another shape is dead
// without asking.
func setupTokenShape(token string) bool {
	rest, ok := strings.CutPrefix(token, "st_")
	if !ok || len(rest) < 16 || len(rest) > 64 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func (h *authHandler) setupForm(c echo.Context) error {
	token := c.QueryParam("token")
	v := views.SetupView{Token: token}
	addr := httpsec.ClientIP(c.Request(), h.trusted)
	if ip, ok := engine.NormalizeIP(addr); ok {
		addr = ip // IPv6 by /64, as the sign-in limiter counts
	}
	if ok, wait := h.setupLooks.take(addr, h.now()); !ok {
		c.Response().Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(wait.Seconds()))))
		return errs.Errorf(errs.RateLimited, "Too many attempts. Try again in %s.", humanWait(wait))
	}
	if !setupTokenShape(token) || h.setupDead() {
		return h.renderSetup(c, http.StatusGone, views.SetupView{Dead: true})
	}
	err := h.config.Setup.Check(c.Request().Context(), token)
	switch {
	case errs.Is(err, errs.Unauthenticated):
		v.Dead = true
		return h.renderSetup(c, http.StatusGone, v)
	case err != nil:
		return err
	}
	return h.renderSetup(c, http.StatusOK, v)
}

func (h *authHandler) setup(c echo.Context) error {
	v := views.SetupView{Token: c.FormValue("token"), Email: tenants.NormalizeEmail(c.FormValue("email"))}
	password, again := c.FormValue("password"), c.FormValue("password_again")
	nonce := ""
	if ck, err := c.Cookie(loginCookie); err == nil {
		nonce = ck.Value
	}
	if !h.sess.checkFormToken(purposeSetup, nonce, c.FormValue(csrfField)) {
		v.FormError = "The form expired. Please try again."
		return h.renderSetup(c, http.StatusForbidden, v)
	}
	if ok, err := h.setupAttempt(c); !ok {
		return err
	}
	fe := fieldErrors{}
	fe.check("email", tenants.ValidateEmail(v.Email))
	fe.check("password", tenants.ValidatePassword(password))
	if password != again {
		fe.add("password_again", "must be the same password")
	}
	if len(fe) > 0 {
		v.Errors = fe
		return h.renderSetup(c, http.StatusBadRequest, v)
	}
	if !setupTokenShape(v.Token) || h.setupDead() {
		return h.renderSetup(c, http.StatusGone, views.SetupView{Dead: true})
	}
	w, err := h.config.Setup.Claim(c.Request().Context(), v.Token, v.Email, password)
	switch {
	case errs.Is(err, errs.Unauthenticated):
		return h.renderSetup(c, http.StatusGone, views.SetupView{Dead: true})
	case isInvalid(err):
		if errs.Is(err, errs.Conflict) {
			v.FormError = errs.Message(err)
		} else {
			v.FormError = formError(err, fe, "email", "password")
		}
		v.Errors = fe
		return h.renderSetup(c, http.StatusBadRequest, v)
	case err != nil:
		return err
	}
	h.claimed.Store(true)
	rec := w.Result
	u := session{UserID: rec.User.ID, Role: rec.User.Role, Email: rec.User.Email, Version: rec.SessionVersion}
	if !h.waitKnown(c.Request().Context(), u.UserID, u.Version) {
		// The login exists: signing in works once this server has it.
		return seeOther(c, "/ui/login", "operator-created")
	}
	if err := h.startSession(c, u); err != nil {
		return err
	}
	c.SetCookie(h.sess.cookie(c.Request(), loginCookie, "", -1))
	h.log.Info("operator login created with the setup link", "user", u.UserID)
	return seeOther(c, "/ui/admin/tenants", "operator-created")
}

// setupDead reports whether this server knows the setup link is dead on
// every server: an operator login existed when it offered its own, or a
// claim succeeded through it. Operator logins are never all removed, so
// the link never comes back.
func (h *authHandler) setupDead() bool {
	return h.claimed.Load() || h.setupClosed != nil && h.setupClosed()
}

// setupAttempt charges one attempt to the client's address; when it has
// none left it renders the refusal and answers false with the render's
// error.
func (h *authHandler) setupAttempt(c echo.Context) (bool, error) {
	if len(c.FormValue("token")) > maxCredential ||
		len(c.FormValue("email")) > maxCredential || len(c.FormValue("password")) > maxCredential || len(c.FormValue("password_again")) > maxCredential {
		return false, h.renderSetup(c, http.StatusGone, views.SetupView{Dead: true})
	}
	now := h.now()
	ok, wait, _ := h.limiter.attempt(setupLimitKey, httpsec.ClientIP(c.Request(), h.trusted), now)
	if !ok {
		c.Response().Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(wait.Seconds()))))
		return false, errs.Errorf(errs.RateLimited, "Too many attempts. Try again in %s.", humanWait(wait))
	}
	return true, nil
}

// renderSetup shows the setup page with a fresh form token. The token is
// in the page's address: no referrer carries it anywhere, and the page is
// not stored.
func (h *authHandler) renderSetup(c echo.Context, status int, v views.SetupView) error {
	hdr := c.Response().Header()
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("Cache-Control", "no-store")
	if !v.Dead {
		nonce := randomToken(16)
		c.SetCookie(h.sess.cookie(c.Request(), loginCookie, nonce, 3600))
		v.CSRF = h.sess.formToken(purposeSetup, nonce)
	}
	v.Token = strings.TrimSpace(v.Token)
	return render(c, status, views.Setup(page(c, "Set up Sluice", ""), v))
}
