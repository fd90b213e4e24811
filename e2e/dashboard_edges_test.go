package e2e

// The dashboard's edges, as a person sees them in a real browser: the
// operator's tenant page (suspend, resume, delete with the name typed),
// the notice after a block that names who was blocked and undoes it, the
// header on a phone, empty states without debug-looking dashed boxes, and
// the keys list that says how many revoked keys it hides.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

func operatorServer(t *testing.T) *server {
	t.Helper()
	return startServer(t, serverOpts{env: []string{
		"SLUICE_OPERATOR_EMAIL=" + uiOperatorEmail,
		"SLUICE_OPERATOR_PASSWORD=" + uiOperatorPassword,
	}})
}

func checkStatus(t *testing.T, s *server, tn tenant) (int, string) {
	t.Helper()
	r := call(t, "POST", s.base+"/v1/check", tn.Key, ipCheck("203.0.113.5", "/api/example"))
	return r.Status, r.errCode()
}

// The operator opens a tenant from the list, suspends it (its service key's
// checks answer 403 forbidden), resumes it, and deletes it only once its
// name is typed; the other tenant is untouched.
func TestDashboardTenantLifecycle(t *testing.T) {
	exe := requireBrowser(t)
	s := operatorServer(t)
	doomed, bystander := createTenant(t, s, "doomed"), createTenant(t, s, "bystander")
	b := newBrowser(t, exe, s.base)
	b.acceptDialogs()
	b.signIn(uiOperatorEmail, uiOperatorPassword)

	b.open("/ui/admin/tenants", `[data-testid="tenant-link"]`)
	row := `[data-testid="tenant-row"][data-tenant-id="` + doomed.ID + `"]`
	if st := b.submit(row + ` [data-testid="tenant-link"]`); st != 200 {
		b.fail("open the tenant", fmt.Errorf("status %d", st))
	}
	if got := b.text(`[data-testid="tenant-title"]`); got != "doomed" {
		b.fail("tenant page", fmt.Errorf("title %q", got))
	}
	if got := b.text(`[data-testid="tenant-status"]`); got != "active" {
		b.fail("tenant page", fmt.Errorf("status %q", got))
	}
	if got := b.text(`[data-testid="tenant-owners"]`); got != "doomed@example.com" {
		b.fail("tenant page", fmt.Errorf("owners %q", got))
	}
	if got := b.text(`[data-testid="tenant-id"]`); got != doomed.ID {
		b.fail("tenant page", fmt.Errorf("id %q", got))
	}
	b.screenshot("tenant-page")

	if st := b.submit(`[data-testid="tenant-suspend"]`); st != 200 {
		b.fail("suspend", fmt.Errorf("status %d", st))
	}
	if got := b.text(`[data-testid="tenant-status"]`); got != "suspended" {
		b.fail("suspend", fmt.Errorf("status %q", got))
	}
	if got := b.text(`[data-testid="flash"]`); !strings.Contains(got, "403") {
		b.fail("suspend", fmt.Errorf("notice %q", got))
	}
	if st, code := checkStatus(t, s, doomed); st != 403 || code != "forbidden" {
		t.Fatalf("check with the suspended tenant's key: %d %s", st, code)
	}
	if st, _ := checkStatus(t, s, bystander); st != 200 {
		t.Fatalf("check with the other tenant's key: %d", st)
	}
	b.screenshot("tenant-suspended")

	if st := b.submit(`[data-testid="tenant-resume"]`); st != 200 {
		b.fail("resume", fmt.Errorf("status %d", st))
	}
	if got := b.text(`[data-testid="tenant-status"]`); got != "active" {
		b.fail("resume", fmt.Errorf("status %q", got))
	}
	if st, _ := checkStatus(t, s, doomed); st != 200 {
		t.Fatalf("check after resuming: %d", st)
	}

	// A name typed wrong deletes nothing and says what to type.
	b.set(`[data-testid="tenant-delete-confirm"]`, "doome")
	if st := b.submit(`[data-testid="tenant-delete"]`); st != 400 {
		b.fail("delete with a wrong name", fmt.Errorf("status %d", st))
	}
	if got := b.text(`[data-testid="error-confirm_name"]`); !strings.Contains(got, "doomed") {
		b.fail("delete with a wrong name", fmt.Errorf("error %q", got))
	}
	if st, _ := checkStatus(t, s, doomed); st != 200 {
		t.Fatalf("check after a refused delete: %d", st)
	}
	b.set(`[data-testid="tenant-delete-confirm"]`, "doomed")
	if st := b.submit(`[data-testid="tenant-delete"]`); st != 200 {
		b.fail("delete", fmt.Errorf("status %d", st))
	}
	if got := b.text(`[data-testid="flash"]`); !strings.Contains(got, "Tenant deleted") {
		b.fail("delete", fmt.Errorf("notice %q", got))
	}
	if b.exists(row) || !b.exists(`[data-testid="tenant-row"][data-tenant-id="`+bystander.ID+`"]`) {
		b.fail("delete", fmt.Errorf("the list still shows the deleted tenant, or lost the other"))
	}
	if st, code := checkStatus(t, s, doomed); st != 401 || code != "unauthenticated" {
		t.Fatalf("check with the deleted tenant's key: %d %s", st, code)
	}
	if st, _ := checkStatus(t, s, bystander); st != 200 {
		t.Fatalf("check with the other tenant's key after the delete: %d", st)
	}
}

