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
