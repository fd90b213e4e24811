package e2e

// The audit log in a real browser against the real cmd/server: a tenant's
// owner creates a policy, raises one of its limits and revokes a consumer
// key in the dashboard, then opens the Audit log and sees who did each,
// with the limit's value before and after. The operator sees the same
// entries among every tenant's and filters by tenant; another tenant's
// owner sees none of them.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

func TestDashboardAuditLog(t *testing.T) {
	exe := requireBrowser(t)
	s := startServer(t, serverOpts{env: []string{
		"SLUICE_OPERATOR_EMAIL=" + uiOperatorEmail,
		"SLUICE_OPERATOR_PASSWORD=" + uiOperatorPassword,
	}})
	acme, other := createTenant(t, s, "auditco"), createTenant(t, s, "otherco")
	const ownerEmail, otherEmail, password = "auditco@example.com", "otherco@example.com", "correct horse battery staple"

	b := newBrowser(t, exe, s.base)
	b.acceptDialogs()
	b.signIn(ownerEmail, password)

	// A policy with a 5-per-minute anonymous tier and a pro tier.
	b.open("/ui/policies/new", `[data-testid="policy-form"]`)
	b.set(`[data-testid="policy-name"]`, "search")
	b.set(`[data-testid="policy-method"]`, "GET")
	b.set(`[data-testid="policy-path"]`, "/api/search")
	b.set(`#f-tier-0-name`, "anonymous")
	b.set(`#f-tier-0-limit-0-limit`, "5")
	b.set(`#f-tier-0-limit-0-period`, "60s")
	b.set(`#f-tier-1-name`, "pro")
	b.set(`#f-tier-1-limit-0-algorithm`, "sliding_window")
	b.set(`#f-tier-1-limit-0-limit`, "1000")
	b.set(`#f-tier-1-limit-0-period`, "1m")
	if st := b.submit(`[data-testid="policy-save"]`); st != 200 {
		b.fail("create policy", fmt.Errorf("status %d", st))
	}
	// Its anonymous limit raised from 5 to 12.
	b.open("/ui/policies", `[data-testid="policy-link"]`)
	b.submit(`[data-testid="policy-link"]`)
	b.do("policy page", chromedp.WaitVisible(chromedp.CSS(`#f-tier-0-limit-0-limit`)))
	b.set(`#f-tier-0-limit-0-limit`, "12")
	if st := b.submit(`[data-testid="policy-save"]`); st != 200 {
		b.fail("edit policy", fmt.Errorf("status %d", st))
	}
	// A key, then revoked.
	b.open("/ui/keys", `[data-testid="key-form"]`)
	b.set(`[data-testid="key-name"]`, "partner app")
	b.set(`[data-testid="key-tier"]`, "pro")
	if st := b.submit(`[data-testid="key-create"]`); st != 200 {
		b.fail("create key", fmt.Errorf("status %d", st))
	}
	secret := b.text(`[data-testid="key-secret"]`)
	b.submit(`[data-testid="key-row"] a`)
	b.do("key page", chromedp.WaitVisible(chromedp.CSS(`[data-testid="key-revoke"]`)))
	if st := b.submit(`[data-testid="key-revoke"]`); st != 200 {
		b.fail("revoke key", fmt.Errorf("status %d", st))
	}

	// The Audit log, from the navigation: newest first, who and what.
	b.submit(`[data-testid="nav-audit"]`)
	b.do("audit log", chromedp.WaitVisible(chromedp.CSS(`[data-testid="audit-list"]`)))
	rows := b.auditRows()
	want := []string{
		ownerEmail + " | revoked consumer key partner app",
		ownerEmail + " | created consumer key partner app",
		ownerEmail + " | updated policy search",
		ownerEmail + " | created policy search",
		"operator | created tenant auditco",
	}
	if len(rows) != len(want) {
		b.fail("audit rows", fmt.Errorf("%d rows, want %d:\n%s", len(rows), len(want), strings.Join(rows, "\n")))
	}
	for i, w := range want {
		if !strings.HasPrefix(rows[i], w) {
			b.fail("audit rows", fmt.Errorf("row %d is %q, want it to start %q", i, rows[i], w))
		}
	}
	if !strings.Contains(rows[2], "anonymous › limit: 5 → 12") || !strings.Contains(rows[0], "status: active → revoked") {
		b.fail("audit changes", fmt.Errorf("update %q, revocation %q", rows[2], rows[0]))
	}
	if body := b.text(`main`); strings.Contains(body, secret) || strings.Contains(body, acme.Key) {
		b.fail("audit log", fmt.Errorf("the page shows a secret"))
	}
	b.screenshot("audit-01-tenant")

	// Filtered to policies by the object filter.
	b.set(`[data-testid="audit-filter-type"]`, "policy")
	b.submit(`[data-testid="audit-filter-apply"]`)
	b.do("filtered", chromedp.WaitVisible(chromedp.CSS(`[data-testid="audit-filter-clear"]`)))
	if n := b.count(`[data-testid="audit-row"]`); n != 2 {
		b.fail("policy filter", fmt.Errorf("%d rows, want 2", n))
	}
	b.signOut()

	// Another tenant's owner sees its own tenant's creation only.
	b.signIn(otherEmail, password)
	b.open("/ui/audit", `[data-testid="audit-list"]`)
	if rows := b.auditRows(); len(rows) != 1 || !strings.HasPrefix(rows[0], "operator | created tenant otherco") {
		b.fail("other tenant's audit log", fmt.Errorf("rows:\n%s", strings.Join(rows, "\n")))
	}
	if body := b.text(`main`); strings.Contains(body, "search") || strings.Contains(body, "partner app") || strings.Contains(body, ownerEmail) {
		b.fail("other tenant's audit log", fmt.Errorf("it shows auditco's changes: %q", body))
	}
	b.signOut()

	// The operator sees every tenant's, then filters to one.
	b.signIn(uiOperatorEmail, uiOperatorPassword)
	b.submit(`[data-testid="nav-audit"]`)
	b.do("operator's audit log", chromedp.WaitVisible(chromedp.CSS(`[data-testid="audit-list"]`)))
	all := strings.Join(b.auditRows(), "\n")
	for _, w := range []string{"auditco | " + ownerEmail + " | updated policy search", "anonymous › limit: 5 → 12", "otherco | operator | created tenant otherco"} {
		if !strings.Contains(all, w) {
			b.fail("operator's audit log", fmt.Errorf("lacks %q:\n%s", w, all))
		}
	}
	b.screenshot("audit-02-operator")
	b.set(`[data-testid="audit-filter-tenant"]`, other.ID)
	b.submit(`[data-testid="audit-filter-apply"]`)
	b.do("tenant filter", chromedp.WaitVisible(chromedp.CSS(`[data-testid="audit-filter-clear"]`)))
	if rows := b.auditRows(); len(rows) != 1 || !strings.HasPrefix(rows[0], "otherco | operator | created tenant otherco") {
		b.fail("operator's tenant filter", fmt.Errorf("rows:\n%s", strings.Join(rows, "\n")))
	}
}

// auditRows reads the audit page's rows as a person reads them: the
// tenant (on the operator's page), who, what, and the changes, joined by
// " | ".
func (b *browser) auditRows() []string {
	b.t.Helper()
	ctx, cancel := b.timeout()
	defer cancel()
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('[data-testid="audit-row"]')).map(function (r) {
		var cell = function (id) { var c = r.querySelector('[data-testid="' + id + '"]'); return c ? c.innerText.replace(/\s+/g, ' ').trim() : null; };
		var changes = Array.from(r.querySelectorAll('[data-testid="audit-change"]')).map(function (c) { return c.innerText.replace(/\s+/g, ' ').trim(); });
		return [cell("audit-tenant"), cell("audit-actor"), cell("audit-what"), changes.join("; ")].filter(function (x) { return x !== null; }).join(" | ");
	})`))
	if err != nil {
		b.fail("read audit rows", err)
	}
	return rows
}
