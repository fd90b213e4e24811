package ui

import (
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// accountHandler lets every signed-in user change their own password and
// email and end their other sessions. Each of these moves the user's
// session version, which ends every session of theirs; this browser gets a
// new session with the new version, once this server holds it.
type accountHandler struct {
	config service.Services
	wait   versionWaiter
	auth   *authHandler
	// emailLimit bounds email changes per user: each one ends by telling
	// the user whether the address was free (see email).
	emailLimit *userLimiter
}

func (h *accountHandler) show(c echo.Context) error {
	return h.render(c, http.StatusOK, views.AccountView{Email: mustSession(c).Email})
}

func (h *accountHandler) render(c echo.Context, status int, v views.AccountView) error {
	return render(c, status, views.Account(page(c, "Your account", views.NavAccount), v))
}

// renew replaces this browser's session after the user's session version
// moved to rec's.
func (h *accountHandler) renew(c echo.Context, w service.Written[service.UserRecord]) error {
	h.wait.WaitVersion(c.Request().Context(), w.Version)
	s := mustSession(c)
	s.Version = w.Result.SessionVersion
	s.Email = w.Result.User.Email
	return h.auth.startSession(c, s)
}

// fieldErrorsOf places a worker's invalid_request on the form field it
// names, or on fallback.
func fieldErrorsOf(err error, fields []string, fallback string) map[string]string {
	path, text, ok := splitMessage(errs.Message(err))
	for _, f := range fields {
		if ok && path == f {
			return map[string]string{f: text}
		}
	}
	return map[string]string{fallback: errs.Message(err)}
}

func (h *accountHandler) password(c echo.Context) error {
	s := mustSession(c)
	current, next := c.FormValue("current_password"), c.FormValue("new_password")
	v := views.AccountView{Email: s.Email}
	fe := fieldErrors{}
	if current == "" {
		fe.add("current_password", "required")
	}
	fe.check("new_password", tenants.ValidatePassword(next))
	if next != c.FormValue("confirm_password") {
		fe.add("confirm_password", "does not match the new password")
	}
	if len(fe) > 0 {
		v.PasswordErrors = fe
		return h.render(c, http.StatusBadRequest, v)
	}
	w, err := h.config.Users.ChangePassword(c.Request().Context(), s.UserID, current, next)
	if errs.Is(err, errs.Invalid) {
		v.PasswordErrors = fieldErrorsOf(err, []string{"current_password", "new_password"}, "new_password")
		return h.render(c, http.StatusBadRequest, v)
	}
	if err != nil {
		return err
	}
	if err := h.renew(c, w); err != nil {
		return err
	}
	h.auth.log.Info("dashboard password changed", "user", s.UserID)
	return seeOther(c, "/ui/account", "password-changed")
}

// email changes the user's sign-in email. An address that already has a
// login (in any tenant, or the operator's) is answered as a change is: the
// same redirect, notice and fresh session cookie, but nothing changes.
// Saying "taken" would tell any user which addresses have logins, as an
// invite would (see memberHandler.invite). The account page then shows the
// email the user signs in with, so the user who made the change still
// learns whether it took: the limit per user bounds how many addresses
// one user can learn about, and the current password is checked first.
func (h *accountHandler) email(c echo.Context) error {
	s := mustSession(c)
	email := strings.TrimSpace(c.FormValue("email"))
	v := views.AccountView{Email: email}
	fe := fieldErrors{}
	fe.check("email", tenants.ValidateEmail(email))
	if c.FormValue("password") == "" {
		fe.add("password", "required")
	}
	if len(fe) > 0 {
		v.EmailErrors = fe
		return h.render(c, http.StatusBadRequest, v)
	}
	if ok, wait := h.emailLimit.take(s.UserID, h.auth.now()); !ok {
		v.EmailErrors = map[string]string{"email": fmt.Sprintf("Too many email changes. Try again in %s.", humanWait(wait))}
		c.Response().Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(wait.Seconds()))))
		return h.render(c, http.StatusTooManyRequests, v)
	}
	w, err := h.config.Users.ChangeEmail(c.Request().Context(), s.UserID, c.FormValue("password"), email)
	switch {
	case errs.Is(err, errs.Conflict):
		h.auth.log.Info("dashboard email change to an address with a login; nothing changed", "user", s.UserID)
		if err := h.auth.startSession(c, s); err != nil {
			return err
		}
		return seeOther(c, "/ui/account", "email-submitted")
	case errs.Is(err, errs.Invalid):
		v.EmailErrors = fieldErrorsOf(err, []string{"email", "current_password"}, "email")
		if msg, ok := v.EmailErrors["current_password"]; ok {
			v.EmailErrors = map[string]string{"password": msg}
		}
		return h.render(c, http.StatusBadRequest, v)
	case err != nil:
		return err
	}
	if w.Version == 0 { // the same email: nothing changed
		if err := h.auth.startSession(c, s); err != nil {
			return err
		}
		return seeOther(c, "/ui/account", "email-submitted")
	}
	if err := h.renew(c, w); err != nil {
		return err
	}
	h.auth.log.Info("dashboard email changed", "user", s.UserID)
	return seeOther(c, "/ui/account", "email-submitted")
}

func (h *accountHandler) endOthers(c echo.Context) error {
	w, err := h.config.Users.EndSessions(c.Request().Context(), mustSession(c).UserID)
	if err != nil {
		return err
	}
	if err := h.renew(c, w); err != nil {
		return err
	}
	return seeOther(c, "/ui/account", "sessions-ended")
}
