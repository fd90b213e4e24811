package ui_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/app"
)

// The JWT issuers page: an owner adds an issuer (a bad one is refused
// naming the field) and deletes it; a member sees the list without the
// form, and each change a member posts is refused.
func TestJWTIssuerPage(t *testing.T) {
	s := bootSiteWith(t, func(c *app.Config) { c.JWKSAllowPrivate = true })
	tn := s.tenant("idp")
	owner := s.asOwner(tn)
	p := want(t, owner.get("/ui/jwt-issuers"), http.StatusOK, "issuers")
	if !p.has("issuer-none") || !p.has("issuer-create") {
		t.Fatal("a new tenant's issuers page")
	}
	p = want(t, owner.post("/ui/jwt-issuers", url.Values{"issuer": {"https://id.idp.test/"}, "jwks_url": {"https://127.0.0.1:9/jwks"}, "algorithms": {"HS256"}}), http.StatusBadRequest, "HS256")
	if !strings.Contains(p.text("form-errors"), "algorithms[0]") {
		t.Fatalf("error: %q", p.text("form-errors"))
	}
	want(t, owner.post("/ui/jwt-issuers", url.Values{"issuer": {"https://id.idp.test/"}, "audiences": {"api, web"}, "jwks_url": {"https://127.0.0.1:9/jwks"},
		"algorithms": {"RS256, ES256"}, "subject": {"sub"}, "tier": {"plan"}}), http.StatusSeeOther, "add")
	p = want(t, owner.get("/ui/jwt-issuers"), http.StatusOK, "after adding")
	if !p.has("issuer-row") || !strings.Contains(p.text("issuer-row"), "https://id.idp.test/") || !strings.Contains(p.text("issuer-row"), "RS256, ES256") {
		t.Fatalf("row: %q", p.text("issuer-row"))
	}
	id := p.attr("issuer-row", "data-issuer-id")
	if got := s.api("GET", "/v1/jwt/issuers/"+id, tn.key, nil); got["issuer"] != "https://id.idp.test/" {
		t.Fatalf("the API's issuer: %v", got)
	}

	want(t, owner.post("/ui/members", url.Values{"email": {"mia@idp.test"}, "password": {"mia's first password"}}), http.StatusCreated, "invite")
	mia := s.agent()
	mia.signIn("mia@idp.test", "mia's first password")
	p = want(t, mia.get("/ui/jwt-issuers"), http.StatusOK, "the list as a member")
	if !p.has("issuer-row") || p.has("issuer-create") || p.has("issuer-delete") || !p.has("issuer-owners-only") {
		t.Fatal("a member's list shows the form or not the issuer")
	}
	want(t, mia.post("/ui/jwt-issuers", url.Values{"issuer": {"x"}, "jwks_url": {"https://127.0.0.1:9/jwks"}}), http.StatusForbidden, "a member adds")
	want(t, mia.post("/ui/jwt-issuers/"+id+"/delete", nil), http.StatusForbidden, "a member deletes")

	want(t, mia.get("/ui/jwt-issuers/"+id), http.StatusForbidden, "a member opens the edit form")
	want(t, mia.post("/ui/jwt-issuers/"+id, url.Values{"issuer": {"x"}, "jwks_url": {"https://127.0.0.1:9/jwks"}}), http.StatusForbidden, "a member edits")

	// The owner edits it: from a URL to an inline key set, keeping what it
	// does not change; bad JSON is refused naming the field, nothing changed.
	p = want(t, owner.get("/ui/jwt-issuers/"+id), http.StatusOK, "the edit form")
	if p.attr("issuer-iss", "value") != "https://id.idp.test/" || p.attr("issuer-algorithms", "value") != "RS256, ES256" || p.attr("issuer-tier", "value") != "plan" {
		t.Fatal("the edit form is not filled in")
	}
	form := url.Values{"issuer": {"https://id.idp.test/"}, "audiences": {"api"}, "jwks": {`{"keys": [`}, "algorithms": {"ES256"}, "subject": {"sub"}, "tier": {"plan"}}
	p = want(t, owner.post("/ui/jwt-issuers/"+id, form), http.StatusBadRequest, "bad JSON")
	if !strings.Contains(p.text("form-errors"), "jwks") {
		t.Fatalf("error: %q", p.text("form-errors"))
	}
	if got := s.api("GET", "/v1/jwt/issuers/"+id, tn.key, nil); got["jwks_url"] != "https://127.0.0.1:9/jwks" {
		t.Fatalf("a refused edit changed the issuer: %v", got)
	}
	set := `{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","x":"WKn-ZIGevcwGIyyrzFoZNBdaq9_TsqzGl96oc0CWuis","y":"y77t-RvAHRKTsSGdIYUfweuOvwrvDD-Q3Hv5J0fSKbE"}]}`
	form.Set("jwks", set)
	want(t, owner.post("/ui/jwt-issuers/"+id, form), http.StatusSeeOther, "save an inline key set")
	got := s.api("GET", "/v1/jwt/issuers/"+id, tn.key, nil)
	if got["jwks_url"] != nil || got["jwks"] == nil || fmt.Sprint(got["audiences"]) != "[api]" || fmt.Sprint(got["algorithms"]) != "[ES256]" {
		t.Fatalf("the API's issuer after the edit: %v", got)
	}
	if p = want(t, owner.get("/ui/jwt-issuers"), http.StatusOK, "after editing"); !strings.Contains(p.text("issuer-row"), "inline key set") {
		t.Fatalf("row: %q", p.text("issuer-row"))
	}
	want(t, owner.get("/ui/jwt-issuers/jwi_nope"), http.StatusNotFound, "an unknown issuer")

	want(t, owner.post("/ui/jwt-issuers/"+id+"/delete", nil), http.StatusSeeOther, "delete")
	if p = want(t, owner.get("/ui/jwt-issuers"), http.StatusOK, "after deleting"); !p.has("issuer-none") {
		t.Fatal("the issuer is still listed")
	}
}