// After a block from the abuse report, the notice names the caller, its
// tenant and until when, and its Undo lifts the block.
func TestDashboardBlockedNoticeUndo(t *testing.T) {
	exe := requireBrowser(t)
	s := operatorServer(t)
	tn := createTenant(t, s, "acme")
	createPolicy(t, s, tn, heavyPolicy)
	const ip = "203.0.113.7"
	for range 12 {
		check(t, s, tn, ipCheck(ip, "/api/example?mode=heavy"))
	}
	b := newBrowser(t, exe, s.base)
	b.signIn(uiOperatorEmail, uiOperatorPassword)
	abuseRow := `[data-testid="abuse-row"][data-identity="` + ip + `"]`
	waitFor(t, 20*time.Second, "the caller in the abuse report", func() bool {
		b.open("/ui/admin/abuse?range=1h", `h1`)
		return b.exists(abuseRow)
	})
	b.set(abuseRow+` [data-testid="block-expiry"]`, "1h")
	if st := b.submit(abuseRow + ` [data-testid="block-submit"]`); st != 200 {
		b.fail("block", fmt.Errorf("status %d", st))
	}
	notice := b.text(`[data-testid="flash"]`)
	if !strings.HasPrefix(notice, "Blocked IP "+ip+" in acme until ") || !strings.Contains(notice, "answer blocked") {
		b.fail("block notice", fmt.Errorf("notice %q", notice))
	}
	if got := b.text(`[data-testid="flash-blocked-id"]`); got != ip {
		b.fail("block notice", fmt.Errorf("names %q", got))
	}
	if c, r := check(t, s, tn, ipCheck(ip, "/api/example?mode=heavy")); c.Reason != "blocked" {
		t.Fatalf("check after the block: %s", r.Raw)
	}
	b.screenshot("blocked-notice")
	if st := b.submit(`[data-testid="flash-undo"]`); st != 200 {
		b.fail("undo", fmt.Errorf("status %d", st))
	}
	if got := b.text(`[data-testid="flash"]`); got != "Unblocked." {
		b.fail("undo", fmt.Errorf("notice %q", got))
	}
	if c, r := check(t, s, tn, ipCheck(ip, "/api/example?mode=heavy")); c.Reason == "blocked" {
		t.Fatalf("check after the undo: %s", r.Raw)
	}
	if b.exists(abuseRow + ` [data-testid="already-blocked"]`) {
		b.fail("undo", fmt.Errorf("the report still says blocked"))
	}
}

// phone emulates a 390 px wide phone.
func (b *browser) phone() {
	b.t.Helper()
	b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
}

