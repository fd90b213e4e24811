package e2e

// The dashboard in a real browser: headless Chromium, driven with chromedp,
// against the real cmd/server binary. The test walks the product as its
// users do: the operator creates a tenant; its owner protects an endpoint
// with two tiers and issues a key; traffic is denied; the owner sees the
// denials; the operator blocks the offender from the abuse report and the
// offender's next check answers "blocked".
//
// Screenshots of every page, at 1280 and 390 px wide, go to the test's temp
// dir and, when SLUICE_SCREENSHOTS_DIR is set, to that directory as well.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

const (
	uiOperatorEmail    = "operator@sluice.test"
	uiOperatorPassword = "operator passphrase 0001"
	uiOwnerEmail       = "owner@acme.test"
	uiOwnerPassword    = "owner passphrase 0002"
	offenderIP         = "203.0.113.77"
)

// findChromium returns a Chromium or Chrome binary, or "".
func findChromium() string {
	if p := os.Getenv("SLUICE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	for _, p := range []string{"/usr/bin/chromium", "/usr/lib/chromium/chromium"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// requireBrowser skips a browser test when no Chromium is installed, unless
// CI=true, where browser tests are required.
func requireBrowser(t *testing.T) string {
	t.Helper()
	p := findChromium()
	if p == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no Chromium found, and CI=true requires the browser tests: install Debian's chromium (apt-get install chromium) or set SLUICE_CHROMIUM")
		}
		t.Skip("browser test skipped: no Chromium found (apt-get install chromium, or set SLUICE_CHROMIUM); with CI=true it is required")
	}
	return p
}

// browser is one headless Chromium tab on the dashboard.
type browser struct {
	t     *testing.T
	ctx   context.Context
	base  string
	shots string
}

func newBrowser(t *testing.T, exe, base string) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx, base: base, shots: filepath.Join(t.TempDir(), "screenshots")}
	if err := os.MkdirAll(b.shots, 0o755); err != nil {
		t.Fatal(err)
	}
	// The first action starts the browser; it must run on the tab's own
	// context, without a deadline (a deadline would end the browser).
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatalf("start Chromium (%s): %v", exe, err)
	}
	return b
}

func (b *browser) timeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.ctx, 30*time.Second)
}

func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := b.timeout()
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.fail(what, err)
	}
}

func (b *browser) fail(what string, err error) {
	b.t.Helper()
	b.screenshot("failure")
	loc, _ := b.location()
	b.t.Fatalf("%s (at %s): %v", what, loc, err)
}

func (b *browser) location() (string, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Location())
}

// open loads a dashboard path and waits for an element.
func (b *browser) open(path, waitFor string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(b.base+path), chromedp.WaitVisible(chromedp.CSS(waitFor)))
}

// submit clicks a button that submits a form and waits for the next page;
// it returns that page's HTTP status.
func (b *browser) submit(sel string) int64 {
	b.t.Helper()
	ctx, cancel := b.timeout()
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel)))
	if err != nil {
		b.fail("submit "+sel, err)
	}
	return resp.Status
}

// boolJS evaluates a boolean expression in the page.
func (b *browser) boolJS(expr string) bool {
	b.t.Helper()
	ctx, cancel := b.timeout()
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
	if err != nil {
		b.fail("evaluate "+expr, err)
	}
	return v
}

func (b *browser) set(sel, value string) {
	b.t.Helper()
	b.do("set "+sel, chromedp.SetValue(chromedp.CSS(sel), value))
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := b.timeout()
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.fail("read "+sel, err)
	}
	return strings.TrimSpace(s)
}

func (b *browser) attr(sel, name string) string {
	b.t.Helper()
	ctx, cancel := b.timeout()
	defer cancel()
	r, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(sel), name))
	if err != nil {
		b.fail("read "+sel+"@"+name, err)
	}
	return r.Value
}

// exists reports whether sel matches now, without waiting.
func (b *browser) exists(sel string) bool {
	b.t.Helper()
	ctx, cancel := b.timeout()
	defer cancel()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
	if err != nil {
		b.fail("query "+sel, err)
	}
	return n > 0
}

