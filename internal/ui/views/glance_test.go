package views

import (
	"strings"
	"testing"
	"time"
)

// A long identifier is shortened around an ellipsis, whole on hover and in
// its copy button; a short one is shown whole, without a button.
func TestIdentifiers(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		cut      bool
	}{
		{"203.0.113.66", "203.0.113.66", false},
		{"ck_AbC1", "ck_AbC1", false},
		{"ckey_KBpZ4MIoSYpkj7tyzeMt", "ckey_KBpZ4M…tyzeMt", true},
		{"2001:db8:1234:5678::/64", "2001:db8:12…8::/64", true},
	} {
		got, cut := shortIdent(tc.in)
		if cut != tc.cut || got != tc.want || len([]rune(got)) > identMax {
			t.Errorf("shortIdent(%q) = %q %v", tc.in, got, cut)
		}
	}
	off := []Offender{{TenantID: "ten_1", TenantName: "acme", Kind: "key", ID: "ckey_KBpZ4MIoSYpkj7tyzeMt", Label: "mobile app",
		DrillURL: "/ui/admin/tenants/ten_1/keys/ckey_KBpZ4MIoSYpkj7tyzeMt", Denied: 3, Allowed: 1, RateLimited: 3,
		FirstSeen: time.Date(2026, 11, 29, 11, 48, 0, 0, time.UTC), LastSeen: time.Date(2026, 11, 29, 11, 59, 0, 0, time.UTC)}}
	now := time.Date(2026, 11, 29, 12, 0, 30, 0, time.UTC)
	d := renderDOM(t, Abuse(operator, AbuseView{Rows: off, Now: now}))
	link := d.one("identity-link")
	if attr(link, "href") != off[0].DrillURL || !strings.Contains(text(link), "mobile app") || !strings.Contains(text(link), "ckey_KBpZ4M…tyzeMt") {
		t.Errorf("key link %q → %q", text(link), attr(link, "href"))
	}
	if got := attr(d.one("abuse-tenant-link"), "href"); got != "/ui/admin/tenants/ten_1" {
		t.Errorf("tenant link %q", got)
	}
	seen := d.one("seen")
	if got := text(seen); got != "12 min ago – now" {
		t.Errorf("seen %q", got)
	}
	if got := attr(seen, "title"); got != "2026-11-29 11:48 UTC – 2026-11-29 11:59 UTC" {
		t.Errorf("seen title %q", got)
	}
	if !strings.Contains(d.raw, `data-copy-value="ckey_KBpZ4MIoSYpkj7tyzeMt"`) {
		t.Error("no copy button with the whole key id")
	}
}

func TestFormatSpan(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		first, last time.Duration
		want        string
	}{
		{-time.Minute, 0, "now"},
		{-12 * time.Minute, -time.Minute, "12 min ago – now"},
		{-8 * time.Minute, -2 * time.Minute, "8 min ago – 2 min ago"},
		{-5 * time.Hour, -90 * time.Minute, "5 h ago – 1 h ago"},
		{-72 * time.Hour, -time.Hour, "3 days ago – 1 h ago"},
	} {
		if got := FormatSpan(now.Add(tc.first), now.Add(tc.last), now); got != tc.want {
			t.Errorf("%v–%v: %q, want %q", tc.first, tc.last, got, tc.want)
		}
	}
}

// The settings are one menu entry whose summary names the settings page
// shown; a member's menu has no owner pages.
func TestSettingsMenu(t *testing.T) {
	p := owner
	p.Nav = NavWebhooks
	d := renderDOM(t, Overview(p, OverviewView{}))
	toggle := d.one("nav-settings-toggle")
	if attr(toggle, "aria-current") != "page" || !strings.Contains(text(toggle), "Webhooks") {
		t.Errorf("settings summary %q current %q", text(toggle), attr(toggle, "aria-current"))
	}
	for _, id := range []string{"nav-members", "nav-service-keys", "nav-webhooks", "nav-account"} {
		d.one(id)
	}
	p.Nav = NavKeys
	d = renderDOM(t, Overview(p, OverviewView{}))
	if got := attr(d.one("nav-settings-toggle"), "aria-current"); got != "" {
		t.Errorf("settings marked current on the keys page: %q", got)
	}
}

// The operator's view of a key has its facts and no forms.
func TestKeyReadOnly(t *testing.T) {
	v := KeyView{Key: KeyRow{ID: "ckey_1", Name: "mobile app", Tier: "pro", Status: "active", URL: "/ui/keys/ckey_1"},
		Tiers: []string{"pro"}, ReadOnly: true, TenantName: "acme", TenantURL: "/ui/admin/tenants/ten_1"}
	d := renderDOM(t, KeyDetail(operator, v))
	d.one("key-read-only")
	if got := attr(d.one("key-tenant-link"), "href"); got != "/ui/admin/tenants/ten_1" {
		t.Errorf("tenant link %q", got)
	}
	d.none("key-edit-form")
	d.none("key-revoke")
	d.none("reset-form")
	d.none("overrides-form")
	v.ReadOnly = false
	v.Key.Tier = "gold"
	d = renderDOM(t, KeyDetail(owner, v))
	d.one("key-edit-form")
	d.one("key-tier-unlisted")
}
