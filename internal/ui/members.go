package ui

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// memberHandler lets an owner invite members.
type memberHandler struct {
	config configCaller
}

func (h *memberHandler) show(c echo.Context) error {
	return render(c, http.StatusOK, views.Members(page(c, "Members", views.NavMembers), views.MembersView{}))
}

func (h *memberHandler) invite(c echo.Context) error {
	f := views.MemberForm{Email: strings.TrimSpace(c.FormValue("email"))}
	req := bus.UserCreate{TenantID: mustSession(c).TenantID, Email: f.Email, Password: c.FormValue("password"), Role: tenants.RoleMember}
	var u tenants.User
	err := h.config.Call(c.Request().Context(), bus.OpUserCreate, req, &u)
	if errs.Is(err, errs.Conflict) {
		// The email already signs in somewhere in Sluice, perhaps in another
		// tenant or as the operator. Saying so would tell any owner which
		// addresses have logins, so the answer is the invite's own, and the
		// existing login is left as it is (one email, one login).
		err, u = nil, tenants.User{Email: tenants.NormalizeEmail(f.Email)}
	}
	if err != nil {
		fe := fieldErrors{}
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
		return render(c, http.StatusBadRequest, views.Members(page(c, "Members", views.NavMembers), views.MembersView{Form: f}))
	}
	v := views.MembersView{Invited: u.Email}
	return render(c, http.StatusCreated, views.Members(page(c, "Members", views.NavMembers), v))
}
