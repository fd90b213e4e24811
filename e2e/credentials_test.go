package e2e

// Credential lifecycle in a real browser against the real cmd/server: a
// tenant's owner rolls the service key (adds one, sees its secret once,
// revokes the old one, which the API then refuses), manages a member (sees
// them listed, changes their role, which ends the member's session, removes
// them), and changes their own password.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// acceptDialogs clicks OK on every confirm() the pages open, as a person
// who means to revoke or remove does.
func (b *browser) acceptDialogs() {
	b.t.Helper()
	err := chromedp.Listen(b.ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); !ok {
			return
		}
		go chromedp.Do(b.ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := cdp.Call(ctx, t, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			return err
		}))
	})
	if err != nil {
		b.t.Fatal(err)
	}
}

func (b *browser) count(sel string) int {
	b.t.Helper()
	ctx, cancel := b.timeout()
	defer cancel()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
	if err != nil {
		b.fail("count "+sel, err)
	}
	return n
}

func TestCredentialsInBrowser(t *testing.T) {
	exe := requireBrowser(t)
	s := startServer(t, serverOpts{})
	tn := createTenant(t, s, "rollco")
	ownerEmail, ownerPassword := "rollco@example.com", "correct horse battery staple"
	keys := mustStatus(t, call(t, "GET", s.base+"/v1/service-keys", tn.Key, nil), 200)
	var oldID string
	if list, ok := keys.Body["service_keys"].([]any); ok && len(list) == 1 {
		oldID, _ = list[0].(map[string]any)["id"].(string)
	}
	if oldID == "" {
		t.Fatalf("service keys: %s", keys.Raw)
	}

	owner := newBrowser(t, exe, s.base)
	owner.acceptDialogs()
	owner.signIn(ownerEmail, ownerPassword)

	// Service keys: one to start with; adding one shows its secret once.
	owner.open("/ui/service-keys", `[data-testid="service-key-list"]`)
	if n := owner.count(`[data-testid="service-key-row"]`); n != 1 {
		t.Fatalf("%d service keys listed at first", n)
	}
	if got := owner.text(`[data-testid="service-key-prefix"]`); !strings.HasPrefix(tn.Key, strings.TrimSuffix(got, "…")) {
		t.Fatalf("listed prefix %q is not the key's", got)
	}
	if st := owner.submit(`[data-testid="service-key-create"]`); st != 200 {
		t.Fatalf("add a service key: %d", st)
	}
	secret := owner.text(`[data-testid="service-key-secret"]`)
	if !strings.HasPrefix(secret, "sk_") || owner.count(`[data-testid="service-key-row"]`) != 2 {
		t.Fatalf("after adding: secret %q, %d rows", secret, owner.count(`[data-testid="service-key-row"]`))
	}
	owner.screenshot("credentials-01-service-key-added")
	mustStatus(t, call(t, "GET", s.base+"/v1/policies", secret, nil), 200)
	owner.open("/ui/service-keys", `[data-testid="service-key-list"]`)
	if owner.exists(`[data-testid="service-key-secret"]`) || owner.count(`[data-testid="service-key-row"]`) != 2 {
		t.Fatal("reloading the page shows the secret again or adds a key")
	}

	// Revoke the old key: the page says so and the API refuses it.
	if st := owner.submit(fmt.Sprintf(`[data-key-id=%q] [data-testid="service-key-revoke"]`, oldID)); st != 200 {
		t.Fatalf("revoke: %d", st)
	}
	if got := owner.text(`[data-testid="flash"]`); !strings.Contains(got, "revoked") {
		t.Fatalf("flash after revoking: %q", got)
	}
	if got := owner.text(fmt.Sprintf(`[data-key-id=%q] [data-testid="service-key-status"]`, oldID)); got != "revoked" {
		t.Fatalf("old key's status: %q", got)
	}
	waitFor(t, 5*time.Second, "old key refused", func() bool {
		return call(t, "GET", s.base+"/v1/policies", tn.Key, nil).Status == 401
	})
	// The last active key cannot be revoked by mistake.
	owner.submit(`[data-testid="service-key-row"][data-status="active"] [data-testid="service-key-revoke"]`)
	if got := owner.text(`[data-testid="service-key-error"]`); !strings.Contains(got, "last active service key") {
		t.Fatalf("revoking the last key: %q", got)
	}
	mustStatus(t, call(t, "GET", s.base+"/v1/policies", secret, nil), 200)

	// Members: invite one, who signs in in another browser.
	owner.open("/ui/members", `[data-testid="member-form"]`)
	owner.set(`[data-testid="member-email"]`, "mia@rollco.test")
	owner.set(`[data-testid="member-password"]`, "mia's first passphrase")
	owner.submit(`[data-testid="member-invite"]`)
	if got := owner.text(`[data-testid="member-invited"]`); !strings.Contains(got, "mia@rollco.test") {
		t.Fatalf("invite notice: %q", got)
	}
	owner.open("/ui/members", `[data-testid="member-list"]`)
	owner.do("member listed", chromedp.WaitVisible(chromedp.CSS(`[data-testid="member-row"][data-email="mia@rollco.test"]`)))
	mia := newBrowser(t, exe, s.base)
	mia.signIn("mia@rollco.test", "mia's first passphrase")
	owner.open("/ui/members", `[data-testid="member-list"]`)
	miaRow := `[data-testid="member-row"][data-email="mia@rollco.test"]`
	if got := owner.text(miaRow + ` [data-testid="member-last-sign-in"]`); got == "never" || got == "" {
		t.Fatalf("mia's last sign-in: %q", got)
	}
	owner.screenshot("credentials-02-members")

	// A role change ends mia's session: her next page is the sign-in form.
	owner.do("choose owner", chromedp.SetValue(chromedp.CSS(miaRow+` [data-testid="member-role"]`), "owner"))
	owner.submit(miaRow + ` [data-testid="member-role-save"]`)
	if got := owner.text(`[data-testid="flash"]`); !strings.Contains(got, "Role changed") {
		t.Fatalf("flash after a role change: %q", got)
	}
	mia.open("/ui/keys", `[data-testid="login-form"]`)
	mia.signIn("mia@rollco.test", "mia's first passphrase")
	mia.open("/ui/members", `[data-testid="member-list"]`) // owners see members

	// Removing her ends her session too, and she is gone from the list.
	owner.open("/ui/members", `[data-testid="member-list"]`)
	owner.submit(miaRow + ` [data-testid="member-remove"]`)
	if owner.exists(miaRow) {
		t.Fatal("a removed member is still listed")
	}
	mia.open("/ui/keys", `[data-testid="login-form"]`)

	// The owner changes their password; the old one stops working.
	owner.open("/ui/account", `[data-testid="password-form"]`)
	owner.set(`[data-testid="password-current"]`, "not the password")
	owner.set(`[data-testid="password-new"]`, "a fresh passphrase 42")
	owner.set(`[data-testid="password-confirm"]`, "a fresh passphrase 42")
	if st := owner.submit(`[data-testid="password-save"]`); st != 400 {
		t.Fatalf("wrong current password: %d", st)
	}
	if got := owner.text(`[data-testid="error-current_password"]`); !strings.Contains(got, "not your current password") {
		t.Fatalf("wrong current password says %q", got)
	}
	owner.set(`[data-testid="password-current"]`, ownerPassword)
	owner.set(`[data-testid="password-new"]`, "a fresh passphrase 42")
	owner.set(`[data-testid="password-confirm"]`, "a fresh passphrase 42")
	if st := owner.submit(`[data-testid="password-save"]`); st != 200 {
		t.Fatalf("change password: %d", st)
	}
	if got := owner.text(`[data-testid="flash"]`); !strings.Contains(got, "Password changed") {
		t.Fatalf("flash after the change: %q", got)
	}
	owner.screenshot("credentials-03-password-changed")
	owner.signOut()
	owner.open("/ui/login", `[data-testid="login-form"]`)
	owner.do("old password", chromedp.SendKeys(chromedp.CSS(`[data-testid="login-email"]`), ownerEmail), chromedp.SendKeys(chromedp.CSS(`[data-testid="login-password"]`), ownerPassword))
	owner.submit(`[data-testid="login-submit"]`)
	if got := owner.text(`[data-testid="login-error"]`); !strings.Contains(got, "Wrong email or password") {
		t.Fatalf("old password: %q", got)
	}
	owner.signIn(ownerEmail, "a fresh passphrase 42")
}