// headerOnOneLine reports the header's height and whether its logo, every
// menu entry and the sign-out button sit on one line.
func (b *browser) headerOnOneLine() (height int, oneLine bool, detail string) {
	b.t.Helper()
	ctx, cancel := b.timeout()
	defer cancel()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const mid = el => { const r = el.getBoundingClientRect(); return (r.top + r.bottom) / 2; };
		const items = [document.querySelector('.brand img'), ...document.querySelectorAll('.main-nav > ul > li'), document.querySelector('[data-testid="sign-out"]')];
		const mids = items.map(mid);
		const spread = Math.max(...mids) - Math.min(...mids);
		const h = Math.round(document.querySelector('header.site').getBoundingClientRect().height);
		const wide = document.documentElement.scrollWidth > window.innerWidth;
		return h + ' ' + (spread < 8 && !wide) + ' spread=' + spread.toFixed(1) + ' page_wider_than_screen=' + wide;
	})()`))
	if err != nil {
		b.fail("measure the header", err)
	}
	var ok string
	fmt.Sscanf(out, "%d %s", &height, &ok)
	return height, ok == "true", out
}

// On a 390 px phone the header takes one line, for the operator and for a
// tenant owner, whose menu is the longest.
func TestDashboardPhoneHeader(t *testing.T) {
	exe := requireBrowser(t)
	s := operatorServer(t)
	createTenant(t, s, "phone")
	b := newBrowser(t, exe, s.base)
	b.signIn(uiOperatorEmail, uiOperatorPassword)
	b.signOut()
	b.signIn("phone@example.com", "correct horse battery staple")
	for _, who := range []string{"owner", "operator"} {
		if who == "operator" {
			b.signOut()
			b.signIn(uiOperatorEmail, uiOperatorPassword)
		}
		b.phone()
		b.open("/ui/account", `header.site`)
		h, oneLine, detail := b.headerOnOneLine()
		if !oneLine || h > 60 {
			b.fail("phone header of the "+who, fmt.Errorf("%d px high, one line %v (%s)", h, oneLine, detail))
		}
		t.Logf("%s's header at 390 px: %s", who, detail)
		b.do("desktop viewport", chromedp.EmulateViewport(1280, 900))
	}
}

// noDashedJS lists the visible elements with a dashed or dotted border.
const noDashedJS = `(() => {
	const bad = [];
	for (const el of document.querySelectorAll('body *')) {
		const cs = getComputedStyle(el);
		if (cs.display === 'none' || cs.visibility === 'hidden') continue;
		const r = el.getBoundingClientRect();
		if (r.width === 0 || r.height === 0) continue;
		for (const side of ['Top', 'Right', 'Bottom', 'Left']) {
			const style = cs['border' + side + 'Style'];
			if ((style === 'dashed' || style === 'dotted') && parseFloat(cs['border' + side + 'Width']) > 0) {
				bad.push(el.tagName.toLowerCase() + '.' + el.className + ' (' + side.toLowerCase() + ' ' + style + ')');
				break;
			}
		}
	}
	return bad.join('; ');
})()`

// No visible element of the main pages has a dashed border: the empty
// states and the policy form's limit rows look finished. The pages are
// seen empty first (where the empty states show), then filled.
func TestDashboardNoDashedBorders(t *testing.T) {
	exe := requireBrowser(t)
	s := operatorServer(t)
	b := newBrowser(t, exe, s.base)
	noDashed := func(path, waitFor string) {
		t.Helper()
		b.open(path, waitFor)
		ctx, cancel := b.timeout()
		defer cancel()
		bad, err := chromedp.Run(ctx, chromedp.Evaluate[string](noDashedJS))
		if err != nil {
			b.fail("inspect "+path, err)
		}
		if bad != "" {
			b.fail("dashed borders on "+path, fmt.Errorf("%s", bad))
		}
	}
	b.signIn(uiOperatorEmail, uiOperatorPassword)
	noDashed("/ui/admin/tenants", `[data-testid="empty-tenants"]`)
	noDashed("/ui/admin/blocks", `[data-testid="empty-blocks"]`)
	noDashed("/ui/admin/abuse", `h1`)
	tn := createTenant(t, s, "dashes")
	b.signOut()
	b.signIn("dashes@example.com", "correct horse battery staple")
	noDashed("/ui/", `[data-testid="empty-policies"]`)
	noDashed("/ui/policies", `[data-testid="empty-policies"]`)
	noDashed("/ui/keys", `[data-testid="empty-keys"]`)
	noDashed("/ui/policies/new", `[data-testid="policy-form"]`)
	createPolicy(t, s, tn, heavyPolicy)
	for _, p := range [][2]string{
		{"/ui/", `[data-testid="chart"]`}, {"/ui/policies", `[data-testid="policy-row"]`},
		{"/ui/analytics", `[data-testid="chart"]`}, {"/ui/callers", `h1`}, {"/ui/members", `h1`},
		{"/ui/service-keys", `h1`}, {"/ui/account", `h1`},
	} {
		noDashed(p[0], p[1])
	}
	b.open("/ui/policies", `[data-testid="policy-link"]`)
	b.submit(`[data-testid="policy-link"]`)
	noDashed(strings.TrimPrefix(mustLocation(b), s.base), `[data-testid="policy-delete"]`)
}

func mustLocation(b *browser) string {
	b.t.Helper()
	loc, err := b.location()
	if err != nil {
		b.fail("location", err)
	}
	return loc
}

// A tenant whose keys are all revoked reads "No active keys — 1 revoked
// key hidden. Show them", and the link shows the revoked key.
func TestDashboardRevokedKeysHidden(t *testing.T) {
	exe := requireBrowser(t)
	s := operatorServer(t)
	tn := createTenant(t, s, "revoker")
	k := mustStatus(t, call(t, "POST", s.base+"/v1/keys", tn.Key, map[string]any{"name": "old app", "tier": "pro"}), 201)
	mustStatus(t, call(t, "DELETE", s.base+"/v1/keys/"+k.str("id"), tn.Key, nil), 200)
	b := newBrowser(t, exe, s.base)
	b.signIn("revoker@example.com", "correct horse battery staple")
	b.open("/ui/keys", `[data-testid="keys-only-revoked"]`)
	msg := strings.Join(strings.Fields(b.text(`[data-testid="keys-only-revoked"]`)), " ")
	if msg != "No active keys — 1 revoked key hidden. Show them" {
		b.fail("keys list", fmt.Errorf("says %q", msg))
	}
	if b.exists(`[data-testid="key-row"]`) || b.exists(`[data-testid="empty-keys"]`) {
		b.fail("keys list", fmt.Errorf("shows a key row or the no-keys-yet state"))
	}
	b.screenshot("keys-only-revoked")
	if st := b.submit(`[data-testid="show-revoked"]`); st != 200 {
		b.fail("show revoked", fmt.Errorf("status %d", st))
	}
	if n := b.count(`[data-testid="key-row"]`); n != 1 || !strings.Contains(b.text(`[data-testid="key-row"]`), "old app") {
		b.fail("show revoked", fmt.Errorf("%d rows", n))
	}
}
