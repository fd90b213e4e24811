package e2e

// The first ten minutes of a new user, in a real browser: the setup link a
// first start prints, and the demo --demo makes.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/demo"
)

var setupLinkRe = regexp.MustCompile(`/ui/setup\?token=(st_\w+)`)

// waitOutput waits until re matches p's output and answers its last match.
func waitOutput(t testing.TB, p *proc, re *regexp.Regexp, d time.Duration) []string {
	t.Helper()
	var m [][]string
	waitFor(t, d, "output matching "+re.String(), func() bool {
		m = re.FindAllStringSubmatch(p.logs.String(), -1)
		return len(m) > 0
	})
	return m[len(m)-1]
}

// A first start with no operator login prints a setup link; a second
// server on the same NATS and worker prints a newer one, which replaces
// the first. The newer link works once, on either server: the person
// chooses the operator's login, is signed in, creates the first tenant
// and opens its dashboard from the same browser. Afterwards the link is
// dead on both servers, and the chosen login signs in on the second.
func TestSetupLink(t *testing.T) {
	exe := requireBrowser(t)
	natsAddr := freeAddr(t)
	a := startServer(t, serverOpts{extra: []string{"--nats-listen", natsAddr}})
	first := waitOutput(t, a.proc, setupLinkRe, 20*time.Second)[1]
	b2 := startServer(t, serverOpts{extra: []string{"--nats-url", "nats://" + natsAddr, "--nats-nkey", filepath.Join(a.data, bus.ServerSeedName),
		"--worker=external", "--cluster=off", "--node", "second"}})
	second := waitOutput(t, b2.proc, setupLinkRe, 20*time.Second)[1]
	if first == second {
		t.Fatal("both servers printed the same token")
	}
	// Each token is on its banner's link line only, in no log line.
	if n, m := strings.Count(a.logs.String(), first), strings.Count(b2.logs.String(), second); n != 1 || m != 1 {
		t.Fatalf("the tokens appear %d and %d times in the servers' output, want once each", n, m)
	}

	b := newBrowser(t, exe, a.base)
	// The first link was replaced by the second server's.
	b.open("/ui/setup?token="+first, `[data-testid="setup-dead"]`)
	// The second server's link works on the first server too.
	b.open("/ui/setup?token="+second, `[data-testid="setup-form"]`)
	b.screenshot("setup")
	b.set(`[data-testid="setup-email"]`, uiOperatorEmail)
	b.set(`[data-testid="setup-password"]`, uiOperatorPassword)
	b.set(`[data-testid="setup-password-again"]`, "not the same password")
	if st := b.submit(`[data-testid="setup-submit"]`); st != 400 {
		b.fail("mismatched passwords", fmt.Errorf("status %d, want 400", st))
	}
	if got := b.text(`[data-testid="error-password_again"]`); got == "" {
		b.fail("mismatched passwords", fmt.Errorf("no error next to the second password"))
	}
	b.set(`[data-testid="setup-password"]`, uiOperatorPassword)
	b.set(`[data-testid="setup-password-again"]`, uiOperatorPassword)
	if st := b.submit(`[data-testid="setup-submit"]`); st != 200 {
		b.fail("setup", fmt.Errorf("status %d", st))
	}
	b.do("signed in as the operator", chromedp.WaitVisible(chromedp.CSS(`[data-testid="empty-tenants"]`)))
	if got := b.text(`[data-testid="signed-in-as"]`); !strings.Contains(got, uiOperatorEmail) || !strings.Contains(got, "operator") {
		b.fail("setup", fmt.Errorf("header says %q", got))
	}

	// The link is dead now, on both servers.
	for _, base := range []string{a.base, b2.base} {
		b.do("dead link on "+base, chromedp.Navigate(base+"/ui/setup?token="+second), chromedp.WaitVisible(chromedp.CSS(`[data-testid="setup-dead"]`)))
		if b.exists(`[data-testid="setup-form"]`) {
			b.fail("dead link", fmt.Errorf("%s still shows the form", base))
		}
	}
	r := call(t, "POST", b2.base+"/ui/setup", "", "token="+second+"&email=x%40y.test&password=another+passphrase&password_again=another+passphrase", "Content-Type", "application/x-www-form-urlencoded")
	if r.Status == 200 || r.Status/100 == 3 {
		t.Fatalf("a second claim of the link answered %d", r.Status)
	}

	// The first tenant, and its dashboard, from the same browser.
	b.open("/ui/admin/tenants", `[data-testid="tenant-form"]`)
	b.set(`[data-testid="tenant-name"]`, "first")
	b.set(`[data-testid="tenant-owner-email"]`, uiOwnerEmail)
	b.set(`[data-testid="tenant-owner-password"]`, uiOwnerPassword)
	if st := b.submit(`[data-testid="tenant-create"]`); st != 201 {
		b.fail("create tenant", fmt.Errorf("status %d", st))
	}
	if st := b.submit(`[data-testid="tenant-open-created"]`); st != 200 {
		b.fail("open the tenant", fmt.Errorf("status %d", st))
	}
	b.do("the tenant's overview", chromedp.WaitVisible(chromedp.CSS(`[data-testid="empty-policies"]`)))
	if got := b.text(`[data-testid="signed-in-as"]`); !strings.Contains(got, "in first") {
		b.fail("open the tenant", fmt.Errorf("header says %q", got))
	}
	b.open("/ui/policies/new", `[data-testid="policy-form"]`)
	b.open("/ui/audit", `[data-testid="nav-audit"]`)
	if got := b.text(`main`); !strings.Contains(got, "opened") {
		b.fail("the tenant's audit log", fmt.Errorf("no opening in %q", got))
	}
	b.screenshot("operator-in-tenant")
	b.submit(`[data-testid="leave-tenant"]`)
	b.do("back on the operator's pages", chromedp.WaitVisible(chromedp.CSS(`[data-testid="tenant-row"]`)))

	// The chosen login signs in on the second server.
	b.signOut()
	b.base = b2.base
	b.signIn(uiOperatorEmail, uiOperatorPassword)
}

