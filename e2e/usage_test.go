package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
)

// A tenant owner opens Usage from the navigation, sees the month's units
// per key and policy, and downloads the CSV: the browser saves a file under
// the suggested name whose bytes are the API's CSV for the month.
func TestDashboardUsageDownload(t *testing.T) {
	exe := requireBrowser(t)
	s := startServer(t, serverOpts{})
	tn := createTenant(t, s, "metered")
	createPolicy(t, s, tn, map[string]any{"name": "plan", "path": "/api/*",
		"tiers": map[string]any{"pro": map[string]any{"algorithm": "fixed_window", "limit": 100, "calendar": "month"}}})
	key := mustStatus(t, call(t, "POST", s.base+"/v1/keys", tn.Key, map[string]any{"name": "customer", "tier": "pro"}), 201)
	var units int64
	waitFor(t, 5*time.Second, "the policy on the server", func() bool {
		c, _ := check(t, s, tn, map[string]any{"api_key": key.str("key"), "path": "/api/x", "peek": true})
		return c.Policy == "plan"
	})
	for _, cost := range []int64{5, 7, 11} {
		if c, _ := check(t, s, tn, map[string]any{"api_key": key.str("key"), "path": "/api/x", "cost": cost}); c.Allowed {
			units += cost
		}
	}
	first := time.Now().UTC().Format("2006-01") + "-01"
	from, _ := time.Parse(time.DateOnly, first)
	to := from.AddDate(0, 1, -1).Format(time.DateOnly)
	waitFor(t, 10*time.Second, "the usage applied", func() bool {
		r := call(t, "GET", s.base+"/v1/usage?from="+first+"&to="+to, tn.Key, nil)
		return r.Status == 200 && fmt.Sprint(r.Body["total"]) == fmt.Sprint(units)
	})
	apiCSV := mustStatus(t, call(t, "GET", s.base+"/v1/usage?format=csv&from="+first+"&to="+to, tn.Key, nil), 200)

	b := newBrowser(t, exe, s.base)
	b.signIn("metered@example.com", "correct horse battery staple")
	b.open("/ui/", `nav a[href="/ui/usage"]`)
	b.submit(`nav a[href="/ui/usage"]`)
	b.do("usage page", chromedp.WaitVisible(chromedp.CSS(`[data-testid="usage-keys"]`)))
	if got := b.text(`[data-testid="usage-total"]`); got != fmt.Sprint(units) {
		b.fail("usage total", fmt.Errorf("%q, want %d", got, units))
	}
	if got := b.text(`[data-testid="usage-key-row"]`); !strings.Contains(got, "customer") || !strings.Contains(got, "plan") {
		b.fail("usage row", fmt.Errorf("%q", got))
	}
	b.screenshot("usage")

	dir := t.TempDir()
	begins := chromedp.Events(b.ctx, cdpbrowser.DownloadWillBegin)
	progress := chromedp.Events(b.ctx, cdpbrowser.DownloadProgress)
	b.do("download the CSV", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
			Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: dir, EventsEnabled: new(true),
		})
		return err
	}), chromedp.Click(chromedp.CSS(`[data-testid="usage-csv"]`)))
	var name string
	for ev, err := range begins {
		if err != nil {
			b.fail("download", err)
		}
		name = ev.SuggestedFilename
		break
	}
	if want := "usage-" + first + "-to-" + to + "-by-key.csv"; name != want {
		b.fail("download", fmt.Errorf("suggested name %q, want %q", name, want))
	}
	ctx, cancel := b.timeout()
	defer cancel()
	for ev, err := range progress {
		if err != nil || ctx.Err() != nil {
			b.fail("download", fmt.Errorf("%v %v", err, ctx.Err()))
		}
		if ev.State == cdpbrowser.DownloadProgressStateCanceled {
			b.fail("download", fmt.Errorf("canceled"))
		}
		if ev.State != cdpbrowser.DownloadProgressStateCompleted {
			continue
		}
		got, err := os.ReadFile(filepath.Join(dir, ev.GUID))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(apiCSV.Raw) || !strings.Contains(string(got), ","+key.str("id")+",customer,") {
			t.Fatalf("downloaded CSV:\n%s\nthe API's:\n%s", got, apiCSV.Raw)
		}
		break
	}
}