// screenshot saves the whole page at 1280 and at 390 px wide.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	for _, w := range []int64{1280, 390} {
		ctx, cancel := b.timeout()
		var opts []chromedp.EmulateViewportOption
		if w < 600 {
			opts = append(opts, chromedp.EmulateMobile)
		}
		var buf []byte
		err := chromedp.Do(ctx, chromedp.EmulateViewport(w, 900, opts...), chromedp.Sleep(150*time.Millisecond))
		if err == nil {
			buf, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
		}
		cancel()
		if err != nil {
			b.t.Logf("screenshot %s at %d px: %v", name, w, err)
			continue
		}
		file := fmt.Sprintf("%s-%d.png", name, w)
		if err := os.WriteFile(filepath.Join(b.shots, file), buf, 0o644); err != nil {
			b.t.Fatal(err)
		}
		if dir := os.Getenv("SLUICE_SCREENSHOTS_DIR"); dir != "" {
			if err := os.MkdirAll(dir, 0o755); err == nil {
				_ = os.WriteFile(filepath.Join(dir, file), buf, 0o644)
			}
		}
	}
	b.do("restore viewport", chromedp.EmulateViewport(1280, 900))
}

// saveShot writes the page, 1280 px wide, to path (the README's
// screenshot, with SLUICE_UPDATE_SCREENSHOTS=1).
func (b *browser) saveShot(path string) {
	b.t.Helper()
	ctx, cancel := b.timeout()
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		b.fail("screenshot "+path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("wrote %s", path)
}

func (b *browser) signIn(email, password string) {
	b.t.Helper()
	b.open("/ui/login", `[data-testid="login-form"]`)
	b.do("fill sign-in", chromedp.SendKeys(chromedp.CSS(`[data-testid="login-email"]`), email), chromedp.SendKeys(chromedp.CSS(`[data-testid="login-password"]`), password))
	if st := b.submit(`[data-testid="login-submit"]`); st != 200 {
		b.fail("sign in as "+email, fmt.Errorf("status %d", st))
	}
	if got := b.text(`[data-testid="signed-in-as"]`); !strings.Contains(got, email) {
		b.fail("sign in as "+email, fmt.Errorf("header says %q", got))
	}
}

func (b *browser) signOut() {
	b.t.Helper()
	b.submit(`[data-testid="sign-out"]`)
	b.do("signed out", chromedp.WaitVisible(chromedp.CSS(`[data-testid="login-form"]`)))
}

func TestDashboard(t *testing.T) {
	exe := requireBrowser(t)
	s := startServer(t, serverOpts{env: []string{
		"SLUICE_OPERATOR_EMAIL=" + uiOperatorEmail,
		"SLUICE_OPERATOR_PASSWORD=" + uiOperatorPassword,
	}})
	b := newBrowser(t, exe, s.base)

	// An anonymous visitor is sent to sign in.
	b.open("/ui/policies", `[data-testid="login-form"]`)
	b.screenshot("01-sign-in")

	// The operator signs in and creates a tenant; its service key is shown once.
	b.signIn(uiOperatorEmail, uiOperatorPassword)
	b.do("tenants page", chromedp.WaitVisible(chromedp.CSS(`[data-testid="empty-tenants"]`)))
	b.set(`[data-testid="tenant-name"]`, "acme")
	b.set(`[data-testid="tenant-owner-email"]`, uiOwnerEmail)
	b.set(`[data-testid="tenant-owner-password"]`, uiOwnerPassword)
	if st := b.submit(`[data-testid="tenant-create"]`); st != 201 {
		b.fail("create tenant", fmt.Errorf("status %d", st))
	}
	serviceKey := b.text(`[data-testid="service-key"]`)
	if !strings.HasPrefix(serviceKey, "sk_") {
		b.fail("create tenant", fmt.Errorf("service key %q", serviceKey))
	}
	b.screenshot("02-operator-tenant-created")
	b.signOut()

	// The owner signs in to an empty tenant, which says what to do first.
	b.signIn(uiOwnerEmail, uiOwnerPassword)
	b.do("overview", chromedp.WaitVisible(chromedp.CSS(`[data-testid="empty-policies"]`)))
	b.screenshot("03-overview-new-tenant")

	// A policy with two tiers. A mistyped period is refused next to its input.
	b.open("/ui/policies/new", `[data-testid="policy-form"]`)
	b.set(`[data-testid="policy-name"]`, "heavy-example")
	b.set(`[data-testid="policy-method"]`, "GET")
	b.set(`[data-testid="policy-path"]`, "/api/example")
	b.set(`[data-testid="policy-query"]`, "mode=heavy")
	b.set(`#f-tier-0-name`, "anonymous")
	b.set(`#f-tier-0-limit-0-limit`, "5")
	b.set(`#f-tier-0-limit-0-period`, "60s")
	b.set(`#f-tier-1-name`, "pro")
	b.set(`#f-tier-1-limit-0-algorithm`, "sliding_window")
	b.set(`#f-tier-1-limit-0-limit`, "1000")
	b.set(`#f-tier-1-limit-0-period`, "one minute")
	// The browser itself flags a period that is no duration at all (it
	// does not stop the form for it: TestPolicyFormFourBadInputs)...
	mismatch, formValid := b.boolJS(`document.querySelector('#f-tier-1-limit-0-period').validity.patternMismatch`),
		b.boolJS(`document.querySelector('[data-testid="policy-form"]').checkValidity()`)
	if !mismatch || formValid {
		b.fail("invalid policy", fmt.Errorf("the browser let the period %q through (mismatch %v, form valid %v)", "one minute", mismatch, formValid))
	}
	// ...and the server refuses one out of range, next to its input.
	b.set(`#f-tier-1-limit-0-period`, "400d")
	if st := b.submit(`[data-testid="policy-save"]`); st != 400 {
		b.fail("invalid policy", fmt.Errorf("status %d, want 400", st))
	}
	if msg := b.text(`[data-testid="error-tier.1.limit.0.period"]`); !strings.Contains(msg, "366d") {
		b.fail("invalid policy", fmt.Errorf("period error %q", msg))
	}
	b.screenshot("04-policy-form-error")
	b.set(`#f-tier-1-limit-0-period`, "1m")
	if st := b.submit(`[data-testid="policy-save"]`); st != 200 {
		b.fail("create policy", fmt.Errorf("status %d", st))
	}
	b.do("policy listed", chromedp.WaitVisible(chromedp.CSS(`[data-testid="policy-row"]`)))
	if got := b.text(`[data-testid="policy-list"]`); !strings.Contains(got, "heavy-example") || !strings.Contains(got, "pro") {
		b.fail("policy list", fmt.Errorf("list says %q", got))
	}

	// The path tester names the policy and tier without consuming anything.
	b.set(`[data-testid="test-path"]`, "/api/example.json?mode=normal&mode=heavy")
	b.set(`[data-testid="test-caller"]`, offenderIP)
	b.submit(`[data-testid="path-test-form"] button[type="submit"]`)
	if p, tier := b.attr(`[data-testid="path-test-result"]`, "data-policy"), b.attr(`[data-testid="path-test-result"]`, "data-tier"); p != "heavy-example" || tier != "anonymous" {
		b.fail("path tester", fmt.Errorf("policy %q tier %q", p, tier))
	}
	b.screenshot("05-policies")

	// A key on the pro tier; its secret is shown once.
	b.open("/ui/keys", `[data-testid="key-form"]`)
	b.screenshot("06-keys-empty")
	b.set(`[data-testid="key-name"]`, "mobile app")
	b.set(`[data-testid="key-tier"]`, "pro")
	if st := b.submit(`[data-testid="key-create"]`); st != 200 {
		b.fail("create key", fmt.Errorf("status %d after the redirect", st))
	}
	secret := b.text(`[data-testid="key-secret"]`)
	if !strings.HasPrefix(secret, "ck_") {
		b.fail("create key", fmt.Errorf("secret %q", secret))
	}
	// The page's script ran (the content security policy lets it): it
	// shows the copy button, which stays hidden without scripts.
	b.do("copy button", chromedp.WaitVisible(chromedp.CSS(`button[data-copy="new-key-secret"]`)))
	b.screenshot("07-key-created")
	// A reload shows the list without the secret and makes no second key.
	b.do("reload", chromedp.Reload())
	b.do("keys list after a reload", chromedp.WaitVisible(chromedp.CSS(`[data-testid="key-form"]`)))
	if b.exists(`[data-testid="key-secret"]`) || b.count(`[data-testid="key-row"]`) != 1 {
		b.fail("reload after creating a key", fmt.Errorf("secret shown again or a second key"))
	}
	b.submit(`[data-testid="key-row"] a`)
	b.do("key page", chromedp.WaitVisible(chromedp.CSS(`[data-testid="overrides-form"]`)))
	b.submit(`[data-testid="override-add"]`)
	b.do("override row", chromedp.WaitVisible(chromedp.CSS(`#f-override-0-limit`)))
	b.screenshot("07b-key-page")

	// Traffic: the key's checks pass; one IP goes far over its 5 per minute.
	tn := tenant{Key: serviceKey}
	for range 3 {
		if c, r := check(t, s, tn, map[string]any{"api_key": secret, "path": "/api/example?mode=heavy"}); !c.Allowed || c.Tier != "pro" {
			t.Fatalf("key check: %s", r.Raw)
		}
	}
	denied := 0
	for range 20 {
		if c, _ := check(t, s, tn, ipCheck(offenderIP, "/api/example?mode=heavy")); !c.Allowed {
			denied++
		}
	}
	if denied != 15 {
		t.Fatalf("%d of 20 checks denied, want 15", denied)
	}
	check(t, s, tn, ipCheck("198.51.100.9", "/api/example?mode=heavy"))

	// The denials reach the chart and the top offenders (counters are
	// flushed every second).
	deadline := time.Now().Add(20 * time.Second)
	for {
		b.open("/ui/analytics?range=1h", `[data-testid="chart"]`)
		if b.attr(`[data-testid="chart"]`, "data-denied") == "15" && b.exists(`[data-testid="offender-row"][data-identity="`+offenderIP+`"]`) {
			break
		}
		if time.Now().After(deadline) {
			b.fail("denials on the analytics page", errors.New("chart or offenders never showed the 15 denials"))
		}
		time.Sleep(500 * time.Millisecond)
	}
	if got := b.text(`[data-testid="offender-row"][data-identity="` + offenderIP + `"]`); !strings.Contains(got, "75.0%") {
		b.fail("offender row", fmt.Errorf("row says %q, want a 75.0%% denial ratio", got))
	}
	b.screenshot("08-analytics")
	b.submit(`[data-testid="offender-row"][data-identity="` + offenderIP + `"] a[data-testid="identity-link"]`)
	b.do("identity history", chromedp.WaitVisible(chromedp.CSS(`[data-testid="identity-history"]`)))
	if got := b.attr(`[data-testid="chart"]`, "data-denied"); got != "15" {
		b.fail("identity history", fmt.Errorf("chart shows %s denials, want 15", got))
	}
	b.screenshot("09-identity")
	b.open("/ui/", `[data-testid="chart"]`)
	if got := b.attr(`[data-testid="chart"]`, "data-denied"); got != "15" {
		b.fail("overview", fmt.Errorf("chart shows %s denials, want 15", got))
	}
	b.do("overview tables", chromedp.WaitVisible(chromedp.CSS(`[data-testid="top-identities"]`)))
	b.screenshot("10-overview")
	b.open("/ui/keys", `[data-testid="key-row"]`)
	b.screenshot("11-keys")
	b.open("/ui/policies", `[data-testid="policy-link"]`)
	b.submit(`[data-testid="policy-link"]`)
	b.do("policy page", chromedp.WaitVisible(chromedp.CSS(`[data-testid="policy-delete"]`)))
	b.screenshot("11b-policy-edit")
	b.open("/ui/members", `[data-testid="member-form"]`)
	b.screenshot("11c-members")
	b.signOut()

	// The operator blocks the offender from the abuse report.
	b.signIn(uiOperatorEmail, uiOperatorPassword)
	b.open("/ui/admin/abuse", `[data-testid="abuse-row"][data-identity="`+offenderIP+`"]`)
	b.screenshot("12-abuse")
	b.set(`[data-testid="abuse-row"][data-identity="`+offenderIP+`"] [data-testid="block-reason"]`, "scraping heavy-example")
	if st := b.submit(`[data-testid="abuse-row"][data-identity="` + offenderIP + `"] [data-testid="block-submit"]`); st != 200 {
		b.fail("block", fmt.Errorf("status %d", st))
	}
	if got := b.text(`[data-testid="flash"]`); !strings.Contains(got, "Blocked") {
		b.fail("block", fmt.Errorf("notice %q", got))
	}
	if c, r := check(t, s, tn, ipCheck(offenderIP, "/api/example?mode=heavy")); c.Allowed || c.Reason != "blocked" {
		t.Fatalf("check after the block: %s", r.Raw)
	}
	if c, r := check(t, s, tn, ipCheck("198.51.100.9", "/api/example?mode=heavy")); !c.Allowed {
		t.Fatalf("another caller after the block: %s", r.Raw)
	}
	b.open("/ui/admin/blocks", `[data-testid="block-row"][data-identity="`+offenderIP+`"]`)
	b.screenshot("13-blocks")
	b.open("/ui/admin/tenants", `[data-testid="tenant-row"]`)
	b.screenshot("14-tenants")
	t.Logf("screenshots in %s", b.shots)
}
