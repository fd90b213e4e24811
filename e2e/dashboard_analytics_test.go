package e2e

// The dashboard's analytics by outcome, the Callers page, and the policy
// and key forms' finer points, in a real browser against the real server.
// TestDashboard (dashboard_test.go) already walks the main path: a new
// key's secret shown once and a reload making no second key, a period the
// browser refuses, the path tester's policy and tier; these tests do not
// repeat it.

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// ownerOf is the dashboard login createTenant gives a tenant's owner.
func ownerOf(name string) (email, password string) {
	return name + "@example.com", "correct horse battery staple"
}

// TestDashboardPolicyAndKeyForms: the policy form shows every mistake at
// once, each under its input and named by tier, after the browser's own
// checks; its "Other tiers" choice decides what a key of an unlisted tier
// gets, which the key form warns about and the path tester says.
func TestDashboardPolicyAndKeyForms(t *testing.T) {
	exe := requireBrowser(t)
	s := startServer(t, serverOpts{})
	tn := createTenant(t, s, "formco")
	b := newBrowser(t, exe, s.base)
	b.signIn(ownerOf("formco"))

	// Four mistakes in one save: an empty name, limit "abc", limit 0 and
	// period "forever".
	b.open("/ui/policies/new", `[data-testid="policy-form"]`)
	// The new form's name is empty already; leave it so.
	if got := b.attr(`[data-testid="policy-name"]`, "value"); got != "" {
		b.fail("new policy form", fmt.Errorf("name %q", got))
	}
	b.set(`[data-testid="policy-path"]`, "/api/gated")
	b.set(`#f-tier-0-name`, "anonymous")
	b.set(`#f-tier-0-limit-0-limit`, "abc")
	b.set(`#f-tier-0-limit-0-period`, "60s")
	b.set(`#f-tier-1-name`, "pro")
	b.set(`#f-tier-1-limit-0-limit`, "0")
	b.set(`#f-tier-1-limit-0-period`, "forever")
	// The browser checks first: the constraints are on the inputs, and it
	// refuses each of the four.
	for sel, want := range map[string]string{
		`#f-name`:                  "required",
		`#f-tier-0-limit-0-limit`:  "pattern",
		`#f-tier-1-limit-0-limit`:  "pattern",
		`#f-tier-1-limit-0-period`: "pattern",
	} {
		if !b.boolJS(fmt.Sprintf(`document.querySelector(%q).hasAttribute(%q)`, sel, want)) {
			b.fail("HTML constraints", fmt.Errorf("%s has no %s attribute", sel, want))
		}
		if b.boolJS(fmt.Sprintf(`document.querySelector(%q).validity.valid`, sel)) {
			b.fail("HTML constraints", fmt.Errorf("the browser accepts %s", sel))
		}
	}
	if b.boolJS(`document.querySelector('[data-testid="policy-form"]').checkValidity()`) {
		b.fail("HTML constraints", errors.New("the browser would send the form"))
	}
	// The server checks everything again (a browser without validation,
	// or a crafted request): the form comes back with all four problems.
	if !b.boolJS(`document.querySelector('[data-testid="policy-form"]').noValidate = true`) {
		b.fail("skip the browser's checks", errors.New("noValidate not set"))
	}
	if st := b.submit(`[data-testid="policy-save"]`); st != 400 {
		b.fail("save with four mistakes", fmt.Errorf("status %d, want 400", st))
	}
	for field, want := range map[string]string{
		"name":                  "required",
		"tier.0.limit.0.limit":  "whole number",
		"tier.1.limit.0.limit":  "at least 1",
		"tier.1.limit.0.period": "duration",
	} {
		sel := `[data-testid="error-` + field + `"]`
		if got := b.text(sel); !strings.Contains(got, want) {
			b.fail("error under "+field, fmt.Errorf("%q, want it to say %q", got, want))
		}
		// Under its own input: in the same field wrapper, and the input
		// points at it.
		id := "f-" + strings.ReplaceAll(field, ".", "-")
		if !b.boolJS(fmt.Sprintf(`(() => { const i = document.getElementById(%q); return i.closest('.field').contains(document.querySelector(%q)) && i.getAttribute('aria-invalid') === 'true' })()`, id, sel)) {
			b.fail("error under "+field, errors.New("the message is not under its input"))
		}
	}
	summary := b.text(`[data-testid="form-errors"]`)
	for _, want := range []string{"anonymous › limit", "pro › limit", "pro › period", "Name"} {
		if !strings.Contains(summary, want) {
			b.fail("error summary", fmt.Errorf("%q does not name %q", summary, want))
		}
	}
	if got := b.attr(`#f-tier-1-limit-0-period`, "value"); got != "forever" {
		b.fail("the form keeps what was typed", fmt.Errorf("period %q", got))
	}
	b.screenshot("20-policy-form-four-errors")

	// Fixed, with "Other tiers: Denied".
	b.set(`[data-testid="policy-name"]`, "gated")
	b.set(`#f-tier-0-limit-0-limit`, "5")
	b.set(`#f-tier-1-limit-0-limit`, "100")
	b.set(`#f-tier-1-limit-0-period`, "1m")
	b.set(`[data-testid="policy-unlisted-tiers"]`, "deny")
	if st := b.submit(`[data-testid="policy-save"]`); st != 200 {
		b.fail("save gated", fmt.Errorf("status %d", st))
	}
	b.do("policy listed", chromedp.WaitVisible(chromedp.CSS(`[data-testid="policy-link"]`)))
	b.submit(`[data-testid="policy-link"]`)
	b.do("policy page", chromedp.WaitVisible(chromedp.CSS(`[data-testid="policy-unlisted-tiers"]`)))
	if got := b.attr(`[data-testid="policy-unlisted-tiers"] option[selected]`, "value"); got != "deny" {
		b.fail("other tiers", fmt.Errorf("the saved policy shows %q", got))
	}
	policyURL, _ := b.location()

	// A key of a tier no policy lists: the form warns with the secret.
	b.open("/ui/keys", `[data-testid="key-form"]`)
	b.set(`[data-testid="key-name"]`, "gold customer")
	b.set(`[data-testid="key-tier"]`, "gold")
	if st := b.submit(`[data-testid="key-create"]`); st != 200 {
		b.fail("create a gold key", fmt.Errorf("status %d", st))
	}
	secret := b.text(`[data-testid="key-secret"]`)
	if got := b.text(`[data-testid="key-tier-unlisted"]`); !strings.Contains(got, "gold") || !strings.Contains(got, "denied") {
		b.fail("unlisted tier warning", fmt.Errorf("%q", got))
	}
	b.screenshot("21-key-unlisted-tier")
	// A key of a listed tier gets no warning.
	b.set(`[data-testid="key-name"]`, "pro customer")
	b.set(`[data-testid="key-tier"]`, "pro")
	b.submit(`[data-testid="key-create"]`)
	b.do("second key", chromedp.WaitVisible(chromedp.CSS(`[data-testid="key-secret"]`)))
	if b.exists(`[data-testid="key-tier-unlisted"]`) {
		b.fail("listed tier", errors.New("a pro key is warned about"))
	}

	// The path tester says what the gold key gets, and so does the API.
	tester := func(want string) {
		t.Helper()
		b.open("/ui/policies", `[data-testid="path-test-form"]`)
		b.set(`[data-testid="test-path"]`, "/api/gated")
		b.set(`[data-testid="test-caller"]`, secret)
		b.submit(`[data-testid="path-test-form"] button[type="submit"]`)
		if p, tier := b.attr(`[data-testid="path-test-result"]`, "data-policy"), b.attr(`[data-testid="path-test-result"]`, "data-tier"); p != "gated" || tier != "gold" {
			b.fail("path tester", fmt.Errorf("policy %q tier %q", p, tier))
		}
		if got := b.text(`[data-testid="path-test-unlisted"]`); !strings.Contains(got, want) {
			b.fail("path tester", fmt.Errorf("%q, want it to say %q", got, want))
		}
	}
	tester("denied")
	b.screenshot("22-path-tester-unlisted")
	if c, r := check(t, s, tn, map[string]any{"api_key": secret, "path": "/api/gated"}); c.Allowed || c.Reason != "rate_limited" || c.Tier != "gold" {
		t.Fatalf("gold key with other tiers denied: %s", r.Raw)
	}
	// "Other tiers: Unlimited": the tester and the API agree again.
	b.open(strings.TrimPrefix(policyURL, s.base), `[data-testid="policy-unlisted-tiers"]`)
	b.set(`[data-testid="policy-unlisted-tiers"]`, "allow")
	if st := b.submit(`[data-testid="policy-save"]`); st != 200 {
		b.fail("save gated", fmt.Errorf("status %d", st))
	}
	tester("not limited")
	if c, r := check(t, s, tn, map[string]any{"api_key": secret, "path": "/api/gated"}); !c.Allowed || c.Tier != "gold" {
		t.Fatalf("gold key with other tiers allowed: %s", r.Raw)
	}
}

