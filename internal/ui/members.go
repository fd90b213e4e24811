package ui

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// memberHandler lets an owner invite members, list them, change their
// roles and remove them.
type memberHandler struct {
	config service.Services
	wait   versionWaiter
	auth   *authHandler
}

func (h *memberHandler) show(c echo.Context) error {
	return h.render(c, http.StatusOK, views.MembersView{})
}

// render fills the member list and shows the page.
func (h *memberHandler) render(c echo.Context, status int, v views.MembersView) error {
	s := mustSession(c)
	us, err := h.config.Users.List(c.Request().Context(), s.TenantID)
	if err != nil {
		return err
	}
	for _, u := range us {
		v.Members = append(v.Members, views.MemberRow{ID: u.ID, Email: u.Email, Role: u.Role, CreatedAt: u.CreatedAt, LastSignIn: u.LastLoginAt, Self: u.ID == s.UserID})
	}
	return render(c, status, views.Members(page(c, "Members", views.NavMembers), v))
}

func (h *memberHandler) role(c echo.Context) error {
	s := mustSession(c)
	w, err := h.config.Users.SetRole(c.Request().Context(), s.TenantID, c.Param("id"), c.FormValue("role"))
	switch {
	case errs.Is(err, errs.Conflict):
		return h.render(c, http.StatusConflict, views.MembersView{Error: "The tenant's only owner stays an owner: make another member an owner first."})
	case err != nil:
		return err
	}
	h.wait.WaitVersion(c.Request().Context(), w.Version)
	if w.Result.ID == s.UserID && w.Version != 0 {
		// The owner changed their own role: this browser goes on with it.
		s.Role, s.Version = w.Result.Role, w.Result.SessionVersion
		if err := h.auth.startSession(c, s); err != nil {
			return err
		}
		return seeOther(c, "/ui/", "role-changed")
	}
	return seeOther(c, "/ui/members", "role-changed")
}

func (h *memberHandler) remove(c echo.Context) error {
	s := mustSession(c)
	w, err := h.config.Users.Delete(c.Request().Context(), s.TenantID, c.Param("id"))
	switch {
	case errs.Is(err, errs.Conflict):
		return h.render(c, http.StatusConflict, views.MembersView{Error: "The tenant's only owner cannot be removed."})
	case err != nil:
		return err
	}
	h.wait.WaitVersion(c.Request().Context(), w.Version)
	if w.Result.ID == s.UserID {
		c.SetCookie(h.auth.sess.cookie(c.Request(), sessionCookie, "", -1))
		return seeOther(c, "/ui/login", "signed-out")
	}
	return seeOther(c, "/ui/members", "member-removed")
}

func (h *memberHandler) invite(c echo.Context) error {
	f := views.MemberForm{Email: strings.TrimSpace(c.FormValue("email"))}
	req := service.UserCreate{TenantID: mustSession(c).TenantID, Email: f.Email, Password: c.FormValue("password"), Role: tenants.RoleMember}
	// Checks of the input alone, the same for every address: they say
	// nothing about which addresses have logins.
	fe := fieldErrors{}
	fe.check("email", tenants.ValidateEmail(req.Email))
	fe.check("password", tenants.ValidatePassword(req.Password))
	if len(fe) > 0 {
		f.Errors = fe
		return h.render(c, http.StatusBadRequest, views.MembersView{Form: f})
	}
	u, err := h.config.Users.Create(c.Request().Context(), req)
	if tenants.CapReached(err) {
		// The worker checks the cap before the address, so this answer is
		// the same for every address.
		return h.render(c, http.StatusConflict, views.MembersView{Form: f, Error: errs.Message(err)})
	}
	if errs.Is(err, errs.Conflict) {
		// The email already signs in somewhere in Sluice, perhaps in another
		// tenant or as the operator. Saying so would tell any owner which
		// addresses have logins, so the answer is the invite's own, and the
		// existing login is left as it is (one email, one login).
		err, u = nil, tenants.User{Email: tenants.NormalizeEmail(f.Email)}
	}
	if err != nil {
		switch {
		case errs.Is(err, errs.Invalid):
			if path, text, ok := splitMessage(errs.Message(err)); ok && (path == "email" || path == "password") {
				fe.add(path, text)
			} else {
				fe.add("email", errs.Message(err))
			}
		default:
			return err
		}
		f.Errors = fe
		return h.render(c, http.StatusBadRequest, views.MembersView{Form: f})
	}
	// The answer holds the notice only, not the member list: a list with or
	// without the address would say whether it already had a login.
	return render(c, http.StatusCreated, views.Members(page(c, "Members", views.NavMembers), views.MembersView{Invited: u.Email}))
}
