package e2e

import (
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A tenant owner adds a webhook endpoint on the Webhooks page of a real
// browser: the signing secret is shown once, on the page the form leads
// to, and never again; a key made through the API sends key.created to the
// receiver (a real HTTPS server the worker trusts through
// --webhook-ca-file); the endpoint's page lists the delivery as delivered
// with the receiver's 200, and its Resend button sends the same webhook-id
// again.
func TestDashboardWebhooks(t *testing.T) {
	exe := requireBrowser(t)
	var mu sync.Mutex
	var ids []string
	recv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("webhook-signature") == "" || !strings.HasPrefix(r.Header.Get("webhook-signature"), "v1,") {
			http.Error(w, "unsigned", http.StatusBadRequest)
			return
		}
		mu.Lock()
		ids = append(ids, r.Header.Get("webhook-id"))
		mu.Unlock()
	}))
	t.Cleanup(recv.Close)
	ca := filepath.Join(t.TempDir(), "receiver.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: recv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, serverOpts{extra: []string{"--webhook-allow-private", "--webhook-ca-file", ca}})
	tn := createTenant(t, s, "hooked")

	b := newBrowser(t, exe, s.base)
	b.signIn("hooked@example.com", "correct horse battery staple")
	b.open("/ui/webhooks", `[data-testid="webhook-form"]`)
	b.set(`[data-testid="webhook-url"]`, recv.URL+"/sluice")
	b.set(`[data-testid="webhook-description"]`, "billing")
	// key.created alone, as a click on each other event's box would leave it.
	if !b.boolJS(`(() => { for (const c of document.querySelectorAll('input[name=events]')) c.checked = c.value === 'key.created'; return true })()`) {
		b.fail("events", fmt.Errorf("not set"))
	}
	b.submit(`[data-testid="webhook-create"]`)
	b.do("the secret shown", chromedp.WaitVisible(chromedp.CSS(`[data-testid="webhook-secret-shown"]`)))
	secret := b.text(`[data-testid="webhook-secret"]`)
	prefix := b.text(`[data-testid="webhook-secret-prefix"]`)
	if !strings.HasPrefix(secret, "whsec_") || !strings.HasPrefix(secret, strings.TrimSuffix(prefix, "…")) {
		b.fail("secret", fmt.Errorf("secret %q, prefix %q", secret, prefix))
	}
	page, err := b.location()
	if err != nil {
		b.fail("location", err)
	}
	page, _, _ = strings.Cut(strings.TrimPrefix(page, s.base), "?")
	b.open(page, `[data-testid="webhook-secret-prefix"]`)
	if b.exists(`[data-testid="webhook-secret-shown"]`) || strings.Contains(b.text("main"), secret) {
		b.fail("secret", fmt.Errorf("the secret is shown again on %s", page))
	}

	mustStatus(t, call(t, "POST", s.base+"/v1/keys", tn.Key, map[string]any{"name": "customer", "tier": "pro"}), 201)
	waitFor(t, 15*time.Second, "key.created at the receiver", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ids) == 1
	})
	waitFor(t, 10*time.Second, "the delivery listed as delivered", func() bool {
		b.open(page, `[data-testid="webhook-secret-prefix"]`)
		return b.exists(`[data-testid="delivery-row"][data-status="delivered"]`)
	})
	if code := b.text(`[data-testid="delivery-row"] [data-testid="delivery-code"]`); !strings.Contains(code, "200") {
		hook := strings.TrimPrefix(page, "/ui/webhooks/")
		b.fail("delivery code", fmt.Errorf("%q, want 200; the API: %s", code, call(t, "GET", s.base+"/v1/webhooks/"+hook+"/deliveries", tn.Key, nil).Raw))
	}
	b.screenshot("webhook")
	b.submit(`[data-testid="delivery-resend"]`)
	waitFor(t, 15*time.Second, "the resend at the receiver", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ids) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if ids[0] == "" || ids[1] != ids[0] {
		t.Fatalf("webhook-ids %q: a resend keeps the first's", ids)
	}
}
