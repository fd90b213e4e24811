package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// Times on dashboard pages read in the browser's time zone, with the UTC
// time on hover: a browser set to Tokyo sees a tenant's creation nine hours
// ahead of the UTC title.
func TestDashboardLocalTimes(t *testing.T) {
	exe := requireBrowser(t)
	s := startServer(t, serverOpts{env: []string{
		"SLUICE_OPERATOR_EMAIL=" + uiOperatorEmail,
		"SLUICE_OPERATOR_PASSWORD=" + uiOperatorPassword,
	}})
	createTenant(t, s, "tokyo")
	b := newBrowser(t, exe, s.base)
	tctx, cancel := b.timeout()
	_, err := chromedp.Call(tctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Asia/Tokyo"})
	cancel()
	if err != nil {
		t.Fatalf("set the browser's time zone: %v", err)
	}
	b.signIn(uiOperatorEmail, uiOperatorPassword)
	b.open("/ui/admin/tenants", `time[data-local]`)

	utc := b.attr(`time[data-local]`, "title")
	local := b.text(`time[data-local]`)
	iso := b.attr(`time[data-local]`, "datetime")
	at, err := time.Parse(time.RFC3339, iso)
	if err != nil {
		b.fail("time element", fmt.Errorf("datetime %q: %v", iso, err))
	}
	if want := at.UTC().Format("2006-01-02 15:04 UTC"); utc != want {
		b.fail("time element", fmt.Errorf("title %q, want the UTC time %q", utc, want))
	}
	tokyo := at.In(time.FixedZone("JST", 9*3600)).Format("2006-01-02 15:04")
	if !strings.HasPrefix(local, tokyo+" ") || strings.HasSuffix(local, "UTC") {
		b.fail("time element", fmt.Errorf("text %q, want Tokyo's %q and its zone", local, tokyo))
	}
	t.Logf("created: %q, title %q", local, utc)
}
