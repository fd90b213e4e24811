package views

import (
	"strings"
	"testing"
	"time"
)

func TestServiceKeysPage(t *testing.T) {
	used := t0.Add(-time.Hour)
	d := renderDOM(t, ServiceKeys(owner, ServiceKeysView{Base: "/ui/service-keys", Keys: []ServiceKeyRow{
		{ID: "skey_old", Prefix: "sk_Old12", CreatedAt: t0, Status: "revoked", LastUsed: &used},
		{ID: "skey_new", Prefix: "sk_New34", CreatedAt: t0, Status: "active"},
	}}))
	checkAccessible(t, d)
	d.none("service-key-secret")
	d.none("service-key-error")
	rows := d.byTestID("service-key-row")
	if len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
	// Only an active key has a revoke button, posting under the page's base.
	buttons := d.byTestID("service-key-revoke")
	if len(buttons) != 1 {
		t.Fatalf("%d revoke buttons, want 1 (the active key)", len(buttons))
	}
	if action := attr(buttons[0].Parent, "action"); action != "/ui/service-keys/skey_new/revoke" {
		t.Errorf("revoke posts to %q", action)
	}
	if got := text(d.byTestID("service-key-last-used")[1]); got != "never" {
		t.Errorf("an unused key's last use: %q", got)
	}
	if got := text(d.byTestID("service-key-last-used")[0]); got == "never" || got == "" {
		t.Errorf("a used key's last use: %q", got)
	}

	// The secret of a key just added, once; the operator's page posts under its own base.
	op := operator
	op.Nav = NavTenants
	d = renderDOM(t, ServiceKeys(op, ServiceKeysView{Base: "/ui/admin/tenants/ten_1/service-keys", TenantName: "acme", Secret: "sk_secret",
		Keys: []ServiceKeyRow{{ID: "skey_1", Prefix: "sk_secre", CreatedAt: t0, Status: "active"}}, Error: "kept"}))
	checkAccessible(t, d)
	if got := text(d.one("service-key-secret")); got != "sk_secret" {
		t.Errorf("secret %q", got)
	}
	if got := text(d.one("service-key-error")); got != "kept" {
		t.Errorf("error %q", got)
	}
	if !strings.Contains(d.raw, "of acme") || attr(d.one("service-key-revoke").Parent, "action") != "/ui/admin/tenants/ten_1/service-keys/skey_1/revoke" {
		t.Error("the operator's page does not name the tenant or post under its base")
	}
}

func TestMemberListAndAccount(t *testing.T) {
	login := t0.Add(-time.Minute)
	d := renderDOM(t, Members(owner, MembersView{Error: "The tenant's only owner cannot be removed.", Members: []MemberRow{
		{ID: "usr_o", Email: "o@a.test", Role: "owner", CreatedAt: t0, LastSignIn: &login, Self: true},
		{ID: "usr_m", Email: "m@a.test", Role: "member", CreatedAt: t0},
	}}))
	checkAccessible(t, d)
	rows := d.byTestID("member-row")
	if len(rows) != 2 || attr(rows[1], "data-email") != "m@a.test" {
		t.Fatalf("member rows: %d", len(rows))
	}
	if got := text(d.byTestID("member-last-sign-in")[1]); got != "never" {
		t.Errorf("a member who never signed in: %q", got)
	}
	if !strings.Contains(text(rows[0]), "you") || strings.Contains(text(rows[1]), "you") {
		t.Error("the signed-in owner is not marked, or someone else is")
	}
	// Each row's role select shows the member's current role.
	for i, want := range []string{"owner", "member"} {
		sel := d.byTestID("member-role")[i]
		for o := sel.FirstChild; o != nil; o = o.NextSibling {
			if o.Data == "option" && hasAttr(o, "selected") && attr(o, "value") != want {
				t.Errorf("row %d selects %q, want %q", i, attr(o, "value"), want)
			}
		}
	}
	if attr(d.byTestID("member-remove")[1].Parent, "action") != "/ui/members/usr_m/remove" {
		t.Error("remove posts elsewhere")
	}
	d.one("member-error")

	d = renderDOM(t, Account(owner, AccountView{Email: "o@a.test", PasswordErrors: map[string]string{"current_password": "is not your current password"}}))
	checkAccessible(t, d)
	if got := text(d.one("error-current_password")); got != "is not your current password" {
		t.Errorf("current password error %q", got)
	}
	d.one("password-form")
	d.one("email-form")
	d.one("end-other-sessions")
	d.one("nav-account")
	d.one("nav-service-keys")
}
