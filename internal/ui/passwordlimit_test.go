package ui_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// Invites and changes of password or email, which make the worker hash a
// password, are limited per user (20, then one per 30 s): the request over
// the limit answers 429 and reaches no worker, and other users are not
// affected.
func TestPasswordWorkLimitedPerUser(t *testing.T) {
	s := bootSite(t)
	ta, tb := s.tenant("alpha"), s.tenant("beta")
	a := s.agent()
	a.signIn(ta.email, ta.password)
	a.get("/ui/members")
	invite := func(ag *agent, email string) page {
		t.Helper()
		return ag.post("/ui/members", url.Values{"email": {email}, "password": {"invited passphrase"}})
	}
	for i := range 20 {
		want(t, invite(a, fmt.Sprintf("m%d@alpha.test", i)), http.StatusCreated, "invite within the limit")
	}
	p := want(t, invite(a, "over@alpha.test"), http.StatusTooManyRequests, "invite over the limit")
	if !strings.Contains(p.body, "Too many invites") {
		t.Errorf("429 page:\n%.2000s", p.body)
	}
	a.get("/ui/account")
	want(t, a.post("/ui/account/password", url.Values{"current_password": {ta.password}, "new_password": {"another passphrase"}, "confirm_password": {"another passphrase"}}),
		http.StatusTooManyRequests, "password change over the limit")
	want(t, a.post("/ui/account/email", url.Values{"password": {ta.password}, "email": {"moved@alpha.test"}}),
		http.StatusTooManyRequests, "email change over the limit")

	// Nothing over the limit was done.
	x := s.agent()
	x.get("/ui/login")
	want(t, x.post("/ui/login", url.Values{"email": {"over@alpha.test"}, "password": {"invited passphrase"}}), http.StatusUnauthorized, "the refused invite")
	s.agent().signIn(ta.email, ta.password)

	// Another user is not limited by alpha's owner.
	b := s.agent()
	b.signIn(tb.email, tb.password)
	b.get("/ui/members")
	want(t, invite(b, "m@beta.test"), http.StatusCreated, "another owner's invite")
}