var demoLineRe = regexp.MustCompile(`  Demo +\S+/ui/login as (\S+), password (\S+)`)

// --demo makes a tenant whose charts, callers and the abuse report have
// data; a second start with --demo replaces it rather than adding one;
// the operator removes it from its page.
func TestDemo(t *testing.T) {
	exe := requireBrowser(t)
	s := startServer(t, serverOpts{extra: []string{"--demo"}, env: []string{
		"SLUICE_OPERATOR_EMAIL=" + uiOperatorEmail,
		"SLUICE_OPERATOR_PASSWORD=" + uiOperatorPassword,
	}})
	m := waitOutput(t, s.proc, demoLineRe, 30*time.Second)
	email, password := m[1], m[2]
	if email != demo.OwnerEmail {
		t.Fatalf("demo owner %q", email)
	}

	b := newBrowser(t, exe, s.base)
	b.acceptDialogs()
	b.signIn(email, password)
	// Counters reach the worker about a second after the checks.
	deadline := time.Now().Add(20 * time.Second)
	for {
		b.open("/ui/", `[data-testid="chart"]`)
		allowed, _ := strconv.Atoi(b.attr(`[data-testid="chart"]`, "data-allowed"))
		denied, _ := strconv.Atoi(b.attr(`[data-testid="chart"]`, "data-denied"))
		if allowed > 1000 && denied > 1000 && b.exists(`[data-testid="top-identities"]`) {
			break
		}
		if time.Now().After(deadline) {
			b.fail("the demo's overview", fmt.Errorf("chart shows %d allowed, %d denied", allowed, denied))
		}
		time.Sleep(500 * time.Millisecond)
	}
	if bars := b.count(`[data-testid="chart-bar"][data-denied]:not([data-denied="0"])`); bars < 10 {
		b.fail("the demo's overview", fmt.Errorf("only %d bars with denials; the traffic should span minutes", bars))
	}
	b.screenshot("demo-overview")
	if os.Getenv("SLUICE_UPDATE_SCREENSHOTS") == "1" {
		b.saveShot("../docs/img/dashboard.png")
	}
	b.open("/ui/analytics?range=1h", `[data-testid="offender-row"][data-identity="`+demo.AbuserIP+`"]`)
	b.screenshot("demo-analytics")
	b.open("/ui/callers", `main`)
	b.signOut()

	b.signIn(uiOperatorEmail, uiOperatorPassword)
	b.open("/ui/admin/abuse", `[data-testid="abuse-row"][data-identity="`+demo.AbuserIP+`"]`)
	b.screenshot("demo-abuse")

	// A second --demo replaces the demo tenant, with a new password.
	s.stop()
	s.restart(t)
	m2 := waitOutput(t, s.proc, demoLineRe, 30*time.Second)
	if m2[2] == password {
		t.Fatal("the second --demo printed the same password")
	}
	// The operator's session outlives the restart.
	b.open("/ui/admin/tenants", `[data-testid="tenant-demo"]`)
	if n := b.count(`[data-testid="tenant-demo"]`); n != 1 {
		b.fail("second --demo", fmt.Errorf("%d demo tenants listed, want 1", n))
	}
	b.submit(`[data-testid="tenant-row"]:has([data-testid="tenant-demo"]) [data-testid="tenant-link"]`)
	b.do("the demo's page", chromedp.WaitVisible(chromedp.CSS(`[data-testid="tenant-remove-demo"]`)))
	if st := b.submit(`[data-testid="tenant-remove-demo"]`); st != 200 {
		b.fail("remove the demo", fmt.Errorf("status %d", st))
	}
	if got := b.text(`[data-testid="flash"]`); !strings.Contains(got, "deleted") {
		b.fail("remove the demo", fmt.Errorf("notice %q", got))
	}
	if b.exists(`[data-testid="tenant-demo"]`) {
		b.fail("remove the demo", fmt.Errorf("a demo tenant is still listed"))
	}
	// Its owner is gone with it.
	b.signOut()
	b.open("/ui/login", `[data-testid="login-form"]`)
	b.do("fill sign-in", chromedp.SendKeys(chromedp.CSS(`[data-testid="login-email"]`), m2[1]), chromedp.SendKeys(chromedp.CSS(`[data-testid="login-password"]`), m2[2]))
	if st := b.submit(`[data-testid="login-submit"]`); st != 401 {
		b.fail("the removed demo's owner signs in", fmt.Errorf("status %d, want 401", st))
	}
}