// TestDashboardAnalyticsAndCallers: each outcome is a series of its own,
// offenders rank per reason (a revoked key's one check stays at the
// bottom, "1 of 1 checks"), keys show their usage, and the Callers page
// looks a caller up, resets, blocks and unblocks it, for its own tenant
// only.
func TestDashboardAnalyticsAndCallers(t *testing.T) {
	exe := requireBrowser(t)
	s := startServer(t, serverOpts{})
	tn := createTenant(t, s, "outco")
	createTenant(t, s, "otherco")
	createPolicy(t, s, tn, map[string]any{"name": "heavy", "path": "/api/heavy",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 5, "period": "60s"},
			"pro": map[string]any{"algorithm": "token_bucket", "limit": 100, "period": "60s"}}})
	partner := mustStatus(t, call(t, "POST", s.base+"/v1/keys", tn.Key, map[string]any{"name": "partner", "tier": "pro"}), 201)
	old := mustStatus(t, call(t, "POST", s.base+"/v1/keys", tn.Key, map[string]any{"name": "old app", "tier": "pro"}), 201)
	mustStatus(t, call(t, "DELETE", s.base+"/v1/keys/"+old.str("id"), tn.Key, nil), 200)
	const noisy, blocked = "203.0.113.80", "203.0.113.88"
	mustStatus(t, call(t, "POST", s.base+"/v1/admin/blocks", operatorToken, map[string]any{"tenant_id": tn.ID, "identity": map[string]any{"kind": "ip", "id": blocked}, "reason": "known bad"}), 201)

	// 5 allowed and 15 rate limited for one IP, 3 allowed for a key, one
	// check with a revoked key, 4 from a blocked IP.
	denied := 0
	for range 20 {
		if c, _ := check(t, s, tn, ipCheck(noisy, "/api/heavy")); !c.Allowed {
			denied++
		}
	}
	if denied != 15 {
		t.Fatalf("%d of 20 denied, want 15", denied)
	}
	for range 3 {
		check(t, s, tn, map[string]any{"api_key": partner.str("key"), "path": "/api/heavy"})
	}
	if c, r := check(t, s, tn, map[string]any{"api_key": old.str("key"), "path": "/api/heavy"}); c.Reason != "invalid_key" {
		t.Fatalf("revoked key: %s", r.Raw)
	}
	for range 4 {
		if c, r := check(t, s, tn, ipCheck(blocked, "/api/heavy")); c.Reason != "blocked" {
			t.Fatalf("blocked IP: %s", r.Raw)
		}
	}

	b := newBrowser(t, exe, s.base)
	b.signIn(ownerOf("outco"))
	waitFor(t, 20*time.Second, "every outcome on the analytics page", func() bool {
		b.open("/ui/analytics?range=1h", `[data-testid="chart"]`)
		return b.attr(`[data-testid="chart"]`, "data-rate-limited") == "15" && b.attr(`[data-testid="chart"]`, "data-blocked") == "4" &&
			b.attr(`[data-testid="chart"]`, "data-invalid-key") == "1" && b.count(`[data-testid="offender-row"]`) == 3
	})
	for id, want := range map[string]string{"chart-allowed": "8", "chart-rate-limited": "15", "chart-invalid-key": "1", "chart-blocked": "4", "chart-denied": "20"} {
		if got := b.text(`[data-testid="` + id + `"]`); got != want {
			b.fail("legend", fmt.Errorf("%s says %q, want %q", id, got, want))
		}
	}
	for _, class := range []string{"bar-allowed", "bar-rate-limited", "bar-invalid-key", "bar-blocked"} {
		if !b.exists(`[data-testid="chart-bar"] rect.` + class) {
			b.fail("chart", fmt.Errorf("no %s segment is drawn", class))
		}
	}
	// Offenders by reason: the scraper, the blocked IP, and last the
	// revoked key, whose one check is 100% of its checks but one denial.
	rows := []struct{ id, reason, text string }{
		{noisy, "rate_limited", "15 of 20 checks"},
		{blocked, "blocked", "4 of 4 checks"},
		{old.str("id"), "invalid_key", "1 of 1 checks"},
	}
	for i, want := range rows {
		sel := fmt.Sprintf(`[data-testid="offender-row"]:nth-child(%d)`, i+1)
		if id, reason := b.attr(sel, "data-identity"), b.attr(sel, "data-reason"); id != want.id || reason != want.reason {
			b.fail("offenders by reason", fmt.Errorf("row %d is %s/%s, want %s/%s", i+1, id, reason, want.id, want.reason))
		}
		if got := b.text(sel); !strings.Contains(got, want.text) {
			b.fail("offenders by reason", fmt.Errorf("row %d says %q, want %q", i+1, got, want.text))
		}
	}
	if got := b.text(`[data-testid="offender-row"]:nth-child(3)`); !strings.Contains(got, "Invalid key") || !strings.Contains(got, "old app") {
		b.fail("revoked key row", fmt.Errorf("%q", got))
	}
	b.do("show the numbers", chromedp.Click(chromedp.CSS(`.chart-data summary`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid="chart-row"]`)))
	b.screenshot("23-analytics-by-outcome")
	// The overview and the caller's history split denials the same way.
	b.open("/ui/?range=1h", `[data-testid="stat-denied"]`)
	for id, want := range map[string]string{"stat-denied": "20", "stat-rate-limited": "15", "stat-invalid-key": "1", "stat-blocked": "4"} {
		if got := b.text(`[data-testid="` + id + `"]`); got != want {
			b.fail("overview", fmt.Errorf("%s says %q, want %q", id, got, want))
		}
	}
	b.open("/ui/analytics/identity?kind=ip&id="+blocked+"&range=1h", `[data-testid="identity-history"]`)
	if got := b.text(`[data-testid="identity-blocked"]`); got != "4" || b.text(`[data-testid="identity-rate-limited"]`) != "0" {
		b.fail("identity history", fmt.Errorf("blocked %q", got))
	}

	// Keys: each key's usage.
	b.open("/ui/keys?revoked=1", `[data-testid="key-row"]`)
	for id, want := range map[string][2]string{partner.str("id"): {"3", "0"}, old.str("id"): {"0", "1"}} {
		sel := `[data-testid="key-row"][data-key-id="` + id + `"]`
		if a, d := b.text(sel+` [data-testid="key-allowed"]`), b.text(sel+` [data-testid="key-denied"]`); a != want[0] || d != want[1] {
			b.fail("key usage", fmt.Errorf("key %s: %s allowed, %s denied; want %s, %s", id, a, d, want[0], want[1]))
		}
	}
	b.open("/ui/keys/"+old.str("id"), `[data-testid="key-usage"]`)
	if got := b.text(`[data-testid="key-usage-invalid-key"]`); got != "1" {
		b.fail("key page usage", fmt.Errorf("invalid key %q", got))
	}

	// Callers: look the scraper up from the search box.
	b.open("/ui/callers", `[data-testid="caller-search"]`)
	b.set(`[data-testid="caller-query"]`, noisy)
	b.submit(`[data-testid="caller-search-submit"]`)
	b.do("caller", chromedp.WaitVisible(chromedp.CSS(`[data-testid="caller"]`)))
	bucket := `[data-testid="caller-bucket"][data-policy="heavy"]`
	if got := b.text(bucket + ` [data-testid="caller-remaining"]`); got != "0" || !strings.Contains(b.text(bucket), "denied") || !strings.Contains(b.text(bucket), "5 per 1m") {
		b.fail("caller bucket", fmt.Errorf("remaining %q, row %q", got, b.text(bucket)))
	}
	if got := b.text(`[data-testid="caller-recent-rate-limited"]`); got != "15" || b.text(`[data-testid="caller-recent-allowed"]`) != "5" {
		b.fail("recent decisions", fmt.Errorf("%q", b.text(`[data-testid="caller-recent-totals"]`)))
	}
	b.screenshot("24-caller")
	// Looking again took nothing: still drained, still 0, not -1 or reset.
	b.do("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(bucket)))
	if got := b.text(bucket + ` [data-testid="caller-remaining"]`); got != "0" {
		b.fail("second look", fmt.Errorf("remaining %q", got))
	}
	// Reset from the row: the form comes with the policy chosen.
	b.submit(bucket + ` [data-testid="caller-reset-link"]`)
	b.do("reset form", chromedp.WaitVisible(chromedp.CSS(`[data-testid="reset-form"]`)))
	if got := b.attr(`[data-testid="reset-policy"] option[selected]`, "value"); got != "heavy" {
		b.fail("reset form", fmt.Errorf("policy %q chosen, want heavy", got))
	}
	b.submit(`[data-testid="reset-submit"]`)
	if got := b.text(`[data-testid="flash"]`); !strings.Contains(got, "reset") {
		b.fail("reset", fmt.Errorf("notice %q", got))
	}
	if got := b.text(bucket + ` [data-testid="caller-remaining"]`); got != "5" {
		b.fail("after the reset", fmt.Errorf("remaining %q, want 5", got))
	}
	// Block, and the next check is blocked; unblock, and it passes.
	b.set(`[data-testid="caller-block-reason"]`, "scraping")
	b.submit(`[data-testid="caller-block-submit"]`)
	if got := b.text(`[data-testid="caller-blocked"]`); !strings.Contains(got, "scraping") {
		b.fail("block", fmt.Errorf("blocked says %q", got))
	}
	if c, r := check(t, s, tn, ipCheck(noisy, "/api/heavy")); c.Reason != "blocked" {
		t.Fatalf("after the block: %s", r.Raw)
	}
	b.screenshot("25-caller-blocked")
	b.submit(`[data-testid="unblock-submit"]`)
	if got := b.text(`[data-testid="flash"]`); !strings.Contains(got, "Unblocked") || !b.exists(`[data-testid="caller-block-form"]`) {
		b.fail("unblock", fmt.Errorf("notice %q", got))
	}
	if c, r := check(t, s, tn, ipCheck(noisy, "/api/heavy")); !c.Allowed {
		t.Fatalf("after the unblock: %s", r.Raw)
	}
	// A key by its prefix.
	b.open("/ui/callers", `[data-testid="caller-search"]`)
	b.set(`[data-testid="caller-query"]`, partner.str("prefix"))
	b.submit(`[data-testid="caller-search-submit"]`)
	b.do("key caller", chromedp.WaitVisible(chromedp.CSS(`[data-testid="caller"]`)))
	if id, tier := b.attr(`[data-testid="caller"]`, "data-identity"), b.text(`[data-testid="caller-tier"]`); id != partner.str("id") || tier != "pro" {
		b.fail("key by prefix", fmt.Errorf("found %s tier %s", id, tier))
	}
	b.signOut()

	// Another tenant finds none of this: not the key, by id or prefix, and
	// for the scraper's IP only its own (empty) state.
	b.signIn(ownerOf("otherco"))
	for _, q := range []string{partner.str("id"), partner.str("prefix")} {
		b.open("/ui/callers", `[data-testid="caller-search"]`)
		b.set(`[data-testid="caller-query"]`, q)
		b.submit(`[data-testid="caller-search-submit"]`)
		b.do("foreign key", chromedp.WaitVisible(chromedp.CSS(`[data-testid="caller-message"]`)))
		if b.exists(`[data-testid="caller"]`) || strings.Contains(b.text("main"), "partner") {
			b.fail("isolation", fmt.Errorf("another tenant's key %s is shown", q))
		}
	}
	b.open("/ui/callers?q="+noisy, `[data-testid="caller"]`)
	if !b.exists(`[data-testid="caller-no-policies"]`) || b.text(`[data-testid="caller-recent-allowed"]`) != "0" || b.text(`[data-testid="caller-recent-rate-limited"]`) != "0" {
		b.fail("isolation", fmt.Errorf("another tenant sees %q", b.text(`[data-testid="caller-recent-totals"]`)))
	}
	b.screenshot("26-caller-other-tenant")
}
