package ui_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// apiStatus calls the JSON API and returns only the status.
func (s *site) apiStatus(method, path, token string) int {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func rowIDs(p page, testid, attr string) []string {
	var out []string
	for _, n := range p.testID(testid) {
		out = append(out, attrOf(n, attr))
	}
	return out
}

func TestServiceKeyPage(t *testing.T) {
	s := bootSite(t)
	tn, other := s.tenant("rolling"), s.tenant("other")
	a := s.agent()
	a.signIn(tn.email, tn.password)

	p := want(t, a.get("/ui/service-keys"), http.StatusOK, "service keys")
	oldID := rowIDs(p, "service-key-row", "data-key-id")
	if len(oldID) != 1 || p.has("service-key-secret") || p.text("service-key-status") != "active" {
		t.Fatalf("a new tenant's service keys: %v", oldID)
	}
	if got := p.text("service-key-prefix"); !strings.HasPrefix(tn.key, strings.TrimSuffix(got, "…")) {
		t.Errorf("prefix %q is not the start of the key", got)
	}

	// Adding a key redirects; the page after it shows the secret once.
	p = want(t, a.post("/ui/service-keys", nil), http.StatusSeeOther, "add a key")
	if p.location != "/ui/service-keys?done=service-key-created" {
		t.Fatalf("add a key: to %q", p.location)
	}
	p = want(t, a.get(p.location), http.StatusOK, "after adding")
	secret := p.text("service-key-secret")
	if !strings.HasPrefix(secret, "sk_") || len(p.testID("service-key-row")) != 2 {
		t.Fatalf("after adding: secret %q, %d rows", secret, len(p.testID("service-key-row")))
	}
	if p = want(t, a.get("/ui/service-keys"), http.StatusOK, "reload"); p.has("service-key-secret") || len(p.testID("service-key-row")) != 2 {
		t.Fatal("a reload shows the secret again or adds a key")
	}
	if st := s.apiStatus("GET", "/v1/policies", secret); st != http.StatusOK {
		t.Fatalf("the new key: %d", st)
	}

	// Another tenant's key is not found here; the old key is revoked.
	otherKey := rowIDs(s.asOwner(other).get("/ui/service-keys"), "service-key-row", "data-key-id")[0]
	want(t, a.post("/ui/service-keys/"+otherKey+"/revoke", nil), http.StatusNotFound, "revoke another tenant's key")
	if st := s.apiStatus("GET", "/v1/policies", other.key); st != http.StatusOK {
		t.Fatalf("the other tenant's key after a foreign revoke: %d", st)
	}
	p = want(t, a.post("/ui/service-keys/"+oldID[0]+"/revoke", nil), http.StatusSeeOther, "revoke the old key")
	waitFor(t, 5*time.Second, "old key refused", func() bool { return s.apiStatus("GET", "/v1/policies", tn.key) == http.StatusUnauthorized })
	p = want(t, a.get(p.location), http.StatusOK, "after revoking")
	if !strings.Contains(p.text("flash"), "revoked") {
		t.Errorf("flash %q", p.text("flash"))
	}

	// The last active key stays.
	var last string
	for _, n := range p.testID("service-key-row") {
		if attrOf(n, "data-status") == "active" {
			last = attrOf(n, "data-key-id")
		}
	}
	p = want(t, a.post("/ui/service-keys/"+last+"/revoke", nil), http.StatusConflict, "revoke the last key")
	if !strings.Contains(p.text("service-key-error"), "last active service key") {
		t.Errorf("last key error %q", p.text("service-key-error"))
	}
	if st := s.apiStatus("GET", "/v1/policies", secret); st != http.StatusOK {
		t.Fatalf("the last key after a refused revoke: %d", st)
	}

	// The operator sees and manages any tenant's keys.
	op := s.agent()
	op.signIn(opEmail, opPassword)
	p = want(t, op.get("/ui/admin/tenants/"+tn.id+"/service-keys"), http.StatusOK, "operator's page")
	if len(p.testID("service-key-row")) != 2 || !strings.Contains(p.body, "rolling") {
		t.Fatalf("operator's page: %d rows", len(p.testID("service-key-row")))
	}
	p = want(t, op.post("/ui/admin/tenants/"+tn.id+"/service-keys", nil), http.StatusSeeOther, "operator adds a key")
	if !strings.HasPrefix(want(t, op.get(p.location), http.StatusOK, "operator after adding").text("service-key-secret"), "sk_") {
		t.Fatal("the operator is not shown the new key")
	}
	want(t, op.get("/ui/admin/tenants/ten_missing/service-keys"), http.StatusNotFound, "operator, unknown tenant")
	// A tenant's owner does not reach the operator's pages.
	want(t, a.get("/ui/admin/tenants/"+other.id+"/service-keys"), http.StatusForbidden, "owner on the operator's page")
}

// asOwner is a signed-in agent of a tenant's owner.
func (s *site) asOwner(tn tenantInfo) *agent {
	a := s.agent()
	a.signIn(tn.email, tn.password)
	return a
}

func TestMembersPage(t *testing.T) {
	s := bootSite(t)
	tn := s.tenant("team")
	owner := s.asOwner(tn)
	owner.get("/ui/members")
	want(t, owner.post("/ui/members", url.Values{"email": {"mia@team.test"}, "password": {"mia's first password"}}), http.StatusCreated, "invite")
	mia := s.agent()
	mia.signIn("mia@team.test", "mia's first password")
	want(t, mia.get("/ui/keys"), http.StatusOK, "member's page")
	want(t, mia.get("/ui/members"), http.StatusForbidden, "members page as a member")
	want(t, mia.get("/ui/service-keys"), http.StatusForbidden, "service keys as a member")

	p := want(t, owner.get("/ui/members"), http.StatusOK, "members")
	rows := p.testID("member-row")
	if len(rows) != 2 {
		t.Fatalf("%d member rows", len(rows))
	}
	var miaID, ownerID string
	for _, r := range rows {
		switch attrOf(r, "data-email") {
		case "mia@team.test":
			miaID = attrOf(r, "data-user-id")
		case tn.email:
			ownerID = attrOf(r, "data-user-id")
		}
	}
	if miaID == "" || ownerID == "" {
		t.Fatalf("members listed: %v", rowIDs(p, "member-row", "data-email"))
	}
	if strings.Contains(p.text("member-last-sign-in"), "never") {
		t.Error("the owner signed in but the list says never")
	}

	// The only owner stays.
	p = want(t, owner.post("/ui/members/"+ownerID+"/role", url.Values{"role": {"member"}}), http.StatusConflict, "demote the only owner")
	if !strings.Contains(p.text("member-error"), "only owner") {
		t.Errorf("error %q", p.text("member-error"))
	}
	want(t, owner.post("/ui/members/"+ownerID+"/remove", nil), http.StatusConflict, "remove the only owner")

	// A role change ends the member's session; signing in again gives the new role.
	want(t, owner.post("/ui/members/"+miaID+"/role", url.Values{"role": {"owner"}}), http.StatusSeeOther, "promote")
	if p := mia.get("/ui/keys"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.location, "/ui/login") {
		t.Fatalf("a promoted member's old session: %d to %q", p.status, p.location)
	}
	mia.signIn("mia@team.test", "mia's first password")
	want(t, mia.get("/ui/members"), http.StatusOK, "members page as a new owner")

	// Removal ends the session; the removed user cannot sign in.
	want(t, owner.post("/ui/members/"+miaID+"/remove", nil), http.StatusSeeOther, "remove")
	if p := mia.get("/ui/keys"); p.status != http.StatusSeeOther {
		t.Fatalf("a removed member's session: %d", p.status)
	}
	mia.get("/ui/login")
	if p := mia.post("/ui/login", url.Values{"email": {"mia@team.test"}, "password": {"mia's first password"}}); p.status != http.StatusUnauthorized {
		t.Fatalf("a removed member signs in: %d", p.status)
	}
	if ids := rowIDs(want(t, owner.get("/ui/members"), http.StatusOK, "members after removal"), "member-row", "data-user-id"); len(ids) != 1 || ids[0] != ownerID {
		t.Fatalf("members after removal: %v", ids)
	}

	// Another tenant's member is not found.
	other := s.asOwner(s.tenant("elsewhere"))
	other.get("/ui/members")
	want(t, other.post("/ui/members/"+ownerID+"/remove", nil), http.StatusNotFound, "remove another tenant's member")
	want(t, other.post("/ui/members/"+ownerID+"/role", url.Values{"role": {"member"}}), http.StatusNotFound, "demote another tenant's member")
}

func TestAccountPage(t *testing.T) {
	s := bootSite(t)
	tn := s.tenant("acct")
	here, there := s.asOwner(tn), s.asOwner(tn)
	want(t, here.get("/ui/account"), http.StatusOK, "account")

	p := want(t, here.post("/ui/account/password", url.Values{"current_password": {"not my password"}, "new_password": {"a brand new passphrase"}, "confirm_password": {"a brand new passphrase"}}), http.StatusBadRequest, "wrong current password")
	if !strings.Contains(p.text("error-current_password"), "not your current password") {
		t.Errorf("current password error %q", p.text("error-current_password"))
	}
	p = want(t, here.post("/ui/account/password", url.Values{"current_password": {tn.password}, "new_password": {"a brand new passphrase"}, "confirm_password": {"something else"}}), http.StatusBadRequest, "mismatch")
	if p.text("error-confirm_password") == "" {
		t.Error("no error beside the confirmation")
	}
	p = want(t, here.post("/ui/account/password", url.Values{"current_password": {tn.password}, "new_password": {"short"}, "confirm_password": {"short"}}), http.StatusBadRequest, "short")
	if p.text("error-new_password") == "" {
		t.Error("no error beside the new password")
	}
	if p := there.get("/ui/keys"); p.status != http.StatusOK {
		t.Fatalf("refused changes ended a session: %d", p.status)
	}

	p = want(t, here.post("/ui/account/password", url.Values{"current_password": {tn.password}, "new_password": {"a brand new passphrase"}, "confirm_password": {"a brand new passphrase"}}), http.StatusSeeOther, "change password")
	if p = want(t, here.get(p.location), http.StatusOK, "this browser after the change"); !strings.Contains(p.text("flash"), "Password changed") {
		t.Errorf("flash %q", p.text("flash"))
	}
	if p := there.get("/ui/keys"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.location, "/ui/login") {
		t.Fatalf("the other browser after a password change: %d to %q", p.status, p.location)
	}
	there.get("/ui/login")
	if p := there.post("/ui/login", url.Values{"email": {tn.email}, "password": {tn.password}}); p.status != http.StatusUnauthorized {
		t.Fatalf("old password: %d", p.status)
	}
	there.signIn(tn.email, "a brand new passphrase")

	// Email: the password is required; the change ends the other session.
	want(t, here.post("/ui/account/email", url.Values{"email": {"new@acct.test"}, "password": {"wrong"}}), http.StatusBadRequest, "email, wrong password")
	p = want(t, here.post("/ui/account/email", url.Values{"email": {"new@acct.test"}, "password": {"a brand new passphrase"}}), http.StatusSeeOther, "change email")
	if got := want(t, here.get(p.location), http.StatusOK, "after the email change").text("signed-in-as"); !strings.Contains(got, "new@acct.test") {
		t.Errorf("signed in as %q", got)
	}
	if p := there.get("/ui/keys"); p.status != http.StatusSeeOther {
		t.Fatalf("the other browser after an email change: %d", p.status)
	}
	there.signIn("new@acct.test", "a brand new passphrase")

	// Signing out everywhere else keeps this browser only.
	want(t, here.post("/ui/account/sessions", nil), http.StatusSeeOther, "sign out elsewhere")
	want(t, here.get("/ui/keys"), http.StatusOK, "this browser")
	if p := there.get("/ui/keys"); p.status != http.StatusSeeOther {
		t.Fatalf("the other browser: %d", p.status)
	}

	// The operator changes their own password too.
	op := s.agent()
	op.signIn(opEmail, opPassword)
	op.get("/ui/account")
	want(t, op.post("/ui/account/password", url.Values{"current_password": {opPassword}, "new_password": {"operator passphrase 2"}, "confirm_password": {"operator passphrase 2"}}), http.StatusSeeOther, "operator's password")
	want(t, op.get("/ui/admin/tenants"), http.StatusOK, "operator after the change")
}

// An email change to an address that already has a login answers as a
// change to a free one does, and changes nothing; changes are limited per
// user.
func TestEmailChangeDoesNotRevealLogins(t *testing.T) {
	s := bootSite(t)
	tn, other := s.tenant("probe"), s.tenant("elsewhere")
	a := s.asOwner(tn)
	a.get("/ui/account")
	change := func(email, password, what string, status int) (page, string) {
		t.Helper()
		p := want(t, a.post("/ui/account/email", url.Values{"email": {email}, "password": {password}}), status, what)
		if status != http.StatusSeeOther {
			return p, ""
		}
		return p, want(t, a.get(p.location), http.StatusOK, what+", the page after").text("flash")
	}
	takenP, takenFlash := change(other.email, tn.password, "another tenant's owner", http.StatusSeeOther)
	opP, opFlash := change(opEmail, tn.password, "the operator's email", http.StatusSeeOther)
	freeP, freeFlash := change("fresh@probe.test", tn.password, "a free address", http.StatusSeeOther)
	if takenP.location != freeP.location || opP.location != freeP.location || takenFlash != freeFlash || opFlash != freeFlash {
		t.Errorf("answers differ: taken %q %q, operator's %q %q, free %q %q", takenP.location, takenFlash, opP.location, opFlash, freeP.location, freeFlash)
	}
	// Only the free address took; the others' logins are as they were.
	s.agent().signIn(other.email, other.password)
	s.agent().signIn(opEmail, opPassword)
	s.agent().signIn("fresh@probe.test", tn.password)

	// Five changes an hour per user, whatever their outcome.
	change("fresh2@probe.test", "not my password", "a wrong password", http.StatusBadRequest)
	change("fresh2@probe.test", "not my password", "a wrong password again", http.StatusBadRequest)
	p, _ := change("fresh2@probe.test", tn.password, "the sixth change in an hour", http.StatusTooManyRequests)
	if !strings.Contains(p.text("error-email"), "Too many email changes") {
		t.Errorf("the refusal says %q", p.text("error-email"))
	}
	// Another user has their own five.
	b := s.asOwner(other)
	b.get("/ui/account")
	want(t, b.post("/ui/account/email", url.Values{"email": {"new@elsewhere.test"}, "password": {other.password}}), http.StatusSeeOther, "another user's change")
}
