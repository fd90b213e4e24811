package views

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"
	"golang.org/x/net/html"
)

// dom renders a component and parses it as a browser would.
type dom struct {
	t    *testing.T
	root *html.Node
	raw  string
}

func renderDOM(t *testing.T, c templ.Component) dom {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	root, err := html.Parse(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	return dom{t: t, root: root, raw: buf.String()}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// all returns the elements matching pred, in document order.
func (d dom) all(pred func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && pred(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(d.root)
	return out
}

func (d dom) byTestID(id string) []*html.Node {
	return d.all(func(n *html.Node) bool { return attr(n, "data-testid") == id })
}

func (d dom) one(id string) *html.Node {
	d.t.Helper()
	ns := d.byTestID(id)
	if len(ns) != 1 {
		d.t.Fatalf("%d elements with data-testid=%q, want 1", len(ns), id)
	}
	return ns[0]
}

func (d dom) none(id string) {
	d.t.Helper()
	if ns := d.byTestID(id); len(ns) != 0 {
		d.t.Fatalf("unexpected data-testid=%q", id)
	}
}

func (d dom) byID(id string) *html.Node {
	d.t.Helper()
	ns := d.all(func(n *html.Node) bool { return attr(n, "id") == id })
	if len(ns) != 1 {
		d.t.Fatalf("%d elements with id=%q, want 1", len(ns), id)
	}
	return ns[0]
}

func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

var (
	owner    = Page{Title: "t", CSRF: "tok", User: &UserInfo{Email: "o@a.test", Role: "owner", TenantName: "acme", Owner: true}, Assets: Assets{CSS: "/c.css", JS: "/a.js", Logo: "/l.svg", Favicon: "/f.svg"}}
	operator = Page{Title: "t", CSRF: "tok", User: &UserInfo{Email: "op@x.test", Role: "operator", Operator: true}}
	t0       = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

// Every input has a label that names it, and every form posts its token.
func checkAccessible(t *testing.T, d dom) {
	t.Helper()
	labels := map[string]bool{}
	for _, l := range d.all(func(n *html.Node) bool { return n.Data == "label" }) {
		if f := attr(l, "for"); f != "" {
			labels[f] = true
		}
	}
	for _, in := range d.all(func(n *html.Node) bool {
		return (n.Data == "input" && attr(n, "type") != "hidden") || n.Data == "select" || n.Data == "textarea"
	}) {
		if attr(in, "class") == "default-submit" {
			continue
		}
		id := attr(in, "id")
		if id == "" || !labels[id] {
			if in.Parent == nil || in.Parent.Data != "label" {
				t.Errorf("<%s name=%q> has no label", in.Data, attr(in, "name"))
			}
		}
	}
	// The browser's own validation would stop a form at its first bad
	// input with one bubble, and the page's errors, every input's at once,
	// would never show: a form with constrained inputs opts out of it.
	for _, f := range d.all(func(n *html.Node) bool { return n.Data == "form" }) {
		constrained := (dom{root: f}).all(func(n *html.Node) bool {
			return (n.Data == "input" || n.Data == "textarea" || n.Data == "select") && (hasAttr(n, "required") || hasAttr(n, "pattern") ||
				hasAttr(n, "min") || hasAttr(n, "max") || hasAttr(n, "minlength") || hasAttr(n, "maxlength") ||
				attr(n, "type") == "email" || attr(n, "type") == "url" || attr(n, "type") == "number" || strings.HasPrefix(attr(n, "type"), "date"))
		})
		if len(constrained) > 0 && !hasAttr(f, "novalidate") {
			t.Errorf("form to %s has constrained inputs (%s) but no novalidate", attr(f, "action"), attr(constrained[0], "name"))
		}
	}
	// An input marked invalid points at its error message.
	for _, in := range d.all(func(n *html.Node) bool { return attr(n, "aria-invalid") == "true" }) {
		found := false
		for _, id := range strings.Fields(attr(in, "aria-describedby")) {
			for _, e := range d.all(func(n *html.Node) bool { return attr(n, "id") == id }) {
				found = found || (strings.Contains(attr(e, "class"), "error") && strings.TrimSpace(text(e)) != "")
			}
		}
		if !found {
			t.Errorf("<%s name=%q> is aria-invalid but describedby %q names no error message", in.Data, attr(in, "name"), attr(in, "aria-describedby"))
		}
	}
	for _, f := range d.all(func(n *html.Node) bool { return n.Data == "form" && attr(n, "method") == "post" }) {
		found := false
		for _, in := range (dom{root: f}).all(func(n *html.Node) bool { return n.Data == "input" && attr(n, "name") == "_csrf" }) {
			found = found || attr(in, "value") != ""
		}
		if !found {
			t.Errorf("form to %s has no _csrf token", attr(f, "action"))
		}
	}
}

func TestLayoutNavigation(t *testing.T) {
	d := renderDOM(t, Overview(owner, OverviewView{}))
	d.one("nav-policies")
	d.one("nav-members")
	d.none("nav-tenants")
	if got := text(d.one("signed-in-as")); !strings.Contains(got, "o@a.test") || !strings.Contains(got, "acme") {
		t.Errorf("header: %q", got)
	}
	d.one("sign-out")

	op := operator
	op.Nav = NavTenants
	d = renderDOM(t, Tenants(op, TenantsView{}))
	d.one("nav-tenants")
	d.none("nav-policies")
	if attr(d.one("nav-tenants"), "aria-current") != "page" {
		t.Error("the current page is not marked")
	}

	member := owner
	member.User = &UserInfo{Email: "m@a.test", Role: "member"}
	d = renderDOM(t, Overview(member, OverviewView{}))
	d.none("nav-members")

	// Signed out: no navigation.
	d = renderDOM(t, Login(Page{Title: "Sign in"}, LoginView{CSRF: "x", Error: "Wrong email or password."}))
	d.none("nav-overview")
	d.none("sign-out")
	if got := text(d.one("login-error")); got != "Wrong email or password." {
		t.Errorf("login error %q", got)
	}
	checkAccessible(t, d)
}

func TestOverviewEmptyStates(t *testing.T) {
	d := renderDOM(t, Overview(owner, OverviewView{Chart: NewChart("c", nil, time.Minute)}))
	d.one("empty-policies")
	d.one("chart-empty")
	d.none("empty-traffic")

	d = renderDOM(t, Overview(owner, OverviewView{PolicyCount: 1, Chart: NewChart("c", []ChartPoint{{Start: t0}}, time.Minute)}))
	d.none("empty-policies")
	d.one("empty-traffic")

	pts := []ChartPoint{{Start: t0, Allowed: 10}, {Start: t0.Add(time.Minute), Allowed: 2, Denied: 7}}
	d = renderDOM(t, Overview(owner, OverviewView{
		PolicyCount: 1, Chart: NewChart("c", pts, time.Minute), Totals: Totals{Allowed: 12, Denied: 7},
		TopPolicies:   []PolicyStat{{Name: "heavy", URL: "/ui/policies/pol_1", Denied: 7, Allowed: 12}},
		TopIdentities: []Offender{{Kind: "ip", ID: "203.0.113.7", Denied: 7, Ratio: 0.7, DrillURL: "/ui/analytics/identity?kind=ip&id=203.0.113.7"}},
	}))
	d.none("empty-traffic")
	if got := text(d.one("stat-denied")); got != "7" {
		t.Errorf("denied stat %q", got)
	}
	if got := text(d.one("top-policies")); !strings.Contains(got, "heavy") || !strings.Contains(got, "36.8%") {
		t.Errorf("top policies %q", got)
	}
	if got := attr(d.one("identity-link"), "href"); got != "/ui/analytics/identity?kind=ip&id=203.0.113.7" {
		t.Errorf("drill link %q", got)
	}
}

func TestChart(t *testing.T) {
	pts := []ChartPoint{{Start: t0, Allowed: 30}, {Start: t0.Add(time.Minute)}, {Start: t0.Add(2 * time.Minute), Allowed: 1, Denied: 9}}
	c := NewChart("Allowed and denied", pts, time.Minute)
	if c.Totals != (Totals{Allowed: 31, Denied: 9}) || c.Peak != 30 {
		t.Fatalf("totals %+v peak %d", c.Totals, c.Peak)
	}
	if c.YTicks[4].Label != "40" || c.YTicks[0].Label != "0" {
		t.Errorf("axis %v", c.YTicks)
	}
	d := renderDOM(t, ChartView(c))
	chart := d.one("chart")
	if attr(chart, "data-allowed") != "31" || attr(chart, "data-denied") != "9" {
		t.Errorf("chart totals %q %q", attr(chart, "data-allowed"), attr(chart, "data-denied"))
	}
	bars := d.byTestID("chart-bar")
	if len(bars) != 3 || attr(bars[2], "data-denied") != "9" {
		t.Fatalf("%d bars", len(bars))
	}
	if got := text(bars[2]); got != "12:02: 1 allowed, 9 denied" {
		t.Errorf("bar title %q", got)
	}
	svg := d.all(func(n *html.Node) bool { return n.Data == "svg" && attr(n, "role") == "img" })
	if len(svg) != 1 || !strings.Contains(attr(svg[0], "aria-label"), "31 allowed and 9 denied") {
		t.Error("the chart has no accessible summary")
	}
	// The data table lists the steps with decisions only.
	rows := d.all(func(n *html.Node) bool { return n.Data == "tr" })
	if len(rows) != 3 { // header + 2 steps
		t.Errorf("%d table rows", len(rows))
	}
	for _, tc := range []struct{ in, want int64 }{{0, 4}, {4, 4}, {5, 8}, {9, 12}, {30, 40}, {101, 120}, {999, 1200}, {12345, 20000}} {
		if got := niceCeil(tc.in); got != tc.want {
			t.Errorf("niceCeil(%d) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestPolicyFormShowsErrorsByItsInputs(t *testing.T) {
	f := PolicyForm{
		Name: "x", Path: "/x", Action: "/ui/policies", Methods: []string{"GET"}, Algorithms: []string{"token_bucket", "sliding_window"},
		Tiers: []TierRow{
			{Name: "anonymous", Limits: []LimitRow{{Algorithm: "token_bucket", Limit: "5", Period: "60s"}}},
			{Name: "pro", Limits: []LimitRow{{Name: "a", Algorithm: "sliding_window", Limit: "1", Period: "1m"}, {Name: "b", Algorithm: "token_bucket", Limit: "2", Period: "soon"}}},
		},
		Errors: map[string]string{"tier.1.limit.1.period": `must be a duration such as "60s" or "1m"`, "path": `must start with "/"`},
	}
	d := renderDOM(t, PolicyEdit(owner, f))
	checkAccessible(t, d)
	if got := len(d.byTestID("tier-card")); got != 2 {
		t.Fatalf("%d tier cards", got)
	}
	if got := len(d.byTestID("limit-row")); got != 3 {
		t.Fatalf("%d limit rows", got)
	}
	msg := d.one("error-tier.1.limit.1.period")
	if !strings.Contains(text(msg), "duration") {
		t.Errorf("period error %q", text(msg))
	}
	in := d.byID("f-tier-1-limit-1-period")
	if attr(in, "aria-invalid") != "true" || !strings.Contains(attr(in, "aria-describedby"), attr(msg, "id")) || attr(in, "value") != "soon" {
		t.Errorf("the invalid input: %v", in.Attr)
	}
	// The error sits in the same field wrapper as its input.
	if in.Parent != msg.Parent {
		t.Error("the message is not next to its input")
	}
	summary := text(d.one("form-errors"))
	// The summary names the tier and the limit by what was typed.
	if !strings.Contains(summary, "Path") || !strings.Contains(summary, "pro › b › period") {
		t.Errorf("summary %q", summary)
	}
	// Path comes before the tier in the summary, as on the page.
	if strings.Index(summary, "Path") > strings.Index(summary, "pro › b") {
		t.Errorf("summary order %q", summary)
	}
	// The browser checks limits and periods before sending, except for the
	// buttons that only add or remove rows.
	if p := attr(in, "pattern"); p == "" || attr(d.byID("f-tier-1-limit-1-limit"), "pattern") == "" {
		t.Errorf("period pattern %q; limit input %v", p, d.byID("f-tier-1-limit-1-limit").Attr)
	}
	if !hasAttr(d.one("add-tier"), "formnovalidate") {
		t.Error("adding a tier would be blocked by the browser's checks")
	}
	d.none("policy-delete")

	f.ID, f.DeleteURL, f.Errors = "pol_1", "/ui/policies/pol_1/delete", nil
	d = renderDOM(t, PolicyEdit(owner, f))
	d.one("policy-delete")
	d.none("form-errors")
	if attr(d.byID("f-shadow"), "checked") != "" {
		t.Error("shadow is not set")
	}
}

func TestPoliciesAndPathTester(t *testing.T) {
	d := renderDOM(t, Policies(owner, PoliciesView{Test: PathTest{Methods: []string{"GET"}}}))
	d.one("empty-policies")
	d.none("path-test-result")
	checkAccessible(t, d)

	d = renderDOM(t, Policies(owner, PoliciesView{
		Policies: []PolicyRow{{ID: "pol_1", Name: "heavy", Method: "GET", Path: "/api/x", Query: "mode=heavy", Shadow: true, URL: "/ui/policies/pol_1", Tiers: []TierSummary{{Name: "anonymous", Limits: "10 per 60s"}}}},
		Test:     PathTest{Methods: []string{"GET"}, Result: &PathTestResult{Matched: true, Policy: "heavy", PolicyURL: "/ui/policies/pol_1", Tier: "anonymous", Reason: "ok", Allowed: true, Limit: 10, Remaining: 9, Reset: "6 s"}},
	}))
	d.none("empty-policies")
	if got := text(d.one("policy-row")); !strings.Contains(got, "heavy") || !strings.Contains(got, "anonymous 10 per 60s") || !strings.Contains(got, "shadow") {
		t.Errorf("row %q", got)
	}
	r := d.one("path-test-result")
	if attr(r, "data-policy") != "heavy" || attr(r, "data-tier") != "anonymous" || !strings.Contains(text(r), "9 of 10") {
		t.Errorf("result %q", text(r))
	}
}

func TestKeysPage(t *testing.T) {
	d := renderDOM(t, Keys(owner, KeysView{}))
	d.one("empty-keys")
	d.none("key-created")
	checkAccessible(t, d)

	exp := t0.Add(24 * time.Hour)
	d = renderDOM(t, Keys(owner, KeysView{
		Total:   2,
		Keys:    []KeyRow{{ID: "ckey_1", Name: "app", Prefix: "ck_AbCd1", Tier: "pro", Status: "active", ExpiresAt: &exp, LastUsed: &t0, URL: "/ui/keys/ckey_1"}, {ID: "ckey_2", Name: "old", Prefix: "ck_zzzz", Tier: "free", Status: "revoked", URL: "/ui/keys/ckey_2"}},
		Created: &CreatedKey{Name: "app", Tier: "pro", Secret: "ck_secret", URL: "/ui/keys/ckey_1"},
		Create:  KeyForm{Errors: map[string]string{"tier": "required"}},
	}))
	if got := text(d.one("key-secret")); got != "ck_secret" {
		t.Errorf("secret %q", got)
	}
	rows := d.byTestID("key-row")
	if len(rows) != 2 || !strings.Contains(text(rows[0]), "2026-03-01 12:00 UTC") || !strings.Contains(text(rows[1]), "—") {
		t.Errorf("rows %d", len(rows))
	}
	if got := text(d.one("error-tier")); got != "required" {
		t.Errorf("tier error %q", got)
	}
	// The copy button stays hidden until the script shows it.
	btn := d.all(func(n *html.Node) bool { return attr(n, "data-copy") == "new-key-secret" })
	if len(btn) != 1 || !hasAttr(btn[0], "hidden") {
		t.Error("copy button")
	}
	d.none("revoked-hidden")
	d.none("key-page-range")
}

// A page of a long list says where it is and links to its neighbours.
func TestKeysPagePager(t *testing.T) {
	d := renderDOM(t, Keys(owner, KeysView{
		Total: 10000, Filter: "cust", Tier: "pro",
		TierChoices: []Choice{{Value: "", Label: "Any tier"}, {Value: "pro", Label: "pro", Current: true}},
		Keys:        []KeyRow{{ID: "ckey_1", Name: "customer 1", Prefix: "ck_AbCd1", Tier: "pro", Status: "active", URL: "/ui/keys/ckey_1"}},
		Page:        KeysPage{From: 51, To: 100, Of: 10000, PrevURL: "/ui/keys?q=cust&tier=pro", NextURL: "/ui/keys?page=3&q=cust&tier=pro"},
	}))
	checkAccessible(t, d)
	if got := strings.Join(strings.Fields(text(d.one("key-page-range"))), " "); got != "Showing 51–100 of 10 000" {
		t.Errorf("range %q", got)
	}
	if got := attr(d.one("keys-prev"), "href"); got != "/ui/keys?q=cust&tier=pro" {
		t.Errorf("previous %q", got)
	}
	if got := attr(d.one("keys-next"), "href"); got != "/ui/keys?page=3&q=cust&tier=pro" {
		t.Errorf("next %q", got)
	}
	d.one("key-tier-filter")
	// The first page has no previous link, the last no next one.
	d = renderDOM(t, Keys(owner, KeysView{Total: 2, Keys: []KeyRow{{ID: "ckey_1", Name: "a", URL: "/ui/keys/ckey_1"}}, Page: KeysPage{From: 1, To: 1, Of: 1}}))
	d.none("keys-prev")
	d.none("keys-next")
}

// Revoked keys left out of the list are counted, with a way to show them:
// a tenant whose keys are all revoked does not read "no keys".
func TestKeysPageSaysRevokedKeysAreHidden(t *testing.T) {
	d := renderDOM(t, Keys(owner, KeysView{Total: 1, HiddenRevoked: 1}))
	checkAccessible(t, d)
	d.none("empty-keys")
	if got := strings.Join(strings.Fields(text(d.one("keys-only-revoked"))), " "); got != "No active keys — 1 revoked key hidden. Show them" {
		t.Errorf("message %q", got)
	}
	if got := attr(d.one("show-revoked"), "href"); got != "/ui/keys?revoked=1" {
		t.Errorf("show link %q", got)
	}
	d = renderDOM(t, Keys(owner, KeysView{Total: 3, Filter: "old", HiddenRevoked: 2}))
	if got := strings.Join(strings.Fields(text(d.one("keys-only-revoked"))), " "); got != "No active key matches this filter — 2 revoked keys hidden. Show them" {
		t.Errorf("filtered message %q", got)
	}
	if got := attr(d.one("show-revoked"), "href"); got != "/ui/keys?q=old&revoked=1" {
		t.Errorf("filtered show link %q", got)
	}
	d = renderDOM(t, Keys(owner, KeysView{Total: 2, HiddenRevoked: 1,
		Keys: []KeyRow{{ID: "ckey_1", Name: "app", Prefix: "ck_AbCd1", Tier: "pro", Status: "active", URL: "/ui/keys/ckey_1"}}}))
	if got := strings.Join(strings.Fields(text(d.one("revoked-hidden"))), " "); got != "1 revoked key hidden. Show them" {
		t.Errorf("hint %q", got)
	}
}

func hasAttr(n *html.Node, key string) bool {
	for _, a := range n.Attr {
		if a.Key == key {
			return true
		}
	}
	return false
}

func TestKeyDetail(t *testing.T) {
	v := KeyView{
		Key:       KeyRow{ID: "ckey_1", Name: "app", Prefix: "ck_AbCd1", Tier: "pro", Status: "active", URL: "/ui/keys/ckey_1"},
		Overrides: OverridesForm{Policies: []string{"heavy"}, Algorithms: []string{"token_bucket"}, Rows: []OverrideRow{{Policy: "heavy", LimitRow: LimitRow{Algorithm: "token_bucket", Limit: "5", Period: "1m"}}}, Errors: map[string]string{"override.0.period": "bad"}},
		Reset:     ResetForm{Action: "/ui/keys/ckey_1/reset", Kind: "key", ID: "ckey_1", Policies: []string{"heavy"}},
	}
	d := renderDOM(t, KeyDetail(owner, v))
	checkAccessible(t, d)
	d.one("key-edit-form")
	d.one("overrides-form")
	d.one("reset-form")
	d.one("key-revoke")
	if got := text(d.one("error-override.0.period")); got != "bad" {
		t.Errorf("override error %q", got)
	}
	v.Key.Status = "revoked"
	d = renderDOM(t, KeyDetail(owner, v))
	d.none("key-revoke")
	d.none("key-edit-form")
	if got := text(d.one("key-status")); got != "revoked" {
		t.Errorf("status %q", got)
	}
}

func TestAnalyticsAndAbuse(t *testing.T) {
	off := []Offender{{TenantID: "ten_1", TenantName: "acme", Kind: "ip", ID: "203.0.113.7", Allowed: 10, Denied: 30, Ratio: 0.75, FirstSeen: t0, LastSeen: t0.Add(time.Hour), DrillURL: "/ui/analytics/identity?kind=ip&id=203.0.113.7"}}
	byReason := []ReasonOffender{
		{Offender: off[0], Reason: "rate_limited", Count: 30, Checks: 40},
		{Offender: Offender{Kind: "key", ID: "key_1", Label: "old app", Denied: 1, InvalidKey: 1}, Reason: "invalid_key", Count: 1, Checks: 1},
	}
	d := renderDOM(t, Analytics(owner, AnalyticsView{Chart: NewChart("c", nil, time.Minute), Offenders: byReason}))
	checkAccessible(t, d)
	rows := d.byTestID("offender-row")
	if len(rows) != 2 {
		t.Fatalf("%d offender rows", len(rows))
	}
	row := rows[0]
	if attr(row, "data-identity") != "203.0.113.7" || attr(row, "data-reason") != "rate_limited" || !strings.Contains(text(row), "Rate limited") ||
		!strings.Contains(text(row), "75.0%") || !strings.Contains(text(row), "30 of 40 checks") || !strings.Contains(text(row), "2026-03-01 13:00 UTC") {
		t.Errorf("offender %q", text(row))
	}
	// A key's one invalid check says so: 1 of 1 checks, not just "100%".
	if got := text(rows[1]); !strings.Contains(got, "Invalid key") || !strings.Contains(got, "1 of 1 checks") || !strings.Contains(got, "old app") {
		t.Errorf("invalid key row %q", got)
	}
	// A caller denied by a concurrency limit is listed under that reason.
	slots := []ReasonOffender{{Offender: Offender{Kind: "ip", ID: "192.0.2.9", Denied: 4}, Reason: "concurrency_limited", Count: 4, Checks: 14}}
	d = renderDOM(t, Analytics(owner, AnalyticsView{Chart: NewChart("c", nil, time.Minute), Offenders: slots}))
	if got := text(d.one("offender-reason")); got != "Concurrency limited" {
		t.Errorf("concurrency reason %q", got)
	}
	d = renderDOM(t, Analytics(owner, AnalyticsView{Chart: NewChart("c", nil, time.Minute)}))
	d.one("offenders-empty")

	off[0].DrillURL = ""
	off[0].RateLimited, off[0].InvalidKey, off[0].Blocked = 25, 1, 4
	d = renderDOM(t, Abuse(operator, AbuseView{Rows: off, Expiries: []Choice{{Value: "24h", Label: "1 day", Current: true}}}))
	checkAccessible(t, d)
	r := d.one("abuse-row")
	if attr(r, "data-tenant-id") != "ten_1" || !strings.Contains(text(r), "acme") {
		t.Errorf("abuse row %q", text(r))
	}
	// The operator sees the denials by reason too.
	for id, want := range map[string]string{"abuse-rate-limited": "25", "abuse-invalid-key": "1", "abuse-blocked": "4"} {
		if got := strings.TrimSpace(text(d.one(id))); got != want {
			t.Errorf("%s: %q, want %q", id, got, want)
		}
	}
	d.one("block-form")
	if got := attr(d.one("block-reason"), "value"); got != "abuse report: 30 denied" {
		t.Errorf("default reason %q", got)
	}
	off[0].BlockedUntil = "until never"
	d = renderDOM(t, Abuse(operator, AbuseView{Rows: off}))
	d.none("block-form")
	d.one("already-blocked")
}

func TestOperatorPages(t *testing.T) {
	d := renderDOM(t, Tenants(operator, TenantsView{}))
	d.one("empty-tenants")
	checkAccessible(t, d)
	d = renderDOM(t, Tenants(operator, TenantsView{
		Tenants: []TenantRow{{ID: "ten_1", Name: "acme", Policies: 2, Keys: 3, Users: 1, Allowed: 5, Denied: 1}},
		Created: &CreatedTenant{Name: "acme", ServiceKey: "sk_x", OwnerEmail: "o@a.test"},
		Form:    TenantForm{Errors: map[string]string{"owner_password": "must be at least 12 characters"}},
	}))
	if got := text(d.one("service-key")); got != "sk_x" {
		t.Errorf("service key %q", got)
	}
	if got := text(d.one("tenant-row")); !strings.Contains(got, "acme") || !strings.Contains(got, "6") {
		t.Errorf("tenant row %q", got)
	}
	d.one("error-owner_password")

	d = renderDOM(t, Blocks(operator, BlocksView{Form: BlockForm{Tenants: []Choice{{Value: "ten_1", Label: "acme"}}}}))
	d.one("empty-blocks")
	d.one("manual-block-form")
	checkAccessible(t, d)
	d = renderDOM(t, Blocks(operator, BlocksView{Blocks: []BlockRow{{ID: "blk_1", TenantName: "acme", Kind: "ip", IdentityID: "203.0.113.7", Reason: "abuse", CreatedAt: t0, Active: true}}}))
	if got := text(d.one("block-row")); !strings.Contains(got, "unblocked by hand") {
		t.Errorf("block row %q", got)
	}
	d.one("unblock")
}

func TestMembersAndErrors(t *testing.T) {
	d := renderDOM(t, Members(owner, MembersView{Invited: "m@a.test"}))
	checkAccessible(t, d)
	if got := text(d.one("member-invited")); !strings.Contains(got, "m@a.test") {
		t.Errorf("invited %q", got)
	}
	d = renderDOM(t, ErrorPage(owner, ErrorView{Status: 404, Title: "Page not found", Message: "No."}))
	if got := text(d.one("error-page")); !strings.Contains(got, "Page not found") {
		t.Errorf("error page %q", got)
	}
	p := owner
	p.Flash = "Key revoked."
	d = renderDOM(t, Members(p, MembersView{}))
	if got := text(d.one("flash")); got != "Key revoked." {
		t.Errorf("flash %q", got)
	}
}

func TestFormatting(t *testing.T) {
	if got := FormatCount(1234567); got != "1\u202f234\u202f567" {
		t.Errorf("FormatCount %q", got)
	}
	if got := FormatCount(-1000); got != "-1\u202f000" {
		t.Errorf("FormatCount %q", got)
	}
	if got := describeField("tier.0.limit.11.period"); got != "Tier 1, limit 12, period" {
		t.Errorf("describeField %q", got)
	}
	if got := sortedKeys(map[string]string{"tier.10.name": "", "tier.9.name": "", "path": "", "name": ""}); strings.Join(got, " ") != "name path tier.9.name tier.10.name" {
		t.Errorf("sortedKeys %v", got)
	}
}

// The chart stacks each outcome as its own series, names each in the
// legend with its total, and splits the data table by reason.
func TestChartSeriesByOutcome(t *testing.T) {
	pts := []ChartPoint{
		{Start: t0, Allowed: 20, Denied: 6, RateLimited: 3, InvalidKey: 2, Blocked: 1},
		{Start: t0.Add(time.Minute), Allowed: 4},
	}
	c := NewChart("Decisions", pts, time.Minute)
	d := renderDOM(t, ChartView(c))
	chart := d.one("chart")
	for name, want := range map[string]string{"data-allowed": "24", "data-denied": "6", "data-rate-limited": "3", "data-invalid-key": "2", "data-blocked": "1"} {
		if got := attr(chart, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	for id, want := range map[string]string{"chart-allowed": "24", "chart-rate-limited": "3", "chart-invalid-key": "2", "chart-blocked": "1", "chart-denied": "6"} {
		if got := text(d.one(id)); got != want {
			t.Errorf("legend %s = %q, want %q", id, got, want)
		}
	}
	d.none("legend-no-reason") // every denial has a reason
	bars := d.byTestID("chart-bar")
	classes := map[string]bool{}
	for _, r := range d.all(func(n *html.Node) bool { return n.Data == "rect" && strings.HasPrefix(attr(n, "class"), "bar-") }) {
		classes[attr(r, "class")] = true
	}
	for _, want := range []string{"bar-allowed", "bar-rate-limited", "bar-invalid-key", "bar-blocked"} {
		if !classes[want] {
			t.Errorf("no %s segment among %v", want, classes)
		}
	}
	if got := text(bars[0]); got != "12:00: 20 allowed, 6 denied (3 rate limited, 2 invalid key, 1 blocked)" {
		t.Errorf("bar title %q", got)
	}
	if got := text(d.byTestID("chart-row")[0]); got != "2026-03-01 12:00 UTC"+"20"+"3"+"2"+"1"+"6" {
		t.Errorf("table row %q", got)
	}
	// Denials counted before reasons were get a series of their own.
	d = renderDOM(t, ChartView(NewChart("Decisions", []ChartPoint{{Start: t0, Denied: 5, RateLimited: 2}}, time.Minute)))
	if got := text(d.one("chart-denied")); got != "5" {
		t.Errorf("denied in all %q", got)
	}
	d.one("legend-no-reason")
}

// Denials by a concurrency limit are a series of their own, between rate
// limited and invalid key, named in the legend, the bar's title, the data
// table and the accessible summary, and never counted as unexplained; a
// range without any shows neither the legend item nor the column.
func TestChartConcurrencySeries(t *testing.T) {
	pts := []ChartPoint{{Start: t0, Allowed: 10, Denied: 5, RateLimited: 1, ConcurrencyLimited: 4}}
	c := NewChart("Decisions", pts, time.Minute)
	if c.Totals.ConcurrencyLimited != 4 || c.Totals.Unexplained() != 0 || pts[0].Unexplained() != 0 {
		t.Fatalf("totals %+v", c.Totals)
	}
	d := renderDOM(t, ChartView(c))
	if got := attr(d.one("chart"), "data-concurrency-limited"); got != "4" {
		t.Errorf("data-concurrency-limited %q", got)
	}
	if got := text(d.one("chart-concurrency-limited")); got != "4" {
		t.Errorf("legend %q", got)
	}
	d.none("legend-no-reason")
	var classes []string
	for _, r := range d.all(func(n *html.Node) bool { return n.Data == "rect" && strings.HasPrefix(attr(n, "class"), "bar-") }) {
		classes = append(classes, attr(r, "class"))
	}
	if strings.Join(classes, " ") != "bar-allowed bar-rate-limited bar-concurrency-limited" {
		t.Errorf("segments bottom to top %v", classes)
	}
	if got := text(d.one("chart-bar")); got != "12:00: 10 allowed, 5 denied (1 rate limited, 4 concurrency limited)" {
		t.Errorf("bar title %q", got)
	}
	if got := text(d.byTestID("chart-row")[0]); got != "2026-03-01 12:00 UTC"+"10"+"1"+"4"+"0"+"0"+"5" {
		t.Errorf("table row %q", got)
	}
	if got := chartSummary(c); !strings.Contains(got, "4 concurrency limited") {
		t.Errorf("summary %q", got)
	}
	d = renderDOM(t, ChartView(NewChart("Decisions", []ChartPoint{{Start: t0, Allowed: 1, Denied: 1, RateLimited: 1}}, time.Minute)))
	d.none("legend-concurrency-limited")
	if got := text(d.byTestID("chart-row")[0]); got != "2026-03-01 12:00 UTC"+"1"+"1"+"0"+"0"+"1" {
		t.Errorf("table row without concurrency denials %q", got)
	}
}

// The most denied policies split a policy's denials into rate limited and
// concurrency limited when any was denied by a concurrency limit.
func TestOverviewSplitsConcurrencyDenials(t *testing.T) {
	v := OverviewView{PolicyCount: 2, Chart: NewChart("c", []ChartPoint{{Start: t0, Allowed: 5, Denied: 9, RateLimited: 3, ConcurrencyLimited: 6}}, time.Minute),
		Totals: Totals{Allowed: 5, Denied: 9, RateLimited: 3, ConcurrencyLimited: 6},
		TopPolicies: []PolicyStat{
			{Name: "llm", URL: "/ui/policies/pol_1", Allowed: 4, Denied: 7, RateLimited: 1, ConcurrencyLimited: 6},
			{Name: "search", URL: "/ui/policies/pol_2", Allowed: 1, Denied: 2, RateLimited: 2},
		}}
	d := renderDOM(t, Overview(owner, v))
	if got := text(d.one("stat-concurrency-limited")); got != "6" {
		t.Errorf("stat %q", got)
	}
	cl, rl := d.byTestID("top-policy-concurrency-limited"), d.byTestID("top-policy-rate-limited")
	if len(cl) != 2 || text(cl[0]) != "6" || text(cl[1]) != "0" || text(rl[0]) != "1" || text(rl[1]) != "2" {
		t.Errorf("split %d rows", len(cl))
	}
	v.TopPolicies[0].ConcurrencyLimited, v.TopPolicies[0].Denied = 0, 1
	v.Totals.ConcurrencyLimited = 0
	d = renderDOM(t, Overview(owner, v))
	d.none("top-policy-concurrency-limited")
	d.none("stat-concurrency-limited")
}

func TestFormatPeriodAndWait(t *testing.T) {
	for d, want := range map[time.Duration]string{time.Minute: "1m", 90 * time.Second: "90s", 36 * time.Hour: "36h", 48 * time.Hour: "2d", 1500 * time.Millisecond: "1.5s"} {
		if got := FormatPeriod(d); got != want {
			t.Errorf("FormatPeriod(%v) = %q, want %q", d, got, want)
		}
	}
	for d, want := range map[time.Duration]string{0: "0s", 1: "1s", 55 * time.Second: "55s", 125 * time.Second: "2m 5s", time.Hour + 3*time.Second: "1h 0m 3s", 50 * time.Hour: "2d 2h"} {
		if got := FormatWait(d); got != want {
			t.Errorf("FormatWait(%v) = %q, want %q", d, got, want)
		}
	}
}
