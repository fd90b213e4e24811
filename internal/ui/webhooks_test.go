package ui_test

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/app"
)

// The webhooks page: an endpoint added (its secret shown once), its events
// and thresholds edited, a key's creation delivered to a real HTTPS
// receiver and listed with its status, code and attempts, resent, the
// secret rotated, the endpoint deleted; a bad URL is refused naming the
// field; another tenant's endpoint is not found.
func TestWebhookPages(t *testing.T) {
	var received atomic.Int64
	receiver := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("webhook-signature") != "" {
			received.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(receiver.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: receiver.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	s := bootSiteWith(t, func(c *app.Config) { c.Webhooks.AllowPrivate, c.Webhooks.CAFile = true, ca })
	tn, other := s.tenant("hooked"), s.tenant("other")
	a := s.agent()
	a.signIn(tn.email, tn.password)

	p := want(t, a.get("/ui/webhooks"), http.StatusOK, "webhooks")
	if !p.has("webhook-none") || !p.has("nav-webhooks") {
		t.Fatal("a new tenant's webhooks page")
	}
	p = want(t, a.post("/ui/webhooks", url.Values{"url": {"http://example.com/hook"}, "events": {"key.created"}, "thresholds": {"80, 100"}}), http.StatusBadRequest, "an http URL")
	if !strings.Contains(p.text("form-errors"), "url: must be https") {
		t.Fatalf("error: %q", p.text("form-errors"))
	}
	p = want(t, a.post("/ui/webhooks", url.Values{"url": {receiver.URL + "/hook"}, "events": {"key.created", "key.revoked"}, "thresholds": {"50, 100"}}), http.StatusSeeOther, "add")
	hookPage := strings.Split(p.location, "?")[0]
	p = want(t, a.get(p.location), http.StatusOK, "after adding")
	secret := p.text("webhook-secret")
	if !strings.HasPrefix(secret, "whsec_") || !strings.HasPrefix(secret, strings.TrimSuffix(p.text("webhook-secret-prefix"), "…")) {
		t.Fatalf("secret %q, prefix %q", secret, p.text("webhook-secret-prefix"))
	}
	if p = want(t, a.get(hookPage), http.StatusOK, "reload"); p.has("webhook-secret") {
		t.Fatal("a reload shows the secret again")
	}
	p = want(t, a.post(hookPage, url.Values{"url": {receiver.URL + "/hook"}, "events": {"key.created"}, "thresholds": {"101"}}), http.StatusBadRequest, "a bad threshold")
	if !strings.Contains(p.text("form-errors"), "thresholds") {
		t.Fatalf("error: %q", p.text("form-errors"))
	}
	want(t, a.post(hookPage, url.Values{"url": {receiver.URL + "/hook"}, "events": {"key.created"}, "thresholds": {"80"}, "description": {"billing"}}), http.StatusSeeOther, "save")

	s.api("POST", "/v1/keys", tn.key, map[string]any{"name": "mobile", "tier": "pro"})
	waitFor(t, 10*time.Second, "the delivery listed as delivered", func() bool {
		p = a.get(hookPage)
		return p.text("delivery-status") == "delivered"
	})
	if p.text("delivery-code") != "200" || p.text("delivery-attempts") != "1" {
		t.Fatalf("delivery row: code %q, attempts %q", p.text("delivery-code"), p.text("delivery-attempts"))
	}
	id := p.attr("delivery-row", "data-delivery-id")
	want(t, a.post(hookPage+"/deliveries/"+id+"/resend", nil), http.StatusSeeOther, "resend")
	waitFor(t, 10*time.Second, "resent", func() bool { return received.Load() == 2 && a.get(hookPage).text("delivery-attempts") == "2" })

	prefix := a.get(hookPage).text("webhook-secret-prefix")
	p = want(t, a.post(hookPage+"/rotate", nil), http.StatusSeeOther, "rotate")
	p = want(t, a.get(p.location), http.StatusOK, "after rotating")
	if ns := p.text("webhook-secret"); ns == secret || !strings.HasPrefix(ns, "whsec_") || p.text("webhook-secret-prefix") == prefix {
		t.Fatalf("rotated secret %q (was %q)", ns, secret)
	}

	b := s.agent()
	b.signIn(other.email, other.password)
	want(t, b.get(hookPage), http.StatusNotFound, "another tenant's endpoint")
	want(t, b.post(hookPage+"/delete", nil), http.StatusNotFound, "another tenant's delete")

	want(t, a.post(hookPage+"/delete", nil), http.StatusSeeOther, "delete")
	if p = want(t, a.get("/ui/webhooks"), http.StatusOK, "after deleting"); !p.has("webhook-none") {
		t.Fatal("the endpoint is still listed")
	}
}

// Webhooks are the owners': a member sees the endpoints and their
// deliveries but no form, and each change a member posts is refused. An
// endpoint added by a user who is then removed is paused, shown so, and
// an owner resumes it.
func TestWebhooksAreOwnersOnly(t *testing.T) {
	s := bootSiteWith(t, func(c *app.Config) { c.Webhooks.AllowPrivate = true })
	tn := s.tenant("team")
	owner := s.asOwner(tn)
	owner.get("/ui/members")
	want(t, owner.post("/ui/members", url.Values{"email": {"mia@team.test"}, "password": {"mia's first password"}}), http.StatusCreated, "invite")
	owner.get("/ui/webhooks")
	p := want(t, owner.post("/ui/webhooks", url.Values{"url": {"https://127.0.0.1:9/owner"}, "events": {"key.created"}, "thresholds": {"80"}}), http.StatusSeeOther, "owner adds")
	ownerHook := strings.Split(p.location, "?")[0]
	s.api("POST", "/v1/keys", tn.key, map[string]any{"name": "mobile", "tier": "pro"})
	var delivery string
	waitFor(t, 10*time.Second, "a delivery listed", func() bool {
		delivery = owner.get(ownerHook).attr("delivery-row", "data-delivery-id")
		return delivery != ""
	})

	mia := s.agent()
	mia.signIn("mia@team.test", "mia's first password")
	p = want(t, mia.get("/ui/webhooks"), http.StatusOK, "the list as a member")
	if !p.has("webhook-row") || p.has("webhook-create") || !p.has("webhook-owners-only") {
		t.Fatal("a member's list shows the add form or not the endpoint")
	}
	p = want(t, mia.get(ownerHook), http.StatusOK, "an endpoint as a member")
	for _, id := range []string{"webhook-save", "webhook-rotate", "webhook-delete", "webhook-pause", "delivery-resend"} {
		if p.has(id) {
			t.Errorf("a member's endpoint page has %s", id)
		}
	}
	if !p.has("delivery-row") || !p.has("webhook-settings") {
		t.Fatal("a member does not see the endpoint's settings and deliveries")
	}
	for path, form := range map[string]url.Values{
		"/ui/webhooks":        {"url": {"https://127.0.0.1:9/mia"}, "events": {"key.created"}},
		ownerHook:             {"url": {"https://127.0.0.1:9/elsewhere"}, "events": {"key.created"}},
		ownerHook + "/rotate": nil, ownerHook + "/pause": nil, ownerHook + "/delete": nil,
		ownerHook + "/deliveries/" + delivery + "/resend": nil,
	} {
		want(t, mia.post(path, form), http.StatusForbidden, "a member's POST "+path)
	}
	if p := owner.get(ownerHook); p.status != http.StatusOK || !strings.Contains(p.text("webhook-secret-prefix"), "whsec_") {
		t.Fatal("the owner's endpoint changed")
	}

	// Mia, made an owner, adds an endpoint, then is removed.
	var miaID string
	for _, r := range want(t, owner.get("/ui/members"), http.StatusOK, "members").testID("member-row") {
		if attrOf(r, "data-email") == "mia@team.test" {
			miaID = attrOf(r, "data-user-id")
		}
	}
	want(t, owner.post("/ui/members/"+miaID+"/role", url.Values{"role": {"owner"}}), http.StatusSeeOther, "promote")
	mia.signIn("mia@team.test", "mia's first password")
	mia.get("/ui/webhooks")
	p = want(t, mia.post("/ui/webhooks", url.Values{"url": {"https://127.0.0.1:9/mia"}, "events": {"key.created"}, "thresholds": {"80"}}), http.StatusSeeOther, "Mia adds as an owner")
	miaHook := strings.Split(p.location, "?")[0]
	owner.get("/ui/members")
	want(t, owner.post("/ui/members/"+miaID+"/remove", nil), http.StatusSeeOther, "remove Mia")
	p = want(t, owner.get("/ui/webhooks"), http.StatusOK, "the list after the removal")
	if n := len(p.testID("webhook-paused")); n != 1 {
		t.Fatalf("%d endpoints shown paused, want Mia's", n)
	}
	p = want(t, owner.get(miaHook), http.StatusOK, "Mia's endpoint")
	if !strings.Contains(p.text("webhook-paused-notice"), "was removed") || !p.has("webhook-resume") {
		t.Fatalf("paused notice %q", p.text("webhook-paused-notice"))
	}
	want(t, owner.post(miaHook+"/resume", nil), http.StatusSeeOther, "resume")
	if p = owner.get(miaHook); p.has("webhook-paused-notice") || !p.has("webhook-pause") {
		t.Fatal("still paused after resuming")
	}
}
