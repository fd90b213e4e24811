package e2e

// The dashboard reads at a glance on a laptop: at 1280×800 and 1440×900,
// with the demo's data, no identifier (an IP, a key id or prefix) breaks
// across lines, the header is one row, and no page scrolls sideways. The
// operator's abuse report names and links each key and tenant; the key's
// page opens read-only for the operator.

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/demo"
)

// glanceJS measures the page: the identifiers whose text spans more than
// one line (the client rectangles of their text), whether the header's
// logo, top-level entries and sign-out share one row, and what is wider
// than its box (the page, or a table's scrolling wrapper).
const glanceJS = `(() => {
	const lines = el => {
		const r = document.createRange();
		r.selectNodeContents(el);
		const tops = new Set();
		for (const rect of r.getClientRects()) {
			if (rect.width > 0) tops.add(Math.round(rect.top));
		}
		return tops.size;
	};
	const broken = [];
	let idents = 0;
	for (const el of document.querySelectorAll('.ident-text')) {
		if (el.getClientRects().length === 0) continue;
		idents++;
		const n = lines(el);
		if (n > 1) broken.push(el.textContent.trim() + ' (' + n + ' lines)');
	}
	const mid = el => { const r = el.getBoundingClientRect(); return (r.top + r.bottom) / 2; };
	const items = [document.querySelector('.brand img'), ...document.querySelectorAll('.main-nav > ul > li'), document.querySelector('[data-testid="sign-out"]')];
	const mids = items.filter(Boolean).map(mid);
	const spread = Math.max(...mids) - Math.min(...mids);
	const wide = [];
	if (document.documentElement.scrollWidth > window.innerWidth) wide.push('page ' + document.documentElement.scrollWidth + ' > ' + window.innerWidth);
	for (const w of document.querySelectorAll('.table-wrap')) {
		if (w.scrollWidth > w.clientWidth + 1) wide.push((w.querySelector('[data-testid]') || w).getAttribute('data-testid') + ' ' + w.scrollWidth + ' > ' + w.clientWidth);
	}
	return JSON.stringify({idents, broken, headerRow: spread < 8, spread: Math.round(spread), wide});
})()`

type glance struct {
	Idents    int      `json:"idents"`
	Broken    []string `json:"broken"`
	HeaderRow bool     `json:"headerRow"`
	Spread    int      `json:"spread"`
	Wide      []string `json:"wide"`
}

func (b *browser) glance() glance {
	b.t.Helper()
	ctx, cancel := b.timeout()
	defer cancel()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[string](glanceJS))
	if err != nil {
		b.fail("measure the page", err)
	}
	var g glance
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		b.fail("measure the page", err)
	}
	return g
}

// walk opens each page at each laptop size and holds it to a glance.
func (b *browser) walk(pages map[string]string) {
	b.t.Helper()
	for _, size := range [][2]int64{{1280, 800}, {1440, 900}} {
		b.do("viewport", chromedp.EmulateViewport(size[0], size[1]))
		for path, wait := range pages {
			b.open(path, wait)
			g := b.glance()
			at := fmt.Sprintf("%s at %d×%d", path, size[0], size[1])
			if len(g.Broken) > 0 {
				b.fail(at, fmt.Errorf("identifiers on two lines: %s", strings.Join(g.Broken, "; ")))
			}
			if !g.HeaderRow {
				b.fail(at, fmt.Errorf("the header is more than one row (its entries' middles spread %d px)", g.Spread))
			}
			if len(g.Wide) > 0 {
				b.fail(at, fmt.Errorf("scrolls sideways: %s", strings.Join(g.Wide, "; ")))
			}
			b.t.Logf("%s: %d identifiers, each on one line", at, g.Idents)
		}
	}
	b.do("viewport", chromedp.EmulateViewport(1280, 900))
}

