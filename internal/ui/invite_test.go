package ui_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// An owner's invite answers the same whether or not the email already
// signs in somewhere in Sluice (another tenant's owner, the operator), and
// never touches that existing login.
func TestInviteDoesNotRevealExistingEmails(t *testing.T) {
	s := bootSite(t)
	ta, tb := s.tenant("alpha"), s.tenant("beta")
	a := s.agent()
	a.signIn(ta.email, ta.password)
	a.get("/ui/members")

	invite := func(email string) string {
		t.Helper()
		p := want(t, a.post("/ui/members", url.Values{"email": {email}, "password": {"invited passphrase"}}), http.StatusCreated, "invite "+email)
		if !strings.Contains(p.text("member-invited"), email) {
			t.Fatalf("invite %s: notice %q", email, p.text("member-invited"))
		}
		// Everything but the address itself is the same answer.
		return strings.ReplaceAll(p.body, email, "EMAIL")
	}
	fresh := invite("new@alpha.test")
	for _, existing := range []string{tb.email, opEmail} {
		if got := invite(existing); got != fresh {
			t.Errorf("inviting %s answers differently from a new address", existing)
		}
	}

	// The existing logins are untouched: their own passwords still work,
	// the owner's chosen one does not, and beta's owner is still beta's.
	b := s.agent()
	b.signIn(tb.email, tb.password)
	if p := b.get("/ui/policies"); p.status != http.StatusOK || !strings.Contains(p.body, "beta") {
		t.Errorf("beta's owner after the invite: %d", p.status)
	}
	s.agent().signIn(opEmail, opPassword)
	x := s.agent()
	x.get("/ui/login")
	if p := x.post("/ui/login", url.Values{"email": {tb.email}, "password": {"invited passphrase"}}); p.status != http.StatusUnauthorized {
		t.Errorf("the invite's password signs in to an existing login: %d", p.status)
	}
	// The new address was created in alpha.
	n := s.agent()
	n.signIn("new@alpha.test", "invited passphrase")
	want(t, n.get("/ui/policies"), http.StatusOK, "invited member")
}
