package e2e

// A form reports every problem at once: the browser's own validation, which
// stops a form at its first bad input with one bubble, is off, so one submit
// brings back the server's errors for every input, each next to its input,
// with what was typed kept.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

func TestPolicyFormFourBadInputs(t *testing.T) {
	exe := requireBrowser(t)
	s := startServer(t, serverOpts{})
	createTenant(t, s, "forms")
	b := newBrowser(t, exe, s.base)
	b.signIn("forms@example.com", "correct horse battery staple")

	b.open("/ui/policies/new", `[data-testid="policy-form"]`)
	typed := map[string]string{ // input id → what a person types
		"#f-name":                  "heavy example!",
		"#f-path":                  "api/no-slash",
		"#f-tier-0-limit-0-limit":  "ten",
		"#f-tier-0-limit-0-period": "60s",
		"#f-tier-1-limit-0-limit":  "100",
		"#f-tier-1-limit-0-period": "5 parsecs",
	}
	for sel, v := range typed {
		b.do("type into "+sel, chromedp.SendKeys(chromedp.CSS(sel), v))
	}
	// The browser sees two of them as invalid (patterns): with its own
	// validation on, it would stop at the first and show one bubble.
	if b.boolJS(`document.querySelector('[data-testid="policy-form"]').checkValidity()`) {
		b.fail("four bad inputs", fmt.Errorf("the browser finds the form valid; the test no longer shows what it is about"))
	}

	// One submit. A form the browser kept to itself would never load a
	// page: the wait for one is short, so that failure is quick.
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`[data-testid="policy-save"]`)))
	cancel()
	if err != nil {
		b.fail("submit the form once", fmt.Errorf("no page came back (did the browser's validation stop the form?): %w", err))
	}
	if resp.Status != 400 {
		b.fail("submit the form once", fmt.Errorf("status %d, want 400", resp.Status))
	}
	b.screenshot("policy-form-four-errors")

	errors := map[string]string{ // input id → its error message's test id
		"#f-name":                  "error-name",
		"#f-path":                  "error-path",
		"#f-tier-0-limit-0-limit":  "error-tier.0.limit.0.limit",
		"#f-tier-1-limit-0-period": "error-tier.1.limit.0.period",
	}
	shown := b.text(`[data-testid="policy-form"]`)
	if n := strings.Count(b.outerHTML(`[data-testid="policy-form"]`), `data-testid="error-`); n != len(errors) {
		b.fail("four field errors", fmt.Errorf("%d field errors, want %d:\n%s", n, len(errors), shown))
	}
	for input, errID := range errors {
		sel := fmt.Sprintf(`[data-testid=%q]`, errID)
		if !b.exists(sel) || b.text(sel) == "" {
			b.fail("four field errors", fmt.Errorf("no error by %s:\n%s", input, shown))
		}
		if b.attr(input, "aria-invalid") != "true" || !strings.Contains(b.attr(input, "aria-describedby"), b.attr(sel, "id")) {
			b.fail("four field errors", fmt.Errorf("%s is not marked invalid and described by its error", input))
		}
	}
	if n := strings.Count(b.text(`[data-testid="form-errors"] ul`), "\n") + 1; n != len(errors) {
		b.fail("the summary", fmt.Errorf("%d problems listed, want %d: %q", n, len(errors), b.text(`[data-testid="form-errors"]`)))
	}
	// Everything typed is still there, good and bad.
	for sel, v := range typed {
		if got := b.value(sel); got != v {
			b.fail("typed values kept", fmt.Errorf("%s holds %q, want %q", sel, got, v))
		}
	}
}

// value is an input's current value.
func (b *browser) value(sel string) string {
	b.t.Helper()
	ctx, cancel := b.timeout()
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Value(chromedp.CSS(sel)))
	if err != nil {
		b.fail("read the value of "+sel, err)
	}
	return v
}

// outerHTML is an element's HTML.
func (b *browser) outerHTML(sel string) string {
	b.t.Helper()
	ctx, cancel := b.timeout()
	defer cancel()
	h, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS(sel)))
	if err != nil {
		b.fail("read "+sel, err)
	}
	return h
}