func TestDashboardAtAGlance(t *testing.T) {
	exe := requireBrowser(t)
	s := startServer(t, serverOpts{extra: []string{"--demo"}, env: []string{
		"SLUICE_OPERATOR_EMAIL=" + uiOperatorEmail,
		"SLUICE_OPERATOR_PASSWORD=" + uiOperatorPassword,
	}})
	m := waitOutput(t, s.proc, demoLineRe, 30*time.Second)
	owner, password := m[1], m[2]
	shots := os.Getenv("SLUICE_UPDATE_SCREENSHOTS") == "1"

	b := newBrowser(t, exe, s.base)
	b.signIn(uiOperatorEmail, uiOperatorPassword)
	// Counters reach the worker about a second after the demo's checks.
	keyLink := `[data-testid="abuse-row"][data-kind="key"] [data-testid="identity-link"]`
	deadline := time.Now().Add(30 * time.Second)
	for {
		b.open("/ui/admin/abuse", `main`)
		if b.exists(`[data-testid="abuse-row"][data-identity="`+demo.AbuserIP+`"]`) && b.exists(keyLink) {
			break
		}
		if time.Now().After(deadline) {
			b.fail("the demo's abuse report", fmt.Errorf("no row for %s and a named key", demo.AbuserIP))
		}
		time.Sleep(500 * time.Millisecond)
	}
	// A key reads as its name and links to the operator's view of it; the
	// tenant links to its page; "seen" reads relative to now.
	abuser := `[data-testid="abuse-row"][data-identity="` + demo.AbuserIP + `"]`
	if seen := b.text(abuser + ` [data-testid="seen"]`); !strings.Contains(seen, "ago") && !strings.Contains(seen, "now") {
		b.fail("the abuser's seen", fmt.Errorf("%q", seen))
	}
	if title := b.attr(abuser+` [data-testid="seen"]`, "title"); !strings.Contains(title, "UTC") {
		b.fail("the abuser's seen", fmt.Errorf("title %q has no exact times", title))
	}
	tenantURL := b.attr(abuser+` [data-testid="abuse-tenant-link"]`, "href")
	keyURL := b.attr(keyLink, "href")
	keyName := b.text(keyLink + ` .identity-name`)
	if !strings.HasPrefix(tenantURL, "/ui/admin/tenants/") || !strings.Contains(keyURL, "/keys/") || keyName == "" {
		b.fail("the abuse report's links", fmt.Errorf("tenant %q, key %q named %q", tenantURL, keyURL, keyName))
	}
	// A long key id is shortened, whole on hover, with a copy button.
	keyID := b.attr(`[data-testid="abuse-row"][data-kind="key"]:has([data-testid="identity-link"])`, "data-identity")
	if len(keyID) > 20 {
		sel := `[data-testid="abuse-row"][data-identity="` + keyID + `"]`
		if got := b.attr(sel+` .ident-text`, "title"); got != keyID {
			b.fail("a long key id", fmt.Errorf("title %q, want %q", got, keyID))
		}
		if got := b.attr(sel+` .copy-ident`, "data-copy-value"); got != keyID {
			b.fail("a long key id's copy button", fmt.Errorf("copies %q, want %q", got, keyID))
		}
	}
	b.do("viewport", chromedp.EmulateViewport(1280, 800))
	if shots {
		b.saveShot("../docs/img/abuse-report.png")
	}
	b.screenshot("glance-abuse")
	b.open(keyURL, `[data-testid="key-read-only"]`)
	if got := b.text(`[data-testid="key-title"]`); !strings.Contains(got, keyName) {
		b.fail("the operator's view of the key", fmt.Errorf("title %q", got))
	}
	if b.exists(`[data-testid="key-edit-form"]`) || b.exists(`[data-testid="key-revoke"]`) || b.exists(`[data-testid="reset-form"]`) {
		b.fail("the operator's view of the key", fmt.Errorf("it has forms"))
	}
	b.walk(map[string]string{
		"/ui/admin/tenants": `[data-testid="tenant-list"]`,
		"/ui/admin/abuse":   `[data-testid="abuse-list"]`,
		"/ui/admin/blocks":  `[data-testid="block-list"]`,
		"/ui/admin/audit":   `main`,
		"/ui/account":       `main`,
		tenantURL:           `[data-testid="tenant-id"]`,
		keyURL:              `[data-testid="key-read-only"]`,
	})
	// The operator inside the tenant's dashboard has the longest header:
	// the tenant's menu and a button back to the operator's pages.
	b.open(tenantURL, `[data-testid="tenant-open"]`)
	b.submit(`[data-testid="tenant-open"]`)
	b.walk(map[string]string{"/ui/keys": `[data-testid="leave-tenant"]`, "/ui/webhooks": `[data-testid="leave-tenant"]`})
	b.submit(`[data-testid="leave-tenant"]`)
	b.signOut()

	b.signIn(owner, password)
	ownerKey := strings.TrimPrefix(keyURL[strings.Index(keyURL, "/keys/"):], "/keys/")
	b.open("/ui/keys/"+ownerKey, `[data-testid="key-edit-form"]`)
	// The tier field offers the tiers the policies define.
	if n := b.count(`#key-tiers option`); n == 0 {
		b.fail("the key's tier field", fmt.Errorf("no tiers offered"))
	}
	if shots {
		b.saveShot("../docs/img/key.png")
	}
	b.screenshot("glance-key")
	// Webhooks live under the settings menu, which shows the page open.
	b.open("/ui/webhooks", `[data-testid="webhook-form"]`)
	if got := b.text(`[data-testid="nav-settings-toggle"]`); !strings.Contains(got, "Webhooks") {
		b.fail("the settings menu on the webhooks page", fmt.Errorf("it reads %q", got))
	}
	// The event checkboxes line up with the URL field above them.
	if !b.boolJS(`Math.abs(document.querySelector('[data-testid="webhook-events"] input[type=checkbox]').getBoundingClientRect().left - document.querySelector('[data-testid="webhook-url"]').getBoundingClientRect().left) < 2`) {
		b.fail("the webhook form", fmt.Errorf("the event checkboxes do not start where the URL field does"))
	}
	b.do("open the settings menu", chromedp.Click(chromedp.CSS(`[data-testid="nav-settings-toggle"]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid="nav-members"]`)))
	if shots {
		b.do("close the settings menu", chromedp.Click(chromedp.CSS(`h1`)))
		b.saveShot("../docs/img/webhooks.png")
	}
	b.screenshot("glance-webhooks")
	b.walk(map[string]string{
		"/ui/":                           `main`,
		"/ui/policies":                   `main`,
		"/ui/keys":                       `[data-testid="key-list"]`,
		"/ui/keys/" + ownerKey:           `[data-testid="key-edit-form"]`,
		"/ui/customers":                  `[data-testid="customer-form"]`,
		"/ui/analytics":                  `main`,
		"/ui/callers?q=" + demo.AbuserIP: `main`,
		"/ui/usage":                      `main`,
		"/ui/audit":                      `main`,
		"/ui/webhooks":                   `[data-testid="webhook-form"]`,
		"/ui/members":                    `main`,
		"/ui/service-keys":               `main`,
		"/ui/account":                    `main`,
	})
}
